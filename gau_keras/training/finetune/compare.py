"""Run the same CLUE fine-tuning protocol for several starting points and tabulate dev metrics.

    gau-keras compare --data-dir ../shared/data/clue --out-dir runs/clue_compare \\
        --variant bundled= \\
        --variant scratch=--from-scratch \\
        --variant roformer_v2="--model roformer_v2 --model-dir runs/roformer_v2_tiny/export"

A variant is ``LABEL=ARGS``: ARGS are extra command-line arguments given to every
task script of that variant (empty: the bundled GAU-alpha). Each (variant, task)
runs ``gau-keras finetune <task>`` in its own process with the task's
defaults overridden by its ``budget`` (both in `gau_keras.data.clue.TASKS`, the
budget sized for a 2-core CPU; see ``COMPARED``)
and the shared ``--seed``, once per rate of ``--lrs`` (or the one ``--lr``):
the best rate on dev is kept per variant and task, so every starting point gets
the same grid. Outputs and logs go to ``OUT_DIR/<label>/`` (``.../lr<rate>/``
with a grid). A run whose metrics file says it finished with the same options is not
repeated, so an interrupted comparison resumes where it stopped (one with other options,
e.g. an older budget, runs again). At the end the best dev metric
of every (variant, task) and the average over the tasks are printed as a
markdown table and written to ``OUT_DIR/summary.md`` and ``OUT_DIR/summary.json``.
"""

import argparse
import json
import pathlib
import shlex
import subprocess
import sys
import time

from gau_keras import cli_env, flags

#: the tasks compared, each run as ``gau-keras finetune <task>`` with its registry defaults
#: overridden by its ``budget`` (`gau_keras.data.clue.TASKS`; sized for a 2-core CPU: few-shot
#: tasks get more epochs, large ones a training subset; more epochs where every start's best dev
#: epoch was the last). Only the first 100 test rows are predicted: the table is about dev.
COMPARED = ("tnews", "iflytek", "ocnli_full", "bustm", "csl", "cluewsc", "chid", "c3", "cmrc2018", "cluener")


def budget_arguments(task):
    """The command-line options of a task's compare budget (its defaults, then its budget)."""
    from gau_keras.training.finetune.tasks import spec_of

    spec = spec_of(task)
    budget = {key: spec.defaults[key] for key in ("epochs", "maxlen", "batch_size")}
    budget.update(spec.budget)
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in budget.items())


def protocol(tasks):
    """task -> budget arguments for ``tasks``."""
    return {task: budget_arguments(task) for task in tasks}


def parse_variant(text):
    """``LABEL=ARGS`` -> (label, [args]); the label names the output folder."""
    label, sep, rest = text.partition("=")
    if not sep or not label or "/" in label:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected LABEL=ARGS (LABEL without '/')")
    return label, shlex.split(rest)


