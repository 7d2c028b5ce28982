"""gau_keras.snippets.ViterbiDecoder and AutoRegressiveDecoder: behaviour on
numpy "models", and seq2seq decoding with real models (the bundled GAU-α
under application='unilm' and 'lm', a tiny random RoFormerV2) in the manner
of bert4keras's task_seq2seq_autotitle.py. Numbers against bert4keras:
tests/snippets/test_parity.py."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert np.array_equal(nodes, kept)  # the caller's scores are left alone


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
    ends_soon = _fixed([0.05, 0.05, 0.1, 0.8])  # id 3 is the likeliest
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
    assert set(everything.tolist()) > {1, 3}  # unrestricted: rarer ids appear too
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
    assert np.allclose(hot, [[1, 2]] / np.sum([1, 2]))  # p ** (1/2) renormalised
    with pytest.raises(ValueError, match="rtype"):
        decoder.predict([np.zeros((1, 1))], np.zeros((1, 0), int), None, rtype="scores")
    with pytest.raises(NotImplementedError):
        AutoRegressiveDecoder(None, 1, 3).predict([], None)


MODELS = {
    "gau_alpha-unilm": lambda: build_transformer_model(
        *model_files(BUNDLED_DIR)[:2], model="gau_alpha", application="unilm"
    ),
    "gau_alpha-lm": lambda: build_transformer_model(*model_files(BUNDLED_DIR)[:2], model="gau_alpha", application="lm"),
    "roformer_v2-unilm": lambda: build_transformer_model(TINY_ROFORMER, model="roformer_v2", application="unilm"),
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
    context, segments = [2, 11, 57, 9, 3], [0] * 5  # ids < 60 (the tiny RoFormer's vocab)
    maxlen = 3
    greedy = []
    for _ in range(maxlen):  # by hand: argmax of the last position
        ids = context + greedy
        greedy.append(int(_next_probas(model, ids, segments + [1] * len(greedy)).argmax()))
    decoder = Seq2Seq(model, start_id=None, end_id=-1, maxlen=maxlen)
    assert decoder.beam_search([context, segments], topk=1).tolist() == greedy
    assert decoder.last_token(model) is decoder.last_token(model)
    assert "step" not in capsys.readouterr().out  # last_token's predict is silent
    np.random.seed(0)
    assert [s.tolist() for s in decoder.random_sample([context, segments], 2, topk=1)] == [greedy] * 2
    beams = decoder.beam_search([context, segments], topk=3)
    assert len(beams) == maxlen
    np.random.seed(1)
    (sample,) = decoder.random_sample([context, segments], 1, topk=4)
    for step, token in enumerate(sample.tolist()):
        top4 = np.argsort(_next_probas(model, context + sample.tolist()[:step], segments + [1] * step))[-4:]
        assert token in top4


# ---------------------------------------------------------------- bad arguments (issue 36)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"maxlen": 0}, "maxlen must be an integer >= 1, got 0"),
        ({"maxlen": -3}, "maxlen must be"),
        ({"maxlen": 2.5}, "maxlen must be"),
        ({"maxlen": 5, "minlen": -1}, "minlen must be an integer >= 0"),
    ],
)
def test_decoder_lengths_are_checked_where_given(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _fixed([0.5, 0.5])(None, 1, **kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d: d.random_sample([[1]], 0), "n must be an integer >= 1"),
        (lambda d: d.random_sample([[1]], 2, topk=0), "topk must be an integer >= 1, got 0"),
        (lambda d: d.random_sample([[1]], 2, topp=0), r"topp must be in \(0, 1\]"),
        (lambda d: d.random_sample([[1]], 2, topp=-0.5), r"topp must be in \(0, 1\]"),
        (lambda d: d.random_sample([[1]], 2, topp=1.5), r"topp must be in \(0, 1\]"),
        (lambda d: d.random_sample([[1]], 2, temperature=0), "temperature must be a finite number > 0"),
        (lambda d: d.beam_search([[1]], topk=0), "topk must be an integer >= 1"),
        (lambda d: d.beam_search([[1]], topk=2, temperature=float("nan")), "temperature must be"),
        (lambda d: d.beam_search([[1]], topk=2, min_ends=0), "min_ends must be an integer >= 1"),
    ],
)
def test_decoding_arguments_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call(_fixed([0.2, 0.3, 0.5])(None, 2, maxlen=4))


def test_a_topk_beyond_the_vocabulary_takes_every_id():
    decoder = _fixed([0.2, 0.3, 0.5], "logits")(None, 2, maxlen=4)
    np.random.seed(0)
    assert len(decoder.random_sample([[1]], 3, topk=50)) == 3
    assert decoder.beam_search([[1]], topk=50).tolist() == [2]


def test_nan_scores_stop_decoding_with_an_error():
    for rtype in ("probas", "logits"):
        decoder = _fixed([0.2, float("nan"), 0.5], rtype)(None, 2, maxlen=4)
        with pytest.raises(ValueError, match=r"predict returned NaN scores \(rows \[0\]\) after 0 output ids"):
            decoder.beam_search([[1]], topk=2)
        with pytest.raises(ValueError, match="NaN"):
            decoder.random_sample([[1]], 2)


@settings(max_examples=40, deadline=None)
@given(
    probas=st.lists(st.floats(0.01, 1.0), min_size=2, max_size=6),
    n=st.integers(1, 4),
    topk=st.one_of(st.none(), st.integers(1, 9)),
    topp=st.one_of(st.none(), st.floats(0.05, 1.0)),
    temperature=st.floats(0.3, 3.0),
)
def test_random_sample_returns_n_sequences_of_vocabulary_ids(probas, n, topk, topp, temperature):
    probas = np.asarray(probas) / np.sum(probas)
    decoder = _fixed(probas)(None, len(probas) - 1, maxlen=5)
    samples = decoder.random_sample([[1]], n, topk=topk, topp=topp, temperature=temperature)
    assert len(samples) == n
    assert all(1 <= len(s) <= 5 and all(0 <= i < len(probas) for i in s) for s in samples)


def test_viterbi_arguments_are_checked():
    trans = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"trans must be a square \[num_labels, num_labels\] matrix, got shape"):
        ViterbiDecoder(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"starts names no label of the 3: \[5\]"):
        ViterbiDecoder(trans, starts=[0, 5])
    with pytest.raises(ValueError, match=r"ends names no label of the 3: \[-1\]"):
        ViterbiDecoder(trans, ends=[-1])
    with pytest.raises(ValueError, match="trans holds NaN"):
        ViterbiDecoder(np.full((2, 2), np.nan))
    decoder = ViterbiDecoder(trans)
    with pytest.raises(ValueError, match=r"nodes must be \[seq_len, 3\] \(the labels of trans\), got shape \(4,"):
        decoder.decode(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        decoder.decode(np.zeros(3))
    with pytest.raises(ValueError, match=r"nodes hold NaN at steps \[1\]"):
        decoder.decode(np.array([[0, 1, 2], [0, np.nan, 1.0]]))
    assert decoder.decode(np.zeros((0, 3))).tolist() == []


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), length=st.integers(1, 4), labels=st.integers(1, 3))
def test_viterbi_is_the_brute_force_best_path(seed, length, labels):
    rng = np.random.default_rng(seed)
    trans, nodes = rng.normal(size=(labels, labels)), rng.normal(size=(length, labels))
    assert ViterbiDecoder(trans).decode(nodes).tolist() == _brute_viterbi(nodes, trans, range(labels), range(labels))


def test_numpy_numbers_are_numbers():
    decoder = _fixed([0.2, 0.3, 0.5])(None, 2, maxlen=np.int64(4))
    np.random.seed(0)
    assert (
        len(
            decoder.random_sample(
                [[1]], np.int64(2), topk=np.int32(2), topp=np.float32(0.9), temperature=np.float32(1.0)
            )
        )
        == 2
    )
