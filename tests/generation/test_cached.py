"""Cached decoding (gau_keras.generation.CachedLM) against the recompute path.

The recompute path is bert4keras's: ``AutoRegressiveDecoder.predict`` runs the model over
the prompt and the ids so far at every step. With ``cached=CachedLM(model)`` the same
decoder runs the model's key/value caches in one compiled loop: beam search must give the
same ids (TensorFlow: rotary, absolute and relative positions, both applications, a GPT,
T5 with its cross-attention; the recompute path is slow on JAX); on JAX, greedy decoding is
checked against one forward pass over the sequence it produced (a causal or UniLM model's
logits at a position do not depend on the later ids).
"""

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.generation import CachedLM, choose
from gau_keras.snippets import AutoRegressiveDecoder

VOCAB, END = 60, 3
PROMPT = [2, 5, 7, 9, 11, 13, 17]


def tiny_model(name, application, seed=1, noise=0.05):
    """A 2-layer model of ``name`` with every weight moved off its init (seeded)."""
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "attention_key_size": 16,
        "hidden_act": "gelu" if name in ("bert", "albert") else "relu",
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
    }
    if name.startswith("gpt"):
        config["hidden_act"] = "gelu"
        del config["attention_key_size"]
    keras.utils.set_random_seed(seed)
    model = build_transformer_model(config, model=name, application=application)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(0, noise, weight.shape).astype("float32"))
    return model


class Decoder(AutoRegressiveDecoder):
    """The recompute path, as a bert4keras script writes it."""

    def __init__(self, model, application, **kwargs):
        super().__init__(**kwargs)
        self.model, self.output_segment = model, int(application == "unilm")

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids = np.concatenate([inputs[0], output_ids], 1)
        segment_ids = np.concatenate([inputs[1], np.full_like(output_ids, self.output_segment)], 1)
        return self.last_token(self.model).predict(model_inputs(self.model, token_ids, segment_ids))


def model_inputs(model, token_ids, segment_ids):
    """``[token_ids, segment_ids]``, or ``[token_ids]`` for a model without segments (GPT2)."""
    return [token_ids, segment_ids][: len(model.inputs)]


@pytest.mark.parametrize(
    "name, application, start_id, noise",
    [
        ("roformer_v2", "lm", None, 0.05),
        ("gau_alpha", "lm", 4, 0.5),
        ("bert", "unilm", None, 0.05),
        ("albert", "lm", None, 0.05),
        ("gpt2_ml", "lm", None, 0.3),
    ],
)
def test_beam_search_gives_the_recompute_ids(name, application, start_id, noise):
    # 7 prompt ids + 12 steps: past softmax_plus's floor of 16 keys (GAU-alpha)
    model = tiny_model(name, application, noise=noise)
    inputs = [PROMPT, [0] * len(PROMPT)]
    recompute = Decoder(model, application, start_id=start_id, end_id=END, maxlen=12, minlen=2)
    cached = Decoder(
        model, application, start_id=start_id, end_id=END, maxlen=12, minlen=2, cached=CachedLM(model, max_length=32)
    )
    want = recompute.beam_search(inputs, topk=3)  # topk=1 (greedy): test_greedy_ids_are_...
    assert cached.beam_search(inputs, topk=3).tolist() == want.tolist()
    assert len(set(want.tolist())) >= 2  # not a constant output: the comparison means something


def test_random_sample_keeps_bert4keras_contract():
    model = tiny_model("roformer_v2", "lm")
    lm = CachedLM(model, max_length=32)
    decoder = Decoder(model, "lm", start_id=None, end_id=END, maxlen=10, cached=lm)
    np.random.seed(7)
    first = decoder.random_sample([PROMPT, [0] * 7], n=5, topk=8, topp=0.95, temperature=1.2)
    np.random.seed(7)
    again = decoder.random_sample([PROMPT, [0] * 7], n=5, topk=8, topp=0.95, temperature=1.2)
    assert [a.tolist() for a in first] == [a.tolist() for a in again]  # numpy's seed makes it repeat
    assert len(first) == 5 and len({tuple(a) for a in first}) > 1
    ended = [a for a in first if a[-1] == END]
    assert all(len(a) <= 10 and ((a >= 0) & (a < VOCAB)).all() for a in first)
    assert first[: len(ended)] == ended  # finished ones first
    greedy = decoder.beam_search([PROMPT, [0] * 7], topk=1)
    top1 = decoder.random_sample([PROMPT, [0] * 7], n=2, topk=1)
    assert all(a.tolist() == greedy.tolist() for a in top1)


