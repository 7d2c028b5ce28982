"""gau_keras.recurrence: forward against a numpy loop, gradients against autodiff
and against numerical differentiation (float64) — every test for both
implementations (the native C++ kernel and the XLA loops) — and the choice
between them."""

import functools
import warnings

import numpy as np
import pytest
import tensorflow as tf

from gau_keras import recurrence
from gau_keras.recurrence import kernel_choice, sru_recurrence, sru_recurrence_autodiff
from gau_keras.recurrence.tensorflow import native as kernels
from gau_keras.recurrence.tensorflow import xla_loops as xla
from gau_keras.recurrence.tensorflow.prepare import prepare


@pytest.fixture(params=["native", "xla"])
def implementation(request, monkeypatch):
    """Runs a test that requests it once per implementation (through $GAU_KERAS_SRU_KERNEL);
    the others run with the default choice ("auto")."""
    if request.param == "native":
        try:
            kernels.load()
        except kernels.KernelUnavailable as reason:
            pytest.skip(f"native SRU kernel not buildable here: {reason}")
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", request.param)
    return request.param


def numpy_sru(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional):
    """Direct transcription of docs/srupp.md, one direction and one step at a time."""
    B, L, _ = U.shape
    dirs = 2 if bidirectional else 1
    d = weight_c.size // (2 * dirs)
    k = U.shape[-1] // (dirs * d)
    Uk = U.reshape(B, L, dirs, d, k)
    w, b = weight_c.reshape(2, dirs, d), bias.reshape(2, dirs, d)
    m = np.ones((B, dirs, d)) if dropout_mask is None else dropout_mask.reshape(B, dirs, d)
    pad = np.zeros((B, L), bool) if mask_pad is None else mask_pad
    scale_x = 1.0 if scale_x is None else scale_x
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    h = np.zeros((B, L, dirs, d))
    c_last = np.zeros((B, dirs, d))
    for di in range(dirs):
        c = c0.reshape(B, dirs, d)[:, di].copy()
        for t in range(L) if di == 0 else range(L - 1, -1, -1):
            u = Uk[:, t, di]
            xp = u[..., 3] if k == 4 else x.reshape(B, L, dirs, d)[:, t, di] * scale_x
            f = sig(u[..., 1] + b[0, di] + w[0, di] * c)
            r = sig(u[..., 2] + b[1, di] + w[1, di] * c)
            c_new = u[..., 0] + (c - u[..., 0]) * f
            h_t = xp + (c_new - xp) * m[:, di] * r
            keep = ~pad[:, t, None]
            c = np.where(keep, c_new, c)
            h[:, t, di] = np.where(keep, h_t, 0.0)
        c_last[:, di] = c
    return h.reshape(B, L, dirs * d), c_last.reshape(B, dirs * d)


def make_inputs(
    rng, B=2, L=5, d=3, k=3, bidirectional=False, d_in=None, pad=False, scale=False, dropout=False, dtype=np.float64
):
    dirs = 2 if bidirectional else 1
    d_in = dirs * d if k == 3 else (d_in or 4)
    args = dict(
        U=rng.normal(size=(B, L, dirs * d * k)),
        x=rng.normal(size=(B, L, d_in)),
        weight_c=rng.uniform(-1, 1, size=2 * dirs * d),
        bias=rng.normal(size=2 * dirs * d) * 0.5,
        c0=rng.normal(size=(B, dirs * d)),
        mask_pad=None,
        scale_x=None,
        dropout_mask=None,
        bidirectional=bidirectional,
    )
    if pad:  # right padding for row 0, left padding for row 1
        mask = np.zeros((B, L), bool)
        mask[0, L - 2 :] = True
        mask[1, :1] = True
        args["mask_pad"] = mask
    if scale:
        args["scale_x"] = 1.3
    if dropout:
        args["dropout_mask"] = (rng.uniform(size=(B, dirs * d)) > 0.3) / 0.7
    for key in ("U", "x", "weight_c", "bias", "c0", "dropout_mask"):
        if args[key] is not None:
            args[key] = args[key].astype(dtype)
    return args


CASES = [
    dict(k=k, bidirectional=bi, pad=pad, scale=scale, dropout=drop)
    for k in (3, 4)
    for bi in (False, True)
    for pad, scale, drop in ((False, False, False), (True, True, True))
]


DIFF_ARGS = ("U", "x", "weight_c", "bias", "c0")


