"""Corpus -> whole-word-MLM TFRecord shards (GAU-α's pretraining recipe).

    python3 pretrain/prepare_corpus.py corpus.txt --vocab vocab.txt --output-dir data/mlm \
        --shards 8 --workers 4 --seed 0 [--segmenter lac] [--dynamic-mask]

Input: text (one document per line) or JSON lines (``--text-key``). Bad lines
(undecodable bytes, invalid JSON, no text, empty, no tokens) are skipped,
counted per reason and listed as ``file:line: reason`` in ``skipped.log``.
Output, in ``--output-dir``: ``shard-XXXXX-of-YYYYY.tfrecord``, ``summary.json``
and ``skipped.log``.

Process layout: worker processes (``spawn``) segment and mask; they never
import TensorFlow, so they can run LAC's paddle model. This process reads the
input, keeps the workers' results in input order and writes the TFRecords (it
imports TensorFlow only for that). Each document's masks come from a numpy
Generator seeded with (seed, line index), so the output depends on the seed
only, not on how documents are split between workers.
"""
import argparse
import collections
import glob
import json
import multiprocessing
import os
import sys
import time

import numpy as np
from tqdm import tqdm

try:
    import gau_keras  # noqa: F401
except ImportError:  # run as a script from a checkout that is not pip-installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gau_keras.data.mlm import MaskStats, WholeWordMLM  # noqa: E402
from gau_keras.segmenters import SEGMENTERS, get_segmenter  # noqa: E402
from gau_keras.tokenizers import Tokenizer  # noqa: E402

