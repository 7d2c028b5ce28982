"""The fused Pallas recurrence (gau_keras.recurrence.jax.pallas_kernel), run on this CPU in Pallas's interpreter.

In the JAX pass (``KERAS_BACKEND=jax``; skipped on TensorFlow): with the kernel
forced, outputs and every gradient equal the ``lax.scan`` pair's (float32:
≤ 2e-5 relative) for k = 3 and 4, uni- and bidirectional, with padding, c0,
scale_x and a dropout mask, at odd sizes (L = 1, hidden sizes that are no
multiple of the block); both plans (Triton's single time block and Mosaic's
time blocks of 8) run interpreted; the official-SRU++ parity fixtures of
tests/layers/test_srupp.py hold in float32 with the kernel; half-precision inputs;
the choice of implementation and its errors; and a Keras SRU++ training step
exported with ``jax.export`` for CUDA and for TPU holds the kernel's custom
calls and no loop over time.

``python3 -m tests.recurrence.test_pallas`` prints the parity figures of every
case on the platform at hand (on a GPU, the Triton kernel against the scan).
"""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.jax_only

#: k, bidirectional, padding, L, B, d: every option, odd sizes (L = 1; d = 5 and 33: no multiple of a block)
CASES = [
    (3, False, False, 9, 2, 5),
    (3, True, True, 7, 3, 33),
    (4, False, True, 1, 2, 5),
    (4, True, False, 6, 1, 33),
    (3, True, False, 1, 2, 4),
    (4, False, True, 12, 3, 17),
]
CASE_IDS = [f"k{k}-{'bi' if bi else 'uni'}-{'pad' if pad else 'nopad'}-L{L}-B{B}-d{d}" for k, bi, pad, L, B, d in CASES]
DIFF_ARGS = ("U", "x", "weight_c", "bias", "c0", "scale_x")
RTOL = 2e-5


