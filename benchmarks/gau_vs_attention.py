"""GAU-alpha vs RoFormerV2 at equal width: step time, peak memory and MFU.

Compared blocks (the equal-width pair of the GAU paper / GAU-alpha):
  * GAU-alpha: 2 GAU layers, H 768, e 1536, s 128, swish, softmax_plus.
  * RoFormerV2: 1 MHA + FFN layer, 12 heads x 64, FFN 3072, relu, softmax.
Both bias-free, post-norm with the parameter-free RMS norm and rotary
positions; dropout 0 (a rate of 0 skips the Dropout layers, as in bert4keras).

What is built: the full models from ``build_transformer_model`` (application
'encoder', no MLM head) with a 64-token vocabulary, fed random non-padding
token ids. This runs exactly the code users run -- the padding-mask
computation, the rotary table, softmax_plus's key count, the embedding RMS
norm -- rather than a re-assembly of the layers that could drift from it,
while the small vocabulary keeps the embedding (the same for both models,
64 x 768 weights, a gather of B·L·H) far below 1 % of the work, so equal-width
blocks are what is compared. There is no MLM head: with a real vocabulary its
[B·L, H] x [H, V] product would dominate both models equally and hide the
difference.

Training step: ``model.train_on_batch`` (Adam, MSE of the hidden states
against a fixed random target): forward + backward + optimizer update, one
compiled ``tf.function`` (``jit_compile=False``, Keras's own default on CPU).
Inference: ``model.predict_on_batch``. Both return numpy values, so a timed
call has finished its work.

FLOPs, counted analytically (multiply-add = 2 FLOPs, matmuls only; softmax,
norms, rotary, activations and the optimizer update are left out), for
B sequences of L tokens, width H:
  * GAU layer: 2·B·L·H·(2e + s)  [i_dense]  + 2·B·L²·s  [q kᵀ]
               + 2·B·L²·e  [A v]  + 2·B·L·e·H  [o_dense]
  * MHA + FFN layer (h heads of d, h·d = H): 4 · 2·B·L·H²  [q, k, v, o]
               + 2·B·L²·H  [q kᵀ, all heads]  + 2·B·L²·H  [A v]
               + 2 · 2·B·L·H·F  [FFN in, out]
  * training = 3 × forward (the backward pass does two matmuls per forward one).
With the sizes above GAU-alpha does 14.5 M·BL + 6656·BL² forward FLOPs per
2 layers and RoFormerV2 14.2 M·BL + 3072·BL² per layer: GAU-alpha does *more*
attention arithmetic (one head of width s + e instead of h heads of H), so
whatever it gains at long L comes from moving one [B, L, L] score tensor per
layer instead of h of them.

MFU = achieved FLOP/s (analytic FLOPs / median step time) ÷ the best float32
[n, n] @ [n, n] FLOP/s measured on this machine (n = 2048), the calibration
run in the first and the last worker of the run (best of both).

Peak memory: each (model, length, mode) runs in a fresh worker process. After
one warm-up step (graph tracing, optimizer slot creation) the baseline is
taken and the peak statistics are reset; the figure reported is the peak over
the timed steps minus that baseline: the memory a step needs on top of the
resident weights and optimizer state (activations kept for the backward pass,
gradients, temporaries). It is read from TensorFlow's allocator statistics
(``tf.config.experimental.get_memory_info``); on CPU the workers switch TF to
its BFC CPU allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``) because the default
oneDNN allocator counts only buffers of 256 KiB or more, which would miss
GAU-alpha's [2, 128, 128] attention matrices at L = 128. An interleaved A/B
run of RoFormerV2 (L 128 and 512) put the BFC allocator's step time within
noise of the default's (ratios 0.96-1.06). The process RSS is no alternative
on CPU: TF's pool keeps freed memory resident, so RSS shows the pool, not a
step's peak. Where the allocator keeps no statistics the worker's peak RSS is
used instead (see ``_common.MemoryProbe``); the header names the method.

Timing: for each (length, mode) the two models' workers are alive together and
the parent alternates them step by step (order flipped every round), so load
from other processes hits both; the time ratio is the median of the per-round
ratios.

Backends (``--backends tensorflow,jax``): each model runs in a worker per backend, all of them
side by side in the same rounds; a row per backend, and the JAX rows give each model's JAX step
time over its TensorFlow one (median of the per-round ratios). On JAX the step is jitted (Keras's
JAX trainer; ``jit_compile=False`` would run it op by op) and peak memory is the worker's peak
RSS (JAX's buffers are not TensorFlow's allocator's), so the memory columns of the two backends
are not comparable with each other.

Usage: python3 benchmarks/gau_vs_attention.py [--lengths 128,512,1024,2048]
    [--batch-size 2] [--repeats 5] [--modes train,infer] [--backends tensorflow,jax] [--quick]
"""

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import _common  # noqa: E402  (path set above)