SHARD_GLOB = "shard-*-of-*.tfrecord"
SKIP_REASONS = ("undecodable", "invalid_json", "no_text_key", "empty", "no_tokens")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="corpus files or globs, one document per line")
    parser.add_argument("--vocab", required=True, help="vocab.txt of the tokenizer")
    parser.add_argument("--output-dir", required=True, help="folder for the shards (local or gs://)")
    parser.add_argument("--format", choices=("auto", "text", "jsonl"), default="auto",
                        help="auto: jsonl for *.json / *.jsonl, text otherwise")
    parser.add_argument("--text-key", default="text", help="JSON field holding the document text")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                        help="segmenting/masking processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--maxlen", type=int, default=512)
    parser.add_argument("--segmenter", choices=sorted(SEGMENTERS), default="jieba")
    parser.add_argument("--dynamic-mask", action="store_true",
                        help="store word starts instead of fixed masks (mask at training time)")
    parser.add_argument("--mask-prob", type=float, default=0.15, help="share of words selected")
    parser.add_argument("--no-lower-case", action="store_true", help="keep case (default: lower-case)")
    parser.add_argument("--docs-per-task", type=int, default=256, help="documents sent to a worker at once")
    parser.add_argument("--overwrite", action="store_true", help="replace existing shards in --output-dir")
    args = parser.parse_args(argv)
    for name in ("shards", "workers", "docs_per_task"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.maxlen < 3:
        parser.error(f"--maxlen must be >= 3, got {args.maxlen}")
    if not os.path.isfile(args.vocab):
        parser.error(f"--vocab {args.vocab}: no such file")
    args.files = expand_inputs(args.inputs, parser)
    return args


def expand_inputs(patterns, parser):
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            parser.error(f"input {pattern!r}: no such file")
        files.extend(path for path in matches if os.path.isfile(path))
    return files


# -- reading (main process) ---------------------------------------------------

def parse_line(raw, is_json, text_key):
    """``(text, None)`` for a usable line, ``(None, (reason, detail))`` otherwise."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, ("undecodable", f"invalid UTF-8 at byte {error.start}")
    line = line.rstrip("\r\n")
    if is_json:
        if not line.strip():
            return None, ("empty", "blank line")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            return None, ("invalid_json", str(error))
        if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
            return None, ("no_text_key", f"no string field {text_key!r}")
        line = record[text_key]
    if not line.strip():
        return None, ("empty", "no text")
    return line, None


def read_documents(files, is_json, text_key):
    """Yields ``(doc_index, location, text_or_None, skip, n_bytes)`` per line;
    ``is_json(path)`` tells the format, doc_index counts every line read."""
    doc_index = 0
    for path in files:
        path_is_json = is_json(path)
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, 1):
                text, skip = parse_line(raw, path_is_json, text_key)
                yield doc_index, f"{path}:{line_number}", text, skip, len(raw)
                doc_index += 1


# -- segmenting and masking (worker processes, never TensorFlow) ----------------

_WORKER = {}


def _init_worker(vocab, lower_case, segmenter, maxlen, mask_prob, dynamic, seed):
    tokenizer = Tokenizer(vocab, do_lower_case=lower_case)
    kwargs = {"in_process": True} if segmenter == "lac" else {}
    _WORKER.update(segmenter=get_segmenter(segmenter, **kwargs), seed=seed,
                   mlm=WholeWordMLM(tokenizer, maxlen=maxlen, mask_prob=mask_prob, dynamic=dynamic))


def process_batch(batch):
    """``batch``: list of (doc_index, location, text). Returns
    (examples in order, MaskStats as dict, [(location, 'no_tokens')])."""
    words = _WORKER["segmenter"].segment([text for _, _, text in batch])
    examples, stats, skipped = [], MaskStats(), []
    for (doc_index, location, _), doc_words in zip(batch, words):
        rng = np.random.default_rng([_WORKER["seed"], doc_index])
        doc_examples, doc_stats = _WORKER["mlm"].examples(doc_words, rng)
        if not doc_examples:
            skipped.append((location, "no_tokens", "no token after tokenization"))
            continue
        examples.extend(doc_examples)
        stats.add(doc_stats)
    return examples, stats.as_dict(), skipped


# -- orchestration (main process) -----------------------------------------------

def check_output_dir(gfile, output_dir, overwrite):
    existing = gfile.glob(gfile.join(output_dir, SHARD_GLOB)) if gfile.exists(output_dir) else []
    existing += [path for path in (gfile.join(output_dir, "summary.json"),) if gfile.exists(path)]
    if existing and not overwrite:
        raise SystemExit(f"prepare_corpus: {output_dir} already holds {len(existing)} shard/summary files "
                         f"(e.g. {existing[0]}); pass --overwrite to replace them")
    for path in existing:
        gfile.remove(path)


def batches_of_documents(args, skipped):
    """``(batch, n_bytes)`` of usable documents; skipped lines go to ``skipped``."""
    def is_json(path):
        return args.format == "jsonl" or (args.format == "auto" and path.endswith((".json", ".jsonl")))

    batch, batch_bytes = [], 0
    for doc_index, location, text, skip, n_bytes in read_documents(args.files, is_json, args.text_key):
        batch_bytes += n_bytes
        if skip is not None:
            skipped.append((location,) + skip)
        else:
            batch.append((doc_index, location, text))
        if len(batch) >= args.docs_per_task:
            yield batch, batch_bytes
            batch, batch_bytes = [], 0
    if batch or batch_bytes:
        yield batch, batch_bytes


def run(args):
    """Prepares the shards; returns the summary dict."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # after argument checks; the workers never import it

    from gau_keras.data.tfrecord import ShardedWriter

    start = time.time()
    check_output_dir(tf.io.gfile, args.output_dir, args.overwrite)
    skipped, stats = [], MaskStats()
    context = multiprocessing.get_context("spawn")
    init_args = (args.vocab, not args.no_lower_case, args.segmenter, args.maxlen, args.mask_prob,
                 args.dynamic_mask, args.seed)
    total_bytes = sum(os.path.getsize(path) for path in args.files)
    progress = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="prepare_corpus", file=sys.stderr)
    with context.Pool(args.workers, initializer=_init_worker, initargs=init_args) as pool, \
            ShardedWriter(args.output_dir, args.shards) as writer:
        pending = collections.deque()

        def collect():
            result, n_bytes = pending.popleft()
            examples, batch_stats, batch_skipped = result.get()
            for features in examples:
                writer.write(features)
            stats.add(MaskStats(**batch_stats))
            skipped.extend(batch_skipped)
            progress.update(n_bytes)
            progress.set_postfix(docs=stats.documents, examples=writer.count, refresh=False)

        for batch, n_bytes in batches_of_documents(args, skipped):
            pending.append((pool.apply_async(process_batch, (batch,)), n_bytes))
            while len(pending) > 2 * args.workers:
                collect()
        while pending:
            collect()
        shard_paths = writer.paths
    progress.close()
    summary = make_summary(args, stats, skipped, shard_paths, time.time() - start)
    with tf.io.gfile.GFile(tf.io.gfile.join(args.output_dir, "skipped.log"), "w") as f:
        f.write("".join(f"{location}: {reason}: {detail}\n"
                        for location, reason, detail in sorted(skipped, key=_loc_key)))
    with tf.io.gfile.GFile(tf.io.gfile.join(args.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, ensure_ascii=False, indent=2)
    return summary


def _loc_key(item):
    path, _, line = item[0].rpartition(":")
    return path, int(line)


def make_summary(args, stats, skipped, shard_paths, seconds):
    reasons = collections.Counter(reason for _, reason, _ in skipped)
    content = max(stats.content_tokens, 1)
    selected = max(stats.selected_tokens, 1)
    return {
        "inputs": args.files,
        "vocab": args.vocab,
        "segmenter": args.segmenter,
        "mode": "dynamic" if args.dynamic_mask else "static",
        "seed": args.seed, "workers": args.workers, "maxlen": args.maxlen, "mask_prob": args.mask_prob,
        "documents_read": stats.documents + len(skipped),
        "documents_used": stats.documents,
        "documents_skipped": len(skipped),
        "skipped_by_reason": {reason: reasons.get(reason, 0) for reason in SKIP_REASONS},
        "examples": stats.examples,
        "tokens": stats.tokens,
        "content_tokens": stats.content_tokens,
        "words": stats.words,
        "selected_words": stats.selected_words,
        "selected_tokens": stats.selected_tokens,
        # fixed masks only; with --dynamic-mask masks are drawn at training time
        "masked_word_fraction": None if args.dynamic_mask else stats.selected_words / max(stats.words, 1),
        "masked_token_fraction": None if args.dynamic_mask else stats.selected_tokens / content,
        "mask_split": None if args.dynamic_mask else {
            "mask": stats.mask_tokens / selected, "random": stats.random_tokens / selected,
            "unchanged": stats.kept_tokens / selected},
        "shards": [os.path.basename(path) for path in shard_paths],
        "seconds": round(seconds, 2),
    }


def print_summary(summary, output_dir):
    lines = [
        f"documents read {summary['documents_read']}, used {summary['documents_used']}, "
        f"skipped {summary['documents_skipped']} ("
        + ", ".join(f"{reason} {count}" for reason, count in summary["skipped_by_reason"].items()) + ")",
        f"examples {summary['examples']} in {len(summary['shards'])} shards, tokens {summary['tokens']} "
        f"({summary['content_tokens']} without [CLS]/[SEP]), words {summary['words']}",
    ]
    if summary["mode"] == "static":
        split = summary["mask_split"]
        lines.append(f"masked: {summary['masked_word_fraction']:.4f} of words, "
                     f"{summary['masked_token_fraction']:.4f} of tokens; split [MASK] {split['mask']:.3f} / "
                     f"random {split['random']:.3f} / unchanged {split['unchanged']:.3f}")
    else:
        lines.append("masks: dynamic (word starts stored)")
    lines.append(f"{summary['seconds']} s; summary, shards and skipped.log in {output_dir}")
    print("\n".join(lines))


def main(argv=None):
    args = parse_args(argv)
    summary = run(args)
    print_summary(summary, args.output_dir)
    return summary


if __name__ == "__main__":
    main()
