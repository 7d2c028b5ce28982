"""A learning-rate x effective-batch sweep of pretrain.py at a fixed budget of sequences.

    python3 pretrain/sweep.py --config pretrain/configs/tiny.json --out runs/sweep/gau \
        --learning-rates 3e-3,1e-2,3e-2 --batch-sizes 32,128 --sequences 40960

Every point trains ``--sequences`` sequences (updates = sequences / effective
batch) with the config's recipe otherwise, the schedule's knots scaled to the
point's length (a linear decay to 0.1x, ``SCHEDULE_SHAPE``, unless
``--keep-schedule``), and ends with a held-out evaluation on all of
``data.eval``. An effective batch above ``--max-batch`` uses gradient
accumulation. Each point is its own ``pretrain.py`` run in
``OUT/lr<lr>_b<batch>/`` (resumable: a finished point is not run again, an
interrupted one resumes). The table (Markdown, ``OUT/sweep.md``; JSON,
``OUT/sweep.json``) is sorted by held-out loss.
"""

import argparse
import copy
import json
import os
import subprocess
import sys

from gau_keras.errors import GauKerasError, OptionError
from gau_keras.training.pretrain import config as config_lib

#: the schedule as fractions of the run: a linear decay to 0.1x (no warm-up, as GAU-alpha).
#: GAU-alpha's own shape {0: 1, 1/8: 0.5, 1/2: 0.1, 1: 0.01} of its 1.28 M steps, scaled to a
#: run of ~1000 updates, halves the rate before the model has left the unigram plateau.
SCHEDULE_SHAPE = ((0.0, 1.0), (1.0, 0.1))


def _floats(text, option, kind=float):
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise OptionError(f"{option}: expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise OptionError(f"{option}: expected positive numbers, got {text!r}")
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the run config the sweep varies")
    parser.add_argument("--out", required=True, help="folder of the sweep's runs and tables")
    parser.add_argument("--learning-rates", required=True, help="comma-separated peak learning rates")
    parser.add_argument("--batch-sizes", required=True, help="comma-separated effective batch sizes")
    parser.add_argument("--sequences", type=int, required=True, help="training sequences per point")
    parser.add_argument(
        "--max-batch", type=int, default=128, help="largest batch per micro-step; larger effective batches accumulate"
    )
    parser.add_argument("--keep-schedule", action="store_true", help="use the config's schedule as it is")
    parser.add_argument("--dry-run", action="store_true", help="write the configs, print the commands")
    args = parser.parse_args(argv)
    args.learning_rates = _floats(args.learning_rates, "--learning-rates")
    args.batch_sizes = _floats(args.batch_sizes, "--batch-sizes", int)
    if args.sequences < 1 or args.max_batch < 1:
        parser.error("--sequences and --max-batch must be >= 1")
    return args


def point_config(base, lr, batch, args, out_dir):
    """The run config of one (learning rate, effective batch) point."""
    config = copy.deepcopy(base)
    micro = min(batch, args.max_batch)
    if batch % micro:
        raise OptionError(f"effective batch {batch} is not a multiple of --max-batch {args.max_batch}")
    accumulation = batch // micro
    updates = max(1, args.sequences // batch)
    config["data"]["batch_size"] = micro
    config["optimizer"].update(learning_rate=lr, gradient_accumulation_steps=accumulation)
    config["stages"] = []  # a point trains the config's own settings throughout (stage ends are absolute updates)
    if not args.keep_schedule:
        config["optimizer"]["schedule"] = {str(round(f * updates)): v for f, v in SCHEDULE_SHAPE}
    evals = max(1, updates // 4)
    config["train"].update(
        steps=updates,
        output_dir=out_dir,
        eval_every=evals,
        eval_batches=0,
        save_every=max(1, min(config["train"]["save_every"], evals)),
        log_every=max(1, min(config["train"]["log_every"], updates // 20 or 1)),
    )
    for key in ("config_path",):
        config.pop(key, None)
    return config


def final_evaluation(run_dir, updates):
    """The last held-out evaluation of a finished run, or None."""
    path = os.path.join(run_dir, "log.jsonl")
    if not os.path.exists(path):
        return None
    evals = [json.loads(line) for line in open(path, encoding="utf-8") if '"eval_loss"' in line]
    evals = [e for e in evals if e["update"] == updates]
    return evals[-1] if evals else None


def _child_env():
    """The environment of a sweep point: this gau_keras first on the path, whatever the
    working directory (``-m`` only adds the current one)."""
    import gau_keras

    root = os.path.dirname(os.path.dirname(os.path.abspath(gau_keras.__file__)))
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def run_point(config_path, run_dir, updates):
    if final_evaluation(run_dir, updates) is None:
        command = [sys.executable, "-m", "gau_keras.training.pretrain.pretrain", "--config", config_path]
        print("running: " + " ".join(command), flush=True)
        with open(os.path.join(os.path.dirname(config_path), "train.log"), "a", encoding="utf-8") as log:
            status = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=_child_env())
        if status:
            print(f"  failed with exit status {status}; see {os.path.dirname(config_path)}/train.log")
            return None
    return final_evaluation(run_dir, updates)


def main(argv=None):
    """The sweep command; a bad option or config (`GauKerasError`) ends it as one line ``error: ...``."""
    try:
        return sweep(argv)
    except GauKerasError as error:
        raise SystemExit(f"error: {error}") from None


def sweep(argv=None):
    """Writes each point's config, runs the points (unless ``--dry-run``), writes the tables."""
    args = parse_args(argv)
    base = config_lib.load(args.config)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for batch in args.batch_sizes:
        for lr in args.learning_rates:
            name = f"lr{lr:g}_b{batch}"
            point_dir = os.path.join(args.out, name)
            os.makedirs(point_dir, exist_ok=True)
            config = point_config(base, lr, batch, args, os.path.join(point_dir, "run"))
            config_path = os.path.join(point_dir, "config.json")
            with open(config_path, "w", encoding="utf-8") as f:
                json.dump(config, f, indent=1, ensure_ascii=False)
            updates = config["train"]["steps"]
            if args.dry_run:
                print(
                    f"{name}: {updates} updates of {config['data']['batch_size']} x "
                    f"{config['optimizer']['gradient_accumulation_steps']}: "
                    f"python3 pretrain/pretrain.py --config {config_path}"
                )
                continue
            record = run_point(config_path, os.path.join(point_dir, "run"), updates)
            rows.append(
                {
                    "learning_rate": lr,
                    "batch": batch,
                    "updates": updates,
                    "name": name,
                    **({} if record is None else record),
                }
            )
            write_tables(args, rows)
    if not args.dry_run:
        print(open(os.path.join(args.out, "sweep.md"), encoding="utf-8").read())
    return 0


def write_tables(args, rows):
    done = sorted((r for r in rows if "eval_loss" in r), key=lambda r: r["eval_loss"])
    lines = [
        f"{args.config}, {args.sequences} sequences per point",
        "",
        "| learning rate | effective batch | updates | held-out loss | held-out masked accuracy | majority baseline |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['learning_rate']:g} | {r['batch']} | {r['updates']} | {r['eval_loss']:.3f} | "
        f"{r['eval_masked_accuracy']:.4f} | {r['majority_baseline_accuracy']:.4f} |"
        for r in done
    ]
    lines += [
        f"| {r['learning_rate']:g} | {r['batch']} | {r['updates']} | failed | | |" for r in rows if "eval_loss" not in r
    ]
    with open(os.path.join(args.out, "sweep.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "sweep.json"), "w", encoding="utf-8") as f:
        json.dump({"config": args.config, "sequences": args.sequences, "points": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
