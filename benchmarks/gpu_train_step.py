"""GAU-α against RoFormerV2 training steps on an accelerator, with what XLA makes of them (issue 34, items 1 and 4).

    python3 benchmarks/gpu_train_step.py                      # on a GPU: L 128 … 4096, 16,384 tokens a step, bf16
    python3 benchmarks/gpu_train_step.py --tiny               # CPU smoke test: tiny sizes, float32

On the JAX backend, for each sequence length L (batch = tokens / L), each step one ``jax.jit`` of an
Adam update on the MSE of the encoder's hidden states against random targets:

* ``RoFormerV2``: ``--layers`` layers of ``--heads`` heads × ``--head-size`` and FFN ``--intermediate``
  (its attention on a GPU cuDNN's fused attention where cuDNN takes the call, spelled out elsewhere);
* ``GAU-α``: twice the layers, GAU e = 2·hidden, s = ``--key-size`` (the release's ratio);
* ``GAU-α plain JAX``: the same GAU-α maths written directly in JAX (``gau_plain_jax.py``: bf16 products,
  float32 master weights, norms and softmax; no Keras), from the weights of a GAU-α of the same
  configuration: the yardstick our GAU-α's layers are measured against;
* ``keras-hub RoFormerV2``: keras_hub's ``RoformerV2Backbone`` of RoFormerV2's size, where keras_hub is installed.

Dropout is 0 (both models' attention then takes the same path in training and inference). For each
model and length: the step time (median of ``--rounds`` rounds of ``--steps`` steps, the models
interleaved), MFU (the models' matrix FLOPs of a training step, 3 × the forward's, over the step time,
against the matrix rate measured in the same process: a bf16 (GPU/TPU) or float32 (CPU) product of
``--peak-size``³), and from the compiled program: XLA's temporary bytes, the bytes its cost analysis
says a step reads and writes, the number of fusions, and the number of float32 ⇄ bfloat16 conversions
(``convert`` ops between the two: round trips around the matrix products). ``--trace DIR`` also writes a
``jax.profiler`` trace of a few steps per model and prints their per-op time table (``xla_profile.py``:
by category, by model code and pass, and the largest instructions; TensorBoard or Perfetto open the
traces themselves).
JSON lines (one per measurement) go to stdout and ``--json``; the table comes last.
"""

import argparse
import json
import os
import pathlib
import re
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # the repository root
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common

import _common  # noqa: E402  (path set above)
import numpy as np  # noqa: E402

MODELS = ("RoFormerV2", "GAU-α", "GAU-α plain JAX", "keras-hub RoFormerV2")
GAU = ("GAU-α", "GAU-α plain JAX")
TRACED_STEPS = 3


