"""The generation scripts of tests/bert4keras_scripts/ (CPM-style GPT-2, GPT2_ML, mT5 titles) run
on tiny checkpoints that the ORIGINAL bert4keras 0.11.5 writes, and decode what it decodes.

One bert4keras subprocess (tests/reference/harness.py, its result cached) builds each model from
a tiny config, moves every trainable weight off its initial value by seeded noise, writes the
weights with its own ``save_weights_as_checkpoint`` and returns them, and decodes the test's
prompt with its own ``AutoRegressiveDecoder`` (beam search, and greedy: ``random_sample`` with
``topk=1``), written as the scripts write theirs, once with the script's end id and once ended
by an id its beam meets half way (so that the end handling runs: random weights rarely reach a
full stop). We lay those weights out as a released model's folder (config.json, model.ckpt,
vocabulary), run each script on it (``runpy``, its folder set by environment variable) and
require the same ids; the GPT scripts run a second time with ``cached=CachedLM(...)`` and must
give them again (GPT2_ML's beam search only: each cached loop compiles for ~10 s on CPU). The
prompt ids come from our tokenizers (SentencePiece trained here on ../shared/data, the bundled
WordPiece vocabulary): they are what both sides decode from.
"""

import json
import os
import pathlib
import runpy
import shutil
import sys

import numpy as np
import pytest

from gau_keras.checkpoints import save_checkpoint
from tests.conftest import SHARED_DATA
from tests.reference.harness import run_bert4keras_code

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "bert4keras_scripts"
SEED = 20261207
NOISE = 0.1
SP_VOCAB = 2000
BUNDLED_VOCAB = (
    pathlib.Path(__file__).resolve().parents[2] / "gau_keras" / "pretrained" / "gau_alpha_tiny" / "vocab.txt"
)

GPT_CONFIG = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 64,
}
T5_CONFIG = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "attention_head_size": 8,
    "intermediate_size": 48,
    "dropout_rate": 0.1,
    "hidden_act": ["gelu", "linear"],
}

