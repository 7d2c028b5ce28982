"""BERT's masked language model the bert4keras way: ``with_mlm=True`` gives the MLM head's
probabilities over the vocab at every position; the checkpoint's head fills in the [MASK]ed
characters of a sentence, then one ``train_on_batch`` step on corpus text (15% of the tokens
masked, the loss counted on those only) lowers the loss on that batch.

    BERT_DIR=chinese_L-12_H-768_A-12 python3 tests/bert4keras_scripts/mlm_bert.py

``BERT_DIR`` is a checkpoint folder laid out as Google's (bert_config.json, bert_model.ckpt,
vocab.txt). ``main()`` returns the masked sentence's ids, the probabilities at its masked
positions and the characters predicted there (before training), the batch and the loss and
masked-token accuracy on it before and after the step, and the model.
"""

import os

import numpy as np
from prologue import checkpoint_folder, data_dir

from gau_keras.backend import K
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import open, sequence_padding, text_segmentate, to_array
from gau_keras.tokenizers import Tokenizer

config_path, checkpoint_path, dict_path = checkpoint_folder("BERT_DIR")
maxlen = 64
batch_size = 8
mask_rate = 0.15
required_files = [os.path.join(data_dir, "corpus", "zh_corpus.txt")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def fill_mask(model, text, positions):
    """(token ids with [MASK] at ``positions``, probas there [len(positions), V], the predicted text)."""
    token_ids, segment_ids = tokenizer.encode(text)
    for i in positions:
        token_ids[i] = tokenizer._token_mask_id
    probas = model.predict(to_array([token_ids], [segment_ids]), verbose=0)[0, list(positions)]
    return token_ids, probas, tokenizer.decode(probas.argmax(axis=1))


def load_texts(filename, limit):
    """The first ``limit`` pieces of the corpus, each at most maxlen - 2 characters."""
    texts = []
    with open(filename, encoding="utf-8") as f:
        for line in f:
            texts.extend(text_segmentate(line.strip(), maxlen - 2, seps="。！？；", strips="\n"))
            if len(texts) >= limit:
                break
    return texts[:limit]


def random_masking(token_ids, rng):
    """(source, target): about mask_rate of the characters become [MASK] in ``source``, and
    ``target`` holds their original ids there and 0 (not counted) elsewhere."""
    source, target = [], []
    for i, t in enumerate(token_ids):
        if 0 < i < len(token_ids) - 1 and rng.random() < mask_rate:
            source.append(tokenizer._token_mask_id)
            target.append(t)
        else:
            source.append(t)
            target.append(0)
    return source, target


def masked_batch(texts, seed=0):
    """([masked token ids, segment ids], targets) of ``texts``, the same masks for the same seed."""
    rng = np.random.default_rng(seed)
    batch_token_ids, batch_segment_ids, batch_targets = [], [], []
    for text in texts:
        token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
        source, target = random_masking(token_ids, rng)
        batch_token_ids.append(source)
        batch_segment_ids.append(segment_ids)
        batch_targets.append(target)
    return [sequence_padding(batch_token_ids), sequence_padding(batch_segment_ids)], sequence_padding(batch_targets)


def mlm_loss(y_true, y_pred):
    """Cross entropy of the MLM probabilities at the masked positions (target id > 0)."""
    y_mask = K.cast(K.not_equal(y_true, 0), K.floatx())
    loss = K.sparse_categorical_crossentropy(y_true, y_pred)
    return K.sum(loss * y_mask) / (K.sum(y_mask) + K.epsilon())


def mlm_acc(y_true, y_pred):
    """Accuracy of the most probable token at the masked positions."""
    y_mask = K.cast(K.not_equal(y_true, 0), K.floatx())
    hits = K.cast(K.equal(K.cast(y_true, "int32"), K.cast(K.argmax(y_pred, axis=-1), "int32")), K.floatx())
    return K.sum(hits * y_mask) / (K.sum(y_mask) + K.epsilon())


def masked_accuracy(model, x, y):
    """``mlm_acc`` of the model's predictions on one batch, in numpy."""
    predicted = model.predict(x, verbose=0).argmax(axis=-1)
    return float((predicted == y)[y > 0].mean())


def main(text="我们在北京大学学习中文", masked=(4, 5), learning_rate=1e-3, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    model = build_transformer_model(config_path, checkpoint_path, with_mlm=True, **model_options)
    token_ids, probas, predicted = fill_mask(model, text, masked)

    # (mlm_acc as a compiled metric fails on Keras 3, which broadcasts the output's mask to
    # the metric's scalar value; Keras 2 took it: tests/bert4keras/test_scripts_bert.py)
    model.compile(loss=mlm_loss, optimizer=Adam(learning_rate))
    x, y = masked_batch(load_texts(required_files[0], batch_size))
    loss_before, acc_before = model.evaluate(x, y, verbose=0), masked_accuracy(model, x, y)
    trained = model.train_on_batch(x, y)
    loss_after, acc_after = model.evaluate(x, y, verbose=0), masked_accuracy(model, x, y)
    return {
        "token_ids": token_ids,
        "probas": probas,
        "predicted": predicted,
        "loss_before": loss_before,
        "loss_after": loss_after,
        "trained": trained,
        "accuracy": (acc_before, acc_after),
        "x": x,
        "y": y,
        "model": model,
        "output_shape": tuple(model.output.shape),
    }


if __name__ == "__main__":
    result = main()
    print("filled in:", result["predicted"], "loss:", result["loss_before"], "->", result["loss_after"])
