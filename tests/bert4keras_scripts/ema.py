"""Exponential moving average of the weights the bert4keras way: an optimizer
class from ``extend_with_exponential_moving_average(Adam)``, trained as usual;
``apply_ema_weights()`` swaps the averages in for evaluation and
``reset_old_weights()`` puts the trained weights back.

Data: FewCLUE tnews headlines (15 news categories).

    python3 tests/bert4keras_scripts/ema.py

``main()`` returns the classifier kernel after every update, its raw / EMA /
restored values, the momentum and the accuracy under raw and EMA weights.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import json
import os

import numpy as np
from keras.layers import Dense, Lambda
from prologue import checkpoint_path, config_path, data_dir, dict_path

from gau_keras.backend import K, keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam, extend_with_exponential_moving_average
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
batch_size = 8
ema_momentum = 0.9
required_files = [os.path.join(data_dir, "clue", "tnews", "train.json")]
news_labels = [str(i) for i in range(100, 117) if i not in (105, 111)]  # tnews has no 105 / 111

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def headlines(path, limit):
    """``limit`` rows spread over the file (it is sorted by label)."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    rows = [json.loads(line) for line in lines[:: len(lines) // limit][:limit]]
    return [(row["sentence"], news_labels.index(str(row["label"]))) for row in rows]


class HeadlineBatches(DataGenerator):
    def __iter__(self, random=False):
        chunk = []
        for is_end, item in self.sample(random):
            chunk.append(item)
            if is_end or len(chunk) == self.batch_size:
                encoded = [tokenizer.encode(text, maxlen=maxlen) for text, _ in chunk]
                x = [sequence_padding([ids for ids, _ in encoded]), sequence_padding([seg for _, seg in encoded])]
                yield x, np.array([[label] for _, label in chunk])
                chunk = []


class KernelRecorder(keras.callbacks.Callback):
    """The value of one weight after every training batch."""

    def __init__(self, weight):
        super().__init__()
        self.weight, self.values = weight, []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(K.eval(self.weight).copy())


def accuracy(model, generator):
    right = total = 0
    for x, y in generator:
        right += int((model.predict(x, verbose=0).argmax(1) == y[:, 0]).sum())
        total += len(y)
    return right / total


def main(rows=32, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = HeadlineBatches(headlines(required_files[0], rows), batch_size)
    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", return_keras_model=False, **model_options
    )
    head = Dense(len(news_labels), activation="softmax", kernel_initializer=bert.initializer, name="Probas")
    model = keras.models.Model(bert.model.input, head(Lambda(lambda x: x[:, 0])(bert.model.output)))
    AdamEMA = extend_with_exponential_moving_average(Adam, name="AdamEMA")
    optimizer = AdamEMA(learning_rate=1e-3, ema_momentum=ema_momentum)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer)

    recorder = KernelRecorder(head.kernel)
    model.fit(train.forfit(), steps_per_epoch=len(train), epochs=epochs, callbacks=[recorder], verbose=0)
    raw, raw_accuracy = K.eval(head.kernel).copy(), accuracy(model, train)
    optimizer.apply_ema_weights()
    ema, ema_accuracy = K.eval(head.kernel).copy(), accuracy(model, train)
    optimizer.reset_old_weights()
    return {
        "trajectory": recorder.values,
        "raw": raw,
        "ema": ema,
        "restored": K.eval(head.kernel).copy(),
        "momentum": ema_momentum,
        "iterations": int(K.eval(optimizer.iterations)),
        "raw_accuracy": raw_accuracy,
        "ema_accuracy": ema_accuracy,
    }


if __name__ == "__main__":
    result = main()
    print(
        {k: result[k] for k in ("iterations", "raw_accuracy", "ema_accuracy")},
        "max |ema - raw|",
        np.abs(result["ema"] - result["raw"]).max(),
    )