#: the original bert4keras: build, perturb, save, decode (the scripts' decoders, in its idiom)
REFERENCE = r"""
import json
import os
import tempfile

from bert4keras.models import build_transformer_model
from bert4keras.snippets import AutoRegressiveDecoder

SETTINGS = %(settings)r
SEED = %(seed)d
NOISE = %(noise)r
work = tempfile.mkdtemp(prefix="b4k_generation_")


def build(name):
    K.clear_session()
    np.random.seed(SEED)
    tf.compat.v1.set_random_seed(SEED)
    setting = SETTINGS[name]
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(setting["config"], f)
    transformer = build_transformer_model(path, None, model=setting["model"], return_keras_model=False)
    session()
    rng = np.random.RandomState(SEED)
    weights = transformer.model.trainable_weights
    values = K.batch_get_value(weights)
    K.batch_set_value([(w, v + rng.normal(0, NOISE, v.shape).astype(v.dtype)) for w, v in zip(weights, values)])
    checkpoint = os.path.join(work, name, "model.ckpt")
    os.makedirs(os.path.dirname(checkpoint))
    transformer.save_weights_as_checkpoint(checkpoint)
    reader = tf.train.load_checkpoint(checkpoint)
    for variable in reader.get_variable_to_shape_map():
        outputs["%%s|var|%%s" %% (name, variable.replace("/", "~"))] = reader.get_tensor(variable)
    return transformer


class Continuation(AutoRegressiveDecoder):
    def __init__(self, model, **kwargs):
        super(Continuation, self).__init__(**kwargs)
        self.model = model

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        token_ids = np.concatenate([inputs[0], output_ids], 1)
        return self.last_token(self.model).predict(token_ids)


class AutoTitle(AutoRegressiveDecoder):
    def __init__(self, decoder, **kwargs):
        super(AutoTitle, self).__init__(**kwargs)
        self.decoder = decoder

    @AutoRegressiveDecoder.wraps(default_rtype="probas")
    def predict(self, inputs, output_ids, states):
        return self.last_token(self.decoder).predict([inputs[0], output_ids])


def decode(transformer, setting, prompt, end_id, key):
    if setting["model"] == "mt5.1.1":
        decoder = AutoTitle(transformer.decoder, start_id=0, end_id=end_id, maxlen=setting["maxlen"])
        first = transformer.encoder.predict(prompt[None])[0]
    else:
        decoder = Continuation(transformer.model, start_id=None, end_id=end_id,
                               maxlen=setting["maxlen"], minlen=setting["minlen"])
        first = prompt
    beam = np.array(decoder.beam_search([first], topk=setting["topk"]), dtype="int64")
    outputs[key + "|beam"] = beam
    outputs[key + "|greedy"] = np.array(decoder.random_sample([first], 1, topk=1)[0], dtype="int64")
    return beam


for name, setting in sorted(SETTINGS.items()):
    transformer = build(name)
    prompt = inputs[name + "|prompt"]
    beam = decode(transformer, setting, prompt, setting["end_id"], name)
    # again, ended by an id the search meets half way: the end handling runs too
    outputs[name + "|near_end_id"] = np.array(beam[len(beam) // 2], dtype="int64")
    decode(transformer, setting, prompt, int(beam[len(beam) // 2]), name + "|near")
"""


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    """A unigram SentencePiece model of SP_VOCAB pieces trained on corpus lines (T5's ids: pad 0,
    eos 1, unk 2): the CPM and mT5 scripts' vocabulary."""
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece (requirements.txt) is not installed")
    corpus = SHARED_DATA / "corpus" / "zh_corpus.txt"
    if not corpus.is_file():
        pytest.skip(f"{corpus} is absent (set GAU_KERAS_DATA to ../shared/data)")
    lines = []
    with open(corpus, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % 20 == 0:
                lines.append(line.rstrip("\n")[:200])
            if len(lines) == 400:
                break
    prefix = tmp_path_factory.mktemp("spm") / "sp"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=SP_VOCAB,
        model_type="unigram",
        character_coverage=0.98,  # the rarest characters stay unknown: a smaller vocabulary
        hard_vocab_limit=False,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


#: script name -> (environment variable of its folder, model, vocabulary file name in the folder)
SCRIPTS_SETUP = {
    "gpt2_cpm_generation": ("CPM_DIR", "gpt2", "chinese_vocab.model"),
    "gpt2_ml_generation": ("GPT2_ML_DIR", "gpt2_ml", "vocab.txt"),
    "mt5_title_generation": ("MT5_DIR", "mt5.1.1", "sentencepiece.model"),
}


def load_script(name, folder):
    """The script's globals, run with its model folder ``folder``."""
    variable = SCRIPTS_SETUP[name][0]
    previous = os.environ.get(variable)
    os.environ[variable] = str(folder)
    try:
        return runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name=f"bert4keras_script_{name}")
    finally:
        if previous is None:
            del os.environ[variable]
        else:
            os.environ[variable] = previous


@pytest.fixture(scope="module")
def generation(sp_model, tmp_path_factory):
    """{script name: (its globals, bert4keras's {'beam', 'greedy'})}, the folders written."""
    root = tmp_path_factory.mktemp("generation")
    namespaces, settings, arrays = {}, {}, {}
    for name, (_, model, vocab_name) in SCRIPTS_SETUP.items():
        folder = root / name
        folder.mkdir()
        shutil.copyfile(BUNDLED_VOCAB if vocab_name == "vocab.txt" else sp_model, folder / vocab_name)
        namespace = namespaces[name] = load_script(name, folder)
        tokenizer = namespace["tokenizer"]
        if model == "mt5.1.1":
            config = dict(T5_CONFIG, vocab_size=tokenizer._vocab_size)
            prompt = tokenizer.encode(namespace["abstract"], maxlen=namespace["max_c_len"])[0]
            decoding = {"end_id": tokenizer._token_end_id, "maxlen": namespace["max_t_len"], "minlen": 1, "topk": 3}
        else:
            config = dict(GPT_CONFIG, vocab_size=tokenizer._vocab_size)
            prompt = tokenizer.encode(namespace["prompt"])[0]
            decoding = {
                "end_id": namespace["end_id"],
                "maxlen": namespace["maxlen"],
                "minlen": namespace.get("minlen", 1),
                "topk": namespace["topk"],
            }
        assert decoding["end_id"] is not None and 2 < len(prompt) < 48, (name, prompt)
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        settings[name] = dict(decoding, model=model, config=config)
        arrays[f"{name}|prompt"] = np.asarray(prompt, dtype="int64")
    code = REFERENCE % {"settings": settings, "seed": SEED, "noise": NOISE}
    results = run_bert4keras_code(code, arrays, graph=True, seed=SEED)
    reference = {}
    for key, value in results.items():
        name, _, item = key.partition("|")
        reference.setdefault(name, {})[item] = value
    for name in SCRIPTS_SETUP:
        head = "var|"
        variables = {k[len(head) :].replace("~", "/"): v for k, v in reference[name].items() if k.startswith(head)}
        save_checkpoint(str(root / name / "model.ckpt"), variables)
    return namespaces, reference


