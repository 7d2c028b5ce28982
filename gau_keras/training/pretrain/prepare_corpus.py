"""Corpus -> whole-word-MLM TFRecord shards (GAU-α's pretraining recipe).

    python3 pretrain/prepare_corpus.py corpus.txt --vocab vocab.txt --output-dir data/mlm \
        --shards 8 --workers 4 --seed 0 [--segmenter lac] [--dynamic-mask]

Input: text (one document per line) or JSON lines (``--text-key``): files,
globs or folders (every file under a folder, recursively, in sorted order;
names starting with "." are left out, as a shell glob leaves them). Bad lines
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

Design notes: docs/pretraining.md (Data).
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

from gau_keras import cli_env, flags, tf_free_children
from gau_keras.data.mlm import MaskStats, SequencePacker, WholeWordMLM, mostly_unusable
from gau_keras.errors import GauKerasError, OutputDirError
from gau_keras.segmenters import SEGMENTERS, get_segmenter, lac_model_dir, restore_default_sigterm
from gau_keras.tokenizers import Tokenizer, load_vocab

SHARD_GLOB = "shard-*-of-*.tfrecord"  # = tfrecord.SHARD_PATTERN (not imported here: TensorFlow)
SKIP_REASONS = ("binary", "undecodable", "invalid_json", "no_text_key", "empty", "no_tokens")
#: the files a run writes besides its shards
SUMMARY, SKIPPED_LOG = "summary.json", "skipped.log"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "inputs",
        nargs="+",
        help="corpus files, globs or folders (a folder: every file under it, recursively, sorted; "
        "names starting with '.' left out), one document per line",
    )
    parser.add_argument("--vocab", required=True, help="vocab.txt of the tokenizer")
    parser.add_argument("--output-dir", required=True, help="folder for the shards (local or gs://)")
    parser.add_argument(
        "--format",
        choices=("auto", "text", "jsonl"),
        default="auto",
        help="auto: jsonl for *.json / *.jsonl, text otherwise",
    )
    parser.add_argument("--text-key", default="text", help="JSON field holding the document text")
    parser.add_argument("--shards", type=flags.positive_int, default=8)
    parser.add_argument(
        "--workers",
        type=flags.positive_int,
        default=max(1, min(4, os.cpu_count() or 1)),
        help="segmenting/masking processes",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--maxlen", type=flags.at_least(3), default=512)
    parser.add_argument("--segmenter", choices=sorted(SEGMENTERS), default="jieba")
    parser.add_argument(
        "--dynamic-mask", action="store_true", help="store word starts instead of fixed masks (mask at training time)"
    )
    parser.add_argument("--mask-prob", type=flags.fraction, default=0.15, help="share of words selected")
    parser.add_argument(
        "--mask-ratio", type=flags.fraction, default=0.8, help="of the selected words, the share replaced by [MASK]"
    )
    parser.add_argument(
        "--random-ratio",
        type=flags.fraction,
        default=0.1,
        help="of the selected words, the share replaced by random tokens",
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="pack consecutive documents into sequences of up to --maxlen tokens "
        "([CLS] a [SEP] b [SEP] ...) instead of one padded sequence each",
    )
    parser.add_argument("--no-lower-case", action="store_true", help="keep case (default: lower-case)")
    parser.add_argument(
        "--docs-per-task", type=flags.positive_int, default=256, help="documents sent to a worker at once"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing shards in --output-dir")
    args = parser.parse_args(argv)
    if args.mask_ratio + args.random_ratio > 1:
        parser.error(f"--mask-ratio + --random-ratio must be <= 1, got {args.mask_ratio} + {args.random_ratio}")
    if not os.path.isfile(args.vocab):
        parser.error(f"--vocab {args.vocab}: no such file")
    try:  # what every worker would fail on at start-up, said once, here
        load_vocab(args.vocab)
    except ValueError as e:
        parser.error(f"--vocab: {e}")
    if args.segmenter == "lac":
        try:
            lac_model_dir()
        except ImportError as e:
            parser.error(f"--segmenter lac: {e}")
    args.files = expand_inputs(args.inputs, parser)
    check_writable(args.output_dir)
    return args


def masking_args(args):
    """The whole-word masking parameters, as recorded in summary.json (and read
    back by ``tfrecord.load_dataset`` when masks are drawn at training time)."""
    return {"mask_prob": args.mask_prob, "mask_ratio": args.mask_ratio, "random_ratio": args.random_ratio}


def expand_inputs(patterns, parser):
    """The files to read: each pattern's matches in sorted order, a folder's files as `files_under` lists them."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            parser.error(f"input {pattern!r}: no such file")
        for path in matches:
            if os.path.isdir(path):
                found = files_under(path)
                if not found:
                    parser.error(f"input {path!r}: a folder with no file in it (names starting with '.' left out)")
                files.extend(found)
            elif os.path.isfile(path):
                files.append(path)
            else:
                parser.error(f"input {path!r}: not a regular file or a folder")
    return files


