"""gau_keras.snippets.ViterbiDecoder and AutoRegressiveDecoder: behaviour on
numpy "models", and seq2seq decoding with real models (the bundled GAU-α
under application='unilm' and 'lm', a tiny random RoFormerV2) in the manner
of bert4keras's task_seq2seq_autotitle.py. Numbers against bert4keras:
tests/test_snippets_parity.py."""
import itertools

import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.pretrained import BUNDLED_DIR, model_files
from gau_keras.snippets import AutoRegressiveDecoder, ViterbiDecoder
from tests.model_utils import TINY_ROFORMER


def _brute_viterbi(nodes, trans, starts, ends):
    best, best_path = -np.inf, None
    for path in itertools.product(range(len(trans)), repeat=len(nodes)):
        if path[0] not in starts or path[-1] not in ends:
            continue
        score = sum(nodes[t, label] for t, label in enumerate(path))
        score += sum(trans[a, b] for a, b in zip(path, path[1:]))
        if score > best:
            best, best_path = score, path
    return list(best_path)


@pytest.mark.parametrize("starts,ends", [(None, None), ([1, 2], None), ([0], [2])])
def test_viterbi_finds_the_best_path(rng, starts, ends):
    trans, nodes = rng.normal(size=(3, 3)), rng.normal(size=(5, 3))
    kept = nodes.copy()
    path = ViterbiDecoder(trans, starts, ends).decode(nodes)
    assert path.tolist() == _brute_viterbi(nodes, trans, starts or range(3), ends or range(3))
    assert np.array_equal(nodes, kept)                 # the caller's scores are left alone


def _fixed(probas, rtype="probas"):
    """A decoder whose next-token distribution never changes."""
    probas = np.asarray(probas, dtype=float)

    class Fixed(AutoRegressiveDecoder):
        @AutoRegressiveDecoder.wraps(default_rtype=rtype)
        def predict(self, inputs, output_ids, states):
            scores = np.log(probas + 1e-30) if rtype == "logits" else probas
            return np.repeat(scores[None], len(output_ids), axis=0)

    return Fixed


def test_end_id_minlen_maxlen_and_start_id():
    ends_soon = _fixed([0.05, 0.05, 0.1, 0.8])                 # id 3 is the likeliest
    assert ends_soon(None, 3, maxlen=10).beam_search([[1]], topk=2).tolist() == [3]
    assert ends_soon(7, 3, maxlen=10).beam_search([[1]], topk=2).tolist() == [7, 3]
    long_enough = ends_soon(None, 3, maxlen=10, minlen=4).beam_search([[1]], topk=2)
    assert len(long_enough) == 4 and long_enough[-1] == 3
    twice = ends_soon(None, 3, maxlen=10).beam_search([[1]], topk=3, min_ends=2)
    assert (twice == 3).sum() == 2 and twice[-1] == 3
    never_ends = _fixed([0.1, 0.6, 0.3, 0.0], "logits")
    assert never_ends(None, 3, maxlen=6).beam_search([[1]], topk=2).tolist() == [1] * 6
    samples = never_ends(None, 3, maxlen=6).random_sample([[1]], 4)
    assert len(samples) == 4 and all(len(s) == 6 and 3 not in s for s in samples)


def test_random_sample_topk_topp_and_temperature():
    probas = [0.02, 0.5, 0.03, 0.3, 0.1, 0.05]
    decoder = _fixed(probas)(None, end_id=-1, maxlen=30)
    np.random.seed(0)
    everything = np.concatenate(decoder.random_sample([[1]], 8))
    assert set(everything.tolist()) > {1, 3}                 # unrestricted: rarer ids appear too
    assert set(np.concatenate(decoder.random_sample([[1]], 8, topk=2)).tolist()) == {1, 3}
    assert set(np.concatenate(decoder.random_sample([[1]], 8, topp=0.7)).tolist()) == {1, 3}
    assert set(np.concatenate(decoder.random_sample([[1]], 8, topp=0.5)).tolist()) == {1}
    assert set(np.concatenate(decoder.random_sample([[1]], 8, topk=3, topp=0.6)).tolist()) == {1, 3}
    cold = np.concatenate(decoder.random_sample([[1]], 8, temperature=0.05))
    assert (cold == 1).mean() > 0.95


def test_wraps_converts_between_probas_and_logits():
    decoder = _fixed([0.2, 0.8])(None, 1, 3)
    probas, states = decoder.predict([np.zeros((1, 1))], np.zeros((1, 0), int), None)
    assert np.allclose(probas, [[0.2, 0.8]]) and states is None
    logits, _ = decoder.predict([np.zeros((1, 1))], np.zeros((1, 0), int), None, rtype="logits")
    assert np.allclose(logits, np.log([[0.2, 0.8]]))
    hot, _ = decoder.predict([np.zeros((1, 1))], np.zeros((1, 0), int), None, temperature=2)
    assert np.allclose(hot, [[1, 2]] / np.sum([1, 2]))      # p ** (1/2) renormalised
    with pytest.raises(ValueError, match="rtype"):
        decoder.predict([np.zeros((1, 1))], np.zeros((1, 0), int), None, rtype="scores")
    with pytest.raises(NotImplementedError):
        AutoRegressiveDecoder(None, 1, 3).predict([], None)


MODELS = {
    "gau_alpha-unilm": lambda: build_transformer_model(*model_files(BUNDLED_DIR)[:2], model="gau_alpha",
                                                       application="unilm"),
    "gau_alpha-lm": lambda: build_transformer_model(*model_files(BUNDLED_DIR)[:2], model="gau_alpha",
                                                    application="lm"),
    "roformer_v2-unilm": lambda: build_transformer_model(TINY_ROFORMER, model="roformer_v2",
                                                         application="unilm"),
}


class Seq2Seq(AutoRegressiveDecoder):
    """task_seq2seq_autotitle.py's decoder."""

    def __init__(self, model, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model = model

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids, segment_ids = inputs
        token_ids = np.concatenate([token_ids, output_ids], 1)
        segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], 1)
        return self.last_token(self.model).predict([token_ids, segment_ids])


def _next_probas(model, token_ids, segment_ids):
    out = model([np.array([token_ids]), np.array([segment_ids])], training=False)
    return np.asarray(out)[0, -1]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_seq2seq_decoding_with_a_model(name, capsys):
    model = MODELS[name]()
    context, segments = [2, 11, 57, 9, 3], [0] * 5     # ids < 60 (the tiny RoFormer's vocab)
    maxlen = 3
    greedy = []
    for _ in range(maxlen):                                   # by hand: argmax of the last position
        ids = context + greedy
        greedy.append(int(_next_probas(model, ids, segments + [1] * len(greedy)).argmax()))
    decoder = Seq2Seq(model, start_id=None, end_id=-1, maxlen=maxlen)
    assert decoder.beam_search([context, segments], topk=1).tolist() == greedy
    assert decoder.last_token(model) is decoder.last_token(model)
    assert "step" not in capsys.readouterr().out                 # last_token's predict is silent
    np.random.seed(0)
    assert [s.tolist() for s in decoder.random_sample([context, segments], 2, topk=1)] == [greedy] * 2
    beams = decoder.beam_search([context, segments], topk=3)
    assert len(beams) == maxlen
    np.random.seed(1)
    (sample,) = decoder.random_sample([context, segments], 1, topk=4)
    for step, token in enumerate(sample.tolist()):
        top4 = np.argsort(_next_probas(model, context + sample.tolist()[:step], segments + [1] * step))[-4:]
        assert token in top4
