"""SRU++ on an accelerator: the fused Pallas kernel against the lax.scan pair and a GRU (issue 33, item 5).

    python3 benchmarks/srupp_gpu.py                       # on a GPU: the two shapes below, float32 and bfloat16
    python3 benchmarks/srupp_gpu.py --official            # also the official SRU++ CUDA kernel and cuDNN GRU (torch)
    python3 benchmarks/srupp_gpu.py --tiny                # CPU smoke test: tiny sizes, the kernel interpreted

For each shape B×L×d (proj p), on the JAX backend, each step one ``jax.jit``:

* ``recurrence``: forward + backward of ``sum(h·g)`` w.r.t. U, x, weight_c and
  bias (k = 3, float32) through ``gau_keras.recurrence.sru_recurrence``, with the
  Pallas kernel (``implementation='pallas'``; ``--blocks`` adds other column
  blocks) and with the ``lax.scan`` pair (``'scan'``); the first lines also
  give the kernel's largest relative difference from the scan pair on those
  inputs (h and every gradient), computed on the device;
* ``train``: one training step (Adam, MSE of the outputs against random
  targets) of a 2-layer ``gau_keras.layers.SRUpp`` (attention in both layers,
  hidden d, projection p), kernel against scan, and of two Keras ``GRU(d)``
  layers, in float32 and in mixed_bfloat16.

With ``--official`` a torch worker (run first, in its own process, so that
JAX's and torch's allocators do not share the GPU) times the same training
step for the official ``sru.SRUpp`` (its CUDA kernel) and for a 2-layer cuDNN
``torch.nn.GRU`` in float32; it needs ``torch`` with CUDA and the ``sru``
package (its kernel is compiled at first use with nvcc).

Times are medians over ``--rounds`` rounds; each round times every variant of
a group for ``--steps`` consecutive steps (the order reversed every other
round), after one warm-up step that compiles.  JSON lines (one per
measurement) go to ``--json`` and stdout; the Markdown table comes last.
On a CPU the kernel runs in Pallas's interpreter: those times say nothing of
its speed (the smoke test only checks that everything runs).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # the repository root
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common
import _common  # noqa: E402  (path set above)
import numpy as np  # noqa: E402

from gau_keras.recurrence.switches import sru_kernel_set  # noqa: E402

SHAPES = "8x512x512x128,16x1024x1024x256"
TINY_SHAPES = "2x12x16x8,2x20x32x8"
OFFICIAL_FLAG = "--official-worker"


def parse_shapes(text):
    """'BxLxdxp,...' → [(B, L, d, p)]; argparse's type."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 4 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise argparse.ArgumentTypeError(f"{item!r} is not BxLxdxp with four positive integers")
        shapes.append(tuple(int(part) for part in parts))
    return shapes