def run(generation, name, **kwargs):
    namespaces, reference = generation
    return namespaces[name]["main"](**kwargs), reference[name]


def assert_same_ids(ours, theirs, decoder, text):
    """The script's beam and greedy ids are bert4keras's, with the script's end id and again with
    an id the beam meets half way as the end (``decoder``: the script's, its model built)."""
    keys = ("beam", "greedy") if "greedy" in ours else ("beam",)
    for key in keys:
        assert ours[key] == theirs[key].tolist(), (key, ours[key], theirs[key].tolist())
    decoder.end_id = int(theirs["near_end_id"])
    try:
        near = {"beam": decoder.beam(text) if hasattr(decoder, "beam") else decoder.generate(text, topk=3)}
        if "greedy" in keys:
            near["greedy"] = decoder.greedy(text)
    finally:
        decoder.end_id = ours["end_id"]
    for key in keys:
        assert near[key] == theirs["near|" + key].tolist(), (f"near end {key}", near[key], theirs["near|" + key])
    print(f"[{text[:6]}] beam {ours['beam']} greedy {ours.get('greedy')}; ended by {theirs['near_end_id']}: {near}")


@pytest.mark.parametrize("cached", [False, True], ids=["recompute", "cached"])
def test_cpm_gpt2_continuation_decodes_as_bert4keras(generation, cached):
    ours, theirs = run(generation, "gpt2_cpm_generation", cached=cached, n=1 if cached else 2)
    namespace = generation[0]["gpt2_cpm_generation"]
    assert_same_ids(dict(ours, end_id=namespace["end_id"]), theirs, ours["writer"], namespace["prompt"])
    for ids in ours["topk_samples"] + ours["topp_samples"]:
        assert 1 <= len(ids) <= namespace["maxlen"] and all(0 <= i < namespace["tokenizer"]._vocab_size for i in ids)
    assert all(isinstance(text, str) and text.startswith(namespace["prompt"]) for text in ours["texts"])


@pytest.mark.parametrize("cached", [False, True], ids=["recompute", "cached"])
def test_gpt2_ml_continuation_decodes_as_bert4keras(generation, cached):
    # cached: beam search only (the cached greedy / sampling loop runs in the CPM test; its compile
    # costs ~10 s on CPU)
    ours, theirs = run(generation, "gpt2_ml_generation", cached=cached, n=0 if cached else 2)
    namespace = generation[0]["gpt2_ml_generation"]
    assert_same_ids(dict(ours, end_id=namespace["end_id"]), theirs, ours["writer"], namespace["prompt"])
    assert len(ours["samples"]) == (0 if cached else 2)
    for ids in ours["samples"]:
        assert namespace["minlen"] <= len(ids) <= namespace["maxlen"]


def test_mt5_title_generation_decodes_as_bert4keras(generation):
    ours, theirs = run(generation, "mt5_title_generation")
    namespace = generation[0]["mt5_title_generation"]
    end_id = namespace["tokenizer"]._token_end_id
    assert_same_ids(dict(ours, end_id=end_id), theirs, ours["autotitle"], namespace["abstract"])
    assert ours["beam"][0] == 0 and len(ours["beam"]) <= generation[0]["mt5_title_generation"]["max_t_len"] + 1
    assert isinstance(ours["title"], str)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