def parse_ints(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers")
    return values


def positive_int(text):
    values = parse_ints(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one positive integer")
    return values[0]


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=parse_ints, default=None, help="sequence lengths (default 128,…,4096)")
    parser.add_argument("--tokens", type=positive_int, default=None, help="tokens a step (default 16384)")
    parser.add_argument("--layers", type=positive_int, default=None, help="RoFormerV2 layers (GAU-α: twice)")
    parser.add_argument("--hidden", type=positive_int, default=None)
    parser.add_argument("--heads", type=positive_int, default=None)
    parser.add_argument("--intermediate", type=positive_int, default=None)
    parser.add_argument("--key-size", type=positive_int, default=None, help="GAU-α's s")
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default=None,
        help="bfloat16 = mixed_bfloat16 (default on GPU/TPU), float32 (default on CPU)",
    )
    parser.add_argument("--rounds", type=positive_int, default=None)
    parser.add_argument("--steps", type=positive_int, default=None)
    parser.add_argument("--peak-size", type=positive_int, default=None, help="side of the calibration product")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CPU smoke test)")
    parser.add_argument("--trace", default=None, help="write a jax.profiler trace of each model here")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="only what XLA makes of the steps (no timing): the CPU proxy of the dissection",
    )
    parser.add_argument("--json", default=None, help="also write the JSON lines to this file")
    args = parser.parse_args(argv)
    tiny = dict(
        lengths=[16, 32],
        tokens=64,
        layers=1,
        hidden=32,
        heads=2,
        intermediate=64,
        key_size=16,
        rounds=2,
        steps=2,
        peak_size=256,
    )
    full = dict(
        lengths=[128, 512, 1024, 2048, 4096],
        tokens=16384,
        layers=4,
        hidden=768,
        heads=12,
        intermediate=3072,
        key_size=128,
        rounds=5,
        steps=5,
        peak_size=8192,
    )
    for key, value in (tiny if args.tiny else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.trace and args.compile_only:
        parser.error("--trace runs steps and --compile-only runs none: give one of them")
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    for length in args.lengths:
        if args.tokens % length:
            parser.error(f"--tokens {args.tokens} is not a multiple of the length {length} (--lengths)")
    return args


# ---------------------------------------------------------------- models and FLOPs


def configs(args):
    """bert4keras configs of the two models (dropout 0)."""
    common = dict(
        vocab_size=128,
        hidden_size=args.hidden,
        max_position_embeddings=max(args.lengths),
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        hidden_act="relu",
    )
    roformer = dict(
        common, num_hidden_layers=args.layers, num_attention_heads=args.heads, intermediate_size=args.intermediate
    )
    gau = dict(
        common,
        num_hidden_layers=2 * args.layers,
        num_attention_heads=1,
        intermediate_size=2 * args.hidden,
        attention_key_size=args.key_size,
        hidden_act="swish",
    )
    return {"RoFormerV2": ("roformer_v2", roformer), "GAU-α": ("gau_alpha", gau)}


def forward_flops(name, args, batch, length):
    """Matrix FLOPs of one forward pass (2·m·k·n per product), embeddings and norms left out."""
    tokens, H = batch * length, args.hidden
    if name == "GAU-α":
        e, s = 2 * H, args.key_size
        per_layer = 2 * tokens * H * (2 * e + s) + 2 * tokens * e * H + 2 * tokens * length * (s + e)
        return 2 * args.layers * per_layer
    per_layer = 2 * tokens * H * 4 * H + 2 * tokens * H * args.intermediate * 2 + 2 * tokens * length * H * 2
    return args.layers * per_layer


def build(name, args, policy):
    """(keras model of [token ids, segment ids] → hidden states, hidden size)."""
    import keras

    keras.config.set_dtype_policy(policy)
    try:
        if name == "keras-hub RoFormerV2":
            import keras_hub

            backbone = keras_hub.models.RoformerV2Backbone(
                vocabulary_size=128,
                num_layers=args.layers,
                num_heads=args.heads,
                hidden_dim=args.hidden,
                intermediate_dim=args.intermediate,
                head_size=args.hidden // args.heads,
                dropout=0.0,
                max_wavelength=10000,
            )
            ids = keras.Input((None,), dtype="int32")
            segments = keras.Input((None,), dtype="int32")
            out = backbone({"token_ids": ids, "segment_ids": segments})  # its padding mask: ids != 0
            return keras.Model([ids, segments], out)
        from gau_keras import build_transformer_model

        model, config = configs(args)[name]
        return build_transformer_model(config, model=model)
    finally:
        keras.config.set_dtype_policy("float32")


def train_step(model, batch, length, seed=0):
    """(step() → loss, the jitted step, its arguments) of an Adam update on MSE(hidden, targets)."""
    import jax
    import jax.numpy as jnp
    import keras

    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(1, 128, (batch, length)), jnp.int32)
    inputs = [ids, jnp.zeros_like(ids)]
    targets = jnp.asarray(rng.normal(size=(batch, length, model.outputs[0].shape[-1])), jnp.float32)
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable):
        out, non_trainable = model.stateless_call(trainable, non_trainable, inputs, training=True)
        return jnp.mean(jnp.square(out.astype(jnp.float32) - targets)), non_trainable

    def step(trainable, non_trainable, opt_vars):
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, non_trainable)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return trainable, non_trainable, opt_vars, loss

    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    state = [
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    ]
    example = [[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in group] for group in state]

    def run():
        *new, loss = jitted(*state)
        state[:] = new
        return loss

    return run, jitted, example


def compiled_facts(jitted, example):
    """What XLA makes of a step: temp bytes, bytes accessed and fusions of the compiled program;
    f32⇄bf16 converts of the program as traced (StableHLO, before XLA's own passes: what the
    model's code asks for, the same on every platform; a CPU adds its own around bf16 ops); and
    the compiled program's text."""
    lowered = jitted.lower(*example)
    traced = lowered.as_text()
    compiled = lowered.compile()
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    text = compiled.as_text()
    pairs = re.findall(r"stablehlo\.convert %\S+ : \(tensor<(?:[\dx]*x)?(\w+)>\) -> tensor<(?:[\dx]*x)?(\w+)>", traced)
    converts = sum(1 for a, b in pairs if {a, b} == {"f32", "bf16"})
    return {
        "temp_bytes": int(getattr(memory, "temp_size_in_bytes", 0) or 0),
        "bytes_accessed": float((cost or {}).get("bytes accessed", float("nan"))),
        "fusions": len(re.findall(r" fusion\([^\n]*\bcalls=", text)),
        "f32_bf16_converts": converts,
    }, text