MODELS = ("gau_alpha", "roformer_v2")
LABELS = {"gau_alpha": "GAU-α", "roformer_v2": "RoFormerV2"}
MODES = ("train", "infer")
BACKENDS = ("tensorflow", "jax")
VOCAB_SIZE = 64

#: the real comparison (issue 2 item 9)
FULL_SIZES = {
    "gau_alpha": dict(
        hidden_size=768,
        num_hidden_layers=2,
        intermediate_size=1536,
        attention_key_size=128,
        num_attention_heads=1,
        hidden_act="swish",
    ),
    "roformer_v2": dict(
        hidden_size=768, num_hidden_layers=1, num_attention_heads=12, intermediate_size=3072, hidden_act="relu"
    ),
}
#: --quick: a smoke test of the machinery, not a measurement
TINY_SIZES = {
    "gau_alpha": dict(
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        attention_key_size=16,
        num_attention_heads=1,
        hidden_act="swish",
    ),
    "roformer_v2": dict(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128, hidden_act="relu"
    ),
}
CALIBRATION = {"full": dict(n=2048, repeats=5), "tiny": dict(n=256, repeats=2)}


# ---------------------------------------------------------------- FLOPs
def gau_layer_flops(tokens, length, hidden, units, key_size):
    """Forward matmul FLOPs of one GAU layer over ``tokens`` = B·L tokens."""
    mm = _common.matmul_flops
    sequences = tokens // length
    return (
        mm(tokens, hidden, 2 * units + key_size)
        + mm(length, key_size, length, sequences)
        + mm(length, length, units, sequences)
        + mm(tokens, units, hidden)
    )


def mha_ffn_layer_flops(tokens, length, hidden, heads, ffn):
    """Forward matmul FLOPs of one MHA + FFN layer (h·d = hidden)."""
    mm = _common.matmul_flops
    sequences = tokens // length
    head_size = hidden // heads
    return (
        4 * mm(tokens, hidden, hidden)
        + mm(length, head_size, length, sequences * heads)
        + mm(length, length, head_size, sequences * heads)
        + 2 * mm(tokens, hidden, ffn)
    )


def model_flops(model, sizes, batch_size, length, mode):
    """Analytic matmul FLOPs of one step (training = 3 × forward)."""
    tokens = batch_size * length
    s = sizes[model]
    if model == "gau_alpha":
        layer = gau_layer_flops(tokens, length, s["hidden_size"], s["intermediate_size"], s["attention_key_size"])
    else:
        layer = mha_ffn_layer_flops(tokens, length, s["hidden_size"], s["num_attention_heads"], s["intermediate_size"])
    forward = s["num_hidden_layers"] * layer
    return forward * (_common.TRAIN_FLOP_FACTOR if mode == "train" else 1)


# ---------------------------------------------------------------- worker side
def worker_setup(spec):
    """Builds the model of ``spec`` and returns (info, step) for ``_common.serve``."""
    return _common.encoder_step(
        spec["model"],
        spec["sizes"],
        spec["batch_size"],
        spec["length"],
        spec["mode"],
        spec["seed"],
        VOCAB_SIZE,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )


def worker_main(spec_json):
    spec = json.loads(spec_json)
    os.environ["KERAS_BACKEND"] = spec["backend"]  # before Keras loads
    _common.serve(lambda: worker_setup(spec))


