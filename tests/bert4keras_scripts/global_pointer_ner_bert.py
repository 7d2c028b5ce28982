"""Named entities (CLUENER2020) with BERT + GlobalPointer, the bert4keras way with sparse
targets: each text's entities are (start token, end token) pairs per category, padded with
(0, 0), and ``sparse_multilabel_categorical_crossentropy`` (``mask_zero=True``) scores every
head's flattened L*L span logits against them; an entity is a span scoring above 0.

    BERT_DIR=chinese_L-12_H-768_A-12 python3 tests/bert4keras_scripts/global_pointer_ner_bert.py

``BERT_DIR`` is a checkpoint folder laid out as Google's (bert_config.json, bert_model.ckpt,
vocab.txt). ``main()`` returns the evaluated loss before and after training, the span scores
of one dev text, the entities found in the dev texts and the dev F1.
"""

import os

import numpy as np
from prologue import checkpoint_folder, data_dir, json_rows

from gau_keras.backend import K, keras, sparse_multilabel_categorical_crossentropy
from gau_keras.layers import GlobalPointer
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding, to_array
from gau_keras.tokenizers import Tokenizer

config_path, checkpoint_path, dict_path = checkpoint_folder("BERT_DIR")
maxlen = 64
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "cluener", name) for name in ("train.json", "dev.json")]
categories = ["address", "book", "company", "game", "government", "movie", "name", "organization", "position", "scene"]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_data(filename, limit):
    """[(text, {(start, end, category), ...})] with inclusive character offsets."""
    D = []
    for row in json_rows(filename, limit):
        D.append(
            (
                row["text"],
                {
                    (start, end, category)
                    for category, names in row["label"].items()
                    for spans in names.values()
                    for start, end in spans
                },
            )
        )
    return D


class data_generator(DataGenerator):
    """([token ids, segment ids], spans [B, categories, n, 2]): each category's (start, end)
    token pairs, (0, 0) padding (that span, [CLS] to [CLS], is never an entity)."""

    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids, batch_labels = [], [], []
        for is_end, (text, entities) in self.sample(random):
            tokens = tokenizer.tokenize(text, maxlen=maxlen)
            mapping = tokenizer.rematch(text, tokens)
            start_mapping = {chars[0]: i for i, chars in enumerate(mapping) if chars}
            end_mapping = {chars[-1]: i for i, chars in enumerate(mapping) if chars}
            spans = [set() for _ in categories]
            for start, end, category in entities:
                if start in start_mapping and end in end_mapping:
                    spans[categories.index(category)].add((start_mapping[start], end_mapping[end]))
            spans = [sorted(s) or [(0, 0)] for s in spans]
            batch_token_ids.append(tokenizer.tokens_to_ids(tokens))
            batch_segment_ids.append([0] * len(tokens))
            batch_labels.append(sequence_padding(spans))
            if len(batch_token_ids) == self.batch_size or is_end:
                batch_token_ids = sequence_padding(batch_token_ids)
                batch_segment_ids = sequence_padding(batch_segment_ids)
                batch_labels = sequence_padding(batch_labels, seq_dims=2)
                yield [batch_token_ids, batch_segment_ids], batch_labels
                batch_token_ids, batch_segment_ids, batch_labels = [], [], []


def sparse_global_pointer_loss(y_true, y_pred):
    """y_true [B, heads, n, 2] (start, end) pairs; y_pred [B, heads, L, L] span logits."""
    length = K.shape(y_pred)[2]
    flat_true = y_true[..., 0] * K.cast(length, K.floatx()) + y_true[..., 1]  # the span's index in L*L
    flat_pred = K.reshape(y_pred, (K.shape(y_pred)[0], K.shape(y_pred)[1], -1))
    loss = sparse_multilabel_categorical_crossentropy(flat_true, flat_pred, mask_zero=True)
    return K.mean(loss)


def recognize(model, text, threshold=0):
    """{(start, end, category)} of ``text`` (character offsets), and the span scores."""
    tokens = tokenizer.tokenize(text, maxlen=maxlen)
    mapping = tokenizer.rematch(text, tokens)
    token_ids = tokenizer.tokens_to_ids(tokens)
    token_ids, segment_ids = to_array([token_ids], [[0] * len(token_ids)])
    scores = model.predict([token_ids, segment_ids], verbose=0)[0]
    scores[:, [0, -1]] -= np.inf
    scores[:, :, [0, -1]] -= np.inf
    entities = set()
    for category, start, end in zip(*np.where(scores > threshold)):
        entities.add((mapping[start][0], mapping[end][-1], categories[category]))
    return entities, scores


def f1_score(model, data):
    """(f1, precision, recall) of the recognised spans."""
    X, Y, Z = 1e-10, 1e-10, 1e-10
    for text, truth in data:
        found = recognize(model, text)[0]
        X += len(found & truth)
        Y += len(found)
        Z += len(truth)
    return 2 * X / (Y + Z), X / Y, X / Z


def main(rows=32, dev_rows=8, epochs=1, learning_rate=2e-5, head_size=32, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train_generator = data_generator(load_data(required_files[0], rows), batch_size)
    valid_data = load_data(required_files[1], dev_rows)

    encoder = build_transformer_model(config_path, checkpoint_path, **model_options)
    output = GlobalPointer(len(categories), head_size)(encoder.output)
    model = keras.models.Model(encoder.input, output)
    model.compile(loss=sparse_global_pointer_loss, optimizer=Adam(learning_rate))

    def evaluate():
        return float(model.evaluate(train_generator.forfit(random=False), steps=len(train_generator), verbose=0))

    loss_before = evaluate()
    history = model.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=epochs, verbose=0)
    loss_after = evaluate()
    recognized = [recognize(model, text) for text, _ in valid_data]
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "history": history.history,
        "texts": [text for text, _ in valid_data],
        "entities": [found for found, _ in recognized],
        "scores": recognized[0][1],
        "f1": f1_score(model, valid_data),
        "model": model,
    }


if __name__ == "__main__":
    result = main()
    print(result["loss_before"], "->", result["loss_after"], "f1, precision, recall:", result["f1"])
    for text, entities in zip(result["texts"], result["entities"]):
        print(text, [(text[start : end + 1], category) for start, end, category in sorted(entities)])
