"""Keyword generation from paper abstracts (FewCLUE csl) as UniLM seq2seq the
bert4keras way: ``application='unilm'`` (segment 0 = source, segment 1 =
target), a ``Loss`` layer that scores only the target tokens by multiplying
with the segment-id input itself (``y_mask = inputs[1][:, 1:]``), and an
``AutoRegressiveDecoder`` whose ``predict`` feeds source + generated ids back.

    python3 tests/bert4keras_scripts/unilm_seq2seq.py

``main()`` returns the training history, the decoder's next-token
probabilities for one input and strings decoded by beam search and by sampling.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

import numpy as np
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import Loss
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import AutoRegressiveDecoder, DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer

maxlen = 64  # source + target tokens
target_maxlen = 12  # generated tokens at most
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "csl", "train.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def abstracts_and_keywords(path, limit):
    """(abstract, keywords joined by '，') of the first ``limit`` papers."""
    return [(paper["abst"], "，".join(paper["keyword"])) for paper in json_rows(path, limit)]


class Seq2SeqBatches(DataGenerator):
    """[token ids, segment ids] of '[CLS] abstract [SEP] keywords [SEP]', no targets (the Loss layer has them)."""

    def __iter__(self, random=False):
        tokens, segments = [], []
        for is_end, (source, target) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(source, target, maxlen=maxlen)
            tokens.append(token_ids)
            segments.append(segment_ids)
            if is_end or len(tokens) == self.batch_size:
                yield [sequence_padding(tokens), sequence_padding(segments)], None
                tokens, segments = [], []


class TargetCrossEntropy(Loss):
    """Next-token cross entropy counted only where the next token is a target (segment 1) token:
    the segment ids themselves are the weights, as bert4keras's seq2seq examples write it."""

    def compute_loss(self, inputs, mask=None):
        y_true, y_mask, y_pred = inputs
        y_true = y_true[:, 1:]  # the tokens to predict
        y_mask = y_mask[:, 1:]  # segment ids: 1 exactly on the target part
        y_pred = y_pred[:, :-1]  # the prediction for each next token
        loss = K.sparse_categorical_crossentropy(y_true, y_pred)
        return K.sum(loss * y_mask) / K.sum(y_mask)


class KeywordWriter(AutoRegressiveDecoder):
    """Continues '[CLS] abstract [SEP]' token by token until [SEP]."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = model

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids, segment_ids = inputs
        token_ids = np.concatenate([token_ids, output_ids], axis=1)
        segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], axis=1)
        return self.last_token(self.model).predict([token_ids, segment_ids], verbose=0)

    def source(self, text):
        return tokenizer.encode(text, maxlen=maxlen - target_maxlen)

    def generate(self, text, topk=2):
        return tokenizer.decode(self.beam_search(self.source(text), topk=topk))

    def sample(self, text, n=2, topk=5):
        return [tokenizer.decode(ids) for ids in self.random_sample(self.source(text), n, topk=topk)]


def main(rows=16, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    pairs = abstracts_and_keywords(required_files[0], rows)
    train = Seq2SeqBatches(pairs, batch_size)
    seq2seq = build_transformer_model(
        config_path, checkpoint_path, model="gau_alpha", application="unilm", **model_options
    )
    output = TargetCrossEntropy(2)(seq2seq.inputs + seq2seq.outputs)
    trainer = keras.models.Model(seq2seq.inputs, output)
    trainer.compile(optimizer=Adam(1e-3))
    history = trainer.fit(train.forfit(), steps_per_epoch=len(train), epochs=epochs, verbose=0)

    writer = KeywordWriter(seq2seq, start_id=None, end_id=tokenizer._token_end_id, maxlen=target_maxlen)
    token_ids, segment_ids = writer.source(pairs[0][0])
    first_step = writer.predict([np.array([token_ids]), np.array([segment_ids])], np.empty((1, 0), int), None)
    return {
        "history": history.history,
        "first_step_probas": first_step[0][0],
        "beam": [writer.generate(source) for source, _ in pairs[:2]],
        "samples": writer.sample(pairs[0][0]),
        "reference": pairs[0][1],
    }


if __name__ == "__main__":
    result = main()
    print(result["history"], result["beam"], result["samples"], result["reference"])
