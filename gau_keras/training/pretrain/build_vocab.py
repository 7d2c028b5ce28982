"""Derives a smaller vocab from a corpus: the tokens of a base vocab that the
corpus uses at least ``--min-count`` times, special tokens first.

    python3 pretrain/build_vocab.py ../shared/data/corpus/zh_corpus.txt \
        --base-vocab ../shared/data/vocab/gau_alpha_vocab.txt --min-count 5 --output vocab.txt

The corpus is tokenized with the base vocab's own tokenizer, so every token
of the new vocab tokenizes the same way; rarer tokens become [UNK]. Token
order follows the base vocab (ids change; write the result next to the model
that is trained with it).
"""

import argparse
import collections
import os
import sys

from tqdm import tqdm

from gau_keras import flags
from gau_keras.tokenizers import Tokenizer, load_vocab

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def count_tokens(paths, tokenizer):
    """Token frequencies over text files (one document per line)."""
    counts = collections.Counter()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in tqdm(f, desc=os.path.basename(path), unit=" docs", mininterval=2.0):
                counts.update(tokenizer.tokenize(line.strip())[1:-1])
    return counts


def derive_vocab(base_vocab, counts, min_count):
    """Special tokens, then base-vocab tokens used >= min_count times, in base order."""
    missing = [t for t in SPECIAL_TOKENS if t not in base_vocab]
    if missing:
        raise ValueError(f"the base vocab lacks the special token(s) {missing}")
    kept = list(SPECIAL_TOKENS)
    kept += [
        t
        for t, _ in sorted(base_vocab.items(), key=lambda kv: kv[1])
        if t not in SPECIAL_TOKENS and counts.get(t, 0) >= min_count
    ]
    return kept


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="+", help="text files, one document per line")
    parser.add_argument("--base-vocab", required=True)
    parser.add_argument("--min-count", type=flags.positive_int, default=5)
    parser.add_argument("--output", required=True)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if os.path.exists(args.output) and not args.overwrite:
        parser.error(f"{args.output} exists; pass --overwrite to replace it")
    try:
        base = load_vocab(args.base_vocab)
    except (OSError, ValueError) as e:  # a missing file, a duplicate token (its line), not UTF-8
        parser.error(f"--base-vocab: {e}")
    counts = count_tokens(args.corpus, Tokenizer(base, do_lower_case=True))
    tokens = derive_vocab(base, counts, args.min_count)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    covered = sum(counts[t] for t in tokens) / max(1, sum(counts.values()))
    print(
        f"{len(tokens)} tokens (of {len(base)}) cover {covered:.2%} of {sum(counts.values())} corpus tokens "
        f"-> {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
