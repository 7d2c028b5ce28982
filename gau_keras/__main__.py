"""The ``gau-keras`` command line (also ``python -m gau_keras``).

    gau-keras fill-mask [--model-dir DIR] "今天天气很[MASK]。"
    gau-keras generate --model-dir DIR --model gpt2 "今天天气" [--strategy greedy|sample|beam]
    gau-keras export (--model-dir DIR | --keras FILE) (--output DIR | --hf DIR)
    gau-keras prepare-corpus corpus.txt --vocab vocab.txt --output-dir data/mlm ...
    gau-keras build-vocab corpus.txt --base-vocab vocab.txt --output small_vocab.txt
    gau-keras pretrain --config pretrain/configs/tiny.json ...
    gau-keras finetune TASK --data-dir ../shared/data/clue ...
    gau-keras compare --data-dir ../shared/data/clue --out-dir runs/compare --variant bundled= ...

``prepare-corpus``, ``build-vocab``, ``pretrain``, ``finetune TASK`` and ``compare`` run
``gau_keras.training.pretrain.prepare_corpus``, ``gau_keras.training.pretrain.build_vocab``,
``gau_keras.training.pretrain.pretrain``, ``gau_keras.training.finetune.runner`` and
``gau_keras.training.finetune.compare`` (``--help`` lists their options); TASK is a task of
``gau_keras.data.clue.TASKS`` that has a head. ``gau-keras --help`` lists every subcommand.
"""

import argparse
import sys

from gau_keras import cli_env, flags, generate

#: subcommands handled by another module's own argument parser
DELEGATED = {
    "prepare-corpus": "gau_keras.training.pretrain.prepare_corpus",
    "build-vocab": "gau_keras.training.pretrain.build_vocab",
    "pretrain": "gau_keras.training.pretrain.pretrain",
    "compare": "gau_keras.training.finetune.compare",
}
#: every subcommand and its line in ``gau-keras --help`` (the delegated ones are handed to their own parsers)
COMMANDS = {
    "fill-mask": "predict the tokens at [MASK] positions",
    "generate": "continue a text with a causal or UniLM model (key/value cache)",
    "export": "write a TensorFlow SavedModel for serving",
    "prepare-corpus": "corpus -> whole-word-MLM TFRecord shards",
    "build-vocab": "a smaller vocab: the base vocab's tokens a corpus uses",
    "pretrain": "masked-LM pretraining on TFRecord shards (--config)",
    "finetune": "fine-tune on a CLUE task: finetune TASK (--help: the tasks)",
    "compare": "fine-tune several starting points, tabulate dev metrics",
}


def _fill_mask(args):
    from gau_keras.fill_mask import fill_mask
    from gau_keras.models.registry import MODELS, model_names
    from gau_keras.pretrained import load_pretrained

    if not MODELS[args.model].has_mlm_head:
        with_head = [name for name in model_names() if MODELS[name].has_mlm_head]
        raise ValueError(
            f"fill-mask: --model {args.model} has no MLM head to predict tokens with (ELECTRA's "
            f"checkpoints hold its discriminator; the GPTs predict the next token only); choose one of "
            f"{', '.join(with_head)}"
        )
    model, tokenizer = load_pretrained(
        args.model_dir,
        model=args.model,
        with_mlm=True,
        **({"softmax_plus_min_len": args.softmax_plus_min_len} if args.softmax_plus_min_len is not None else {}),
    )
    for text in args.texts:
        print(text)
        for i, candidates in enumerate(fill_mask(model, tokenizer, text, args.top_k)):
            shown = "  ".join(f"{token} {prob:.4f}" for token, prob in candidates)
            print(f"  [MASK] #{i + 1}: {shown}")
    return 0


def _generate(args):
    return generate.run(args)


def _export(args):
    from gau_keras import export

    return export.main(args)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gau-keras",
        usage="gau-keras [-h] COMMAND ...",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "".join(f"  {name:<16}{text}\n" for name, text in COMMANDS.items())
        + "\neach has its own --help (gau-keras COMMAND --help)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS)
    fill = commands.add_parser("fill-mask", help=COMMANDS["fill-mask"])
    fill.add_argument("texts", nargs="+", help="texts containing one or more [MASK]")
    fill.add_argument(
        "--model-dir",
        default=None,
        help="directory with bert_config.json, bert_model.ckpt.* and vocab.txt (default: the bundled small GAU-alpha)",
    )
    flags.add_model_option(fill, help="the encoder of --model-dir")
    fill.add_argument("--top-k", type=flags.positive_int, default=5, help="predictions per [MASK] (default 5)")
    fill.add_argument(
        "--softmax-plus-min-len",
        type=flags.positive_int,
        default=None,
        help="floor of softmax_plus's n (16 default; 1 = the released model's training code)",
    )
    fill.set_defaults(run=_fill_mask)
    generate_parser = commands.add_parser("generate", help=COMMANDS["generate"])
    generate.add_arguments(generate_parser)
    generate_parser.set_defaults(run=_generate)
    export = commands.add_parser("export", help=COMMANDS["export"])
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", help="a model directory in the released layout (exports its MLM head)")
    source.add_argument("--keras", help="a .keras file, e.g. a fine-tuning run's <task>_best.keras")
    flags.add_model_option(export, help="with --model-dir: its encoder")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument("--output", help="folder of the SavedModel (for TF Serving: .../NAME/1)")
    target.add_argument(
        "--hf",
        metavar="DIR",
        help="write a Hugging Face model directory instead (config.json, model.safetensors, vocab.txt): "
        "BERT, RoFormer or GPT2",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export at --output (a folder holding only a SavedModel) or --hf",
    )
    export.add_argument(
        "--labels",
        default=None,
        help="a classifier's label names, one a line in label-id order: the label_names output "
        "(default: those of the fine-tuning run that wrote --keras, when known)",
    )
    export.set_defaults(run=_export)
    for name in [name for name in COMMANDS if name not in commands.choices]:  # main() hands them on
        commands.add_parser(name, add_help=False)
    return parser


def _delegate(argv):
    """Runs a subcommand owned by another module; returns its exit status."""
    import importlib

    command, rest = argv[0], argv[1:]
    if command == "finetune":
        from gau_keras.training.finetune import runner

        return runner.main(rest, prog="gau-keras finetune")
    module = importlib.import_module(DELEGATED[command])
    return flags.command_status(module.main, rest)


def main(argv=None):
    cli_env.default_tf_log_level(cli_env.CLI_TF_LOG_LEVEL)  # when called in-process
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and (argv[0] in DELEGATED or argv[0] == "finetune"):
        return _delegate(argv)
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (OSError, ValueError, ImportError) as e:  # FileNotFoundError, PermissionError, no TensorFlow ...
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
