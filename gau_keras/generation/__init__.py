"""Generation with a key/value cache: the models' cached passes (``Transformer.cached_logits``)
run in one compiled loop (``jit_compile`` on TensorFlow, ``jax.jit`` on JAX), beam search and
sampling on the device.

    lm = CachedLM(model, max_length=256)     # a model built with application='lm' or 'unilm'
    ids = lm.beam_search([token_ids], topk=4, maxlen=64, end_id=tokenizer._token_end_id)

Design notes: docs/generation.md.
"""

from gau_keras.generation.cached import CachedLM
from gau_keras.generation.sampling import choose

__all__ = ["CachedLM", "choose"]
