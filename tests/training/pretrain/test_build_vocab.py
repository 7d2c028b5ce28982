"""pretrain/build_vocab.py: a vocab derived from a corpus; a bad base vocab is a one-line usage error."""

import pytest

from gau_keras.training.pretrain import build_vocab

BASE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "北", "京", "天"]


def test_derives_the_used_tokens_and_refuses_a_duplicate_in_the_base_vocab(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("我爱北京\n我爱\n", encoding="utf-8")
    base = tmp_path / "base.txt"
    base.write_text("\n".join(BASE) + "\n", encoding="utf-8")
    out = tmp_path / "vocab.txt"
    assert build_vocab.main([str(corpus), "--base-vocab", str(base), "--min-count", "2", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8").split() == BASE[:5] + ["我", "爱"]
    base.write_text("\n".join(BASE + ["爱"]) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        build_vocab.main([str(corpus), "--base-vocab", str(base), "--output", str(tmp_path / "other.txt")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"--base-vocab: {base}:11: duplicate token '爱' in the vocab")
