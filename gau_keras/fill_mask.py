"""Masked-token prediction with an MLM model (the fill-mask entry point)."""

import re

import numpy as np

from gau_keras import input_checks

MASK = "[MASK]"
#: vocab entries that are markers, not text: [PAD] [UNK] [CLS] [SEP] [MASK] [unused1] ...
SPECIAL_TOKEN = re.compile(r"^\[[^\[\]]+\]$")


def special_token_ids(tokenizer):
    """The ids of the vocab's special tokens, which are never offered as answers."""
    return np.array(
        [i for i in range(tokenizer.vocab_size) if SPECIAL_TOKEN.match(tokenizer.id_to_token(i))], dtype="int64"
    )


def encode_with_masks(tokenizer, text, maxlen=512):
    """Tokenizes ``text`` with literal ``[MASK]`` markers kept as mask tokens.

    Returns (token_ids, segment_ids, mask_positions).
    """
    pieces = text.split(MASK)
    if len(pieces) == 1:
        raise ValueError(f"fill-mask: the text {text!r} contains no {MASK}")
    if not tokenizer.has_token(tokenizer.token_mask):
        raise ValueError(
            f"fill-mask: the vocab has no {tokenizer.token_mask} token: predictions would be made at [UNK] positions"
        )
    tokens = [tokenizer.token_start] if tokenizer.token_start else []
    positions = []
    for i, piece in enumerate(pieces):
        tokens.extend(tokenizer.tokenize(piece)[1:-1])
        if i < len(pieces) - 1:
            positions.append(len(tokens))
            tokens.append(tokenizer.token_mask)
    tokens.append(tokenizer.token_end)
    if maxlen is not None and len(tokens) > maxlen:
        raise ValueError(
            f"fill-mask: the text has {len(tokens)} tokens, more than the model's {maxlen} positions "
            f"(maxlen={maxlen}, its max_position_embeddings)"
        )
    token_ids = tokenizer.tokens_to_ids(tokens)
    return token_ids, [0] * len(token_ids), positions


def check_tokenizer(model, tokenizer):
    """Refuses a tokenizer whose vocabulary is larger than the model's token table (a vocab.txt
    of another model): its ids past the table would be garbage (NaN on JAX), not an answer."""
    size, key = input_checks.id_bounds(model).get("Input-Token", (None, None))
    if size is not None and tokenizer.vocab_size > size:
        raise ValueError(
            f"fill-mask: the tokenizer has {tokenizer.vocab_size} tokens but the model's token table "
            f"has {size} rows ({key}={size}): the vocab does not belong to this model"
        )


def fill_mask(model, tokenizer, text, top_k=5):
    """Top-k predictions for every ``[MASK]`` in ``text``.

    ``model`` outputs MLM probabilities [B, L, V]. Returns one list per mask
    of (token, probability) pairs, most probable first; special tokens
    ([UNK], [PAD], [CLS], [SEP], [MASK], [unused...]) are left out.
    """
    check_tokenizer(model, tokenizer)
    # RoPE models (GAU-alpha, RoFormerV2) have no position table and no length limit
    token_ids, segment_ids, positions = encode_with_masks(tokenizer, text, maxlen=input_checks.max_length(model))
    probs = model.predict([np.array([token_ids]), np.array([segment_ids])], verbose=0)[0]
    special = special_token_ids(tokenizer)
    results = []
    for position in positions:
        ranking = np.array(probs[position], dtype="float64")
        ranking[special] = -np.inf
        order = np.argsort(-ranking, kind="stable")
        best = order[np.isfinite(ranking[order])][:top_k]
        results.append([(tokenizer.id_to_token(int(i)), float(probs[position, i])) for i in best])
    return results
