"""Named entities (CLUENER2020) with a GlobalPointer the bert4keras way: one
head per category scores every (start, end) token pair, trained with
``multilabel_categorical_crossentropy`` over the flattened pairs; an entity is
every pair scoring above 0.

    python3 tests/bert4keras_scripts/global_pointer_ner.py [efficient]

``main()`` returns the evaluated loss before/after training, the score tensor
of one dev text and the entities found in the dev texts.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os
import sys

import numpy as np
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras, multilabel_categorical_crossentropy
from gau_keras.layers import EfficientGlobalPointer, GlobalPointer
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding, to_array
from gau_keras.tokenizers import Tokenizer

maxlen = 40
batch_size = 8
required_files = [
    os.path.join(data_dir, "clue", "cluener", "train.json"),
    os.path.join(data_dir, "clue", "cluener", "dev.json"),
]
categories = sorted(
    ["address", "book", "company", "game", "government", "movie", "name", "organization", "position", "scene"]
)

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_cluener(path, limit):
    """[(text, {(start, end, category)}), ...] (inclusive character offsets)."""
    rows = json_rows(path, limit)
    return [
        (
            row["text"],
            {(s, e, kind) for kind, names in row["label"].items() for spans in names.values() for s, e in spans},
        )
        for row in rows
    ]


def token_positions(text):
    """tokens, and for each character index the index of the token holding it."""
    tokens = tokenizer.tokenize(text, maxlen=maxlen)
    where = {}
    for t, chars in enumerate(tokenizer.rematch(text, tokens)):
        where.update({c: t for c in chars if c not in where})
    return tokens, where


class PointerBatches(DataGenerator):
    """x: [token ids, segment ids]; y: [batch, categories, L, L] 0/1 (1 at (start, end) of an entity)."""

    def __iter__(self, random=False):
        token_ids, targets = [], []
        for is_end, (text, entities) in self.sample(random):
            tokens, where = token_positions(text)
            target = np.zeros((len(categories), len(tokens), len(tokens)))
            for start, end, kind in entities:
                if start in where and end in where:
                    target[categories.index(kind), where[start], where[end]] = 1
            token_ids.append(tokenizer.tokens_to_ids(tokens))
            targets.append(target)
            if is_end or len(token_ids) == self.batch_size:
                ids = sequence_padding(token_ids)
                yield [ids, np.zeros_like(ids)], sequence_padding(targets, seq_dims=3)
                token_ids, targets = [], []


def pointer_crossentropy(y_true, y_pred):
    """Mean over (batch, head) of the multi-label loss of its L*L pair scores."""
    rows = K.shape(y_pred)[0] * K.shape(y_pred)[1]
    loss = multilabel_categorical_crossentropy(K.reshape(y_true, (rows, -1)), K.reshape(y_pred, (rows, -1)))
    return K.mean(loss)


def recognize(model, text):
    """Entities of ``text`` as {(surface string, category)}, and the raw scores."""
    tokens, _ = token_positions(text)
    chars = tokenizer.rematch(text, tokens)
    token_ids = to_array([tokenizer.tokens_to_ids(tokens)])
    scores = model.predict([token_ids, np.zeros_like(token_ids)], verbose=0)[0]
    found = set()
    for head, start, end in zip(*np.where(scores > 0)):
        if chars[start] and chars[end]:
            found.add((text[chars[start][0] : chars[end][-1] + 1], categories[head]))
    return found, scores


def main(pointer="GlobalPointer", rows=32, dev_rows=4, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    layer = {"GlobalPointer": GlobalPointer, "EfficientGlobalPointer": EfficientGlobalPointer}[pointer]
    train = PointerBatches(load_cluener(required_files[0], rows), batch_size)
    encoder = build_transformer_model(config_path, checkpoint_path, model="gau_alpha", **model_options)
    output = layer(heads=len(categories), head_size=32)(encoder.output)
    model = keras.models.Model(encoder.input, output)
    model.compile(loss=pointer_crossentropy, optimizer=Adam(2e-3))

    loss_before = float(model.evaluate(train.forfit(random=False), steps=len(train), verbose=0))
    history = model.fit(train.forfit(), steps_per_epoch=len(train), epochs=epochs, verbose=0)
    loss_after = float(model.evaluate(train.forfit(random=False), steps=len(train), verbose=0))
    dev = load_cluener(required_files[1], dev_rows)
    recognized = [recognize(model, text) for text, _ in dev]
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "history": history.history,
        "texts": [text for text, _ in dev],
        "entities": [found for found, _ in recognized],
        "scores": recognized[0][1],
    }


if __name__ == "__main__":
    result = main("EfficientGlobalPointer" if sys.argv[1:] == ["efficient"] else "GlobalPointer")
    print(result["loss_before"], "->", result["loss_after"], result["entities"])
