"""GAU-α, RoFormerV2, RoFormer and BERT at equal hidden size, and our BERT against
keras-hub's BertBackbone: step time, peak memory and MFU, measured side by side.

Models (hidden 768, dropout 0, a 64-token vocabulary so that the embedding stays far below
1 % of the work; ``--layers N``, default 1):
  * GAU-α: 2N GAU layers (e 1536, s 128, swish, softmax_plus) — twice the layers, as the
    GAU-α release compares it (about one attention + FFN block's parameters per two GAUs);
  * RoFormerV2: N blocks of 12 × 64 heads + FFN 3072 (relu), bias-free, RMS norm, RoPE;
  * RoFormer: N BERT blocks with RoPE (gelu, biases, LayerNorm);
  * BERT: N BERT blocks (gelu, biases, LayerNorm, absolute positions);
  * keras-hub BERT: keras_hub's ``BertBackbone`` of BERT's config (its sequence output), where
    keras_hub is installed.
Each is the model users run (``build_transformer_model`` / keras-hub's class, encoder, no
head). Training step: ``train_on_batch`` (Adam, MSE of the hidden states against a fixed
random target); inference: ``predict_on_batch``. Shapes (batch × length): 8×128, 4×512,
1×1024, 1×2048 (``--shapes``).

Side by side: for each (shape, mode) every model runs in its own worker process, all alive
together, the parent stepping them in turn (order reversed every round); time ratios are the
medians of per-round ratios against BERT. Peak memory: the step's peak above the post-warm-up
baseline (TensorFlow's allocator statistics; see ``_common.MemoryProbe``). MFU: analytic matmul
FLOPs (``gau_vs_attention``'s counts; training = 3 × forward) ÷ median step time ÷ the best
float32 matmul rate measured in the run.

Usage: python3 benchmarks/encoders.py [--shapes 8x128,4x512,1x1024,1x2048] [--layers 1]
    [--repeats 5] [--modes train,infer] [--quick]
"""

import argparse
import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import _common  # noqa: E402  (path set above)
import gau_vs_attention  # noqa: E402

MODES = ("train", "infer")
VOCAB_SIZE = 64
BASELINE = "BERT"
MODELS = ("GAU-α", "RoFormerV2", "RoFormer", "BERT", "keras-hub BERT")
BUILDER_NAMES = {"GAU-α": "gau_alpha", "RoFormerV2": "roformer_v2", "RoFormer": "roformer", "BERT": "bert"}


def sizes_of(quick, layers):
    """{model: build_transformer_model sizes}; keras-hub BERT uses BERT's."""
    hidden, heads, ffn, e, s = (32, 4, 64, 64, 16) if quick else (768, 12, 3072, 1536, 128)
    mha = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn)
    return {
        "GAU-α": dict(
            hidden_size=hidden,
            num_hidden_layers=2 * layers,
            num_attention_heads=1,
            intermediate_size=e,
            attention_key_size=s,
            hidden_act="swish",
        ),
        "RoFormerV2": dict(mha, hidden_act="relu"),
        "RoFormer": dict(mha, hidden_act="gelu"),
        "BERT": dict(mha, hidden_act="gelu", max_position=2048),
    }


def step_flops(model, sizes, batch, length, mode):
    """Analytic matmul FLOPs of one step (``gau_vs_attention``'s per-layer counts)."""
    s = sizes["BERT" if model == "keras-hub BERT" else model]
    tokens = batch * length
    if model == "GAU-α":
        layer = gau_vs_attention.gau_layer_flops(
            tokens, length, s["hidden_size"], s["intermediate_size"], s["attention_key_size"]
        )
    else:
        layer = gau_vs_attention.mha_ffn_layer_flops(
            tokens, length, s["hidden_size"], s["num_attention_heads"], s["intermediate_size"]
        )
    return s["num_hidden_layers"] * layer * (_common.TRAIN_FLOP_FACTOR if mode == "train" else 1)


# ---------------------------------------------------------------- worker side
def keras_hub_step(sizes, batch, length, mode, seed):
    """(info, step) of keras-hub's BertBackbone at BERT's config (sequence output)."""
    import keras
    import keras_hub
    import numpy as np

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB_SIZE,
        num_layers=sizes["num_hidden_layers"],
        num_heads=sizes["num_attention_heads"],
        hidden_dim=sizes["hidden_size"],
        intermediate_dim=sizes["intermediate_size"],
        dropout=0.0,
        max_sequence_length=sizes["max_position"],
    )
    model = keras.Model(backbone.inputs, backbone.output["sequence_output"])
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB_SIZE, size=(batch, length)).astype("int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    target = rng.standard_normal((batch, length, sizes["hidden_size"])).astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse", jit_compile=False)
    step = (
        (lambda: model.train_on_batch(inputs, target)) if mode == "train" else (lambda: model.predict_on_batch(inputs))
    )
    return {"params": int(model.count_params())}, step