def parse_ints(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be positive")
    return values


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def parse_dtypes(text):
    dtypes = [v.strip() for v in text.split(",") if v.strip()]
    unknown = sorted(set(dtypes) - {"float32", "bfloat16"})
    if unknown or not dtypes:
        raise argparse.ArgumentTypeError(f"{text!r}: expected float32 and/or bfloat16")
    return dtypes


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=parse_shapes, default=None, help=f"BxLxdxp,... (default {SHAPES})")
    parser.add_argument("--tiny", action="store_true", help=f"tiny shapes ({TINY_SHAPES}), 2 rounds of 2 steps")
    parser.add_argument(
        "--dtypes", type=parse_dtypes, default=["float32", "bfloat16"], help="training-step dtypes: float32,bfloat16"
    )
    parser.add_argument(
        "--blocks",
        type=parse_ints,
        default=[],
        help="extra kernel column blocks to time in the recurrence (powers of 2)",
    )
    parser.add_argument(
        "--lookaheads",
        type=parse_ints,
        default=[],
        help="extra kernel lookaheads (steps loaded ahead) to time in the recurrence",
    )
    parser.add_argument("--rounds", type=positive_int, default=None, help="timed rounds (default 5, --tiny 2)")
    parser.add_argument(
        "--steps", type=positive_int, default=None, help="steps per round and variant (default 10, --tiny 2)"
    )
    parser.add_argument("--official", action="store_true", help="also time the official SRU++ and cuDNN GRU")
    parser.add_argument("--no-train", action="store_true", help="time the recurrence only")
    parser.add_argument("--json", default=None, help="also write the JSON lines to this file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.shapes = args.shapes or parse_shapes(TINY_SHAPES if args.tiny else SHAPES)
    args.rounds = args.rounds or (2 if args.tiny else 5)
    args.steps = args.steps or (2 if args.tiny else 10)
    for block in args.blocks:
        if block & (block - 1):
            parser.error(f"--blocks: {block} is not a power of 2")
    return args


# ---------------------------------------------------------------- timing

# ---------------------------------------------------------------- recurrence


def recurrence_steps(B, L, d, blocks, lookaheads, seed):
    """{variant: step()} of forward + backward of the recurrence, and the kernel's
    largest relative differences from the scan pair ({quantity: value})."""
    import jax
    import jax.numpy as jnp

    from gau_keras.recurrence.jax import sru_recurrence  # the JAX backend's: it takes ``block``

    rng = np.random.default_rng(seed)
    f32 = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)  # noqa: E731
    U, x, g = f32(B, L, 3 * d), f32(B, L, d), f32(B, L, d)
    w = jnp.asarray(rng.uniform(-1, 1, 2 * d), jnp.float32)
    b = jnp.asarray(np.r_[np.zeros(d), np.full(d, -2.0)], jnp.float32)

    def grad_fn(**options):
        def loss(U, x, w, b):
            h, c = sru_recurrence(U, x, w, b, **options)
            return jnp.sum(h * g) + jnp.sum(c)

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))

    variants = {"kernel": grad_fn(implementation="pallas")}
    for block in blocks:
        variants[f"kernel block {block}"] = grad_fn(implementation="pallas", block=block)
    for lookahead in lookaheads:
        variants[f"kernel lookahead {lookahead}"] = grad_fn(implementation="pallas", lookahead=lookahead)
    variants["scan"] = grad_fn(implementation="scan")
    forward = {
        name: jax.jit(lambda U, x, w, b, i=i: sru_recurrence(U, x, w, b, implementation=i)[0])
        for name, i in (("kernel", "pallas"), ("scan", "scan"))
    }
    rel = lambda a, ref: float(jnp.max(jnp.abs(a - ref)) / (jnp.max(jnp.abs(ref)) + 1e-30))  # noqa: E731
    kernel_grads, scan_grads = variants["kernel"](U, x, w, b)[1], variants["scan"](U, x, w, b)[1]
    parity = {"h": rel(forward["kernel"](U, x, w, b), forward["scan"](U, x, w, b))}
    parity.update(
        {f"d{name}": rel(a, ref) for name, a, ref in zip(("U", "x", "weight_c", "bias"), kernel_grads, scan_grads)}
    )
    steps = {name: (lambda fn=fn: fn(U, x, w, b)[1]) for name, fn in variants.items()}
    return steps, parity


# ---------------------------------------------------------------- training steps


def keras_train_step(model, B, L, d, seed):
    """step() of one jitted Adam step on MSE(model(x), y), the model's state carried between calls."""
    import jax
    import jax.numpy as jnp
    import keras

    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(B, L, d)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(B, L, d)), jnp.float32)
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable, x, y):
        out, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return jnp.mean(jnp.square(out.astype(jnp.float32) - y)), non_trainable

    @jax.jit
    def step(trainable, non_trainable, opt_vars, x, y):
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return trainable, non_trainable, opt_vars, loss

    state = [
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    ]

    def run():
        trainable, non_trainable, opt_vars, loss = step(*state, x, y)
        state[:] = [trainable, non_trainable, opt_vars]
        return loss

    return run


def train_steps(B, L, d, p, dtype, seed):
    """{variant: step()}: SRUpp with the kernel, SRUpp with the scan pair, a 2-layer GRU."""
    import keras

    from gau_keras.layers import SRUpp

    policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
    steps = {}
    for variant, implementation in (("SRU++ kernel", "pallas"), ("SRU++ scan", "scan")):
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((L, d)), SRUpp(d, p, num_layers=2, dtype=policy)])
        with sru_kernel_set(implementation):  # read when the step is traced
            steps[variant] = keras_train_step(model, B, L, d, seed)
            steps[variant]()  # traces and compiles now, under this implementation
    keras.utils.set_random_seed(seed)
    gru = keras.Sequential(
        [
            keras.Input((L, d)),
            keras.layers.GRU(d, return_sequences=True, dtype=policy),
            keras.layers.GRU(d, return_sequences=True, dtype=policy),
        ]
    )
    steps["Keras GRU"] = keras_train_step(gru, B, L, d, seed)
    return steps


# ---------------------------------------------------------------- official SRU++ (torch worker)


