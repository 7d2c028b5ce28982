"""How much Chinese a masked-LM model directory knows, on held-out text.

    python3 benchmarks/mlm_quality.py [--model-dir DIR] \
        --eval-shards 'runs/mlm128/eval/shard-*.tfrecord' --eval-text runs/eval.txt \
        [--length-shards 128=runs/evalpack/128/shard-*.tfrecord,256=...,512=...]

Reports, for the model of ``--model-dir`` (default: the bundled GAU-alpha):
  * whole-word: masked-token accuracy (and loss) on prepare_corpus shards of
    held-out documents, the pretraining objective with its fixed masks, and
    the majority baseline (always the most frequent masked token);
  * random characters: 15% of the characters of each held-out document (its
    first ``--char-maxlen`` tokens, [CLS]/[SEP] included) replaced by [MASK],
    chosen with a fixed seed; accuracy of the top prediction;
  * random characters, as a pair: each document cut in two halves and encoded
    as ``[CLS] first [SEP] second [SEP]`` (segment ids 1 on the second), the
    input of every sentence-pair task; accuracy on all masked tokens and on
    the second half's. A model whose segment-1 embedding was never trained
    (every pretraining segment id 0) fails here;
  * probes: everyday sentences with one obvious blank
    (``benchmarks/fill_mask_probes.tsv``): the share whose answer is in the
    top 5 of ``gau_keras.fill_mask``;
  * with ``--length-shards``: whole-word accuracy on held-out shards packed to
    other lengths (length extrapolation).
Prints a Markdown table; ``--json FILE`` also writes the figures.
"""

import argparse
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import gau_keras.cli_env  # noqa: E402,F401  (first: the script's TensorFlow log level, before TensorFlow loads)

PROBES = HERE / "fill_mask_probes.tsv"


def read_probes(path):
    """[(sentence, accepted answer characters)] of a probes file (# comments)."""
    probes = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            sentence, sep, answers = line.partition("\t")
            if not sep or not answers or sentence.count("[MASK]") != 1:
                raise SystemExit(f"error: {path}:{number}: expected 'sentence with one [MASK]<TAB>answers'")
            probes.append((sentence, answers))
    return probes


def probe_hits(model, tokenizer, probes, top_k=5):
    """[(sentence, answers, top-k tokens, hit)] for every probe."""
    from gau_keras.fill_mask import fill_mask

    results = []
    for sentence, answers in probes:
        top = [token for token, _ in fill_mask(model, tokenizer, sentence, top_k)[0]]
        results.append((sentence, answers, top, any(t in answers for t in top)))
    return results


def _predict_fn(model):
    import tensorflow as tf

    return tf.function(lambda x: model(x, training=False), reduce_retracing=True)


def shard_accuracy(model, pattern, batch_size=32):
    """Whole-word masked accuracy, loss and majority baseline on MLM shards."""
    import numpy as np
    import tensorflow as tf

    from gau_keras.data.tfrecord import SUMMARY_NAME, load_dataset

    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise SystemExit(f"error: no shards match {pattern!r}")
    with open(os.path.join(os.path.dirname(files[0]), SUMMARY_NAME), encoding="utf-8") as f:
        maxlen = json.load(f)["maxlen"]
    predict = _predict_fn(model)
    correct = total = loss = 0.0
    counts = {}
    for inputs, labels in load_dataset(pattern, batch_size, maxlen=maxlen, shuffle=False):
        logits = predict([inputs["Input-Token"], inputs["Input-Segment"]])
        labels = labels.numpy()
        keep = labels > 0
        logits = np.asarray(logits, dtype=np.float64)[keep]
        target = labels[keep]
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        loss += -log_probs[np.arange(len(target)), target].sum()
        correct += (logits.argmax(-1) == target).sum()
        total += len(target)
        for token, count in zip(*np.unique(target, return_counts=True)):
            counts[token] = counts.get(token, 0) + count
    return {
        "accuracy": correct / total,
        "loss": loss / total,
        "majority": max(counts.values()) / total,
        "masked": int(total),
        "maxlen": maxlen,
    }