def build_parser():
    parser = argparse.ArgumentParser(prog="gau-keras compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="the CLUE data folder (e.g. ../shared/data/clue)")
    parser.add_argument("--out-dir", required=True, help="one sub-folder per variant, plus summary.{md,json}")
    parser.add_argument(
        "--variant",
        action="append",
        type=parse_variant,
        required=True,
        help="LABEL=ARGS (repeatable): extra arguments of that variant's runs",
    )
    parser.add_argument("--tasks", default=",".join(COMPARED), help="comma-separated subset of: " + ", ".join(COMPARED))
    parser.add_argument("--lr", type=flags.positive_float, default=1e-3, help="the fine-tuning rate (without --lrs)")
    parser.add_argument(
        "--lrs",
        type=flags.positive_floats,
        default=None,
        help="a grid of rates, e.g. 3e-4,1e-3,3e-3: every (task, variant) runs each and the "
        "table keeps the best on dev (the rate is picked per variant and task)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra", default="", help="arguments appended to every run (e.g. '--epochs 1')")
    return parser


def run_options(task, budget, variant_args, args, lr):
    """The task command's options for one run (budget first, so variant and --extra arguments win)."""
    return (
        ["--data-dir", args.data_dir, "--lr", repr(lr), "--seed", str(args.seed), "--max-test-examples", "100"]
        + shlex.split(budget)
        + list(variant_args)
        + shlex.split(args.extra)
    )


def finished_record(path):
    """The metrics record of a finished run at ``path``, else None."""
    try:
        record = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if record.get("finished") else None


def given_options(task, options):
    """The options a run's argv sets explicitly, as {dest: parsed value} (its defaults left out)."""
    from gau_keras.training.finetune.runner import build_parser

    parser = build_parser(task)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return vars(parser.parse_args(options))


def changed_options(record, task, options):
    """'name: earlier -> now' for every option of ``options`` a finished run's record ran with otherwise."""
    recorded = record.get("args", {})
    return [
        f"--{key.replace('_', '-')}: {recorded.get(key)!r} -> {value!r}"
        for key, value in given_options(task, options).items()
        if key not in ("out_dir", "overwrite") and recorded.get(key) != value
    ]


def run_one(task, label, variant_args, args, lr, budget):
    """Runs (or reuses) one (task, variant, lr); returns its metrics record or None when it failed.

    A finished run is reused only when it ran with every option this run gives (budget, rate,
    seed, variant arguments); otherwise it runs again, saying what changed."""
    out = pathlib.Path(args.out_dir) / label
    if len(args.lrs) > 1:
        out = out / f"lr{lr:g}"
    metrics_path = out / f"{task}_metrics.json"
    options = run_options(task, budget, variant_args, args, lr)
    record = finished_record(metrics_path)
    if record is not None:
        changed = changed_options(record, task, options)
        if not changed:
            print(f"[{label}] {task} lr {lr:g}: finished earlier ({metrics_path})")
            return record
        print(
            f"[{label}] {task} lr {lr:g}: the run in {metrics_path} used other options "
            f"({'; '.join(changed)}): running again",
            flush=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "gau_keras", "finetune", task, *options, "--out-dir", str(out), "--overwrite"]
    log = out / f"{task}.log"
    print(f"[{label}] {task} lr {lr:g}: {shlex.join(command)}  (log: {log})", flush=True)
    started = time.time()
    with open(log, "w", encoding="utf-8") as stream:
        status = subprocess.call(command, stdout=stream, stderr=subprocess.STDOUT)
    record = finished_record(metrics_path)
    if status != 0 or record is None:
        print(f"[{label}] {task} lr {lr:g}: FAILED with exit status {status}; see {log}", file=sys.stderr)
        return None
    best = record["best"]
    print(
        f"[{label}] {task} lr {lr:g}: best dev {record['metric']}={best[record['metric']]:.4f} "
        f"(epoch {best['epoch']}) in {time.time() - started:.0f} s",
        flush=True,
    )
    return record


def best_over_rates(records):
    """The record with the best dev metric among (lr, record) pairs (None when all failed), and its lr."""
    done = [(lr, r) for lr, r in records if r is not None]
    if not done:
        return None, None
    lr, record = max(done, key=lambda item: item[1]["best"][item[1]["metric"]])
    return record, lr


#: tasks whose dev metric is reported in percent (CMRC2018's official F1/EM); every other is 0-1
PERCENT_TASKS = {"cmrc2018"}


def unit_score(record):
    """The best dev metric on a 0-1 scale (cmrc2018's F1 is 0-100, cluener's F1 0-1)."""
    value = record["best"][record["metric"]]
    return value / 100.0 if record["task"] in PERCENT_TASKS else value


def summary_table(results, labels, tasks, rates=None):
    """Markdown table: one row per task, one column per variant (best dev metric, epoch, lr,
    minutes), and the average over the tasks on a 0-1 scale."""
    lines = ["| task | metric | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for task in tasks:
        cells, metric = [], ""
        for label in labels:
            record = results.get((label, task))
            if record is None:
                cells.append("failed")
                continue
            metric = record["metric"]
            best = record["best"]
            lr = f", lr {rates[(label, task)]:g}" if rates and len(set(rates.values())) > 1 else ""
            cells.append(f"{best[metric]:.4f} (ep {best['epoch']}{lr}, {record['seconds'] / 60:.1f} min)")
        lines.append(f"| {task} | {metric or '-'} | " + " | ".join(cells) + " |")
    if len(tasks) > 1:
        averages = []
        for label in labels:
            scores = [unit_score(results[(label, t)]) for t in tasks if results.get((label, t)) is not None]
            averages.append(f"**{sum(scores) / len(scores):.4f}**" if len(scores) == len(tasks) else "-")
        lines.append("| average | 0-1 scale | " + " | ".join(averages) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = build_parser().parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in COMPARED]
    if unknown:
        print(f"error: --tasks: unknown task(s) {unknown}; known: {list(COMPARED)}", file=sys.stderr)
        return 2
    labels = [label for label, _ in args.variant]
    if len(set(labels)) != len(labels):
        print(f"error: --variant labels must differ, got {labels}", file=sys.stderr)
        return 2
    args.lrs = args.lrs or [args.lr]
    cli_env.default_tf_log_level()
    from gau_keras.training.run_dir import write_json, write_text

    budgets = protocol(tasks)
    results, rates, grid = {}, {}, {}
    for task in tasks:
        for label, variant_args in args.variant:
            runs = [(lr, run_one(task, label, variant_args, args, lr, budgets[task])) for lr in args.lrs]
            grid[(label, task)] = runs
            results[(label, task)], rates[(label, task)] = best_over_rates(runs)
    table = summary_table(results, labels, tasks, rates)
    print(table)
    out = pathlib.Path(args.out_dir)
    write_text(out / "summary.md", table + "\n")
    summary = {
        "lrs": args.lrs,
        "seed": args.seed,
        "protocol": {t: budgets[t] for t in tasks},
        "variants": {label: shlex.join(a) for label, a in args.variant},
        "results": {
            f"{label}/{task}": (
                None
                if r is None
                else {"metric": r["metric"], "best": r["best"], "lr": rates[(label, task)], "seconds": r["seconds"]}
            )
            for (label, task), r in results.items()
        },
        "grid": {
            f"{label}/{task}": {f"{lr:g}": None if r is None else r["best"][r["metric"]] for lr, r in runs}
            for (label, task), runs in grid.items()
        },
    }
    write_json(out / "summary.json", summary)
    return 0 if all(r is not None for runs in grid.values() for _, r in runs) else 1


if __name__ == "__main__":
    sys.exit(flags.command_status(main))
