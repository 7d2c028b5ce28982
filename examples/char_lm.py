"""Character-level language model on ../shared/data/corpus/zh_corpus.txt: SRU++
against a causal RoFormerV2-style Transformer of about the same parameter
count, each trained for the same wall-clock budget; prints held-out
bits-per-character for both (issue 3, item 6).

    python3 examples/char_lm.py                  # 10 minutes per model
    python3 examples/char_lm.py --budget 180     # 3 minutes per model

Both models come from ``build_transformer_model`` (``model='srupp'`` and
``model='roformer_v2'``, ``application='lm'``), share the character vocabulary,
the embedding width, the optimiser (Adam, clipnorm 1), the batch and the
window length, and see random training windows drawn with the same seed.  The
budget counts training steps only: the first step (tracing and compilation)
is run before the clock starts and reported separately.  The held-out set is
the corpus's last documents (``--heldout-fraction``), cut into consecutive
windows; bpc = mean next-character cross-entropy / ln 2 over all their
positions.
"""

import argparse
import collections
import math
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # the repository root
import gau_keras.cli_env  # noqa: E402,F401  (first: the script's TensorFlow log level, before TensorFlow loads)

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from gau_keras import build_transformer_model  # noqa: E402

DEFAULT_CORPUS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "corpus" / "zh_corpus.txt"
PAD, UNK, NEWLINE = 0, 1, 2


