"""Gradient accumulation the bert4keras way: ``extend_with_gradient_accumulation(Adam)``
with ``grad_accum_steps=k`` updates the weights once every k batches with the
mean of their gradients, so k batches of n rows train like one batch of k*n.

As in bert4keras the update is delayed: the step of batch 0 updates with
nothing accumulated, the step of batch k with the mean of batches 0..k-1
(whose gradients were all taken at the same weights), and so on; batch k's
own gradient, taken before that update, joins the next one. So the first
update is exactly the big batch's, which this script checks on sentiment
reviews: the same classifier (dropout off, rows padded to one length, so a
batch's gradient does not depend on how rows are grouped) trained on one batch
of 8 rows with plain Adam, and on 3 batches of 4 rows (the same 8, then 4
whose gradient stays pending) with accumulation over 2. Adam runs with
``bias_correction=False``: bias correction would see the micro-step count (3,
not 1), which is bert4keras's behaviour too.

    python3 tests/bert4keras_scripts/gradient_accumulation.py

``main()`` returns both runs' weights, the classifier kernel after every
small batch and the iteration counters.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

import numpy as np
from keras.layers import Dense, Lambda
from prologue import checkpoint_path, config_path, data_dir, dict_path

from gau_keras.backend import K, keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam, extend_with_gradient_accumulation
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
grad_accum_steps = 2
required_files = [os.path.join(data_dir, "sentiment", "train.tsv")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def sentiment_rows(path, limit):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text, label = line.rstrip("\n").split("\t")
            rows.append((text, int(label)))
            if len(rows) == limit:
                break
    return rows


class FixedLengthBatches(DataGenerator):
    """Every batch padded to ``maxlen``: the grouping of rows changes no row's input."""

    def __iter__(self, random=False):
        texts, labels = [], []
        for is_end, (text, label) in self.sample(random):
            texts.append(tokenizer.encode(text, maxlen=maxlen)[0])
            labels.append([label])
            if is_end or len(texts) == self.batch_size:
                token_ids = sequence_padding(texts, length=maxlen)
                yield [token_ids, np.zeros_like(token_ids)], np.array(labels)
                texts, labels = [], []


class KernelAfterEachBatch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.kernels = []

    def on_train_batch_end(self, batch, logs=None):
        self.kernels.append(K.eval(self.model.layers[-1].kernel).copy())


def classifier(**model_options):
    bert = build_transformer_model(
        config_path,
        checkpoint_path,
        model="gau_alpha",
        dropout_rate=0,
        attention_dropout_rate=0,
        return_keras_model=False,
        **model_options,
    )
    cls_vector = Lambda(lambda x: x[:, 0])(bert.model.output)
    output = Dense(2, activation="softmax", kernel_initializer=bert.initializer)(cls_vector)
    return keras.models.Model(bert.model.input, output)


def train(model, optimizer, rows, batch_size):
    model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer)
    generator = FixedLengthBatches(rows, batch_size)
    kernels = KernelAfterEachBatch()
    model.fit(generator.forfit(random=False), steps_per_epoch=len(generator), epochs=1, callbacks=[kernels], verbose=0)
    return [K.eval(w).copy() for w in model.trainable_weights], kernels.kernels, int(K.eval(optimizer.iterations))


def main(rows=12, learning_rate=1e-3, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    data = sentiment_rows(required_files[0], rows)
    model = classifier(**model_options)
    checkpoint_weights = model.get_weights()
    initial = [K.eval(w).copy() for w in model.trainable_weights]
    big, _, big_iterations = train(model, Adam(learning_rate, bias_correction=False), data[:8], batch_size=8)

    model.set_weights(checkpoint_weights)
    AdamGA = extend_with_gradient_accumulation(Adam, name="AdamGA")
    optimizer = AdamGA(learning_rate, bias_correction=False, grad_accum_steps=grad_accum_steps)
    accumulated, kernels, small_iterations = train(model, optimizer, data, batch_size=8 // grad_accum_steps)
    return {
        "initial": initial,
        "big_batch": big,
        "accumulated": accumulated,
        "kernels": kernels,
        "big_iterations": big_iterations,
        "small_iterations": small_iterations,
    }


if __name__ == "__main__":
    result = main()
    diff = max(float(np.abs(a - b).max()) for a, b in zip(result["big_batch"], result["accumulated"]))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(result["big_batch"], result["initial"]))
    print("update", moved, "max |big batch - accumulated|", diff)
