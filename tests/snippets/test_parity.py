"""gau_keras.snippets against the original bert4keras 0.11.5 snippets.

One piece of code (``CASES``) runs twice: here on ``gau_keras.snippets`` and,
in one reference process, on ``bert4keras.snippets``; every result must be
identical (JSON-equal: same values, same dtypes' numbers, same order). The
decoders run on a deterministic numpy "model" (a seeded table of next-token
probabilities), with numpy's RNG seeded before each sampling case, so that the
sampled ids also agree: the same random numbers are drawn in the same order.
strQ2B is not compared: bert4keras 0.11.5's calls Python 2's ``unichr`` and
fails on Python 3 (tests/snippets/test_text.py checks ours).
"""

import json

import numpy as np
import pytest

from gau_keras import snippets
from tests.reference.harness import run_bert4keras_code

CASES = r"""
import json as _json
import numpy as _np


def _plain(x):
    if isinstance(x, _np.ndarray):
        return {"dtype": str(x.dtype), "shape": list(x.shape), "values": x.tolist()}
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, _np.generic):
        return x.item()
    return x


def run_cases(S):
    r = {}
    r["to_array"] = [S.to_array([1, 2]), S.to_array([[1.5]], [3])]
    r["is_string"] = [S.is_string("a"), S.is_string(b"a"), S.is_string(1)]
    r["string_matching"] = [S.string_matching("今天天气很好", ["天气", "x"]),
                            S.string_matching("abc", ["^b", "d"]), S.string_matching("abc", [r"b\w"])]
    r["convert"] = [S.convert_to_unicode("中文".encode("utf-8")), S.convert_to_unicode("x"),
                    S.convert_to_str(b"\xff\xfeab")]
    r["lowercase"] = [S.lowercase_and_normalize(t) for t in ["ÀÉÎõü Straße", "Ｈｅｌｌｏ ÇA", "中文"]]
    arr = _np.zeros(2)
    r["is_one_of"] = [S.is_one_of(arr, [1, arr]), S.is_one_of(arr, [_np.zeros(2)])]
    text = "第一句话很长。第二句，有逗号，也很长。第三句！\n第二段的第一句。短。\n" * 3
    r["segmentate"] = [S.text_segmentate(text, maxlen, seps, strips)
                       for maxlen in (1, 8, 15, 40, 500)
                       for seps, strips in (("\n", None), ("\n。！", "。！"), ("\n。，！", None), ("", None))]
    rng = _np.random.RandomState(3)
    seqs = [list(rng.randint(1, 9, size=n)) for n in (5, 0, 3, 9, 1)]
    r["pad"] = []
    for kwargs in ({}, {"length": 4}, {"length": [12]}, {"value": -1, "mode": "pre"},
                   {"length": 2, "mode": "pre"}):
        r["pad"].append(S.sequence_padding(seqs, **kwargs))
    floats = [rng.rand(n, 2).astype("float32") for n in (3, 1, 4)]
    r["pad"].append(S.sequence_padding(floats, value=0.5))
    grids = [rng.randint(0, 5, size=(n, n, 2)) for n in (2, 4, 3)]
    r["pad"].append(S.sequence_padding(grids, seq_dims=2))
    r["pad"].append(S.sequence_padding(grids, length=[3, 2], seq_dims=2, mode="pre"))
    r["truncate"] = []
    for maxlen, indices in ((10, -1), (6, -2), (3, [1, -1, 0]), (20, -1), (7, 0)):
        lists = [list(range(8)), list(range(100, 105)), [], list(range(200, 203))]
        kept = S.truncate_sequences(maxlen, indices, *lists)
        r["truncate"].append([kept, lists])
    pairs = [("abcdefg", "xxcdeyy"), ("我爱北京天安门", "北京天安门很大"), ("aaa", "aa"), ("abc", "xyz"),
             ("", "abc"), ("abcbdab", "bdcaba"), (list("gxtxayb"), list("aggtab"))]
    r["lcs"] = [[S.longest_common_substring(a, b), S.longest_common_subsequence(a, b)] for a, b in pairs]
    logits = rng.randn(3, 5) * 10
    r["softmax"] = [S.softmax(logits), S.softmax(logits, axis=0), S.softmax(logits.astype("float32"))]
    r["resize"] = [S.orthogonally_resize(rng.randn(4, 6), (6, 10)),
                   S.orthogonally_resize(rng.randn(4, 3), (8, 3), window=4),
                   S.orthogonally_resize(rng.randn(6, 6), (4, 6))]
    trans = rng.randn(4, 4)
    nodes = rng.randn(6, 4)
    r["viterbi"] = [S.ViterbiDecoder(trans).decode(nodes.copy()),
                    S.ViterbiDecoder(trans, starts=[0, 2], ends=[1]).decode(nodes.copy()),
                    S.ViterbiDecoder(trans, starts=[3]).decode(nodes[:1].copy()),
                    S.ViterbiDecoder(trans.astype("float32")).decode(nodes.astype("float32"))]

    class Holder(object):
        @S.insert_arguments(alpha=1, beta="b")
        @S.delete_arguments("gamma")
        def __init__(self, x=0, **kwargs):
            self.x, self.rest = x, sorted(kwargs)

    h = Holder(5, beta=2, other=3)
    r["arguments"] = [h.alpha, h.beta, h.x, h.rest]
    try:
        Holder(gamma=1)
        r["arguments"].append("no error")
    except TypeError as e:
        r["arguments"].append(str(e))

    class Gen(S.DataGenerator):
        def __iter__(self, random=False):
            for is_end, d in self.sample(random):
                yield is_end, d

    r["datagen"] = []
    for data, batch_size, buffer_size in ((list(range(11)), 3, None), (list(range(4)), 5, None)):
        g = Gen(data, batch_size, buffer_size)
        _np.random.seed(7)
        r["datagen"].append([len(g), list(g.sample()), list(g.sample(True)), list(g.sample(True))])
    stream = Gen(iter(range(23)), 2, 5)
    _np.random.seed(8)
    r["datagen"].append([stream.steps, stream.buffer_size, list(stream.sample(True))])

    vocab, table_rng = 7, _np.random.RandomState(11)
    table = table_rng.rand(vocab ** 2, vocab) ** 3
    table[:, 0] = 1e-9

    def next_scores(inputs, output_ids):
        rows = []
        for ctx, out in zip(inputs[0], output_ids):
            seq = list(ctx) + list(out)
            key = (seq[-1] * vocab + (seq[-2] if len(seq) > 1 else 0)) % len(table)
            rows.append(table[key] / table[key].sum())
        return _np.array(rows)

    class ProbasDecoder(S.AutoRegressiveDecoder):
        @S.AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            return next_scores(inputs, output_ids)

    class LogitsDecoder(S.AutoRegressiveDecoder):
        @S.AutoRegressiveDecoder.wraps(default_rtype="logits", use_states=True)
        def predict(self, inputs, output_ids, states):
            return _np.log(next_scores(inputs, output_ids)) * 2.0, (states or 0) + 1

    r["beam"], r["sample"] = [], []
    for cls in (ProbasDecoder, LogitsDecoder):
        for start_id, end_id, maxlen, minlen in ((None, 3, 12, 1), (1, 3, 6, 1), (None, 5, 15, 4),
                                                 (2, 6, 9, 1)):
            dec = cls(start_id=start_id, end_id=end_id, maxlen=maxlen, minlen=minlen)
            for ctx in ([1, 2], [4]):
                for topk, temperature, min_ends in ((1, 1, 1), (3, 1, 1), (4, 0.7, 2), (2, 1.5, 1)):
                    r["beam"].append(dec.beam_search([ctx], topk, temperature=temperature,
                                                     min_ends=min_ends))
                for seed, n, topk, topp, temperature, min_ends in (
                        (0, 4, None, None, 1, 1), (1, 3, 3, None, 1, 1), (2, 5, None, 0.6, 0.8, 1),
                        (3, 3, 4, 0.8, 1, 2), (4, 2, 1, None, 1.3, 1)):
                    _np.random.seed(seed)
                    r["sample"].append(dec.random_sample([ctx], n, topk=topk, topp=topp,
                                                         temperature=temperature, min_ends=min_ends))
    dec = ProbasDecoder(start_id=None, end_id=3, maxlen=5)
    r["wraps"] = [dec.predict([_np.array([[1, 2]])], _np.empty((1, 0), dtype=int), None, 1, rtype)
                  for rtype in ("probas", "logits")]
    r["wraps"] += [dec.predict([_np.array([[1, 2]])], _np.array([[4]]), None, 0.5, "probas")]
    r["first_output_ids"] = [ProbasDecoder(None, 3, 4).first_output_ids, ProbasDecoder(2, 3, 4).first_output_ids]
    return _json.loads(_json.dumps(_plain(r)))
"""


