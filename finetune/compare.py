"""Run the same CLUE fine-tuning protocol for several starting points and tabulate dev metrics.

    python -m finetune.compare --data-dir ../shared/data/clue --out-dir runs/clue_compare \\
        --variant bundled= \\
        --variant scratch=--from-scratch \\
        --variant roformer_v2="--model roformer_v2 --model-dir runs/roformer_v2_tiny/export"

A variant is ``LABEL=ARGS``: ARGS are extra command-line arguments given to every
task script of that variant (empty: the bundled GAU-alpha). Each (variant, task)
runs ``python -m finetune.<module>`` in its own process with the task's budget
from `PROTOCOL` (sized for a 2-core CPU) and the shared ``--lr``/``--seed``;
its outputs and log go to ``OUT_DIR/<label>/``. A run whose metrics file says
it finished is not repeated, so an interrupted comparison resumes where it
stopped. At the end the best dev metric of every run is printed as a markdown
table and written to ``OUT_DIR/summary.md`` and ``OUT_DIR/summary.json``.
"""
import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

#: task name -> (module, budget arguments). Few-shot tasks (160-202 training rows) get more epochs;
#: large ones a training subset. Only the first 100 test rows are predicted: the table is about dev.
PROTOCOL = {
    "tnews": ("tnews", "--epochs 10 --maxlen 64 --batch-size 32"),
    "iflytek": ("iflytek", "--epochs 4 --maxlen 128 --batch-size 32"),
    "ocnli_full": ("ocnli", "--epochs 2 --maxlen 64 --batch-size 32 --max-train-examples 3000 "
                            "--max-eval-examples 1000"),
    "bustm": ("afqmc", "--epochs 15 --maxlen 64 --batch-size 16"),
    "csl": ("csl", "--epochs 10 --maxlen 128 --batch-size 16"),
    "cluewsc": ("wsc", "--epochs 10 --maxlen 128 --batch-size 16"),
    "chid": ("chid", "--epochs 5 --maxlen 64 --batch-size 16"),
    "c3": ("c3", "--epochs 2 --maxlen 128 --batch-size 8 --max-train-examples 800 --max-eval-examples 400"),
    "cmrc2018": ("cmrc2018", "--epochs 3 --maxlen 192 --batch-size 16 --max-eval-examples 400"),
    "cluener": ("cluener", "--epochs 2 --maxlen 64 --batch-size 32 --max-train-examples 3000"),
}


def parse_variant(text):
    """``LABEL=ARGS`` -> (label, [args]); the label names the output folder."""
    label, sep, rest = text.partition("=")
    if not sep or not label or "/" in label:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected LABEL=ARGS (LABEL without '/')")
    return label, shlex.split(rest)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m finetune.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="the CLUE data folder (e.g. ../shared/data/clue)")
    parser.add_argument("--out-dir", required=True, help="one sub-folder per variant, plus summary.{md,json}")
    parser.add_argument("--variant", action="append", type=parse_variant, required=True,
                        help="LABEL=ARGS (repeatable): extra arguments of that variant's runs")
    parser.add_argument("--tasks", default=",".join(PROTOCOL),
                        help="comma-separated subset of: " + ", ".join(PROTOCOL))
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra", default="", help="arguments appended to every run (e.g. '--epochs 1')")
    return parser


def run_command(task, module, variant_args, args):
    """The argv of one run (budget first, so variant and --extra arguments win)."""
    return ([sys.executable, "-m", f"finetune.{module}", "--data-dir", args.data_dir, "--task-name", task,
             "--lr", repr(args.lr), "--seed", str(args.seed), "--max-test-examples", "100"]
            + shlex.split(PROTOCOL[task][1]) + list(variant_args) + shlex.split(args.extra))


def finished_record(path):
    """The metrics record of a finished run at ``path``, else None."""
    try:
        record = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if record.get("finished") else None


def run_one(task, label, variant_args, args):
    """Runs (or reuses) one (task, variant); returns its metrics record or None when it failed."""
    out = pathlib.Path(args.out_dir) / label
    metrics_path = out / f"{task}_metrics.json"
    record = finished_record(metrics_path)
    if record is not None:
        print(f"[{label}] {task}: finished earlier ({metrics_path})")
        return record
    out.mkdir(parents=True, exist_ok=True)
    command = run_command(task, PROTOCOL[task][0], variant_args, args) + ["--out-dir", str(out), "--overwrite"]
    log = out / f"{task}.log"
    print(f"[{label}] {task}: {shlex.join(command)}  (log: {log})", flush=True)
    started = time.time()
    with open(log, "w", encoding="utf-8") as stream:
        status = subprocess.call(command, stdout=stream, stderr=subprocess.STDOUT)
    record = finished_record(metrics_path)
    if status != 0 or record is None:
        print(f"[{label}] {task}: FAILED with exit status {status}; see {log}", file=sys.stderr)
        return None
    best = record["best"]
    print(f"[{label}] {task}: best dev {record['metric']}={best[record['metric']]:.4f} "
          f"(epoch {best['epoch']}) in {time.time() - started:.0f} s", flush=True)
    return record


def summary_table(results, labels, tasks):
    """Markdown table: one row per task, one column per variant (best dev metric, epoch, minutes)."""
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
            cells.append(f"{best[metric]:.4f} (ep {best['epoch']}, {record['seconds'] / 60:.1f} min)")
        lines.append(f"| {task} | {metric or '-'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = build_parser().parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in PROTOCOL]
    if unknown:
        print(f"error: --tasks: unknown task(s) {unknown}; known: {list(PROTOCOL)}", file=sys.stderr)
        return 2
    labels = [label for label, _ in args.variant]
    if len(set(labels)) != len(labels):
        print(f"error: --variant labels must differ, got {labels}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    results = {}
    for task in tasks:
        for label, variant_args in args.variant:
            results[(label, task)] = run_one(task, label, variant_args, args)
    table = summary_table(results, labels, tasks)
    print(table)
    out = pathlib.Path(args.out_dir)
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    summary = {"lr": args.lr, "seed": args.seed, "protocol": {t: PROTOCOL[t][1] for t in tasks},
               "variants": {label: shlex.join(a) for label, a in args.variant},
               "results": {f"{label}/{task}": (None if r is None else {"metric": r["metric"], "best": r["best"],
                                                                        "seconds": r["seconds"]})
                           for (label, task), r in results.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