def official_worker(args):
    """Times the official SRU++ and cuDNN GRU training steps in float32 (torch); JSON lines on stdout."""
    import sru
    import torch

    device = torch.device("cuda")
    for B, L, d, p in args.shapes:
        torch.manual_seed(args.seed)
        x = torch.randn(L, B, d, device=device)  # time-major, as both modules take it
        y = torch.randn(L, B, d, device=device)
        models = {
            "official SRU++": sru.SRUpp(d, d, p, num_layers=2).to(device),
            "cuDNN GRU": torch.nn.GRU(d, d, num_layers=2).to(device),
        }
        for name, model in models.items():
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

            def step():
                optimizer.zero_grad(set_to_none=True)
                out = model(x)[0]
                loss = torch.mean((out - y) ** 2)
                loss.backward()
                optimizer.step()

            for _ in range(3):
                step()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - start) * 1e3 / args.steps)
            print(
                json.dumps(
                    {
                        "group": "train",
                        "shape": [B, L, d, p],
                        "dtype": "float32",
                        "variant": name,
                        "ms": statistics.median(times),
                    }
                ),
                flush=True,
            )


def run_official(args):
    """The official worker's JSON lines (an empty list, with the reason on stderr, when it cannot run)."""
    argv = [
        sys.executable,
        __file__,
        OFFICIAL_FLAG,
        "--shapes",
        ",".join("x".join(map(str, s)) for s in args.shapes),
        "--rounds",
        str(args.rounds),
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
    ]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"official SRU++ not timed (exit {result.returncode}): {result.stderr.strip()[-1500:]}", file=sys.stderr)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# ---------------------------------------------------------------- report


def table(records):
    """The Markdown table: one row per shape, dtype and group, ms per variant and the ratios."""
    rows, index = [], {}
    for r in records:
        key = (tuple(r["shape"]), r["dtype"], r["group"])
        if key not in index:
            index[key] = {}
            rows.append(key)
        index[key][r["variant"]] = r["ms"]
    lines = ["| B×L×d (proj) | dtype | what | variant | ms | / scan | / GRU | / official |", "|---" * 8 + "|"]
    for key in rows:
        (B, L, d, p), dtype, group = key
        times = index[key]
        gru = index.get(((B, L, d, p), "float32" if group == "train" else dtype, group), {})
        ref = {
            "scan": times.get("scan", times.get("SRU++ scan")),
            "GRU": times.get("Keras GRU") or gru.get("Keras GRU"),
            "official": times.get("official SRU++") or gru.get("official SRU++"),
        }
        for variant, ms in times.items():
            ratio = lambda base: f"{ms / base:.3g}" if base else ""  # noqa: E731
            lines.append(
                f"| {B}×{L}×{d} ({p}) | {dtype} | {group} | {variant} | {ms:.3g} | {ratio(ref['scan'])} "
                f"| {ratio(ref['GRU'])} | {ratio(ref['official'])} |"
            )
    return "\n".join(lines)


def main(argv=None):
    args = arguments(argv)
    records = run_official(args) if args.official else []
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit(f"srupp_gpu.py runs on the JAX backend; KERAS_BACKEND is {keras.backend.backend()!r}")

    device = jax.devices()[0]
    print(f"device: {device.platform} {getattr(device, 'device_kind', '')}; jax {jax.__version__}", flush=True)
    out = open(args.json, "w", encoding="utf-8") if args.json else None

    def emit(record):
        records.append(record)
        line = json.dumps(record)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    def timed(steps):
        return _common.interleaved_medians(steps, args.rounds, args.steps, jax.block_until_ready)

    official, records = records, []
    for record in official:
        emit(record)
    for B, L, d, p in args.shapes:
        steps, parity = recurrence_steps(B, L, d, args.blocks, args.lookaheads, args.seed)
        emit({"group": "parity", "shape": [B, L, d, p], "max_relative_difference": parity})
        for variant, ms in timed(steps).items():
            emit({"group": "recurrence", "shape": [B, L, d, p], "dtype": "float32", "variant": variant, "ms": ms})
        if args.no_train:
            continue
        for dtype in args.dtypes:
            steps = train_steps(B, L, d, p, dtype, args.seed)
            for variant, ms in timed(steps).items():
                emit({"group": "train", "shape": [B, L, d, p], "dtype": dtype, "variant": variant, "ms": ms})
    if out:
        out.close()
    print()
    print(table([r for r in records if r["group"] != "parity"]))


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras loads (it is imported where it is used)
    import gau_keras.cli_env  # noqa: F401  (after KERAS_BACKEND: the script's TensorFlow log level)

    if OFFICIAL_FLAG in sys.argv:
        sys.argv.remove(OFFICIAL_FLAG)
        official_worker(arguments())
    else:
        main()
