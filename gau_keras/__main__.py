"""Command line: ``python -m gau_keras fill-mask [--model-dir DIR] "今天天气很[MASK]。"``."""
import argparse
import os
import sys


def _fill_mask(args):
    from gau_keras.fill_mask import fill_mask
    from gau_keras.pretrained import load_pretrained

    model, tokenizer = load_pretrained(args.model_dir, model=args.model, with_mlm=True,
                                       **({"softmax_plus_min_len": args.softmax_plus_min_len}
                                          if args.softmax_plus_min_len is not None else {}))
    for text in args.texts:
        print(text)
        for i, candidates in enumerate(fill_mask(model, tokenizer, text, args.top_k)):
            shown = "  ".join(f"{token} {prob:.4f}" for token, prob in candidates)
            print(f"  [MASK] #{i + 1}: {shown}")
    return 0


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m gau_keras", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    fill = commands.add_parser("fill-mask", help="predict the tokens at [MASK] positions")
    fill.add_argument("texts", nargs="+", help="texts containing one or more [MASK]")
    fill.add_argument("--model-dir", default=None,
                      help="directory with bert_config.json, bert_model.ckpt.* and vocab.txt "
                           "(default: the bundled small GAU-alpha)")
    fill.add_argument("--model", default="gau_alpha", help="gau_alpha (default) or roformer_v2")
    fill.add_argument("--top-k", type=_positive_int, default=5, help="predictions per [MASK] (default 5)")
    fill.add_argument("--softmax-plus-min-len", type=int, default=None,
                      help="floor of softmax_plus's n (16 default; 1 = the released model's training code)")
    fill.set_defaults(run=_fill_mask)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
