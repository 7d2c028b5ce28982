"""Text continuation with a CPM-style GPT-2 (``model='gpt2'``) and a SentencePiece vocabulary,
as bert4keras's CPM-LM example runs it: the prompt's ids followed by the ids generated so far go
through the whole model each step (``last_token``), sampled with top-k / top-p or searched with
a beam.

    CPM_DIR=/path/to/folder python3 tests/bert4keras_scripts/gpt2_cpm_generation.py [PROMPT]

The folder holds ``config.json``, ``model.ckpt.*`` and ``chinese_vocab.model`` (a released
CPM-LM conversion's layout); tests/bert4keras/test_scripts_generation.py writes a tiny one with
the original bert4keras. ``main(cached=True)`` runs the same decoding over a key/value cache
(``gau_keras.generation.CachedLM``) instead of recomputing the prefix each step.
"""

import os
import sys

import numpy as np

from gau_keras.generation import CachedLM
from gau_keras.models import build_transformer_model
from gau_keras.snippets import AutoRegressiveDecoder
from gau_keras.tokenizers import SpTokenizer

model_dir = os.environ.get("CPM_DIR", "cpm_lm")
config_path = os.path.join(model_dir, "config.json")
checkpoint_path = os.path.join(model_dir, "model.ckpt")
spm_path = os.path.join(model_dir, "chinese_vocab.model")
required_files = [config_path, spm_path]

prompt = "今天天气不错，我们"
maxlen = 10  # generated tokens at most
topk = 3  # beams

# the released model has no start / end pieces: the prompt is its pieces only
tokenizer = SpTokenizer(spm_path, token_start=None, token_end=None)
end_id = tokenizer.token_to_id("。")  # a full stop ends the continuation (CPM-LM's example: its newline piece)


class TextContinuation(AutoRegressiveDecoder):
    """Continues a prompt: no start id, the prompt's last piece is where the output begins."""

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

    def sample(self, text, n=2, topk=None, topp=None):
        token_ids, _ = tokenizer.encode(text)
        return [[int(i) for i in ids] for ids in self.random_sample([token_ids], n, topk=topk, topp=topp)]


def main(text=prompt, cached=False, seed=1, n=2):
    """Beam search, greedy decoding and ``n`` top-k / top-p samples each (numpy seeded with
    ``seed``) of one prompt: {'prompt_ids', 'beam', 'greedy', 'topk_samples', 'topp_samples', 'texts', 'writer'}."""
    model = build_transformer_model(config_path, checkpoint_path, model="gpt2")
    cache = CachedLM(model, max_length=len(tokenizer.encode(text)[0]) + maxlen) if cached else None
    writer = TextContinuation(model, start_id=None, end_id=end_id, maxlen=maxlen, cached=cache)
    np.random.seed(seed)
    result = {
        "prompt_ids": tokenizer.encode(text)[0],
        "beam": writer.beam(text),
        "greedy": writer.greedy(text),
        "topk_samples": writer.sample(text, n, topk=5),
        "topp_samples": writer.sample(text, n, topp=0.9),
        "writer": writer,  # to decode more with the model built
    }
    result["texts"] = [text + tokenizer.decode(result["beam"])] + [
        text + tokenizer.decode(ids) for ids in result["topp_samples"]
    ]
    return result


if __name__ == "__main__":
    for key, value in main(*sys.argv[1:2]).items():
        if key != "writer":
            print(key, value)
