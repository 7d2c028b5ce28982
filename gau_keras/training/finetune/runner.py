"""The shared fine-tuning runner behind ``gau-keras finetune TASK`` and ``python -m finetune TASK``.

    gau-keras finetune tnews --data-dir ../shared/data/clue --out-dir runs/tnews

    from gau_keras.training.finetune.runner import Options, train_and_predict
    record = train_and_predict(Options.for_task("tnews", data_dir="../shared/data/clue", epochs=1))

It reads train/dev/test with `gau_keras.data.clue.load_task` (malformed lines
are reported with file and line and counted), builds the pretrained model of
``--model-dir`` (default: the bundled small GAU-alpha) or, with
``--from-scratch``, a randomly initialised model of the same config, puts the
task's head on it and trains with ``model.fit`` (AdamW, linear warm-up over
the first 10% of the steps then linear decay to 0; a tqdm bar per epoch).
After each epoch the dev metric is printed and the weights are kept when it
is the best so far. The best weights then predict the test split, written in
the CLUE submission format. Outputs in ``--out-dir``:

* ``<task>_best.weights.h5``: the best epoch's weights (``model.save_weights``);
* ``<task>_best.keras``: the best epoch's whole model (``model.save``), which
  ``keras.saving.load_model`` reloads after ``import gau_keras`` alone and
  ``python -m gau_keras export`` turns into a SavedModel for serving;
* ``<task>_metrics.json``: arguments, data counts and per-epoch dev metrics;
* ``<task>_predict.json``: test predictions (ids preserved).

Every output is written under a temporary name and renamed into place, so a
killed run never leaves a truncated file under a final name. An existing
output is never replaced unless ``overwrite`` is set, or its metrics file
says its run did not finish (an interrupted run, whose outputs are replaced
with a message saying so). ``out_dir`` is locked (``.lock``, as a pretraining
run directory; removed when the run ends) for the whole run: a second run on
it is refused, naming the first. Lock and atomic writes:
`gau_keras.training.run_dir`. The output folder, the data, ``predict_split`` and
``maxlen`` (against a learned position table) are checked before any training. Exit
status of the command: 0 on success, 2 on a usage or data error.

The options of a run are one dataclass, `Options`: its fields are the
command line's flags, each checked by one rule (``gau_keras.flags``), which is
the flag's argparse type on the command line and `Options`' check for a
library caller (a ValueError naming the field).

The runner is split by job: `options` (`Options`, the command line), `out_dir`
(the output folder: its outputs, their check, its lock), `callbacks` (progress
bar, dev evaluation), `training` (data, model, fit, artefacts:
`train_and_predict`). This module is the command (`run`, `main`) and keeps
their names importable from here.
"""

import sys

from gau_keras import cli_env
from gau_keras.training.finetune import tasks
from gau_keras.training.finetune.options import (
    OUT_DIR_FLAG,
    TASK_DEFAULTS,
    XLA_CHOICES,
    Options,
    build_parser,
    parse_options,
)
from gau_keras.training.finetune.out_dir import check_outputs, lock_out_dir, output_paths
from gau_keras.training.finetune.training import (
    DEV_SUBSET_SEED,
    build_transformer,
    check_maxlen,
    check_predict_split,
    encode,
    join_processes,
    load_split,
    make_optimizer,
    make_strategy,
    predict,
    train_and_predict,
    use_xla,
    write_test_predictions,
)

__all__ = [
    "main",
    "run",
    "Options",
    "build_parser",
    "parse_options",
    "TASK_DEFAULTS",
    "XLA_CHOICES",
    "OUT_DIR_FLAG",
    "output_paths",
    "check_outputs",
    "lock_out_dir",
    "DEV_SUBSET_SEED",
    "load_split",
    "encode",
    "predict",
    "check_maxlen",
    "build_transformer",
    "use_xla",
    "make_strategy",
    "join_processes",
    "make_optimizer",
    "check_predict_split",
    "write_test_predictions",
    "train_and_predict",
]


def run(task, argv=None, prog="gau-keras finetune"):
    """The command line of the task ``task`` (its name); returns the exit status."""
    cli_env.default_tf_log_level()
    options = parse_options(task, argv, prog)
    try:  # before anything starts TensorFlow's runtime or JAX's
        join_processes(options)
        if options.devices > 1:
            make_strategy(options.devices)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        record = train_and_predict(options)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    best = record["best"]
    print(f"{options.task_name}: best dev {record['metric']}={best[record['metric']]:.4f} at epoch {best['epoch']}")
    return 0


def main(argv=None, prog="gau-keras finetune"):
    """``TASK [options]``: the fine-tuning command line (``gau-keras finetune``, ``python -m finetune``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in tasks.names():
        if argv and argv[0] in ("-h", "--help"):
            print(
                f"usage: {prog} TASK [options]; TASK is one of {', '.join(tasks.names())} "
                f"({prog} TASK --help lists the options)"
            )
            return 0
        print(f"usage: {prog} TASK [options]; TASK is one of {', '.join(tasks.names())}", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:], prog)