def matmul_rate(args, dtype):
    """FLOP/s of one square product of --peak-size (the median of 5 after a warm-up)."""
    import jax
    import jax.numpy as jnp

    n = args.peak_size
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), dtype)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), dtype)
    product = jax.jit(jnp.matmul)
    product(a, b).block_until_ready()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        product(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def table(records, peak):
    lines = [
        f"matrix rate measured: {peak / 1e12:.3g} TFLOP/s",
        "",
        "| L (batch) | model | ms | MFU | XLA temp MiB | GB accessed | fusions | f32⇄bf16 converts |",
        "|---" * 8 + "|",
    ]
    for r in records:
        lines.append(
            f"| {r['length']} ({r['batch']}) | {r['model']} | {r['ms']:.3g} | {r['mfu']:.2f} | "
            f"{r['temp_bytes'] / 2**20:.1f} | {r['bytes_accessed'] / 1e9:.3g} | {r['fusions']} | "
            f"{r['f32_bf16_converts']} |"
        )
    by_length = {}
    for r in records:
        by_length.setdefault(r["length"], {})[r["model"]] = r
    lines += [
        "",
        "| L | GAU-α / RoFormerV2 time | GAU-α / RoFormerV2 temp memory | GAU-α / plain JAX time "
        "| GAU-α / plain JAX GB accessed | keras-hub / ours |",
        "|---" * 6 + "|",
    ]
    for length, row in by_length.items():
        gau, rof, hub = row.get("GAU-α"), row.get("RoFormerV2"), row.get("keras-hub RoFormerV2")
        plain = row.get("GAU-α plain JAX")
        ratio = lambda a, b, key: f"{a[key] / b[key]:.3g}" if a and b and b[key] else ""  # noqa: E731
        lines.append(
            f"| {length} | {ratio(gau, rof, 'ms')} | {ratio(gau, rof, 'temp_bytes')} | "
            f"{ratio(gau, plain, 'ms')} | {ratio(gau, plain, 'bytes_accessed')} | {ratio(hub, rof, 'ms')} |"
        )
    return "\n".join(lines)


def main(argv=None):
    args = arguments(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import gau_plain_jax
    import jax
    import jax.numpy as jnp
    import keras
    import xla_profile

    if keras.backend.backend() != "jax":
        raise SystemExit(f"gpu_train_step.py runs on the JAX backend; KERAS_BACKEND is {keras.backend.backend()!r}")

    platform = jax.devices()[0].platform
    dtype = args.dtype or ("float32" if platform == "cpu" else "bfloat16")
    policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
    peak = (
        float("nan") if args.compile_only else matmul_rate(args, jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    )
    print(f"device: {platform} {jax.devices()[0].device_kind}; jax {jax.__version__}; {dtype}", flush=True)
    names = list(MODELS)
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        names.remove("keras-hub RoFormerV2")
        print("keras_hub is not installed: its RoformerV2Backbone is left out", flush=True)
    out = open(args.json, "w", encoding="utf-8") if args.json else None
    records, profiles = [], []
    for length in args.lengths:
        batch = args.tokens // length
        steps, facts = {}, {}
        for name in names:
            if name == "GAU-α plain JAX":
                params = gau_plain_jax.params_from_model(build("GAU-α", args, policy), 2 * args.layers)
                run, jitted, example = gau_plain_jax.train_step(params, batch, length, dtype)
            else:
                run, jitted, example = train_step(build(name, args, policy), batch, length)
            facts[name], hlo_text = compiled_facts(jitted, example)
            if args.compile_only:
                steps[name] = None
                continue
            run()  # compiles
            jax.block_until_ready(run())  # and settles the donated buffers' layout
            steps[name] = run
            if args.trace:
                where = os.path.join(args.trace, f"{name.replace(' ', '_')}-L{length}")
                with jax.profiler.trace(where):
                    for _ in range(TRACED_STEPS):
                        jax.block_until_ready(run())
                title = f"{name}, L {length} (batch {batch})"
                try:
                    profiles.append(xla_profile.table(xla_profile.op_times(where, hlo_text, TRACED_STEPS), title))
                except ValueError as error:  # a trace without per-instruction events: say so, time on
                    profiles.append(f"### {title}: {error}")
        timed = (
            {name: float("nan") for name in steps}
            if args.compile_only
            else _common.interleaved_medians(steps, args.rounds, args.steps, jax.block_until_ready)
        )
        for name, ms in timed.items():
            flops = 3 * forward_flops("GAU-α" if name in GAU else "RoFormerV2", args, batch, length)
            record = {
                "model": name,
                "length": length,
                "batch": batch,
                "dtype": dtype,
                "ms": ms,
                "mfu": flops / (ms / 1e3) / peak,
                **facts[name],
            }
            records.append(record)
            print(json.dumps(record), flush=True)
            if out:
                out.write(json.dumps(record) + "\n")
    if out:
        out.close()
    print()
    print(table(records, peak))
    for profile in profiles:
        print()
        print(profile)


if __name__ == "__main__":
    main()
