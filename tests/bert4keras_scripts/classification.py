"""Review polarity (FewCLUE eprstmt) the bert4keras way: a DataGenerator that
pads its own batches, the encoder's first ([CLS]) vector taken with a Lambda
and a softmax Dense on top, trained with ``model.fit(generator.forfit())``.

    python3 tests/bert4keras_scripts/classification.py

``main()`` returns the losses before and after training, the accuracy and the
predicted probabilities, for tests/bert4keras/test_scripts.py.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

import numpy as np
from keras.layers import Dense, Lambda
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 48
batch_size = 8
classes = ["Negative", "Positive"]
required_files = [os.path.join(data_dir, "clue", "eprstmt", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def read_reviews(path, limit):
    """The first ``limit`` rows as (sentence, class index)."""
    return [(row["sentence"], classes.index(row["label"])) for row in json_rows(path, limit)]


class ReviewBatches(DataGenerator):
    """([token ids, segment ids], [[class]]) batches, padded to their longest row."""

    def __iter__(self, random=False):
        tokens, segments, targets = [], [], []
        for is_end, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            tokens.append(token_ids)
            segments.append(segment_ids)
            targets.append([label])
            if is_end or len(tokens) == self.batch_size:
                yield [sequence_padding(tokens), sequence_padding(segments)], sequence_padding(targets)
                tokens, segments, targets = [], [], []


def mean_cross_entropy(model, generator):
    """Inference-mode loss and accuracy over one pass of ``generator``: (loss, accuracy, probas)."""
    probas = model.predict(generator.fortest(), steps=len(generator), verbose=0)
    labels = np.concatenate([y[:, 0] for _, y in generator]).astype(int)
    picked = probas[np.arange(len(labels)), labels]
    return float(-np.log(picked + 1e-12).mean()), float((probas.argmax(1) == labels).mean()), probas


def main(rows=32, epochs=1, learning_rate=1e-3, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    generator = ReviewBatches(read_reviews(required_files[0], rows), batch_size)
    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", return_keras_model=False, **model_options
    )
    cls_vector = Lambda(lambda x: x[:, 0], name="CLS-token")(bert.model.output)
    probas = Dense(len(classes), activation="softmax", kernel_initializer=bert.initializer)(cls_vector)
    model = keras.models.Model(bert.model.input, probas)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(learning_rate), metrics=["accuracy"])

    loss_before, _, _ = mean_cross_entropy(model, generator)
    history = model.fit(generator.forfit(), steps_per_epoch=len(generator), epochs=epochs, verbose=0)
    loss_after, accuracy, predictions = mean_cross_entropy(model, generator)
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "accuracy": accuracy,
        "predictions": predictions,
        "history": history.history,
        "steps": len(generator),
    }


if __name__ == "__main__":
    result = main()
    print({k: v for k, v in result.items() if k != "predictions"})
