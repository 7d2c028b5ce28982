"""SpTokenizer: bert4keras 0.11.5's SentencePiece tokenizer, on a model trained here.

The model is a small unigram SentencePiece model (3000 pieces) trained in the test on
lines of ../shared/data's Chinese corpus, with T5's special ids (pad 0, eos 1, unk 2, no
bos). bert4keras's own SpTokenizer runs on the same model in a subprocess
(tests/reference/harness.py: tf_keras never enters this process), and the same calls,
from one source (``CALLS``), must give equal results on a few hundred lines.
"""

import json
import sys

import numpy as np
import pytest

from gau_keras.tokenizers import SpTokenizer, TokenIdError, Tokenizer, TokenizerBase
from tests.conftest import SHARED_DATA

VOCAB_SIZE = 3000

# The calls compared, run as they are in both processes: ``calls(t, texts)`` -> JSON-able.
CALLS = r"""
import re


def pre_tokenize(text):
    return [word for word in re.split(r"([，。！？])", text) if word]


CONFIGS = {
    "t5": dict(token_start=None, token_end="</s>"),
    "default": dict(),  # [CLS] / [SEP]: not pieces of the model, so the unk id (as bert4keras)
    "translate": dict(token_start=None, token_end="</s>", token_translate={"\u2581": "<unk>"}),
    "pre_tokenize": dict(token_start=None, token_end="</s>", pre_tokenize=pre_tokenize),
}


def calls(t, texts):
    size = t._vocab_size
    rows = []
    for a, b in zip(texts, texts[1:] + texts[:1]):
        ids = t.encode(a)[0]
        pair = t.encode(a, b)
        rows.append([
            t.tokenize(a), t.tokenize(a, maxlen=10), ids, pair,
            t.encode(a, maxlen=16), t.encode(a, maxlen=16, truncate_from="left"),
            t.encode(a, b, maxlen=24), t.encode(a, b, maxlen=24, truncate_from="left"),
            t.encode(a, b, maxlen=30, pattern="S*ES*E"), t.encode(a, b, maxlen=20, truncate_from=-2),
            t.decode(ids), t.decode(pair[0]),
        ])
    pieces = [t.id_to_token(i) for i in range(size + 5)]
    probes = pieces[:size] + ["[CLS]", "[SEP]", "[MASK]", "xyz", "\u2581\u4eca\u5929", "\u4e00\u4e8c\u4e09\u56db"]
    special = {
        name: getattr(t, "_token_%s_id" % name, None) for name in ("pad", "unk", "mask", "start", "end")
    }
    return {
        "rows": rows,
        "pieces": pieces,
        "ids": t.tokens_to_ids(probes),
        "ids_to_tokens": t.ids_to_tokens([0, 1, 2, size - 1, size, size + 100]),
        "special": special,
        "tokens": [t._token_pad, t._token_unk, t._token_start, t._token_end, size],
        "is_special": [bool(t._is_special(i)) for i in range(size)],
        "is_decodable": [bool(t._is_decodable(i)) for i in range(size + 3)],
        "decode_all": t.decode(list(range(0, size + 3, 7))),
    }
"""

SNIPPET = (
    CALLS
    + r"""
import json, os, tempfile
from bert4keras.tokenizers import SpTokenizer

job = json.loads(str(inputs["job"]))
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "sp.model")
    with open(path, "wb") as f:
        f.write(inputs["model"].tobytes())
    result = {name: calls(SpTokenizer(path, **CONFIGS[name]), job["texts"]) for name in CONFIGS}
outputs["json"] = np.array(json.dumps(result))
"""
)


def _calls_namespace():
    namespace = {"__name__": "sp_tokenizer_calls"}
    exec(compile(CALLS, "tests/test_sp_tokenizer.py[CALLS]", "exec"), namespace)
    return namespace


def _corpus_lines(step, offset, count, width):
    lines = []
    with open(SHARED_DATA / "corpus" / "zh_corpus.txt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % step == offset:
                lines.append(line.rstrip("\n")[:width])
                if len(lines) == count:
                    break
    return lines


EXTRA_TEXTS = [
    "GAU-α在2022年发布，Hello World！😀 café 3.14 don't",
    "  多个  空格\t和\n换行 ",
    "ＬＡＣ全角１２３",
    "罕见字：龘靐齉爩",
    "</s> <pad> <unk> 字面上的特殊记号",
    "",
]


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    """Path of a unigram model trained on 4000 corpus lines (T5's ids: pad 0, eos 1, unk 2)."""
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece (requirements.txt) is not installed")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (set GAU_KERAS_DATA to point at it)")
    prefix = tmp_path_factory.mktemp("spm") / "sp"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus_lines(10, 0, 4000, 300)),
        model_prefix=str(prefix),
        vocab_size=VOCAB_SIZE,
        model_type="unigram",
        character_coverage=0.995,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


