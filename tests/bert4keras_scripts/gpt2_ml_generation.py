"""Article continuation with a GPT2_ML model (``model='gpt2_ml'``) and a WordPiece vocabulary, as
bert4keras's GPT2_ML example runs it: the prompt's ids followed by the ids generated so far go
through the whole model each step, sampled with top-p or searched with a beam.

    GPT2_ML_DIR=/path/to/folder python3 tests/bert4keras_scripts/gpt2_ml_generation.py [PROMPT]

The folder holds ``config.json``, ``model.ckpt.*`` and ``vocab.txt`` (a released GPT2_ML
conversion's layout); tests/bert4keras/test_scripts_generation.py writes a tiny one with the
original bert4keras. ``main(cached=True)`` decodes over a key/value cache
(``gau_keras.generation.CachedLM``).
"""

import os
import sys

import numpy as np

from gau_keras.generation import CachedLM
from gau_keras.models import build_transformer_model
from gau_keras.snippets import AutoRegressiveDecoder
from gau_keras.tokenizers import Tokenizer

model_dir = os.environ.get("GPT2_ML_DIR", "gpt2_ml")
config_path = os.path.join(model_dir, "config.json")
checkpoint_path = os.path.join(model_dir, "model.ckpt")
dict_path = os.path.join(model_dir, "vocab.txt")
required_files = [config_path, dict_path]

prompt = "科学空间"
maxlen = 12  # generated tokens at most
minlen = 2  # no end before this many tokens
topk = 3  # beams

tokenizer = Tokenizer(dict_path, token_start=None, token_end=None, do_lower_case=True)
end_id = tokenizer.token_to_id("。")  # the Chinese full stop ends an article's continuation


class ArticleContinuation(AutoRegressiveDecoder):
    """Continues a prompt: no start id, the output follows the prompt's last token."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = model

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids = np.concatenate([inputs[0], output_ids], axis=1)
        return self.last_token(self.model).predict(token_ids, verbose=0)

    def beam(self, text, topk=topk):
        token_ids, _ = tokenizer.encode(text)
        return [int(i) for i in self.beam_search([token_ids], topk=topk)]

    def greedy(self, text):
        token_ids, _ = tokenizer.encode(text)
        return [int(i) for i in self.random_sample([token_ids], 1, topk=1)[0]]

    def generate(self, text, n=2, topp=0.95):
        token_ids, _ = tokenizer.encode(text)
        return [[int(i) for i in ids] for ids in self.random_sample([token_ids], n, topp=topp)]


def main(text=prompt, cached=False, seed=1, n=2):
    """Beam search, greedy decoding and ``n`` top-p samples (numpy seeded with ``seed``) of one prompt:
    {'prompt_ids', 'beam', 'greedy', 'samples', 'texts', 'writer'}; ``n=0``: beam search only
    (no 'greedy', no samples)."""
    model = build_transformer_model(config_path, checkpoint_path, model="gpt2_ml")
    cache = CachedLM(model, max_length=len(tokenizer.encode(text)[0]) + maxlen) if cached else None
    writer = ArticleContinuation(model, start_id=None, end_id=end_id, maxlen=maxlen, minlen=minlen, cached=cache)
    np.random.seed(seed)
    result = {
        "prompt_ids": tokenizer.encode(text)[0],
        "beam": writer.beam(text),
        "samples": writer.generate(text, n) if n else [],
        "writer": writer,  # to decode more with the model built
    }
    if n:
        result["greedy"] = writer.greedy(text)
    result["texts"] = [text + tokenizer.decode(ids) for ids in [result["beam"]] + result["samples"]]
    return result


if __name__ == "__main__":
    for key, value in main(*sys.argv[1:2]).items():
        if key != "writer":
            print(key, value)
