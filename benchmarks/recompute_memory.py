"""Training-step activation memory and time with and without ``recompute``.

For GAU-alpha (4 GAU layers: H 768, e 1536, s 128) and RoFormerV2 (2 layers:
12 heads x 64, FFN 3072; the same parameter count), batch 1, lengths 2048 and
4096: one worker process per (model, length, recompute), the two recompute
variants of a (model, length) alive together and stepped alternately
(``_common.run_side_by_side``). A step is ``model.train_on_batch`` (Adam, MSE
of the hidden states against a random target, dropout 0.1 so that recompute
has dropout masks to replay); a 64-token vocabulary keeps the embedding out of
the picture, as in ``gau_vs_attention.py``.

Memory: peak of TensorFlow's allocator during the timed steps minus its use
after the warm-up step (weights, optimizer slots and the traced graph
excluded): activations, gradients, temporaries. On CPU the workers use the
BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``) so that every tensor is
counted (see ``_common``).

Usage: python3 benchmarks/recompute_memory.py [--lengths 2048,4096] [--repeats 3] [--quick]
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

VOCAB_SIZE = 64
SIZES = {
    "gau_alpha": dict(
        hidden_size=768,
        num_hidden_layers=4,
        intermediate_size=1536,
        attention_key_size=128,
        num_attention_heads=1,
        hidden_act="swish",
    ),
    "roformer_v2": dict(
        hidden_size=768, num_hidden_layers=2, num_attention_heads=12, intermediate_size=3072, hidden_act="relu"
    ),
}
QUICK_SIZES = {
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
LABELS = {"gau_alpha": "GAU-α", "roformer_v2": "RoFormerV2"}


def worker_setup(spec):
    return _common.encoder_step(
        spec["model"],
        spec["sizes"],
        1,
        spec["length"],
        vocab_size=VOCAB_SIZE,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        recompute=spec["recompute"],
    )


def worker_main(spec_json):
    spec = json.loads(spec_json)
    _common.serve(lambda: worker_setup(spec))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lengths", default=None, help="comma-separated (default 2048,4096; --quick: 128)")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps after 1 warm-up (default 3)")
    parser.add_argument("--models", default="gau_alpha,roformer_v2")
    parser.add_argument("--quick", action="store_true", help="tiny widths: a smoke test, not a measurement")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.lengths = [int(x) for x in (args.lengths or ("128" if args.quick else "2048,4096")).split(",")]
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for model in args.models:
        if model not in SIZES:
            parser.error(f"--models: unknown model {model!r}; choose from {sorted(SIZES)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    sizes = QUICK_SIZES if args.quick else SIZES
    rows, device, method = [], None, None
    f = _common.format_number
    for model in args.models:
        for length in args.lengths:
            print(f"[{model} L={length}] ...", file=sys.stderr, flush=True)
            argvs = {}
            for recompute in (False, True):
                spec = dict(model=model, sizes=sizes[model], length=length, recompute=recompute)
                argvs[recompute] = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", json.dumps(spec)]
            results = _common.measure_side_by_side(argvs, args.repeats)
            device, method = results[False]["device"], results[False]["memory_method"]
            off, on = results[False], results[True]
            mem_off, mem_on = off["peak_bytes"] / _common.MIB, on["peak_bytes"] / _common.MIB
            rows.append(
                [
                    LABELS[model],
                    f"1 × {length}",
                    f(statistics.median(off["seconds"])),
                    f(statistics.median(on["seconds"])),
                    f(_common.median_ratio(on["seconds"], off["seconds"])),
                    f(mem_off),
                    f(mem_on),
                    f(mem_on / mem_off if mem_off else float("nan")),
                ]
            )
    print(
        f"device: {device}; peak memory above the post-warm-up baseline from {method}; "
        f"{args.repeats} timed steps after 1 warm-up" + ("; --quick: not a measurement" if args.quick else "")
    )
    print()
    print(
        _common.markdown_table(
            [
                "model",
                "batch × L",
                "s/step",
                "s/step recompute",
                "time ratio",
                "activation MiB",
                "activation MiB recompute",
                "memory ratio",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
