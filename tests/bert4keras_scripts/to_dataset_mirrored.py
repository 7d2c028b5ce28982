"""A DataGenerator as a ``tf.data.Dataset`` under ``tf.distribute.MirroredStrategy``,
the bert4keras way: the generator yields single unpadded samples,
``to_dataset(types, shapes, names, padded_batch=True)`` pads each batch and
names the parts after the model's input and output layers, and the model
is built and compiled inside ``strategy.scope()``.

Data: FewCLUE tnews headlines (15 news categories; short, so batches pad).

    python3 tests/bert4keras_scripts/to_dataset_mirrored.py   # two logical CPUs

``main()`` uses every logical CPU there is (one unless they were split before
TensorFlow started) and returns the dataset's element spec, its first batch,
the number of replicas and the training history.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import json
import os

import tensorflow as tf
from keras.layers import Dense, Lambda
from prologue import checkpoint_path, config_path, data_dir, dict_path

from gau_keras.backend import keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator
from gau_keras.tokenizers import Tokenizer

maxlen = 40
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "tnews", "train.json")]
news_labels = [100, 101, 102, 103, 104, 106, 107, 108, 109, 110, 112, 113, 114, 115, 116]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def headlines(path, limit):
    """``limit`` (headline, class index) rows, every n-th of the file (it is sorted by label)."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    rows = map(json.loads, lines[:: len(lines) // limit][:limit])
    return [(row["sentence"], news_labels.index(int(row["label"]))) for row in rows]


class OneSampleAtATime(DataGenerator):
    """Yields ([token ids, segment ids], [[label]]) per sample; to_dataset batches and pads."""

    def __iter__(self, random=False):
        for _, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            yield [token_ids, segment_ids], [[label]]  # outputs: one part, Probas = [label]


def main(rows=32, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    generator = OneSampleAtATime(headlines(required_files[0], rows), batch_size)
    dataset = generator.to_dataset(
        types=[("float32", "float32"), ("float32",)],
        shapes=[([None], [None]), ([1],)],
        names=[("Input-Token", "Input-Segment"), ("Probas",)],
        padded_batch=True,
    )
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        bert = build_transformer_model(
            config_path, checkpoint_path=None, model="gau_alpha", return_keras_model=False, **model_options
        )
        cls_vector = Lambda(lambda x: x[:, 0])(bert.model.output)
        output = Dense(len(news_labels), activation="softmax", kernel_initializer=bert.initializer, name="Probas")(
            cls_vector
        )
        model = keras.models.Model(bert.model.input, output)
        model.compile(
            loss="sparse_categorical_crossentropy", optimizer=Adam(1e-3), metrics=["sparse_categorical_accuracy"]
        )
        bert.load_weights_from_checkpoint(checkpoint_path)
    first_batch = next(iter(dataset))
    history = model.fit(dataset, steps_per_epoch=len(generator), epochs=epochs, verbose=0)
    return {
        "element_spec": dataset.element_spec,
        "first_batch": first_batch,
        "history": history.history,
        "replicas": strategy.num_replicas_in_sync,
        "devices": devices,
        "steps": len(generator),
    }


if __name__ == "__main__":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    result = main()
    print(result["replicas"], "replicas", result["history"], result["element_spec"])
