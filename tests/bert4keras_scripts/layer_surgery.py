"""Compressing a classifier by module replacement (bert-of-theseus) on FewCLUE eprstmt, the bert4keras way:
a predecessor and a successor of half its depth built with prefixes, and a third model that feeds the
predecessor's inputs through a random mix of the two models' own layers (``apply_embeddings`` and
``apply_main_layers`` called on tensors of another graph), training the successor's layers only.

    python3 tests/bert4keras_scripts/layer_surgery.py

``main()`` returns the losses and what moved: the successor's weights (trained inside the mixed model),
the predecessor's (frozen), and the predictions of the mixed model and of the successor's own model
afterwards (in inference the mixed model takes the successor's side at every switch).
``num_hidden_layers`` is the successor's depth (the predecessor has twice as many); ``model_options``
go to both ``build_transformer_model`` calls.
"""

import os

import numpy as np
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import Dense, Input, Lambda, Layer
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
batch_size = 8
classes = ["Negative", "Positive"]
required_files = [os.path.join(data_dir, "clue", "eprstmt", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def read_reviews(path, limit):
    return [(row["sentence"], classes.index(row["label"])) for row in json_rows(path, limit)]


class ReviewBatches(DataGenerator):
    def __iter__(self, random=False):
        tokens, segments, labels = [], [], []
        for is_end, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            tokens.append(token_ids)
            segments.append(segment_ids)
            labels.append([label])
            if is_end or len(tokens) == self.batch_size:
                yield [sequence_padding(tokens), sequence_padding(segments)], sequence_padding(labels)
                tokens, segments, labels = [], [], []


class EitherOr(Layer):
    """In training, the first input or the second at random (one draw per batch); else the second."""

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(seed)  # Keras 3: random draws take a seed state

    def call(self, inputs, training=None):
        first, second = inputs
        pick = K.random_binomial(shape=[1], p=0.5, seed=self.seed_generator)
        return K.in_train_phase(pick * first + (1 - pick) * second, second, training=training)

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else mask[1]

    def compute_output_shape(self, input_shape):
        return input_shape[1]


def mixed_model(predecessor, successor, head):
    """The predecessor's inputs through predecessor and successor layers picked at random."""
    inputs = predecessor.inputs
    for layer in predecessor.model.layers:
        layer.trainable = False
    head.trainable = False
    x = EitherOr(seed=1)([predecessor.apply_embeddings(inputs), successor.apply_embeddings(inputs)])
    per_module = predecessor.num_hidden_layers // successor.num_hidden_layers
    for index in range(successor.num_hidden_layers):
        old = x
        for sub in range(per_module):
            old = predecessor.apply_main_layers(old, per_module * index + sub)
        new = successor.apply_main_layers(x, index)
        x = EitherOr(seed=2 + index)([old, new])
    return keras.models.Model(inputs, head(x))


def main(rows=32, num_hidden_layers=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = ReviewBatches(read_reviews(required_files[0], rows), batch_size)
    predecessor = build_transformer_model(
        config_path,
        checkpoint_path,
        model="gau_alpha",
        return_keras_model=False,
        num_hidden_layers=2 * num_hidden_layers,
        prefix="Predecessor-",
        **model_options,
    )
    successor = build_transformer_model(
        config_path,
        checkpoint_path,
        model="gau_alpha",
        return_keras_model=False,
        num_hidden_layers=num_hidden_layers,
        prefix="Successor-",
        **model_options,
    )
    hidden = Input(shape=K.int_shape(predecessor.output)[1:])
    head = keras.models.Model(hidden, Dense(len(classes), activation="softmax")(Lambda(lambda x: x[:, 0])(hidden)))

    teacher = keras.models.Model(predecessor.inputs, head(predecessor.output))
    teacher.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(1e-3))
    teacher.fit(train.forfit(), steps_per_epoch=len(train), epochs=1, verbose=0)

    student = keras.models.Model(successor.inputs, head(successor.output))
    frozen = [w.copy() for w in predecessor.model.get_weights()]
    start = [w.copy() for w in successor.model.get_weights()]
    theseus = mixed_model(predecessor, successor, head)
    theseus.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(1e-3))
    x, y = next(iter(train))
    loss_before = float(theseus.evaluate(x, y, verbose=0))
    history = theseus.fit(train.forfit(), steps_per_epoch=len(train), epochs=2, verbose=0)
    return {
        "history": history.history,
        "loss_before": loss_before,
        "loss_after": float(theseus.evaluate(x, y, verbose=0)),
        "successor_moved": max(float(np.abs(a - b).max()) for a, b in zip(start, successor.model.get_weights())),
        "predecessor_moved": max(float(np.abs(a - b).max()) for a, b in zip(frozen, predecessor.model.get_weights())),
        "student_probas": student.predict(x, verbose=0),
        "theseus_probas": theseus.predict(x, verbose=0),
        "mixed_layers": len(theseus.layers),
    }


if __name__ == "__main__":
    result = main()
    print({k: v for k, v in result.items() if k != "student_probas"})