def test_choose_follows_topk_topp_and_the_draw():
    probas = np.array([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]], "float32")
    pick = lambda u, **kw: keras.ops.convert_to_numpy(choose(probas, np.array(u, "float32"), **kw)).tolist()  # noqa: E731
    assert pick([0.0, 0.0]) == [1, 0] and pick([0.99, 0.99]) == [0, 3]  # ordered by probability, then id
    assert pick([0.5, 0.5]) == [3, 2]  # cdf 0.4, 0.7: 0.5 falls on the second
    assert pick([0.99, 0.99], topk=2) == [3, 1]
    assert pick([0.99, 0.99], topp=0.6) == [3, 2]  # 0.4 + 0.3 reach 0.6; 0.25 * 3 reach it
    assert pick([0.99, 0.99], topk=3, topp=0.5) == [3, 1]


def test_bad_arguments_name_what_is_wrong():
    model = tiny_model("roformer_v2", "lm")
    lm = CachedLM(model, max_length=16)
    with pytest.raises(ValueError, match="the prompt has 16 ids; the buffer holds 16"):
        lm.beam_search([list(range(1, 17))], topk=1, maxlen=4, end_id=END)
    with pytest.raises(ValueError, match=r"end_id must be an id of the vocabulary \(0..59\), got 60"):
        lm.beam_search([PROMPT], topk=1, maxlen=4, end_id=VOCAB)
    with pytest.raises(ValueError, match="maxlen must be >= 1, got 0"):
        lm.beam_search([PROMPT], topk=1, maxlen=0, end_id=END)
    with pytest.raises(ValueError, match="topk must be >= 1, got 0"):
        lm.beam_search([PROMPT], topk=0, maxlen=4, end_id=END)
    with pytest.raises(ValueError, match=r"topp must be in \(0, 1\]"):
        lm.random_sample([PROMPT], n=2, maxlen=4, end_id=END, topp=1.5)
    with pytest.raises(ValueError, match="application='encoder'"):
        CachedLM(tiny_model("roformer_v2", "encoder"))
    srupp = build_transformer_model(
        model="srupp", application="lm", vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, memory_length=4
    )
    with pytest.raises(ValueError, match="SRU.. with memory_length=4 takes the previous segment's memory"):
        CachedLM(srupp)
    with pytest.raises(TypeError, match="cached must be a gau_keras.generation.CachedLM"):
        AutoRegressiveDecoder(start_id=None, end_id=END, maxlen=4, cached=model)


def test_nezha_decodes_with_its_relative_positions_over_the_cache():
    model = tiny_model("nezha", "lm", noise=0.3)
    inputs = [PROMPT, [0] * len(PROMPT)]
    recompute = Decoder(model, "lm", start_id=None, end_id=END, maxlen=8)
    cached = Decoder(model, "lm", start_id=None, end_id=END, maxlen=8, cached=CachedLM(model, max_length=20))
    assert cached.beam_search(inputs, topk=2).tolist() == recompute.beam_search(inputs, topk=2).tolist()