# ---------------------------------------------------------------- parent side
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lengths", help="comma-separated sequence lengths (default 128,512,1024,2048; --quick: 64)")
    parser.add_argument("--batch-size", type=int, help="sequences per step (default 2; --quick: 1)")
    parser.add_argument(
        "--repeats",
        type=int,
        help="timed steps per model and configuration, after one warm-up step (default 5; --quick: 1)",
    )
    parser.add_argument("--modes", default="train,infer", help="comma-separated: train, infer")
    parser.add_argument(
        "--backends", default="tensorflow", help="comma-separated: tensorflow, jax (side by side in one run)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny widths and one short length: a smoke test, not a measurement"
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.lengths = _int_list(args.lengths or ("64" if args.quick else "128,512,1024,2048"), "--lengths")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        parser.error(f"--modes: {bad or args.modes} invalid; choose from {MODES}")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in args.backends if b not in BACKENDS]
    if bad or not args.backends or len(set(args.backends)) != len(args.backends):
        parser.error(f"--backends: {args.backends} invalid; choose from {BACKENDS}, each once")
    if "jax" in args.backends and importlib.util.find_spec("jax") is None:
        parser.error("--backends: jax is not installed")
    if args.batch_size is None:
        args.batch_size = 1 if args.quick else 2
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    for name in ("batch_size", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def _int_list(text, option):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{option}: expected positive integers, got {text!r}")
    return values


def worker_argv(args, sizes, model, length, mode, backend="tensorflow"):
    spec = dict(model=model, sizes=sizes[model], length=length, mode=mode, batch_size=args.batch_size, seed=args.seed)
    spec["backend"] = backend
    return [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", json.dumps(spec)]


def measure(args, sizes, length, mode, calibration, calibrate_first, calibrate_last):
    """Runs both models on every backend side by side for one (length, mode); returns their
    results by ``(model, backend)``."""
    flops_per_second = []

    def calibrate(workers):
        first = (MODELS[0], args.backends[0])
        flops_per_second.append(workers[first].request("calibrate", **calibration)["flops_per_second"])

    results = _common.measure_side_by_side(
        {
            (model, backend): worker_argv(args, sizes, model, length, mode, backend)
            for backend in args.backends
            for model in MODELS
        },
        args.repeats,
        before=calibrate if calibrate_first else None,
        after=calibrate if calibrate_last else None,
    )
    return results, flops_per_second


def summarize(args, sizes, length, mode, results, peak_flops):
    """The table's rows of one (length, mode): one per backend."""
    return [summarize_backend(args, sizes, length, mode, results, peak_flops, backend) for backend in args.backends]


def summarize_backend(args, sizes, length, mode, results, peak_flops, backend):
    mine = {m: results[(m, backend)] for m in MODELS}
    times = {m: statistics.median(mine[m]["seconds"]) for m in MODELS}
    flops = {m: model_flops(m, sizes, args.batch_size, length, mode) for m in MODELS}
    mfu = {m: flops[m] / times[m] / peak_flops for m in MODELS}
    mem = {m: mine[m]["peak_bytes"] / _common.MIB for m in MODELS}
    mem_ratio = mem["gau_alpha"] / mem["roformer_v2"] if mem["roformer_v2"] > 0 else float("nan")
    f = _common.format_number
    row = [
        length,
        mode,
        backend,
        f(times["gau_alpha"] * 1e3),
        f(times["roformer_v2"] * 1e3),
        f(_common.median_ratio(mine["gau_alpha"]["seconds"], mine["roformer_v2"]["seconds"])),
        f(flops["gau_alpha"] / flops["roformer_v2"]),
        f(mem["gau_alpha"]),
        f(mem["roformer_v2"]),
        f(mem_ratio),
        f"{100 * mfu['gau_alpha']:.1f}%",
        f"{100 * mfu['roformer_v2']:.1f}%",
    ]
    if len(args.backends) > 1:  # each model's step time over its TensorFlow one, round by round
        tf_results = {m: results[(m, "tensorflow")]["seconds"] for m in MODELS}
        row += [f(_common.median_ratio(mine[m]["seconds"], tf_results[m])) for m in MODELS]
    return row


HEADERS = [
    "L",
    "mode",
    "backend",
    "GAU-α ms",
    "RoFormerV2 ms",
    "time GAU/RoF",
    "FLOPs GAU/RoF",
    "GAU-α MiB",
    "RoFormerV2 MiB",
    "mem GAU/RoF",
    "GAU-α MFU",
    "RoFormerV2 MFU",
]
VERSUS_TF = ["GAU-α time / TF's", "RoFormerV2 time / TF's"]


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    sizes = TINY_SIZES if args.quick else FULL_SIZES
    calibration = CALIBRATION["tiny" if args.quick else "full"]
    jobs = [(length, mode) for length in args.lengths for mode in args.modes]
    measured, calibrations, device, memory_method, params = [], [], None, None, {}
    for index, (length, mode) in enumerate(jobs):
        print(f"[{index + 1}/{len(jobs)}] L={length} {mode} ...", file=sys.stderr, flush=True)
        results, flops = measure(
            args, sizes, length, mode, calibration, calibrate_first=index == 0, calibrate_last=index == len(jobs) - 1
        )
        calibrations += flops
        first = results[(MODELS[0], args.backends[0])]
        device = first["device"]
        memory_method = ", ".join(f"{b}: {results[(MODELS[0], b)]['memory_method']}" for b in args.backends)
        params = {m: results[(m, args.backends[0])]["params"] for m in MODELS}
        measured.append((length, mode, results))
    peak_flops = max(calibrations)
    rows = [row for length, mode, res in measured for row in summarize(args, sizes, length, mode, res, peak_flops)]
    print(
        f"device: {device}; peak memory from {memory_method}; float32 matmul peak {peak_flops / 1e9:.1f} GFLOP/s "
        f"(n={calibration['n']}, best of runs: " + ", ".join(f"{c / 1e9:.1f}" for c in calibrations) + ")"
    )
    print(
        f"batch size {args.batch_size}, {args.repeats} timed repeats after 1 warm-up step; "
        f"parameters: "
        + ", ".join(f"{LABELS[m]} {params[m]:,}" for m in MODELS)
        + ("; --quick: tiny widths, not a measurement" if args.quick else "")
    )
    print()
    print(_common.markdown_table(HEADERS + (VERSUS_TF if len(args.backends) > 1 else []), rows))


if __name__ == "__main__":
    main()
