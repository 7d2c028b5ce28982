"""Masked-LM training the way GAU-alpha's own pretraining script does it: the
logits of ``with_mlm='linear'``, a ``Loss`` layer that takes the labels as a
model input and reports its accuracy with ``add_metric``, the model compiled
with no loss, and LAMB assembled from bert4keras's optimizer factories
(weight decay, then layer adaptation, then a piecewise-linear schedule).

    python3 tests/bert4keras_scripts/mlm_lamb.py

``main()`` returns the evaluated loss before/after training, the history (its
``mlm_acc`` comes from ``add_metric``) and the optimizer's class name and steps.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

import numpy as np
from prologue import checkpoint_path, config_path, data_dir, dict_path

from gau_keras.backend import K, keras
from gau_keras.layers import Loss
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import (
    Adam,
    extend_with_layer_adaptation,
    extend_with_piecewise_linear_lr,
    extend_with_weight_decay,
)
from gau_keras.snippets import DataGenerator, sequence_padding, text_segmentate
from gau_keras.tokenizers import Tokenizer

maxlen = 48
batch_size = 8
mask_rate = 0.15
required_files = [os.path.join(data_dir, "corpus", "zh_corpus.txt")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def corpus_texts(path, limit):
    """The first ``limit`` pieces of the corpus, each at most maxlen - 2 characters."""
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            texts.extend(text_segmentate(line.strip(), maxlen - 2, seps="。！？", strips="\n"))
            if len(texts) >= limit:
                return texts[:limit]
    return texts


def mask_tokens(token_ids, rng):
    """(masked input, labels): ~15% of the text tokens become [MASK]; labels are 0 elsewhere."""
    source, labels = list(token_ids), [0] * len(token_ids)
    for i in range(1, len(token_ids) - 1):
        if rng.random() < mask_rate:
            source[i], labels[i] = tokenizer._token_mask_id, token_ids[i]
    return source, labels


class MaskedBatches(DataGenerator):
    """[masked ids, segment ids, labels] with no y: the Loss layer reads the labels as an input."""

    def __iter__(self, random=False):
        rng = np.random.default_rng(0 if not random else None)
        columns = [], [], []
        for is_end, text in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            source, labels = mask_tokens(token_ids, rng)
            for column, value in zip(columns, (source, segment_ids, labels)):
                column.append(value)
            if is_end or len(columns[0]) == self.batch_size:
                yield [sequence_padding(column) for column in columns], None
                columns = [], [], []


class MaskedCrossEntropy(Loss):
    """Cross entropy of the logits at the masked positions; their accuracy as the metric ``mlm_acc``."""

    def compute_loss(self, inputs, mask=None):
        labels, logits = inputs
        weights = K.cast(K.not_equal(labels, 0), K.floatx())
        count = K.sum(weights) + K.epsilon()
        loss = K.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        hits = keras.metrics.sparse_categorical_accuracy(labels, logits)
        self.add_metric(K.sum(hits * weights) / count, name="mlm_acc")
        return K.sum(loss * weights) / count


def make_optimizer(learning_rate=2e-3):
    AdamW = extend_with_weight_decay(Adam, name="AdamW")
    LAMB = extend_with_layer_adaptation(AdamW, name="LAMB")
    LAMBLR = extend_with_piecewise_linear_lr(LAMB, name="LAMBLR")
    return LAMBLR(
        learning_rate=learning_rate,
        bias_correction=False,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=["Norm", "bias"],
        lr_schedule={2: 1, 20: 0.5},
    )


def main(rows=32, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = MaskedBatches(corpus_texts(required_files[0], rows), batch_size)
    bert = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", with_mlm="linear", return_keras_model=False, **model_options
    )
    labels = keras.layers.Input(shape=(None,), name="Input-Label")
    output = MaskedCrossEntropy(1)([labels, bert.model.output])
    trainer = keras.models.Model(bert.model.inputs + [labels], output)
    optimizer = make_optimizer()
    trainer.compile(optimizer=optimizer)

    def evaluate():  # the same masked batches every time (random=False seeds the masking)
        return trainer.evaluate(train.forfit(random=False), steps=len(train), verbose=0, return_dict=True)

    before = evaluate()
    history = trainer.fit(train.forfit(random=False), steps_per_epoch=len(train), epochs=epochs, verbose=0)
    after = evaluate()
    return {
        "loss_before": before["loss"],
        "loss_after": after["loss"],
        "evaluated": [before, after],
        "history": history.history,
        "optimizer_class": type(optimizer).__name__,
        "iterations": int(K.eval(optimizer.iterations)),
        "steps": len(train),
    }


if __name__ == "__main__":
    result = main()
    print(result["loss_before"], "->", result["loss_after"], result["history"])
