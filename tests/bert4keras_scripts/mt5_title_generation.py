"""Title generation with mT5 (``model='mt5.1.1'``), as bert4keras's CSL title example decodes
it: the encoder runs once on the abstract, then each step the decoder reads the encoder's output
and the title ids so far (start id 0, end ``</s>``), searched with a beam.

    MT5_DIR=/path/to/folder python3 tests/bert4keras_scripts/mt5_title_generation.py [ABSTRACT]

The folder holds ``config.json``, ``model.ckpt.*`` and ``sentencepiece.model`` (an mT5
conversion's layout); tests/bert4keras/test_scripts_generation.py writes a tiny one with the
original bert4keras. (The example also fine-tunes the model first; this is its decoding.)
"""

import os
import sys

import numpy as np

from gau_keras.models import build_transformer_model
from gau_keras.snippets import AutoRegressiveDecoder
from gau_keras.tokenizers import SpTokenizer

model_dir = os.environ.get("MT5_DIR", "mt5")
config_path = os.path.join(model_dir, "config.json")
checkpoint_path = os.path.join(model_dir, "model.ckpt")
spm_path = os.path.join(model_dir, "sentencepiece.model")
required_files = [config_path, spm_path]

abstract = "本文提出一种基于注意力机制的中文文本摘要方法，在多个公开数据集上取得了较好的效果。"
max_c_len = 48  # abstract tokens
max_t_len = 10  # title tokens

tokenizer = SpTokenizer(spm_path, token_start=None, token_end="</s>")


class AutoTitle(AutoRegressiveDecoder):
    """Decodes a title from the encoded abstract (``inputs[0]``)."""

    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.decoder = encoder, decoder

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        c_encoded = inputs[0]
        return self.last_token(self.decoder).predict([c_encoded, output_ids], verbose=0)

    def encode(self, text):
        c_token_ids, _ = tokenizer.encode(text, maxlen=max_c_len)
        return self.encoder.predict(np.array([c_token_ids]), verbose=0)[0]

    def generate(self, text, topk=1):
        output_ids = self.beam_search([self.encode(text)], topk=topk)
        return [int(i) for i in output_ids]

    def greedy(self, text):
        return [int(i) for i in self.random_sample([self.encode(text)], 1, topk=1)[0]]


def main(text=abstract, topk=3):
    """Beam search (``topk`` beams) and greedy titles of one abstract:
    {'abstract_ids', 'beam', 'greedy', 'title', 'autotitle'}."""
    t5 = build_transformer_model(config_path, checkpoint_path, model="mt5.1.1", return_keras_model=False)
    autotitle = AutoTitle(t5.encoder, t5.decoder, start_id=0, end_id=tokenizer._token_end_id, maxlen=max_t_len)
    beam = autotitle.generate(text, topk=topk)
    return {
        "abstract_ids": tokenizer.encode(text, maxlen=max_c_len)[0],
        "beam": beam,
        "greedy": autotitle.greedy(text),
        "title": tokenizer.decode(beam),
        "autotitle": autotitle,  # to decode more with the model built
    }


if __name__ == "__main__":
    for key, value in main(*sys.argv[1:2]).items():
        if key != "autotitle":
            print(key, value)
