"""Keywords of a paper abstract (FewCLUE csl) written by an ALBERT as UniLM, the bert4keras
way: the vocab simplified with ``load_vocab(..., simplified=True)`` and the checkpoint's
embeddings cut to it with ``keep_tokens``; ``application='unilm'`` (segment 0 = abstract,
segment 1 = keywords; its MLM head predicts the next token); a ``Loss`` layer counting only
the keyword tokens; and an ``AutoRegressiveDecoder`` whose ``predict`` (``wraps(default_rtype=
'probas')``) feeds the abstract and the ids so far back in, decoded by beam search.

    ALBERT_DIR=albert_small_zh_google python3 tests/bert4keras_scripts/unilm_seq2seq_albert.py

``ALBERT_DIR`` is a checkpoint folder laid out as Google's (bert_config.json, bert_model.ckpt,
vocab.txt). ``main()`` returns the training history, the next-token probabilities of one
abstract, for a few abstracts the beam-searched ids and their text, and the decoder.
"""

import os

import numpy as np
from prologue import checkpoint_folder, data_dir, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import Loss
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import AutoRegressiveDecoder, DataGenerator, sequence_padding
from gau_keras.tokenizers import Tokenizer, load_vocab

config_path, checkpoint_path, dict_path = checkpoint_folder("ALBERT_DIR")
maxlen = 96  # abstract + keywords
max_keywords_len = 10  # generated tokens at most
batch_size = 8
required_files = [os.path.join(data_dir, "clue", "csl", "train.json")]

# the vocab without the tokens this tokenizer never produces; keep_tokens maps it into the checkpoint's
token_dict, keep_tokens = load_vocab(dict_path, simplified=True, startswith=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
tokenizer = Tokenizer(token_dict, do_lower_case=True)


def load_data(filename, limit):
    """(abstract, keywords joined by '；') of the first ``limit`` papers."""
    return [(paper["abst"], "；".join(paper["keyword"])) for paper in json_rows(filename, limit)]


class data_generator(DataGenerator):
    """[token ids, segment ids] of '[CLS] abstract [SEP] keywords [SEP]'; no y (the Loss layer has it)."""

    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids = [], []
        for is_end, (abstract, keywords) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(abstract, keywords, maxlen=maxlen)
            batch_token_ids.append(token_ids)
            batch_segment_ids.append(segment_ids)
            if len(batch_token_ids) == self.batch_size or is_end:
                yield [sequence_padding(batch_token_ids), sequence_padding(batch_segment_ids)], None
                batch_token_ids, batch_segment_ids = [], []


class KeywordLoss(Loss):
    """Cross entropy of each next token, counted where that token is a keyword one (segment 1)."""

    def compute_loss(self, inputs, mask=None):
        token_ids, segment_ids, probas = inputs
        y_true = token_ids[:, 1:]
        y_mask = segment_ids[:, 1:]
        y_pred = probas[:, :-1]
        loss = K.sparse_categorical_crossentropy(y_true, y_pred)
        return K.sum(loss * y_mask) / K.sum(y_mask)


class KeywordGenerator(AutoRegressiveDecoder):
    """'[CLS] abstract [SEP]' continued, one token at a time, up to [SEP]."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = model

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids, segment_ids = inputs
        token_ids = np.concatenate([token_ids, output_ids], 1)
        segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], 1)
        return self.last_token(self.model).predict([token_ids, segment_ids])

    def encode(self, abstract):
        return tokenizer.encode(abstract, maxlen=maxlen - max_keywords_len)

    def generate(self, abstract, topk=3):
        """(the beam-searched ids, their text)."""
        output_ids = self.beam_search(self.encode(abstract), topk=topk)
        return output_ids, tokenizer.decode(output_ids)


def main(rows=16, epochs=1, learning_rate=1e-3, decoded=2, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    papers = load_data(required_files[0], rows)
    train_generator = data_generator(papers, batch_size)

    model = build_transformer_model(
        config_path, checkpoint_path, model="albert", application="unilm", keep_tokens=keep_tokens, **model_options
    )
    output = KeywordLoss(2)(model.inputs + model.outputs)
    trainer = keras.models.Model(model.inputs, output)
    trainer.compile(optimizer=Adam(learning_rate))
    history = trainer.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=epochs, verbose=0)

    generator = KeywordGenerator(model, start_id=None, end_id=tokenizer._token_end_id, maxlen=max_keywords_len)
    token_ids, segment_ids = generator.encode(papers[0][0])
    first_probas, _ = generator.predict([np.array([token_ids]), np.array([segment_ids])], np.zeros((1, 0), int), None)
    beams = [generator.generate(abstract) for abstract, _ in papers[:decoded]]
    return {
        "history": history.history,
        "first_probas": first_probas[0],
        "beams": beams,
        "vocab_size": len(keep_tokens),
        "output_shape": tuple(model.output.shape),
        "references": [keywords for _, keywords in papers[:decoded]],
        "generator": generator,
    }


if __name__ == "__main__":
    result = main()
    print(result["history"])
    for (_, text), reference in zip(result["beams"], result["references"]):
        print(text, "|", reference)