def random_char_accuracy(model, tokenizer, texts, maxlen=128, rate=0.15, seed=0, batch_size=64, pair=False):
    """Accuracy when ``rate`` of each text's tokens (first ``maxlen``) are [MASK].

    pair: encode each text as its two halves, ``[CLS] a [SEP] b [SEP]`` with
    segment ids 1 on ``b``; the figures then add ``second_accuracy`` (the
    masked tokens of ``b``). Special tokens are never masked.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for text in texts:
        if pair:
            ids, segments = tokenizer.encode(text[: len(text) // 2], text[len(text) // 2 :], maxlen=maxlen)
        else:
            ids, segments = tokenizer.encode(text, maxlen=maxlen)
        ids, segments = np.array(ids), np.array(segments)
        label = np.zeros_like(ids)
        maskable = np.flatnonzero(ids != tokenizer.token_sep_id)[1:]  # not [CLS], not a [SEP]
        chosen = maskable[rng.random(len(maskable)) < rate]
        label[chosen] = ids[chosen]
        ids[chosen] = tokenizer.token_mask_id
        rows.append((ids, segments, label))
    predict = _predict_fn(model)
    correct = total = second_correct = second_total = 0
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        x, s, y = (np.zeros((len(batch), max(len(r[0]) for r in batch)), "int32") for _ in range(3))
        for i, row in enumerate(batch):
            for array, values in zip((x, s, y), row):
                array[i, : len(values)] = values
        hit = np.asarray(predict([x, s])).argmax(-1) == y
        correct += int(hit[y > 0].sum())
        total += int((y > 0).sum())
        second_correct += int(hit[(y > 0) & (s == 1)].sum())
        second_total += int(((y > 0) & (s == 1)).sum())
    figures = {"accuracy": correct / max(total, 1), "masked": total}
    if pair:
        figures.update(second_accuracy=second_correct / max(second_total, 1), second_masked=second_total)
    return figures


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=None, help="model directory (default: the bundled GAU-alpha)")
    parser.add_argument("--model", default="gau_alpha", help="gau_alpha or roformer_v2")
    parser.add_argument("--eval-shards", help="prepare_corpus shards of held-out documents (whole-word masks)")
    parser.add_argument("--eval-text", help="held-out documents, one per line (random-character masks)")
    parser.add_argument("--char-maxlen", type=int, default=128)
    parser.add_argument("--max-docs", type=int, default=None, help="use the first N held-out documents")
    parser.add_argument("--length-shards", default="", help="LEN=PATTERN,... held-out shards packed to other lengths")
    parser.add_argument("--probes", default=str(PROBES))
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--show-probes", action="store_true", help="print every probe's top 5")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from gau_keras.pretrained import load_pretrained

    model, tokenizer = load_pretrained(args.model_dir, model=args.model, with_mlm=True)
    logits_model, _ = load_pretrained(args.model_dir, model=args.model, with_mlm="linear")
    figures = {"model_dir": args.model_dir or "bundled"}
    rows = []
    probes = probe_hits(model, tokenizer, read_probes(args.probes))
    hits = sum(hit for *_, hit in probes)
    figures["probes"] = {
        "hits": hits,
        "total": len(probes),
        "rate": hits / len(probes),
        "top5": {s: top for s, _, top, _ in probes},
    }
    rows.append(["probes: answer in top 5", f"{hits}/{len(probes)} = {hits / len(probes):.3f}", ""])
    if args.show_probes:
        for sentence, answers, top, hit in probes:
            print(f"{'+' if hit else '-'} {sentence}  [{answers}]  -> {' '.join(top)}")
    if args.eval_shards:
        ww = shard_accuracy(logits_model, args.eval_shards)
        figures["whole_word"] = ww
        rows.append(
            [
                f"whole-word masked accuracy (maxlen {ww['maxlen']})",
                f"{ww['accuracy']:.4f}",
                f"loss {ww['loss']:.3f}, majority {ww['majority']:.4f}, {ww['masked']} masked tokens",
            ]
        )
    if args.eval_text:
        with open(args.eval_text, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()][: args.max_docs]
        rc = random_char_accuracy(logits_model, tokenizer, texts, maxlen=args.char_maxlen)
        figures["random_char"] = rc
        rows.append(
            [
                f"random characters 15% (first {args.char_maxlen} tokens)",
                f"{rc['accuracy']:.4f}",
                f"{len(texts)} documents, {rc['masked']} masked tokens",
            ]
        )
        rp = random_char_accuracy(logits_model, tokenizer, texts, maxlen=args.char_maxlen, pair=True)
        figures["random_char_pair"] = rp
        rows.append(
            [
                f"random characters 15%, each document as a pair of halves (first {args.char_maxlen} tokens)",
                f"{rp['accuracy']:.4f}",
                f"second half (segment 1): {rp['second_accuracy']:.4f} of {rp['second_masked']} masked tokens",
            ]
        )
    for item in filter(None, (x.strip() for x in args.length_shards.split(","))):
        length, _, pattern = item.partition("=")
        result = shard_accuracy(logits_model, pattern)
        figures.setdefault("lengths", {})[length] = result
        rows.append(
            [
                f"whole-word, packed to {length} tokens",
                f"{result['accuracy']:.4f}",
                f"loss {result['loss']:.3f}, {result['masked']} masked tokens",
            ]
        )
    print("| measure | value | details |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, ensure_ascii=False, indent=1)
    return figures


if __name__ == "__main__":
    main()