def worker_setup(spec):
    if spec["model"] == "keras-hub BERT":
        return keras_hub_step(spec["sizes"], spec["batch"], spec["length"], spec["mode"], spec["seed"])
    return _common.encoder_step(
        BUILDER_NAMES[spec["model"]],
        spec["sizes"],
        spec["batch"],
        spec["length"],
        spec["mode"],
        spec["seed"],
        VOCAB_SIZE,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )


# ---------------------------------------------------------------- parent side
def parse_shapes(text):
    try:
        shapes = [tuple(int(n) for n in item.lower().split("x")) for item in text.split(",") if item.strip()]
    except ValueError:
        raise SystemExit(f"--shapes: expected BATCHxLENGTH items such as 8x128, got {text!r}") from None
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise SystemExit(f"--shapes: expected BATCHxLENGTH items such as 8x128, got {text!r}")
    return shapes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--shapes", help="comma-separated BATCHxLENGTH (default 8x128,4x512,1x1024,1x2048; --quick: 2x32)"
    )
    parser.add_argument(
        "--layers", type=int, default=1, help="blocks of the attention models (GAU-α gets twice as many; default 1)"
    )
    parser.add_argument("--repeats", type=int, help="timed steps per model after one warm-up (default 5; --quick: 1)")
    parser.add_argument("--modes", default="train,infer", help="comma-separated: train, infer")
    parser.add_argument("--quick", action="store_true", help="tiny widths: a smoke test, not a measurement")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.shapes = parse_shapes(args.shapes or ("2x32" if args.quick else "8x128,4x512,1x1024,1x2048"))
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in MODES for m in args.modes):
        parser.error(f"--modes: {args.modes} invalid; choose from {MODES}")
    args.repeats = args.repeats if args.repeats is not None else (1 if args.quick else 5)
    for name in ("repeats", "layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def available_models():
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        print("keras_hub is not installed: its BertBackbone is left out", file=sys.stderr, flush=True)
        return [m for m in MODELS if m != "keras-hub BERT"]
    return list(MODELS)


def worker_argv(args, model, sizes, batch, length, mode):
    spec = dict(
        model=model,
        sizes=sizes["BERT" if model == "keras-hub BERT" else model],
        batch=batch,
        length=length,
        mode=mode,
        seed=args.seed,
    )
    return [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", json.dumps(spec)]


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        _common.serve(lambda: worker_setup(json.loads(args.worker)))
        return
    sizes = sizes_of(args.quick, args.layers)
    models = available_models()
    calibration = gau_vs_attention.CALIBRATION["tiny" if args.quick else "full"]
    jobs = [(shape, mode) for shape in args.shapes for mode in args.modes]
    rates, measured, device, method, params = [], [], None, None, {}
    for index, ((batch, length), mode) in enumerate(jobs):
        print(f"[{index + 1}/{len(jobs)}] {batch}x{length} {mode} ...", file=sys.stderr, flush=True)

        def calibrate(workers):
            rates.append(workers[BASELINE].request("calibrate", **calibration)["flops_per_second"])

        results = _common.measure_side_by_side(
            {m: worker_argv(args, m, sizes, batch, length, mode) for m in models},
            args.repeats,
            before=calibrate if index == 0 else None,
            after=calibrate if index == len(jobs) - 1 else None,
        )
        device, method = results[BASELINE]["device"], results[BASELINE]["memory_method"]
        params = {m: results[m]["params"] for m in models}
        measured.append((batch, length, mode, results))
    peak = max(rates)
    f = _common.format_number
    rows = []
    for batch, length, mode, results in measured:
        base = results[BASELINE]["seconds"]
        for m in models:
            seconds = statistics.median(results[m]["seconds"])
            flops = step_flops(m, sizes, batch, length, mode)
            rows.append(
                [
                    f"{batch}×{length}",
                    mode,
                    m,
                    f(seconds * 1e3),
                    f(_common.median_ratio(results[m]["seconds"], base)),
                    f(results[m]["peak_bytes"] / _common.MIB),
                    f"{100 * flops / seconds / peak:.1f}%",
                ]
            )
    print(f"device: {device}; peak memory from {method}; float32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(
        f"{args.repeats} timed repeats after 1 warm-up step; parameters: "
        + ", ".join(f"{m} {params[m]:,}" for m in models)
        + ("; --quick: not a measurement" if args.quick else "")
    )
    print()
    print(_common.markdown_table(["batch×L", "mode", "model", "ms", f"time / {BASELINE}", "peak MiB", "MFU"], rows))


if __name__ == "__main__":
    main()