def load_corpus(path, vocab_size, heldout_fraction):
    """→ (train ids, held-out ids, vocabulary size); documents joined by NEWLINE."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus {str(path)!r} not found (pass --corpus)")
    docs = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    cut = int(len(docs) * (1 - heldout_fraction))
    if not 0 < cut < len(docs):
        raise ValueError(f"--heldout-fraction {heldout_fraction} leaves no training or no held-out documents")
    counts = collections.Counter(ch for doc in docs[:cut] for ch in doc)
    chars = [ch for ch, _ in counts.most_common(vocab_size - 3)]
    index = {ch: i + 3 for i, ch in enumerate(chars)}

    def encode(part):
        ids = []
        for doc in part:
            ids.extend(index.get(ch, UNK) for ch in doc)
            ids.append(NEWLINE)
        return np.asarray(ids, np.int32)

    return encode(docs[:cut]), encode(docs[cut:]), len(chars) + 3


def build_models(args, vocab_size):
    srupp = build_transformer_model(
        model="srupp",
        application="lm",
        with_mlm="linear",
        vocab_size=vocab_size,
        hidden_size=args.srupp_hidden,
        num_hidden_layers=args.srupp_layers,
        proj_size=args.srupp_proj,
        num_attention_heads=args.srupp_heads,
        embedding_size=args.embedding_size,
        dropout_rate=args.dropout,
        name="srupp_lm",
    )
    transformer = build_transformer_model(
        model="roformer_v2",
        application="lm",
        with_mlm="linear",
        vocab_size=vocab_size,
        hidden_size=args.tf_hidden,
        num_hidden_layers=args.tf_layers,
        num_attention_heads=args.tf_heads,
        intermediate_size=args.tf_ffn,
        embedding_size=args.embedding_size,
        segment_vocab_size=0,
        dropout_rate=args.dropout,
        name="roformer_v2_lm",
    )
    return {"SRU++": srupp, "RoFormerV2": transformer}


def parameter_counts(model, vocab_size, embedding_size):
    total = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return total, total - vocab_size * embedding_size


def windows(ids, batch, length, rng):
    starts = rng.integers(0, len(ids) - length - 1, size=batch)
    chunk = np.stack([ids[s : s + length + 1] for s in starts])
    return chunk[:, :-1], chunk[:, 1:]


def train(model, data, args):
    """Trains for args.budget seconds of steps; → (steps, seconds, compile seconds, last loss)."""
    optimizer = keras.optimizers.Adam(args.lr, clipnorm=1.0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    loss = step(*windows(data, args.batch, args.length, rng))
    compile_s = time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.budget:
        loss = step(*windows(data, args.batch, args.length, rng))
        steps += 1
        if args.log_every and steps % args.log_every == 0:
            print(
                f"    step {steps}: loss {float(loss) / math.log(2):.3f} bits, {time.perf_counter() - start:.0f} s",
                flush=True,
            )
    return steps, time.perf_counter() - start, compile_s, float(loss)


def heldout_bpc(model, ids, args):
    n = min(args.eval_windows * args.eval_batch, (len(ids) - 1) // args.length)
    x = ids[: n * args.length].reshape(n, args.length)
    y = ids[1 : n * args.length + 1].reshape(n, args.length)
    predict = tf.function(lambda x: model(x, training=False))
    total = 0.0
    for i in range(0, n, args.eval_batch):
        logits = predict(x[i : i + args.eval_batch])
        ce = keras.losses.sparse_categorical_crossentropy(y[i : i + args.eval_batch], logits, from_logits=True)
        total += float(tf.reduce_sum(ce))
    return total / (n * args.length) / math.log(2), n * args.length


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--budget", type=float, default=600.0, help="training seconds per model")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--heldout-fraction", type=float, default=0.02)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--embedding-size", type=int, default=256)
    parser.add_argument("--srupp-hidden", type=int, default=512)
    parser.add_argument("--srupp-proj", type=int, default=128)
    parser.add_argument("--srupp-layers", type=int, default=3)
    parser.add_argument("--srupp-heads", type=int, default=1)
    parser.add_argument("--tf-hidden", type=int, default=256)
    parser.add_argument("--tf-layers", type=int, default=2)
    parser.add_argument("--tf-heads", type=int, default=4)
    parser.add_argument("--tf-ffn", type=int, default=512)
    parser.add_argument("--eval-windows", type=int, default=16, help="held-out batches")
    parser.add_argument("--eval-batch", type=int, default=16)
    parser.add_argument("--log-every", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    keras.utils.set_random_seed(args.seed)
    train_ids, heldout_ids, vocab_size = load_corpus(args.corpus, args.vocab_size, args.heldout_fraction)
    print(
        f"corpus: {len(train_ids):,} training / {len(heldout_ids):,} held-out characters, "
        f"vocabulary {vocab_size} (UNK rate held-out {np.mean(heldout_ids == UNK):.2%})"
    )
    rows = []
    for name, model in build_models(args, vocab_size).items():
        total, non_embedding = parameter_counts(model, vocab_size, args.embedding_size)
        print(
            f"{name}: {total:,} parameters ({non_embedding:,} besides the tied embedding); "
            f"training {args.budget:.0f} s",
            flush=True,
        )
        steps, seconds, compile_s, last = train(model, train_ids, args)
        bpc, n_chars = heldout_bpc(model, heldout_ids, args)
        rows.append((name, total, non_embedding, steps, seconds, compile_s, last / math.log(2), bpc))
        print(
            f"  {steps} steps in {seconds:.0f} s (+{compile_s:.1f} s first step); held-out bpc {bpc:.3f} "
            f"over {n_chars:,} characters",
            flush=True,
        )
    print(
        f"\n{'model':<11} {'params':>10} {'non-emb':>9} {'steps':>6} {'s/step':>7} {'train bpc':>9} "
        f"{'held-out bpc':>12}"
    )
    for name, total, non_embedding, steps, seconds, _, train_bpc, bpc in rows:
        print(
            f"{name:<11} {total:>10,} {non_embedding:>9,} {steps:>6} {seconds / max(steps, 1):7.3f} "
            f"{train_bpc:9.3f} {bpc:12.3f}"
        )
    print(
        f"(batch {args.batch} x {args.length} characters, same budget {args.budget:.0f} s each; train bpc = last batch)"
    )


if __name__ == "__main__":
    main()