def _run_here():
    namespace = {}
    exec(compile(CASES, "snippets_cases", "exec"), namespace)
    return namespace["run_cases"](snippets)


@pytest.fixture(scope="module")
def results():
    reference = run_bert4keras_code(CASES + "\noutputs['json'] = _json.dumps(run_cases(bert4keras.snippets))\n")
    return _run_here(), json.loads(str(reference["json"]))


CASE_NAMES = [
    "to_array",
    "is_string",
    "string_matching",
    "convert",
    "lowercase",
    "is_one_of",
    "segmentate",
    "pad",
    "truncate",
    "lcs",
    "softmax",
    "resize",
    "viterbi",
    "arguments",
    "datagen",
    "beam",
    "sample",
    "wraps",
    "first_output_ids",
]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_same_as_bert4keras(results, name):
    ours, reference = results
    assert ours[name] == reference[name]


def test_cases_exercise_the_decoders(results):
    """The decoder cases are not degenerate: sequences of several lengths, some sampled differently."""
    ours, _ = results
    lengths = {len(ids["values"]) for ids in ours["beam"]}
    assert len(lengths) >= 4
    samples = [tuple(tuple(s["values"]) for s in case) for case in ours["sample"]]
    assert len(set(samples)) > len(samples) // 2
    assert all(np.isfinite(np.asarray(v["values"])).all() for v in ours["softmax"])