def _grads(fn, args, weights):
    tensors = {key: tf.constant(args[key]) for key in DIFF_ARGS}
    with tf.GradientTape() as tape:
        tape.watch(list(tensors.values()))
        h, c = fn(**{**args, **tensors})
        loss = tf.reduce_sum(h * weights[0]) + tf.reduce_sum(c * weights[1])
    return tape.gradient(loss, [tensors[key] for key in DIFF_ARGS])


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_forward_matches_numpy_and_gradient_matches_autodiff(implementation, rng, case):
    args = make_inputs(rng, **case)
    h_ref, c_ref = numpy_sru(**args)
    for fn in (sru_recurrence, sru_recurrence_autodiff):
        h, c = fn(**args)
        np.testing.assert_allclose(h.numpy(), h_ref, rtol=1e-10, atol=1e-10, err_msg=fn.__name__)
        np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-10, atol=1e-10, err_msg=fn.__name__)
    weights = (rng.normal(size=h_ref.shape), rng.normal(size=c_ref.shape))
    ours = _grads(sru_recurrence, args, weights)
    ref = _grads(sru_recurrence_autodiff, args, weights)
    for name, g, g_ref in zip(DIFF_ARGS, ours, ref):
        as_array = lambda t, name=name: np.zeros(args[name].shape) if t is None else t.numpy()  # noqa: E731
        np.testing.assert_allclose(as_array(g), as_array(g_ref), rtol=1e-9, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("case", [CASES[1], CASES[7]], ids=["uni-k3-pad", "bi-k4-pad"])
def test_gradient_numerical_float64(implementation, rng, case):
    args = make_inputs(rng, B=2, L=4, d=2, **case)
    fixed = {key: v for key, v in args.items() if key not in DIFF_ARGS}

    def fn(U, x, weight_c, bias, c0):
        h, c = sru_recurrence(U, x, weight_c, bias, c0, **fixed)
        return tf.concat([tf.reshape(h, [-1]), tf.reshape(c, [-1])], 0)

    theoretical, numerical = tf.test.compute_gradient(fn, [tf.constant(args[k]) for k in DIFF_ARGS], delta=1e-6)
    for name, t, n in zip(DIFF_ARGS, theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-7, err_msg=name)


def test_gradient_only_through_h(implementation, rng):
    """c_last unused: the upstream gradient for it is absent and must count as zero."""
    args = make_inputs(rng, bidirectional=True, pad=True)
    U = tf.constant(args.pop("U"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(U)
        h, _ = sru_recurrence(U, **args)
        h2, _ = sru_recurrence_autodiff(U, **args)
        loss, loss2 = tf.reduce_sum(h**2), tf.reduce_sum(h2**2)
    np.testing.assert_allclose(tape.gradient(loss, U).numpy(), tape.gradient(loss2, U).numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_computed_in_float32(rng, dtype):
    args = make_inputs(rng, L=6, bidirectional=True, pad=True, dtype=np.float32)
    half = {
        key: (tf.cast(v, dtype) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v)
        for key, v in args.items()
    }
    h, c = sru_recurrence(**half)
    assert h.dtype == dtype and c.dtype == dtype
    rounded = {
        key: (tf.cast(v, tf.float32).numpy().astype(np.float64) if isinstance(v, tf.Tensor) else v)
        for key, v in half.items()
    }
    h_ref, c_ref = numpy_sru(**rounded)
    tol = 1e-2 if dtype == tf.float16 else 4e-2
    np.testing.assert_allclose(tf.cast(h, tf.float32).numpy(), h_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(tf.cast(c, tf.float32).numpy(), c_ref, rtol=tol, atol=tol)


def test_inside_tf_function_with_unknown_length(implementation, rng):
    args = make_inputs(rng, k=4, bidirectional=True, pad=True, dtype=np.float32)
    spec = lambda a: tf.TensorSpec([None, None, a.shape[-1]], tf.float32)  # noqa: E731

    @tf.function(input_signature=[spec(args["U"]), spec(args["x"])])
    def run(U, x):
        with tf.GradientTape() as tape:
            tape.watch(U)
            h, _ = sru_recurrence(U, x, args["weight_c"], args["bias"], mask_pad=args["mask_pad"], bidirectional=True)
            loss = tf.reduce_sum(h)
        return h, tape.gradient(loss, U)

    h, dU = run(args["U"], args["x"])
    h_ref, _ = numpy_sru(**{**args, "c0": np.zeros_like(args["c0"])})
    np.testing.assert_allclose(h.numpy(), h_ref, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(dU.numpy()))


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(weight_c=np.zeros(5)), "weight_c"),
        (dict(bias=np.zeros(8)), "bias"),
        (dict(U=np.zeros((2, 5, 10))), "U's last dimension"),
        (dict(x=np.zeros((2, 5, 4))), "x's last dimension"),
        (dict(mask_pad=np.zeros((2, 5, 1), bool)), "mask_pad"),
    ],
)
def test_bad_arguments_are_named(rng, bad, message):
    args = make_inputs(rng)
    with pytest.raises(ValueError, match=message):
        sru_recurrence(**{**args, **bad})


def test_scale_x_may_be_any_one_element_tensor(implementation, rng):
    """The official package keeps scale_x as a buffer of shape (1,)."""
    args = make_inputs(rng, scale=True)
    h_ref, c_ref = numpy_sru(**args)
    for shaped in (np.array([1.3]), np.array([[1.3]]), tf.constant([1.3], tf.float64)):
        h, c = sru_recurrence(**{**args, "scale_x": shaped})
        np.testing.assert_allclose(h.numpy(), h_ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-10, atol=1e-10)
    scale = tf.Variable([1.3], dtype=tf.float64)
    with tf.GradientTape() as tape:
        h, _ = sru_recurrence(**{**args, "scale_x": scale})
        loss = tf.reduce_sum(h)
    assert tape.gradient(loss, scale).shape == (1,)
    with pytest.raises(ValueError, match="scale_x must hold one value"):
        sru_recurrence(**{**args, "scale_x": np.array([1.3, 1.0])})


def test_the_requested_implementation_runs(implementation, rng):
    assert kernel_choice(tf.float64) == implementation
    args = make_inputs(rng)
    assert kernel_choice(tf.float64, implementation="xla") == "xla"
    np.testing.assert_allclose(
        sru_recurrence(**args, implementation="xla")[0].numpy(),
        sru_recurrence(**args)[0].numpy(),
        rtol=1e-12,
        atol=1e-12,
    )


def test_auto_uses_xla_inside_xla_compiled_functions(monkeypatch, rng):
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "auto")
    args = make_inputs(rng, pad=True, dtype=np.float32)
    seen = []

    @tf.function(jit_compile=True)
    def run(U, x):
        seen.append(kernel_choice(U.dtype))
        return sru_recurrence(U, x, args["weight_c"], args["bias"], args["c0"], mask_pad=args["mask_pad"])[0]

    h = run(args["U"], args["x"])
    assert seen == ["xla"]
    np.testing.assert_allclose(h.numpy(), numpy_sru(**args)[0], rtol=1e-5, atol=1e-5)
    assert kernel_choice(tf.float16) == "xla"  # the kernel has float32 and float64 only


def test_bad_implementation_is_named(monkeypatch, rng):
    with pytest.raises(ValueError, match="implementation='fast'"):
        sru_recurrence(**make_inputs(rng), implementation="fast")
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "gpu")
    with pytest.raises(ValueError, match="GAU_KERAS_SRU_KERNEL='gpu'"):
        kernel_choice()