def files_under(folder):
    """The regular files under ``folder``, recursively, sorted; names starting with "." (.git, .DS_Store) are
    left out, as a shell glob leaves them; a linked folder is read once."""
    files, seen = [], {os.path.realpath(folder)}
    for root, dirs, names in os.walk(folder, followlinks=True):
        kept = [d for d in sorted(dirs) if not d.startswith(".")]
        real = [os.path.realpath(os.path.join(root, d)) for d in kept]
        dirs[:] = [d for d, r in zip(kept, real) if r not in seen and not seen.add(r)]
        files.extend(
            os.path.join(root, n) for n in names if not n.startswith(".") and os.path.isfile(os.path.join(root, n))
        )
    return sorted(files)


def check_writable(output_dir):
    """Before any work: a local ``output_dir`` must be a folder this process can write (it is created if
    missing); an `OutputDirError` names it otherwise. Remote (``gs://``) folders are checked when written."""
    if "://" not in output_dir:
        flags.check_writable_folder(output_dir, "--output-dir", OutputDirError)


# -- reading (main process) ---------------------------------------------------


def parse_line(raw, is_json, text_key):
    """``(text, None)`` for a usable line, ``(None, (reason, detail))`` otherwise."""
    nul = raw.find(b"\x00")
    if nul >= 0:  # text never holds NUL bytes; executables and archives do
        return None, ("binary", f"NUL byte at byte {nul}")
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


class WorkerStartupError(RuntimeError):
    """A worker could not start (bad vocab, segmenter missing ...): the run stops with its message."""