def case_inputs(k, bidirectional, padded, L, B, d, seed=0):
    """Random arguments of one case (c0, scale_x 1.3 and a dropout mask always; padding when asked)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    dirs = 2 if bidirectional else 1
    f32 = lambda *shape, scale=1.0: jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)  # noqa: E731
    arrays = {
        "U": f32(B, L, dirs * d * k),
        "x": f32(B, L, dirs * d if k == 3 else 7),
        "weight_c": f32(2 * dirs * d, scale=0.5),
        "bias": f32(2 * dirs * d),
        "c0": f32(B, dirs * d),
        "scale_x": jnp.float32(1.3),
    }
    fixed = {
        "mask_pad": jnp.asarray(rng.random((B, L)) < 0.3) if padded else None,
        "dropout_mask": jnp.asarray((rng.random((B, dirs * d)) < 0.8) / 0.8, jnp.float32),
    }
    weights = {"w_h": f32(B, L, dirs * d), "w_c": f32(B, dirs * d)}
    return arrays, fixed, weights


def values_and_gradients(fn, arrays, fixed, weights, bidirectional):
    """h, c and the gradients of sum(h·w_h) + sum(c·w_c) w.r.t. DIFF_ARGS, as numpy, from one jitted call."""
    import jax
    import jax.numpy as jnp

    def loss(*diff):
        h, c = fn(**dict(zip(DIFF_ARGS, diff)), bidirectional=bidirectional, **fixed)
        return jnp.sum(h.astype(jnp.float32) * weights["w_h"]) + jnp.sum(c.astype(jnp.float32) * weights["w_c"]), (h, c)

    (_, (h, c)), grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(6)), has_aux=True))(
        *(arrays[name] for name in DIFF_ARGS)
    )
    return {
        "h": np.asarray(h, np.float32),
        "c": np.asarray(c, np.float32),
        **{f"d{name}": np.asarray(g, np.float32) for name, g in zip(DIFF_ARGS, grads)},
    }


def relative_differences(result, reference):
    """{quantity: max |a − b| / max |b|} (0 where both are all zero)."""
    out = {}
    for key, ref in reference.items():
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        diff = float(np.max(np.abs(result[key] - ref))) if ref.size else 0.0
        out[key] = diff / scale if scale else diff
    return out


def kernel_and_scan(case, plan_target=None):
    """The relative differences of the kernel (forced; ``plan_target`` 'mosaic' runs that plan
    interpreted) from the scan pair, for one case."""
    from gau_keras.recurrence import jax as backend
    from gau_keras.recurrence.jax import pallas_kernel

    k, bidirectional, padded, L, B, d = case
    arrays, fixed, weights = case_inputs(*case)
    if plan_target is None:
        kernel = lambda **kw: backend.sru_recurrence(implementation="pallas", **kw)  # noqa: E731
    else:

        def kernel(U, x, weight_c, bias, c0, scale_x, mask_pad=None, dropout_mask=None, bidirectional=False):
            from gau_keras.recurrence.jax.prepare import prepare

            p = prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
            plan = pallas_kernel.plan(
                p.layout, B, L, x.shape[-1], "float32", plan_target, mask_pad is not None, interpret=True
            )
            return pallas_kernel.recurrence(plan, *p.arrays)

    scan = lambda **kw: backend.sru_recurrence(implementation="scan", **kw)  # noqa: E731
    return relative_differences(
        values_and_gradients(kernel, arrays, fixed, weights, bidirectional),
        values_and_gradients(scan, arrays, fixed, weights, bidirectional),
    )


@pytest.fixture(autouse=True)
def _jax_backend():
    import keras

    if keras.backend.backend() != "jax":
        pytest.skip("the Pallas kernel is the JAX backend's (this runs in the JAX pass)")


# ---------------------------------------------------------------- parity with the scan pair


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_kernel_equals_the_scan_pair(case):
    differences = kernel_and_scan(case)
    assert set(differences) == {"h", "c"} | {f"d{name}" for name in DIFF_ARGS}
    assert max(differences.values()) <= RTOL, differences


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[5]], ids=[CASE_IDS[1], CASE_IDS[2], CASE_IDS[5]])
def test_tpu_plan_equals_the_scan_pair(case):
    """Mosaic's plan (time blocks of 8 run in sequence, the state carried in the
    resident output block, columns padded to 128) run by the interpreter."""
    differences = kernel_and_scan(case, plan_target="mosaic")
    assert max(differences.values()) <= RTOL, differences


def test_gradients_equal_autodiff_of_the_kernel_maths():
    """The kernel's hand-written backward against JAX's autodiff of the plain scan (``autodiff``)."""
    from gau_keras.recurrence import jax as backend

    case = (4, True, True, 5, 2, 6)
    arrays, fixed, weights = case_inputs(*case, seed=3)
    kernel = lambda **kw: backend.sru_recurrence(implementation="pallas", **kw)  # noqa: E731
    result = values_and_gradients(kernel, arrays, fixed, weights, True)
    reference = values_and_gradients(backend.sru_recurrence_autodiff, arrays, fixed, weights, True)
    differences = relative_differences(result, reference)
    assert max(differences.values()) <= RTOL, differences


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_inputs_compute_in_float32(dtype):
    import jax.numpy as jnp

    from gau_keras.recurrence import jax as backend

    arrays, fixed, weights = case_inputs(3, True, True, 6, 2, 8, seed=1)
    half = {name: (a.astype(dtype) if name in ("U", "x") else a) for name, a in arrays.items()}
    results = {}
    for implementation in ("pallas", "scan"):
        h, c = backend.sru_recurrence(**half, bidirectional=True, implementation=implementation, **fixed)
        assert h.dtype == jnp.dtype(dtype) and c.dtype == jnp.dtype(dtype)
        fn = lambda i=implementation, **kw: backend.sru_recurrence(implementation=i, **kw)  # noqa: E731
        results[implementation] = values_and_gradients(fn, half, fixed, weights, True)
    assert results["pallas"]["dU"].dtype == np.float32  # converted for the comparison
    differences = relative_differences(results["pallas"], results["scan"])
    # both compute in float32 from the same half inputs; they differ by the rounding of h and dU to `dtype`
    assert max(differences.values()) <= 1e-2, differences


# ---------------------------------------------------------------- the official SRU++'s parity fixtures


@pytest.mark.parametrize(
    "name", ["uni-k4-causal", "bi-layernorm-pre", "post-norm-rescale-every2", "last1-input-to-hidden"]
)
def test_official_srupp_parity_in_float32_with_the_kernel(monkeypatch, name):
    """tests/layers/test_srupp.py's numpy transcription of the official SRU++ on its random state
    dicts, the layer in float32 with the kernel forced (the float64 cases there stay on the scan)."""
    from keras import ops

    from gau_keras.layers import SRUpp
    from tests.layers import test_srupp as S

    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "pallas")
    rng = np.random.default_rng(7)
    cfg = S.CONFIGS[name]
    B, L, d_in = 2, 5, 3
    sd = S.random_state_dict(rng, cfg, d_in)
    layer = SRUpp(**cfg, dtype="float32")
    layer.build((None, None, d_in))
    layer.load_reference_state_dict(sd)
    x = rng.normal(size=(B, L, d_in))
    keep = np.ones((B, L), bool)
    keep[1, 3:] = False
    causal = not cfg.get("bidirectional")
    additive, allowed = S.causal_additive(L) if causal else (None, None)
    c0 = rng.normal(size=(cfg["num_layers"], B, cfg["hidden_size"] * (2 if cfg.get("bidirectional") else 1)))
    h_ref, c_ref, _ = S.np_srupp(sd, cfg, x.transpose(1, 0, 2), c0=c0, mask_pad=~keep.T, attn_add=additive)
    h, c = layer(
        x.astype("float32"),
        mask=keep,
        attention_mask=None if allowed is None else allowed[None],
        initial_state=c0.astype("float32"),
        return_state=True,
    )
    for ours, ref in ((ops.convert_to_numpy(h), h_ref.transpose(1, 0, 2)), (ops.convert_to_numpy(c), c_ref)):
        assert np.max(np.abs(ours - ref)) <= RTOL * np.max(np.abs(ref))


# ---------------------------------------------------------------- the choice of implementation


def test_kernel_choice_by_mode_platform_and_dtype(monkeypatch):
    from gau_keras.recurrence import jax as backend
    from gau_keras.recurrence import kernel_choice

    monkeypatch.delenv("GAU_KERAS_SRU_KERNEL", raising=False)
    assert kernel_choice("float32") == "scan"  # auto on this CPU
    assert backend.kernel_choice("float32", platform="cuda") == "pallas"
    assert backend.kernel_choice("float32", platform="rocm") == "scan"  # no kernel for ROCm GPUs
    assert backend.kernel_choice("bfloat16", platform="tpu") == "pallas"
    assert backend.kernel_choice("float64", platform="cuda") == "scan"  # the kernel's state is float32
    assert kernel_choice("float32", "pallas") == "pallas"
    assert kernel_choice("float32", "xla") == "scan"  # today's name kept as an alias
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "pallas")
    assert kernel_choice("float16") == "pallas"


@pytest.mark.parametrize(
    "implementation, dtype, message",
    [
        ("pallas", "float64", "implementation 'pallas' takes float32, bfloat16, float16"),
        ("native", "float32", "'native' is TensorFlow's C++ kernel"),
        ("cuda", "float32", "implementation='cuda'; expected one of auto, pallas, scan, xla"),
    ],
)
def test_a_request_the_platform_cannot_honour_is_an_error(implementation, dtype, message):
    from gau_keras.recurrence import kernel_choice

    with pytest.raises(ValueError) as error:
        kernel_choice(dtype, implementation)
    assert message in str(error.value)


def test_kernel_tuning_is_checked_whatever_the_platform():
    import jax.numpy as jnp

    from gau_keras.recurrence import jax as backend

    U, x, w = jnp.zeros((1, 2, 6)), jnp.zeros((1, 2, 2)), jnp.zeros(4)
    with pytest.raises(ValueError, match="block must be a power of 2, got 48"):
        backend.sru_recurrence(U, x, w, w, implementation="pallas", block=48)
    with pytest.raises(ValueError, match="lookahead must be a positive integer, got 0"):
        backend.sru_recurrence(U, x, w, w, lookahead=0)
    with pytest.raises(ValueError, match="block=64 tunes the Pallas kernel; implementation 'scan' has none"):
        backend.sru_recurrence(U, x, w, w, implementation="scan", block=64)


def test_float64_with_the_kernel_forced_is_refused_by_the_call():
    import jax
    import jax.numpy as jnp

    from gau_keras.recurrence import jax as backend

    with jax.enable_x64(True):
        U, x = jnp.zeros((1, 2, 6), jnp.float64), jnp.zeros((1, 2, 2), jnp.float64)
        w = jnp.zeros(4, jnp.float64)
        with pytest.raises(ValueError, match="'pallas' takes float32, bfloat16, float16.*not float64"):
            backend.sru_recurrence(U, x, w, w, implementation="pallas")
        h, _ = backend.sru_recurrence(U, x, w, w)  # auto: the scan, in float64
        assert h.dtype == jnp.float64


def test_the_environment_variable_selects_the_kernel_in_a_layer(monkeypatch):
    """GAU_KERAS_SRU_KERNEL=pallas puts the kernel's pallas_call in the SRUpp layer's program."""
    import jax

    from gau_keras.layers import SRUpp

    layer = SRUpp(hidden_size=4, proj_size=4, num_layers=1)
    x = np.zeros((2, 3, 4), np.float32)
    layer(x)
    for mode, expected in (("pallas", True), ("scan", False)):
        monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", mode)
        jaxpr = str(
            jax.make_jaxpr(lambda v, n, x: layer.stateless_call(v, n, x)[0])(
                [v.value for v in layer.trainable_variables], [v.value for v in layer.non_trainable_variables], x
            )
        )
        assert ("pallas_call" in jaxpr) is expected, mode


# ---------------------------------------------------------------- lowering for GPU and TPU

CUSTOM_CALLS = {"cuda": "__gpu$xla.gpu.triton", "tpu": "tpu_custom_call"}


def exported_training_step(platform):
    """The StableHLO text of a jitted Keras training step of a 2-layer SRU++ (attention,
    bidirectional, padding mask, dropout on c) exported for ``platform`` with the default
    implementation choice ("auto"), the kernel's custom call allowed for that export only."""
    import jax
    import jax.numpy as jnp
    import keras
    from jax import export

    from gau_keras.layers import SRUpp

    B, L, d = 2, 9, 8
    inputs = keras.Input((L, d))
    keep = keras.Input((L,), dtype="bool")
    outputs = SRUpp(hidden_size=4, proj_size=4, num_layers=2, bidirectional=True, dropout=0.1)(inputs, mask=keep)
    model = keras.Model([inputs, keep], outputs)
    for cell in model.layers[-1].cells:
        cell.hidden_dropout = 0.2
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)

    def step(trainable, non_trainable, opt_vars, x, mask, y):
        def loss_fn(trainable):
            out, _ = model.stateless_call(trainable, non_trainable, [x, mask], training=True)
            return jnp.mean(jnp.square(out - y))

        loss, grads = jax.value_and_grad(loss_fn)(trainable)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return trainable, opt_vars, loss

    spec = lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype)  # noqa: E731
    args = (
        [spec(v.value) for v in model.trainable_variables],
        [spec(v.value) for v in model.non_trainable_variables],
        [spec(v.value) for v in optimizer.variables],
        jax.ShapeDtypeStruct((B, L, d), jnp.float32),
        jax.ShapeDtypeStruct((B, L), jnp.bool_),
        jax.ShapeDtypeStruct((B, L, 8), jnp.float32),
    )
    checks = [export.DisabledSafetyCheck.custom_call(CUSTOM_CALLS[platform])] if platform in CUSTOM_CALLS else []
    return export.export(jax.jit(step), platforms=[platform], disabled_checks=checks)(*args).mlir_module()


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_a_training_step_exported_for_an_accelerator_runs_the_kernel(monkeypatch, platform):
    monkeypatch.delenv("GAU_KERAS_SRU_KERNEL", raising=False)
    text = exported_training_step(platform)
    # 2 layers × (forward, backward), each one custom call; no XLA loop over time anywhere
    assert text.count(CUSTOM_CALLS[platform]) >= 4, text.count(CUSTOM_CALLS[platform])
    assert "stablehlo.while" not in text


def test_the_same_step_exported_for_cpu_runs_the_scan(monkeypatch):
    monkeypatch.delenv("GAU_KERAS_SRU_KERNEL", raising=False)
    text = exported_training_step("cpu")
    assert "stablehlo.while" in text and not any(call in text for call in CUSTOM_CALLS.values())


def main():
    """Prints the parity figures of every case on the platform at hand."""
    import jax

    os.environ.setdefault("KERAS_BACKEND", "jax")
    print(f"platform: {jax.devices()[0].platform} {jax.devices()[0].device_kind}")
    worst = 0.0
    for case, case_id in zip(CASES, CASE_IDS):
        differences = kernel_and_scan(case)
        worst = max(worst, max(differences.values()))
        print(f"{case_id}: " + ", ".join(f"{k} {v:.2e}" for k, v in differences.items()))
    print(f"worst relative difference: {worst:.2e} (bound {RTOL})")
    return 0 if worst <= RTOL else 1


if __name__ == "__main__":
    raise SystemExit(main())