def test_without_a_compiler_auto_falls_back_and_native_says_why(monkeypatch, tmp_path, rng):
    monkeypatch.setenv("GAU_KERAS_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(kernels.KernelUnavailable, match="no-such-c\\+\\+-compiler"):
        kernels.load.__wrapped__()
    monkeypatch.setenv("CXX", "false")  # exists, fails every build
    with pytest.raises(kernels.KernelUnavailable, match="building sru_ops.cc with false failed"):
        kernels.load.__wrapped__()
    assert not list(tmp_path.rglob("*.so"))

    def unavailable():
        raise kernels.KernelUnavailable("test: no compiler")

    monkeypatch.setattr(kernels, "load", unavailable)
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "auto")
    recurrence._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match="using the XLA loops: test: no compiler"):
        assert kernel_choice(tf.float32) == "xla"
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "native")
    with pytest.raises(kernels.KernelUnavailable, match="no compiler"):
        kernel_choice(tf.float32)


def test_on_an_accelerator_auto_takes_the_xla_loops_and_says_so_once(monkeypatch):
    """TensorFlow has no GPU/TPU kernel: "auto" takes the XLA loops there and points at the JAX backend's."""
    real = tf.config.list_logical_devices
    monkeypatch.setattr(
        tf.config, "list_logical_devices", lambda kind=None: ["/gpu:0"] if kind == "GPU" else real(kind)
    )
    monkeypatch.setenv("GAU_KERAS_SRU_KERNEL", "auto")
    recurrence._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match="KERAS_BACKEND=jax runs it as one fused Pallas kernel"):
        assert kernel_choice(tf.float32) == "xla"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_choice(tf.float32) == "xla"  # said once
    assert kernel_choice(tf.float32, implementation="scan") == "xla"  # the JAX backend's name, an alias here
    with pytest.raises(ValueError, match="'pallas' is the JAX backend's fused kernel"):
        kernel_choice(tf.float32, implementation="pallas")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_xla_in_place_backward_equals_the_plain_graph_one(rng, case):
    """The XLA backward writes dU in place; without XLA (GAU_KERAS_SRU_XLA=0, or XLA
    failing here) rows go through a TensorArray.  Both on the same saved state."""
    args = make_inputs(rng, **case)
    prepared = prepare(
        args["U"],
        args["x"],
        args["weight_c"],
        args["bias"],
        args["c0"],
        args["mask_pad"],
        args["scale_x"],
        args["dropout_mask"],
        case["bidirectional"],
    )
    inputs = prepared.tensors
    fwd, bwd = xla.compiled("float64", prepared.layout)
    if not getattr(bwd, "_jit_compile", False):
        pytest.skip("XLA does not compile the loops here (the plain graph pair is in use)")
    h, c_last, c_seq = fwd(*inputs)
    dh, dc_last = tf.constant(rng.normal(size=h.shape)), tf.constant(rng.normal(size=c_last.shape))
    plain = tf.function(functools.partial(xla.backward, prepared.layout))
    for ours, ref in zip(bwd(*inputs, c_seq, dh, dc_last), plain(*inputs, c_seq, dh, dc_last)):
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