def _init_worker(*args, **kwargs):
    """The pool's initializer. A failure here is kept and raised by the first
    task instead: an initializer that raises makes the pool start a new worker
    forever, and the run would never end."""
    try:
        _start_worker(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - whatever it is, the main process reports it
        plain = isinstance(e, (ValueError, ImportError, OSError))  # their messages name the file / package
        _WORKER["startup_error"] = str(e) if plain else f"{type(e).__name__}: {e}"


def _start_worker(vocab, lower_case, segmenter, maxlen, mask_prob, dynamic, seed, mask_ratio=0.8, random_ratio=0.1):
    tokenizer = Tokenizer(vocab, do_lower_case=lower_case)
    kwargs = {"in_process": True} if segmenter == "lac" else {}
    segmenter = get_segmenter(segmenter, **kwargs)
    restore_default_sigterm()
    _WORKER.update(
        segmenter=segmenter,
        seed=seed,
        mlm=WholeWordMLM(
            tokenizer,
            maxlen=maxlen,
            dynamic=dynamic,
            mask_prob=mask_prob,
            mask_ratio=mask_ratio,
            random_ratio=random_ratio,
        ),
    )


def process_batch(batch):
    """``batch``: list of (doc_index, location, text). Returns
    (examples in order, MaskStats as dict, [(location, 'no_tokens')])."""
    if "startup_error" in _WORKER:
        raise WorkerStartupError(_WORKER["startup_error"])
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


def _files_of_earlier_run(gfile, output_dir):
    """Names of the files an earlier run wrote into ``output_dir`` (its summary.json lists them)."""
    path = gfile.join(output_dir, SUMMARY)
    if not gfile.exists(path):
        return set()
    try:
        with gfile.GFile(path) as f:
            summary = json.load(f)
        return set(summary["shards"]) | {SUMMARY, SKIPPED_LOG}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return set()


def check_output_dir(gfile, output_dir, overwrite):
    """Refuses to write where it would replace a file it did not create, or
    (without ``overwrite``) an earlier run's output; with ``overwrite`` the
    earlier run's files are removed."""
    if gfile.exists(output_dir) and not gfile.isdir(output_dir):
        raise OutputDirError(f"--output-dir {output_dir} is a file, not a folder")
    if not gfile.exists(output_dir):
        return
    existing = gfile.glob(gfile.join(output_dir, SHARD_GLOB))
    existing += [p for p in (gfile.join(output_dir, n) for n in (SUMMARY, SKIPPED_LOG)) if gfile.exists(p)]
    ours = _files_of_earlier_run(gfile, output_dir)
    foreign = [p for p in existing if os.path.basename(p) not in ours]
    if foreign:
        raise OutputDirError(
            f"{output_dir} already holds {foreign[0]}"
            + (f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else "")
            + f", which no {SUMMARY} there lists as written by prepare_corpus; move it away or "
            "choose another --output-dir (--overwrite only replaces an earlier run's files)"
        )
    if existing and not overwrite:
        raise OutputDirError(
            f"{output_dir} already holds {len(existing)} shard/summary files "
            f"(e.g. {existing[0]}); pass --overwrite to replace them"
        )
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


def process_corpus(args, writer, stats, skipped, progress):
    """Feeds document batches to the worker pool and writes the results in
    input order; at most 2 batches per worker are in flight. The workers may
    run paddle (LAC), so they are marked TensorFlow-free for as long as the
    pool lives (a worker the pool restarts inherits the mark too)."""
    with tf_free_children():
        _process_corpus(args, writer, stats, skipped, progress)


def _process_corpus(args, writer, stats, skipped, progress):
    init_args = (
        args.vocab,
        not args.no_lower_case,
        args.segmenter,
        args.maxlen,
        args.mask_prob,
        args.dynamic_mask,
        args.seed,
        args.mask_ratio,
        args.random_ratio,
    )
    pool = multiprocessing.get_context("spawn").Pool(args.workers, initializer=_init_worker, initargs=init_args)
    pending = collections.deque()
    packer = SequencePacker(args.maxlen) if args.pack else None

    def collect():
        result, n_bytes = pending.popleft()
        examples, batch_stats, batch_skipped = result.get()
        for features in examples:
            for sequence in packer.add(features) if packer else [features]:
                writer.write(sequence)
        stats.add(MaskStats(**batch_stats))
        skipped.extend(batch_skipped)
        progress.update(n_bytes)
        progress.set_postfix(docs=str(stats.documents), examples=str(writer.count), refresh=False)

    try:
        for batch, n_bytes in batches_of_documents(args, skipped):
            pending.append((pool.apply_async(process_batch, (batch,)), n_bytes))
            while len(pending) > 2 * args.workers:
                collect()
        while pending:
            collect()
        for sequence in packer.flush() if packer else []:
            writer.write(sequence)
        pool.close()  # let the workers finish normally rather than be terminated
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def run(args):
    """Prepares the shards; returns the summary dict (``status`` "failed"
    with an ``error`` when the input was mostly unusable). A run that fails
    before its summary leaves no shard and no summary.json behind."""
    cli_env.default_tf_log_level()
    import tensorflow as tf  # after argument checks; the workers never import it

    from gau_keras.data.tfrecord import ShardedWriter
    from gau_keras.training.run_dir import write_json, write_text

    start = time.time()
    gfile = tf.io.gfile
    check_output_dir(gfile, args.output_dir, args.overwrite)
    skipped, stats = [], MaskStats()
    total_bytes = sum(os.path.getsize(path) for path in args.files)
    summary_path = gfile.join(args.output_dir, SUMMARY)
    try:
        with ShardedWriter(args.output_dir, args.shards) as writer:
            # written first, so that an interrupted run's files are known as ours (--overwrite replaces them)
            write_json(
                summary_path, {"status": "running", "shards": [os.path.basename(p) for p in writer.paths]}, indent=2
            )
            with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="prepare_corpus", file=sys.stderr) as progress:
                process_corpus(args, writer, stats, skipped, progress)
    except BaseException:
        if gfile.exists(summary_path):
            gfile.remove(summary_path)
        raise
    summary = make_summary(args, stats, skipped, writer, time.time() - start)
    problem = usable_input_problem(summary)
    if problem:
        summary.update(status="failed", error=problem)
    write_text(
        gfile.join(args.output_dir, SKIPPED_LOG),
        "".join(f"{location}: {reason}: {detail}\n" for location, reason, detail in sorted(skipped, key=_loc_key)),
    )
    write_json(summary_path, summary, indent=2)
    return summary


def usable_input_problem(summary):
    """Why the input was unusable (None when it was fine): no usable line, or mostly unusable lines
    (`gau_keras.data.mlm.mostly_unusable`, the threshold of the CLUE readers too). The run then fails (exit
    status 2 from the command line) after writing its summary."""
    read, used = summary["documents_read"], summary["documents_used"]
    if used == 0:
        return f"no usable document in {read} line(s) read"
    if mostly_unusable(summary["documents_skipped"], read):
        reasons = ", ".join(f"{r} {n}" for r, n in summary["skipped_by_reason"].items() if n)
        return (
            f"{summary['documents_skipped']} of {read} lines ({summary['documents_skipped'] / read:.0%}) were "
            f"skipped ({reasons}): is the input a text corpus (one document per line, UTF-8)?"
        )
    return None