@pytest.mark.parametrize("version", ["t5", "mt5.1.1"])
def test_t5_runs_its_encoder_once_and_decodes_over_the_cache(version):
    """bert4keras's title-generation idiom: the encoder's output is ``inputs[0]`` and ``predict``
    runs the decoder on it and the ids so far; with ``cached=`` the encoder output, or the
    input ids themselves, go to the cached decoder."""
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "attention_head_size": 16,
        "intermediate_size": 64,
        "hidden_act": "relu" if version == "t5" else ["gelu", "linear"],
    }
    keras.utils.set_random_seed(1)
    t5 = build_transformer_model(config, model=version, return_keras_model=False)
    rng = np.random.default_rng(0)
    for weight in t5.model.weights:
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))

    class Title(AutoRegressiveDecoder):
        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            return self.last_token(t5.decoder).predict([inputs[0], output_ids])

    source = np.array([5, 9, 11, 20, 7, 3, 1])
    encoded = keras.ops.convert_to_numpy(t5.encoder(source[None].astype("float32")))[0]
    lm = CachedLM(t5, max_length=16, max_input_length=10)
    want = Title(start_id=0, end_id=1, maxlen=12).beam_search([encoded], topk=3)
    assert Title(start_id=0, end_id=1, maxlen=12, cached=lm).beam_search([encoded], topk=3).tolist() == want.tolist()
    assert lm.beam_search([source], 3, 12, 1, start_id=0).tolist() == want.tolist()
    assert len(set(want.tolist())) >= 3
    with pytest.raises(ValueError, match="starts its output with start_id"):
        lm.beam_search([source], 3, 12, 1)
    with pytest.raises(ValueError, match="the input has 11 positions; max_input_length is 10"):
        lm.beam_search([list(range(2, 13))], 3, 12, 1, start_id=0)


@pytest.mark.both_backends
@pytest.mark.parametrize("name, application", [("gau_alpha", "lm"), ("roformer_v2", "unilm"), ("gpt2", "lm")])
def test_greedy_ids_are_the_argmax_of_the_full_forward(name, application):
    model = tiny_model(name, application, noise=0.5)
    lm = CachedLM(model, max_length=24)
    segments = [0] * len(PROMPT)
    ids = lm.beam_search([PROMPT, segments], topk=1, maxlen=10, end_id=END)
    assert len(ids) >= 1
    sequence = np.array([PROMPT + ids.tolist()])
    output_segments = np.array([segments + [int(application == "unilm")] * len(ids)])
    probas = keras.ops.convert_to_numpy(model(model_inputs(model, sequence, output_segments)))[0]
    expected = probas[len(PROMPT) - 1 : -1].argmax(-1)
    assert ids.tolist() == expected.tolist()
    if ids[-1] != END:
        assert len(ids) == 10


def test_backbones_generate_with_the_cache():
    from gau_keras.models import GPT2Backbone, T5Backbone

    config = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    gpt2 = GPT2Backbone(**config, intermediate_size=64, hidden_act="gelu", max_position=64)
    greedy = gpt2.generate([PROMPT], max_new_tokens=6)
    assert len(greedy) == 6 and greedy.tolist() == gpt2.generate([PROMPT], 6, strategy="beam", num_beams=1).tolist()
    sampled = [gpt2.generate([PROMPT], 6, strategy="sample", top_k=5, seed=3).tolist() for _ in range(2)]
    assert sampled[0] == sampled[1]
    t5 = T5Backbone(**config, intermediate_size=64, hidden_act="relu", attention_head_size=16)
    ids = t5.generate([[5, 9, 11, 1]], max_new_tokens=5, end_id=1)
    assert ids[0] == 0 and 2 <= len(ids) <= 6
    with pytest.raises(ValueError, match="strategy must be 'greedy', 'sample' or 'beam', got 'top'"):
        gpt2.generate([PROMPT], strategy="top")


@pytest.mark.both_backends
def test_beam_search_gives_the_recompute_ids_on_this_backend():
    """A short run, so that the JAX pass (whose recompute path retraces at every length) can
    afford it: beam search of 2 over 4 steps, cached and recomputed, on the backend of the pass."""
    model = tiny_model("roformer_v2", "lm", noise=0.3)
    inputs = [PROMPT, [0] * len(PROMPT)]
    want = Decoder(model, "lm", start_id=None, end_id=END, maxlen=4).beam_search(inputs, topk=2)
    cached = Decoder(model, "lm", start_id=None, end_id=END, maxlen=4, cached=CachedLM(model, max_length=12))
    assert cached.beam_search(inputs, topk=2).tolist() == want.tolist()


