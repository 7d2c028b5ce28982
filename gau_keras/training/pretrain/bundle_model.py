"""Copies a pretraining run's export into a model directory and records how it
was trained (TRAINING.md: config, updates, wall time, the masked-accuracy curve).

    python3 pretrain/pretrain.py --config pretrain/configs/tiny.json --export-only
    python3 pretrain/bundle_model.py --run-dir runs/gau_alpha_tiny \
        --config pretrain/configs/tiny.json --output gau_keras/pretrained/gau_alpha_tiny --overwrite
"""

import argparse
import json
import os
import shutil
import sys

from gau_keras.errors import DataFileError

MODEL_FILES = (
    "bert_config.json",
    "vocab.txt",
    "bert_model.ckpt.index",
    "bert_model.ckpt.data-00000-of-00001",
    "checkpoint",
)


def read_log(path):
    """(training records, eval records) of a run's log.jsonl; a restart's
    elapsed time starts again at 0, so wall time is summed per segment."""
    train, evals = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFileError(f"{path}:{number}: not JSON ({e})") from None
            (evals if "eval_loss" in record else train).append(record)
    return train, evals


def wall_time(train):
    total, last = 0.0, 0.0
    for record in train:
        if record["elapsed_s"] < last:  # a resumed segment
            total += last
        last = record["elapsed_s"]
    return total + last


def tokens_per_sequence(config):
    """Mean tokens of a training sequence, from the training shards' summary.json (None if absent)."""
    import glob

    files = sorted(glob.glob(config["data"]["train"]))
    summary = os.path.join(os.path.dirname(files[0]), "summary.json") if files else None
    if not summary or not os.path.isfile(summary):
        return None
    with open(summary, encoding="utf-8") as f:
        record = json.load(f)
    sequences = record.get("sequences") or record.get("examples")
    return record["tokens"] / sequences if sequences else None


def quality_lines(path):
    """The figures of benchmarks/mlm_quality.py --json as Markdown lines."""
    with open(path, encoding="utf-8") as f:
        q = json.load(f)
    lines = [
        "",
        "## What it knows (held-out documents)",
        "",
        "`python3 benchmarks/mlm_quality.py` on this directory:",
        "",
        "| measure | value |",
        "|---|---|",
    ]
    if "whole_word" in q:
        w = q["whole_word"]
        lines.append(
            f"| whole-word masked accuracy (the pretraining objective, maxlen {w['maxlen']}) | "
            f"{w['accuracy']:.4f} (loss {w['loss']:.3f}; majority {w['majority']:.4f}) |"
        )
    if "random_char" in q:
        lines.append(f"| 15% of characters masked at random, first 128 tokens | {q['random_char']['accuracy']:.4f} |")
    if "random_char_pair" in q:
        pair = q["random_char_pair"]
        lines.append(
            f"| the same, each document as a pair of halves (second half segment 1) | "
            f"{pair['accuracy']:.4f} (second half {pair['second_accuracy']:.4f}) |"
        )
    p = q["probes"]
    lines.append(f"| everyday sentences, answer in the top 5 | {p['hits']}/{p['total']} = {p['rate']:.3f} |")
    for length, result in sorted(q.get("lengths", {}).items(), key=lambda item: int(item[0])):
        lines.append(f"| whole-word, packed to {length} tokens | {result['accuracy']:.4f} |")
    return lines


def _char_masks(config):
    fraction = config["data"].get("char_mask_fraction") or 0
    text = f" ({fraction:g} of the sequences masked per character instead)" if fraction else ""
    if config["data"].get("pair_segments"):
        text += ", segment id 1 after the first [SEP] of each packed sequence"
    if config.get("stages"):
        text += f" (after {len(config['stages'])} stages with other settings: the config's `stages`)"
    return text


def training_notes(config_path, train, evals, quality=None, notes=None):
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    per_sequence = tokens_per_sequence(config)
    updates = train[-1]["update"]
    sequences = updates * config["data"]["batch_size"] * (config["optimizer"].get("gradient_accumulation_steps") or 1)
    seen = (
        f"* tokens seen: {sequences * per_sequence / 1e6:.1f} M ({sequences} sequences of "
        f"{per_sequence:.1f} tokens on average)"
        if per_sequence
        else f"* sequences seen: {sequences}"
    )
    lines = [
        "# How this model was trained",
        "",
        "Pretrained with this project's own pipeline (`pretrain/`) on",
        "`../shared/data/corpus/zh_corpus.txt` (every 50th document held out for evaluation),",
        f"whole-word MLM with jieba{_char_masks(config)}, on a 2-core CPU shared with other jobs.",
        "",
        f"* config: `{config_path}` (copied below)",
        f"* updates: {updates} of batch {config['data']['batch_size']} × {config['data']['maxlen']} tokens",
        seen,
        f"* training wall time: {wall_time(train) / 60:.1f} minutes (restarts included, evaluation excluded)",
        f"* final training loss {train[-1]['loss']:.3f}, masked accuracy {train[-1]['masked_accuracy']:.4f}",
    ]
    if evals:
        last = evals[-1]
        lines.append(
            f"* held-out masked-token accuracy {last['eval_masked_accuracy']:.4f} "
            f"(loss {last['eval_loss']:.3f}) vs {last['majority_baseline_accuracy']:.4f} for always "
            f"predicting the most frequent token, over {last['eval_masked_tokens']} masked tokens"
        )
        lines += [
            "",
            "Held-out curve (the masked-token count shows how much of the held-out set each "
            "evaluation covered; runs may evaluate a prefix during training):",
            "",
            "| update | held-out masked accuracy | majority baseline | held-out loss | masked tokens |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['update']} | {r['eval_masked_accuracy']:.4f} | {r['majority_baseline_accuracy']:.4f} "
            f"| {r['eval_loss']:.3f} | {r['eval_masked_tokens']} |"
            for r in evals
        ]
    if quality:
        lines += quality_lines(quality)
    if notes:
        with open(notes, encoding="utf-8") as f:
            lines += ["", f.read().strip()]
    lines += ["", "## Config", "", "```json", json.dumps(config, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--quality", help="benchmarks/mlm_quality.py --json output to include")
    parser.add_argument("--notes", help="a Markdown file to include (how and why, in words)")
    args = parser.parse_args(argv)
    export = os.path.join(args.run_dir, "export")
    missing = [f for f in MODEL_FILES if not os.path.isfile(os.path.join(export, f))]
    if missing:
        parser.error(f"{export} lacks {missing}; run pretrain.py --export-only first")
    if os.path.exists(args.output) and not args.overwrite:
        parser.error(f"{args.output} exists; pass --overwrite to replace it")
    try:
        train, evals = read_log(os.path.join(args.run_dir, "log.jsonl"))
    except DataFileError as error:
        raise SystemExit(f"error: {error}") from None
    if not train:
        parser.error(f"{args.run_dir}/log.jsonl has no training records")
    os.makedirs(args.output, exist_ok=True)
    for name in MODEL_FILES:
        shutil.copy(os.path.join(export, name), os.path.join(args.output, name))
    with open(os.path.join(args.output, "TRAINING.md"), "w", encoding="utf-8") as f:
        f.write(training_notes(args.config, train, evals, args.quality, args.notes))
    print(f"bundled {export} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
