"""Sentiment polarity (../shared/data/sentiment) on a BERT or ALBERT checkpoint the bert4keras
way: ``with_pool=True`` gives the pooled [CLS] vector (``Pooler-Dense``, tanh), a Dropout and
a softmax Dense go on top, and ``model.fit(generator.forfit())`` trains it.

    BERT_DIR=chinese_L-12_H-768_A-12 python3 tests/bert4keras_scripts/classification_bert.py

``BERT_DIR`` is a checkpoint folder laid out as Google's (bert_config.json, bert_model.ckpt,
vocab.txt); ``main(model='albert')`` builds an ALBERT from an ALBERT checkpoint there.
``learning_rate`` is 2e-5, as for fine-tuning a pretrained BERT (the test's tiny random model
takes 2e-3). ``main()`` returns the losses before and after training, the accuracy, the pooled vector's
shape, the pooler's kernel as loaded and the predicted probabilities, for tests/bert4keras/test_scripts_bert.py.
"""

import os

import numpy as np
from keras.layers import Dense, Dropout
from prologue import checkpoint_folder, data_dir

from gau_keras.backend import keras
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, open, sequence_padding
from gau_keras.tokenizers import Tokenizer

config_path, checkpoint_path, dict_path = checkpoint_folder("BERT_DIR")
maxlen = 64
batch_size = 8
num_classes = 2
required_files = [os.path.join(data_dir, "sentiment", "train.tsv")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_data(filename, limit):
    """The first ``limit`` lines of a ``text<TAB>label`` file as (text, int label)."""
    D = []
    with open(filename, encoding="utf-8") as f:
        for line in f:
            text, label = line.rstrip("\n").split("\t")
            D.append((text, int(label)))
            if len(D) == limit:
                break
    return D


class data_generator(DataGenerator):
    """([token ids, segment ids], labels [B, 1]) batches, padded to their longest row."""

    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids, batch_labels = [], [], []
        for is_end, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            batch_token_ids.append(token_ids)
            batch_segment_ids.append(segment_ids)
            batch_labels.append([label])
            if len(batch_token_ids) == self.batch_size or is_end:
                batch_token_ids = sequence_padding(batch_token_ids)
                batch_segment_ids = sequence_padding(batch_segment_ids)
                yield [batch_token_ids, batch_segment_ids], sequence_padding(batch_labels)
                batch_token_ids, batch_segment_ids, batch_labels = [], [], []


def evaluate(model, generator):
    """Inference-mode (loss, accuracy, probabilities) over one pass of ``generator``."""
    probas = model.predict(generator.fortest(), steps=len(generator), verbose=0)
    labels = np.concatenate([y[:, 0] for _, y in generator]).astype(int)
    loss = -np.log(probas[np.arange(len(labels)), labels] + 1e-12).mean()
    return float(loss), float((probas.argmax(axis=1) == labels).mean()), probas


def main(model="bert", rows=32, epochs=1, learning_rate=2e-5, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train_generator = data_generator(load_data(required_files[0], rows), batch_size)

    bert = build_transformer_model(
        config_path, checkpoint_path, model=model, with_pool=True, return_keras_model=False, **model_options
    )
    output = Dropout(rate=0.1)(bert.model.output)
    output = Dense(units=num_classes, activation="softmax", kernel_initializer=bert.initializer)(output)
    classifier = keras.models.Model(bert.model.input, output)
    classifier.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(learning_rate), metrics=["accuracy"])

    pooler_kernel = bert.model.get_layer("Pooler-Dense").get_weights()[0]  # as the checkpoint has it
    loss_before, _, _ = evaluate(classifier, train_generator)
    history = classifier.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=epochs, verbose=0)
    loss_after, accuracy, probas = evaluate(classifier, train_generator)
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "accuracy": accuracy,
        "probas": probas,
        "history": history.history,
        "steps": len(train_generator),
        "pooled_shape": tuple(bert.model.output.shape),
        "pooler_kernel": pooler_kernel,
    }


if __name__ == "__main__":
    result = main()
    print({k: v for k, v in result.items() if k not in ("probas", "pooler_kernel")})