def test_a_cached_pass_never_makes_a_layer_the_model_lacks():
    model = tiny_model("roformer_v2", "lm")
    transformer = model.transformer
    transformer.decode_logits = lambda x: transformer.apply(x, keras.layers.Dense, units=VOCAB, name="Not-There")
    with pytest.raises(ValueError, match="a cached pass reached the layer 'Not-There'"):
        CachedLM(model, max_length=12).beam_search([PROMPT], topk=1, maxlen=2, end_id=END)
    assert "Not-There" not in transformer.layers


def tiny_srupp(seed=1, noise=0.3, **options):
    """A 3-layer causal SRU++ LM with every weight moved off its init; highway_bias 2 lets the
    recurrent state, not the skip term, lead (else a tied head repeats the last token)."""
    keras.utils.set_random_seed(seed)
    model = build_transformer_model(
        model="srupp",
        application="lm",
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=3,
        proj_size=8,
        highway_bias=2.0,
        **options,
    )
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(0, noise, weight.shape).astype("float32"))
    return model


def test_srupp_beam_search_gives_the_recompute_ids():
    model = tiny_srupp()
    inputs = [PROMPT, [0] * len(PROMPT)]
    want = Decoder(model, "lm", start_id=None, end_id=END, maxlen=12, minlen=2).beam_search(inputs, topk=3)
    cached = Decoder(model, "lm", start_id=None, end_id=END, maxlen=12, minlen=2, cached=CachedLM(model, max_length=32))
    assert cached.beam_search(inputs, topk=3).tolist() == want.tolist()
    assert len(set(want.tolist())) >= 4


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"attention_every_n_layers": 2, "layer_norm": True},
        {"layer_norm": True, "normalize_after": True, "rescale": True, "num_attention_heads": 2},
    ],
    ids=["default", "every_2nd_attends", "normalize_after"],
)
def test_srupp_cached_steps_give_the_full_forward_probabilities(options):
    """Teacher-forced: the first pass over the prompt, then one cached step per id (the
    attention's keys and values by slot, the recurrent state carried), against one forward
    pass over the whole sequence; a projected-linear layer (no attention) keeps only c."""
    model = tiny_srupp(**options)
    sequence = PROMPT + [21, 30, 4, 9, 50]
    full = keras.ops.convert_to_numpy(model(np.array([sequence])))[0]
    lm = CachedLM(model, max_length=16)
    ids = np.zeros((1, 16), "int32")
    ids[0, : len(sequence)] = sequence
    feed = (np.zeros_like(ids), None, None)
    logits, caches, ranks = lm._first_pass(ids, feed, len(PROMPT))
    steps = [logits]
    for position in range(len(PROMPT), len(sequence)):
        logits, caches = lm._step(ids, feed, ranks, caches, position)
        steps.append(logits)
    got = keras.ops.convert_to_numpy(keras.ops.softmax(keras.ops.stack([s[0] for s in steps])))
    np.testing.assert_allclose(got, full[len(PROMPT) - 1 :], rtol=1e-4, atol=1e-6)
    cells = [model.get_layer(f"SRUpp-{i}") for i in range(3)]
    assert [len(cache) for cache in caches] == [3 if cell.attention else 1 for cell in cells]  # (k, v, c) or (c,)
    assert [cell.attention for cell in cells].count(False) == (2 if "attention_every_n_layers" in options else 0)


@pytest.mark.both_backends
@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_srupp_greedy_ids_are_the_argmax_of_the_full_forward(policy):
    """The compiled loop (XLA loops of the recurrence on TensorFlow, its scan on JAX); under
    mixed precision the state kept between steps stays float32, as inside the uncached call."""
    keras.config.set_dtype_policy(policy)
    try:
        model = tiny_srupp(noise=0.1)
    finally:
        keras.config.set_dtype_policy("float32")
    ids = CachedLM(model, max_length=24).beam_search([PROMPT], topk=1, maxlen=10, end_id=None)
    probas = keras.ops.convert_to_numpy(model(np.array([PROMPT + ids.tolist()])))[0]
    assert len(ids) == 10 and ids.tolist() == probas[len(PROMPT) - 1 : -1].argmax(-1).tolist()