def _loc_key(item):
    path, _, line = item[0].rpartition(":")
    return path, int(line)


def make_summary(args, stats, skipped, writer, seconds):
    """The summary.json record of a run; ``writer``: its closed ``ShardedWriter``."""
    from gau_keras.data.tfrecord import vocab_checksum

    reasons = collections.Counter(reason for _, reason, _ in skipped)
    content = max(stats.content_tokens, 1)
    selected = max(stats.selected_tokens, 1)
    return {
        "inputs": args.files,
        "vocab": args.vocab,
        "segmenter": args.segmenter,
        "mode": "dynamic" if args.dynamic_mask else "static",
        "seed": args.seed,
        "workers": args.workers,
        "maxlen": args.maxlen,
        **masking_args(args),
        "documents_read": stats.documents + len(skipped),
        "documents_used": stats.documents,
        "documents_skipped": len(skipped),
        "skipped_by_reason": {reason: reasons.get(reason, 0) for reason in SKIP_REASONS},
        "examples": stats.examples,
        "packed": args.pack,
        "sequences": writer.count,
        "tokens": stats.tokens,
        "content_tokens": stats.content_tokens,
        "words": stats.words,
        "selected_words": stats.selected_words,
        "selected_tokens": stats.selected_tokens,
        # fixed masks only; with --dynamic-mask masks are drawn at training time
        "masked_word_fraction": None if args.dynamic_mask else stats.selected_words / max(stats.words, 1),
        "masked_token_fraction": None if args.dynamic_mask else stats.selected_tokens / content,
        "mask_split": None
        if args.dynamic_mask
        else {
            "mask": stats.mask_tokens / selected,
            "random": stats.random_tokens / selected,
            "unchanged": stats.kept_tokens / selected,
        },
        "shards": [os.path.basename(path) for path in writer.paths],
        # checked by tfrecord.load_dataset: a truncated or replaced shard, shards of another vocab
        "shard_records": writer.records,
        "shard_bytes": writer.sizes,
        "vocab_size": len(load_vocab(args.vocab)),
        "vocab_checksum": vocab_checksum(args.vocab),
        "status": "done",
        "seconds": round(seconds, 2),
    }


def print_summary(summary, output_dir):
    lines = [
        f"documents read {summary['documents_read']}, used {summary['documents_used']}, "
        f"skipped {summary['documents_skipped']} ("
        + ", ".join(f"{reason} {count}" for reason, count in summary["skipped_by_reason"].items())
        + ")",
        f"examples {summary['examples']} "
        + (f"packed into {summary['sequences']} sequences " if summary["packed"] else "")
        + f"in {len(summary['shards'])} shards, tokens {summary['tokens']} "
        f"({summary['content_tokens']} without [CLS]/[SEP]), words {summary['words']}",
    ]
    if summary["mode"] == "static":
        split = summary["mask_split"]
        lines.append(
            f"masked: {summary['masked_word_fraction']:.4f} of words, "
            f"{summary['masked_token_fraction']:.4f} of tokens; split [MASK] {split['mask']:.3f} / "
            f"random {split['random']:.3f} / unchanged {split['unchanged']:.3f}"
        )
    else:
        lines.append("masks: dynamic (word starts stored)")
    lines.append(f"{summary['seconds']} s; summary, shards and skipped.log in {output_dir}")
    print("\n".join(lines))


def main(argv=None):
    """The prepare_corpus command: a bad output folder (`GauKerasError`) or a worker that cannot
    start ends it as one line ``prepare_corpus: ...``; so does an unusable input, after its summary."""
    try:
        args = parse_args(argv)
        summary = run(args)
    except WorkerStartupError as error:
        raise SystemExit(f"prepare_corpus: error: a worker failed at start-up: {error}") from None
    except GauKerasError as error:
        raise SystemExit(f"prepare_corpus: {error}") from None
    print_summary(summary, args.output_dir)
    if summary["status"] != "done":
        raise SystemExit(f"prepare_corpus: error: {summary['error']} (see {args.output_dir}/{SKIPPED_LOG})")
    return summary


if __name__ == "__main__":
    sys.exit(flags.command_status(main))
