"""Sentence-pair matching (FewCLUE bustm, the afqmc format) the bert4keras way:
both sentences in one input (``tokenizer.encode(a, b)``: segment 0 then 1),
the pooled [CLS] vector of ``with_pool=True``, Dropout and a softmax Dense.

    python3 tests/bert4keras_scripts/pair_similarity.py

``main()`` returns the training history, the predicted probabilities of the
dev pairs and their segment ids, for tests/bert4keras/test_scripts.py.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

from keras.layers import Dense, Dropout
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, sequence_padding, to_array
from gau_keras.tokenizers import Tokenizer

maxlen = 64
batch_size = 8
task_dir = os.path.join(data_dir, "clue", "bustm")
required_files = [os.path.join(task_dir, "train.json"), os.path.join(task_dir, "dev.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def read_pairs(path, limit):
    """(sentence1, sentence2, 0/1) of the first ``limit`` lines."""
    items = json_rows(path, limit)
    return [(item["sentence1"], item["sentence2"], int(item["label"])) for item in items]


class PairBatches(DataGenerator):
    """A batch is ([token ids, segment ids], [[label], ...]); the pair shares one row."""

    def __iter__(self, random=False):
        batch = []
        for is_end, (first, second, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(first, second, maxlen=maxlen)
            batch.append((token_ids, segment_ids, [label]))
            if is_end or len(batch) == self.batch_size:
                token_ids, segment_ids, labels = zip(*batch)
                yield [sequence_padding(token_ids), sequence_padding(segment_ids)], sequence_padding(labels)
                batch = []


def main(rows=32, dev_rows=8, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = PairBatches(read_pairs(required_files[0], rows), batch_size)
    dev_pairs = read_pairs(required_files[1], dev_rows)

    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", with_pool=True, return_keras_model=False, **model_options
    )
    hidden = Dropout(rate=0.1)(bert.model.output)
    output = Dense(2, activation="softmax", kernel_initializer=bert.initializer)(hidden)
    model = keras.models.Model(bert.model.input, output)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(1e-3), metrics=["accuracy"])
    history = model.fit(train.forfit(), steps_per_epoch=len(train), epochs=epochs, verbose=0)

    encoded = [tokenizer.encode(a, b, maxlen=maxlen) for a, b, _ in dev_pairs]
    token_ids, segment_ids = to_array(*(sequence_padding(column) for column in zip(*encoded)))
    probas = model.predict([token_ids, segment_ids], verbose=0)
    return {
        "history": history.history,
        "probas": probas,
        "segment_ids": segment_ids,
        "labels": [label for _, _, label in dev_pairs],
        "pooled_shape": tuple(bert.model.output.shape),
    }


if __name__ == "__main__":
    result = main()
    print(result["history"], result["probas"].argmax(1), result["labels"])
