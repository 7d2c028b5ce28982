"""Review polarity (FewCLUE eprstmt) written with Keras 2's calls, as bert4keras-era scripts are:
``fit_generator`` / ``evaluate_generator`` / ``predict_generator``, nested Python lists to ``predict``,
a loss of one's own on float64 one-hot targets, Keras 2's ``kullback_leibler_divergence`` as a metric,
and ``model.save('best_model.model')`` read back by ``keras.models.load_model``.

    python3 tests/bert4keras_scripts/keras2_calls.py

``main(keras2=True)`` runs those calls; ``main(keras2=False)`` runs the same training with ``fit`` /
``evaluate`` / ``predict`` on the same batches, for tests/bert4keras/test_scripts.py to compare.
``model_options`` go to ``build_transformer_model`` (the test keeps the first layer only).
"""

import os
import tempfile

import numpy as np
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import Dense, Lambda
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "eprstmt", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_reviews(path, limit):
    """(review, label) of the first ``limit`` rows, labels numbered in order of appearance."""
    labels = {}
    rows = [(row["sentence"], labels.setdefault(row["label"], len(labels))) for row in json_rows(path, limit)]
    return rows, len(labels)


class ReviewBatches(DataGenerator):
    """([token ids, segment ids], one-hot float64 targets) batches."""

    def __init__(self, data, num_classes, **kwargs):
        super().__init__(data, **kwargs)
        self.num_classes = num_classes

    def __iter__(self, random=False):
        tokens, segments, targets = [], [], []
        for is_end, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            tokens.append(token_ids)
            segments.append(segment_ids)
            targets.append(np.eye(self.num_classes)[label])  # float64, as numpy makes it
            if is_end or len(tokens) == self.batch_size:
                yield [sequence_padding(tokens), sequence_padding(segments)], np.array(targets)
                tokens, segments, targets = [], [], []


def cross_entropy(y_true, y_pred):
    """A loss of one's own: y_true arrives as float64 from numpy (Keras 2 cast it to y_pred's dtype)."""
    return -K.sum(y_true * K.log(y_pred + K.epsilon()), axis=-1)


def build_classifier(num_classes, **model_options):
    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", return_keras_model=False, **model_options
    )
    output = Lambda(lambda x: x[:, 0], name="CLS-token")(bert.model.output)
    output = Dense(num_classes, activation="softmax", kernel_initializer=bert.initializer)(output)
    model = keras.models.Model(bert.model.input, output)
    model.compile(loss=cross_entropy, optimizer=Adam(1e-3), metrics=[keras.metrics.kullback_leibler_divergence])
    return model


def main(rows=24, keras2=True, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    data, num_classes = load_reviews(required_files[0], rows)
    train = ReviewBatches(data, num_classes, batch_size=batch_size)
    keras.utils.set_random_seed(42)
    model = build_classifier(num_classes, **model_options)
    if keras2:  # Keras 2's generator methods, on batches in a fixed order
        history = model.fit_generator(train.forfit(random=False), steps_per_epoch=len(train), epochs=2, verbose=0)
        evaluated = model.evaluate_generator(train.forfit(random=False), steps=len(train))
        predicted = model.predict_generator(train.forfit(random=False), steps=len(train))
    else:  # Keras 3's fit / evaluate / predict on the same batches
        history = model.fit(train.forfit(random=False), steps_per_epoch=len(train), epochs=2, verbose=0)
        evaluated = model.evaluate(train.forfit(random=False), steps=len(train), verbose=0)
        predicted = model.predict(train.fortest(), steps=len(train), verbose=0)

    token_ids, segment_ids = tokenizer.encode(data[0][0], maxlen=maxlen)
    nested = model.predict([[token_ids], [segment_ids]], verbose=0)  # Keras 2 took nested lists
    as_arrays = model.predict([np.array([token_ids]), np.array([segment_ids])], verbose=0)

    folder = tempfile.mkdtemp()
    model.save(os.path.join(folder, "best_model.model"))  # a bert4keras-era file name
    reloaded = keras.models.load_model(
        os.path.join(folder, "best_model.model"), safe_mode=False, custom_objects={"cross_entropy": cross_entropy}
    )
    return {
        "history": history.history,
        "evaluated": evaluated,
        "predicted": predicted,
        "nested": nested,
        "as_arrays": as_arrays,
        "reloaded": reloaded.predict([[token_ids], [segment_ids]], verbose=0),
        "reloaded_type": type(reloaded).__name__,
        "num_classes": num_classes,
    }


if __name__ == "__main__":
    result = main()
    print(result["history"], result["evaluated"])