def teacher_forced_logits(lm, sequence, prompt_length, segments=None):
    """The first pass over the prompt, then one cached step per id of ``sequence``: the logits."""
    ids = np.zeros((1, lm.max_length), "int32")
    ids[0, : len(sequence)] = sequence
    segment_ids = np.zeros_like(ids)
    if segments is not None:
        segment_ids[0, : len(segments)] = segments
    feed = (segment_ids, None, None)
    logits, caches, ranks = lm._first_pass(ids, feed, prompt_length)
    steps = [logits]
    for position in range(prompt_length, len(sequence)):
        logits, caches = lm._step(ids, feed, ranks, caches, position)
        steps.append(logits)
    return np.stack([keras.ops.convert_to_numpy(s)[0] for s in steps])


@pytest.mark.parametrize(
    "name, application",
    [
        pytest.param("gpt2", "lm", marks=pytest.mark.both_backends),
        ("gau_alpha", "lm"),
        ("roformer_v2", "unilm"),
        ("nezha", "lm"),
        ("srupp", "lm"),
    ],
)
def test_steps_over_the_filled_slots_give_the_whole_cache_logits(monkeypatch, name, application):
    """A step attends over the shortest key length holding its filled slots (``gau_keras.ops.
    over_filled_slots``; lengths of 4 here, so a short buffer has several): the same logits as
    over the whole cache, for absolute, rotary and relative positions, GAU, UniLM and SRU++
    (on JAX, GPT2: the steps run op by op there, slowly; the cut itself is tests/test_ops.py's)."""
    from gau_keras import ops as gops

    model = tiny_srupp(noise=0.1) if name == "srupp" else tiny_model(name, application, noise=0.3)
    sequence = PROMPT + [21, 30, 4, 9, 50, 12]
    segments = [0] * len(PROMPT) + [int(application == "unilm")] * (len(sequence) - len(PROMPT))
    whole = teacher_forced_logits(CachedLM(model, max_length=24), sequence, len(PROMPT), segments)
    cut_at = tuple(range(4, 25, 4))
    monkeypatch.setattr(gops, "key_lengths", lambda slots: cut_at if slots == 24 else (slots,))
    cut = teacher_forced_logits(CachedLM(model, max_length=24), sequence, len(PROMPT), segments)
    np.testing.assert_allclose(cut, whole, rtol=1e-5, atol=1e-5)
    inputs = [PROMPT, [0] * len(PROMPT)]
    beams = CachedLM(model, max_length=24).beam_search(inputs, topk=2, maxlen=12, end_id=None)
    monkeypatch.undo()
    assert beams.tolist() == CachedLM(model, max_length=24).beam_search(inputs, topk=2, maxlen=12, end_id=None).tolist()


def test_t5_steps_over_the_filled_slots_give_the_whole_cache_ids(monkeypatch):
    """T5's decoder (its relative position bias cut with the keys; the cross-attention over the
    encoder output is not cut): beam search over cut key lengths gives the whole cache's ids."""
    from gau_keras import ops as gops

    config = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    config.update(attention_head_size=16, intermediate_size=64, hidden_act="relu")
    keras.utils.set_random_seed(1)
    t5 = build_transformer_model(config, model="t5", return_keras_model=False)
    rng = np.random.default_rng(0)
    for weight in t5.model.weights:
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))
    source = [5, 9, 11, 20, 7, 3, 1]
    whole = CachedLM(t5, max_length=16, max_input_length=10).beam_search([source], 3, 14, None, start_id=0)
    monkeypatch.setattr(gops, "key_lengths", lambda slots: (4, 8, 12, 16) if slots == 16 else (slots,))
    cut = CachedLM(t5, max_length=16, max_input_length=10).beam_search([source], 3, 14, None, start_id=0)
    assert len(whole) == 15 and cut.tolist() == whole.tolist()
