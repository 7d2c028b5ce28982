"""Adversarial training on the token embeddings (FGM) in Keras 3.

bert4keras's example does it by replacing Keras 2's ``model.train_function``
with a Python function built from ``K.gradients(model.total_loss, ...)`` and
``K.function``; Keras 3 has neither a symbolic total loss nor feed inputs.
What a Keras 3 user writes instead is a ``train_step``: inside the compiled
step, take the gradient of the loss with respect to the embedding matrix,
add ``delta = epsilon * g / ||g||`` to the matrix, run the ordinary step
(its gradients are taken at the perturbed embeddings), subtract ``delta``.
``adversarial_training(model, 'Embedding-Token', epsilon)`` installs that
step on a compiled model, so the call site stays the one-liner it was.

Data: FewCLUE iflytek, a few rows (as the original example).

    python3 tests/bert4keras_scripts/adversarial_training.py

``main()`` trains the same weights for one step on the same batch plainly,
with epsilon = 0 and with epsilon > 0, and returns the three results.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os
import types

import numpy as np
import tensorflow as tf
from keras.layers import Dense, Lambda
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras, search_layer
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
num_classes = 119
required_files = [os.path.join(data_dir, "clue", "iflytek", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def adversarial_training(model, embedding_name, epsilon=1):
    """Makes every training step of the compiled ``model`` an FGM step on ``embedding_name``'s matrix."""
    embedding_layer = None
    for output in model.outputs:
        embedding_layer = search_layer(output, embedding_name)
        if embedding_layer is not None:
            break
    if embedding_layer is None:
        raise ValueError(f"adversarial_training: the model has no layer named {embedding_name!r}")
    embeddings = embedding_layer.embeddings
    ordinary_step = type(model).train_step

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        gradient = tf.convert_to_tensor(tape.gradient(loss, embeddings))  # dense, not IndexedSlices
        delta = epsilon * gradient / (tf.norm(gradient) + 1e-8)
        embeddings.assign_add(delta)
        logs = ordinary_step(self, data)
        embeddings.assign_sub(delta)
        return logs

    model.train_step = types.MethodType(train_step, model)
    model.make_train_function(force=True)


def one_batch(rows):
    samples = json_rows(required_files[0], rows)
    token_ids = sequence_padding([tokenizer.encode(s["sentence"], maxlen=maxlen)[0] for s in samples])
    return [token_ids, np.zeros_like(token_ids)], np.array([[int(s["label"])] for s in samples])


def main(rows=8, epsilon=0.5, learning_rate=1e-5, **model_options):
    if not os.path.exists(required_files[0]):
        raise FileNotFoundError(f"{required_files[0]} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    x, y = one_batch(rows)
    bert = build_transformer_model(
        config_path,
        checkpoint_path,
        model="gau_alpha",
        dropout_rate=0,
        attention_dropout_rate=0,
        return_keras_model=False,
        **model_options,
    )
    output = Lambda(lambda h: h[:, 0])(bert.model.output)
    output = Dense(num_classes, activation="softmax", kernel_initializer=bert.initializer)(output)
    model = keras.models.Model(bert.model.input, output)
    start = model.get_weights()
    embeddings = search_layer(model.output, "Embedding-Token").embeddings

    results = {}
    for run, strength in (("plain", None), ("epsilon_0", 0.0), ("adversarial", epsilon)):
        model.set_weights(start)
        model.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(learning_rate))
        if strength is not None:
            adversarial_training(model, "Embedding-Token", strength)
        logs = model.fit(x, y, batch_size=rows, epochs=1, shuffle=False, verbose=0).history
        results[run] = {"weights": model.get_weights(), "embeddings": K.eval(embeddings).copy(), "loss": logs["loss"]}
    results["start_embeddings"] = start[[w.path for w in model.weights].index(embeddings.path)]
    results["learning_rate"] = learning_rate
    return results


if __name__ == "__main__":
    result = main()
    for run in ("epsilon_0", "adversarial"):
        diff = max(float(np.abs(a - b).max()) for a, b in zip(result["plain"]["weights"], result[run]["weights"]))
        print(run, "loss", result[run]["loss"], "max |weights - plain|", diff)