@pytest.fixture(scope="module")
def parity(sp_model):
    from tests.reference.harness import run_bert4keras_code

    texts = _corpus_lines(100, 55, 300, 150) + EXTRA_TEXTS
    model = np.frombuffer(sp_model.read_bytes(), dtype=np.uint8)
    out = run_bert4keras_code(SNIPPET, {"job": np.array(json.dumps({"texts": texts})), "model": model})
    return texts, json.loads(str(out["json"]))


@pytest.mark.parametrize("config", ["t5", "default", "translate", "pre_tokenize"])
def test_parity_with_bert4keras(sp_model, parity, config):
    texts, expected = parity
    assert len(texts) >= 300
    namespace = _calls_namespace()
    tokenizer = SpTokenizer(str(sp_model), **namespace["CONFIGS"][config])
    got = json.loads(json.dumps(namespace["calls"](tokenizer, texts)))  # tuples -> lists, as the reference's
    want = expected[config]
    for text, got_row, want_row in zip(texts, got.pop("rows"), want.pop("rows")):
        assert got_row == want_row, text
    assert got == want
    if config == "t5":  # the parity is not vacuous: multi-character pieces, unk, truncation
        assert any(len(piece.lstrip("\u2581")) > 1 for piece in want["pieces"])
        assert want["special"] == {"pad": 0, "unk": 2, "mask": 2, "start": None, "end": 1}
        assert want["pieces"][VOCAB_SIZE:] == [""] * 5


def test_t5_style_usage(sp_model):
    tokenizer = SpTokenizer(sp_model, token_start=None, token_end="</s>")  # a PathLike works too
    assert isinstance(tokenizer, TokenizerBase) and issubclass(Tokenizer, TokenizerBase)
    assert tokenizer.vocab_size == tokenizer._vocab_size == VOCAB_SIZE
    assert (tokenizer.token_pad_id, tokenizer.token_unk_id, tokenizer.token_end_id) == (0, 2, 1)
    assert (tokenizer._token_pad, tokenizer._token_unk) == ("<pad>", "<unk>")
    ids, segments = tokenizer.encode("今天天气很好", "我们去公园散步")
    assert ids[-1] == 1 and ids.count(1) == 2 and segments == sorted(segments)
    assert tokenizer.decode(ids) == "今天天气很好 我们去公园散步"  # each text starts a word (▁)
    assert tokenizer.id_to_token(VOCAB_SIZE) == "" and tokenizer.id_to_token(np.int64(1)) == "</s>"
    assert tokenizer.has_token("</s>") and tokenizer.has_token("<unk>") and not tokenizer.has_token("[CLS]")
    with pytest.raises(TokenIdError, match=f"id -1 is not in the vocab \\({VOCAB_SIZE} pieces"):
        tokenizer.id_to_token(-1)
    with pytest.raises(ValueError, match="maxlen=0 "):
        tokenizer.encode("今天", maxlen=0)


def test_bad_model_file_is_one_line_naming_the_file(tmp_path):
    pytest.importorskip("sentencepiece", reason="sentencepiece (requirements.txt) is not installed")
    missing = tmp_path / "missing.model"
    with pytest.raises(
        FileNotFoundError, match=r"^SpTokenizer: SentencePiece model file .*missing\.model' does not exist$"
    ):
        SpTokenizer(str(missing))
    with pytest.raises(FileNotFoundError, match=r"model file .* is a directory$"):
        SpTokenizer(tmp_path)
    garbage = tmp_path / "vocab.txt"
    garbage.write_text("[PAD]\n[UNK]\n你\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"^SpTokenizer: cannot read SentencePiece model file .*vocab\.txt' \("
    ) as info:
        SpTokenizer(str(garbage))
    assert "\n" not in str(info.value)


def test_without_sentencepiece_the_error_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if not installed
    with pytest.raises(ImportError, match=r"^gau_keras: SpTokenizer needs sentencepiece, .*pip install 'sentencepiece"):
        SpTokenizer(str(tmp_path / "any.model"))


def test_the_base_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        TokenizerBase()
