"""Sentence-pair matching (FewCLUE bustm) that reads layers' outputs by call, as bert4keras examples do:
one encoder applied to both sentences, one pooling layer shared by the two, the pooled vectors taken back
with ``layer.get_output_at(0)`` / ``get_output_at(1)``, and the encoder's last hidden states taken with
``bert.model.layers[-2].get_output_at(-1)`` (as task_relation_extraction.py takes them).

    python3 tests/bert4keras_scripts/shared_layer_outputs.py

``main()`` returns the training history, the shapes ``get_*_shape_at`` report and the probabilities.
``model_options`` go to ``build_transformer_model`` (the test keeps the first layer only).
"""

import os

from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import Dense, GlobalMaxPooling1D, Input, Lambda
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 32
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "bustm", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_pairs(path, limit):
    return [(row["sentence1"], row["sentence2"], int(row["label"])) for row in json_rows(path, limit)]


class PairBatches(DataGenerator):
    """([tokens A, segments A, tokens B, segments B], [[label]]): each sentence encoded on its own."""

    def __iter__(self, random=False):
        columns = [[], [], [], []]
        labels = []
        for is_end, (first, second, label) in self.sample(random):
            for i, text in enumerate((first, second)):
                token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
                columns[2 * i].append(token_ids)
                columns[2 * i + 1].append(segment_ids)
            labels.append([label])
            if is_end or len(labels) == self.batch_size:
                yield [sequence_padding(c) for c in columns], sequence_padding(labels)
                columns, labels = [[], [], [], []], []


def main(rows=16, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = PairBatches(load_pairs(required_files[0], rows), batch_size)
    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", return_keras_model=False, **model_options
    )
    encoder = bert.model

    # the encoder's second-to-last layer's last call (task_relation_extraction.py builds on it)
    hidden = encoder.layers[-2].get_output_at(-1)

    inputs = [Input(shape=(None,)) for _ in range(4)]  # tokens A, segments A, tokens B, segments B
    pool = GlobalMaxPooling1D(name="Shared-Pool")  # one layer, called on both sentences
    pool(encoder(inputs[:2]))
    pool(encoder(inputs[2:]))
    u, v = pool.get_output_at(0), pool.get_output_at(1)
    features = keras.layers.Concatenate()([u, v, Lambda(lambda x: K.abs(x[0] - x[1]))([u, v])])
    probas = Dense(2, activation="softmax")(features)
    model = keras.models.Model(inputs, probas)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(1e-3))
    history = model.fit_generator(train.forfit(), steps_per_epoch=len(train), epochs=1, verbose=0)
    x, _ = next(iter(train))
    return {
        "history": history.history,
        "probas": model.predict(x, verbose=0),
        "pool_input_shapes": [pool.get_input_shape_at(0), pool.get_input_shape_at(1)],
        "pool_output_shapes": [pool.get_output_shape_at(0), pool.get_output_shape_at(1)],
        "pool_calls": len(pool._inbound_nodes),
        "hidden_layer": encoder.layers[-2].name,
        "hidden_is_output": hidden is encoder.layers[-2].output,
        "first_input_is_a": pool.get_input_at(0) is not pool.get_input_at(1),
    }


if __name__ == "__main__":
    print(main())
