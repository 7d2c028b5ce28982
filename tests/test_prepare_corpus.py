"""prepare_corpus CLI on a small corpus with bad lines: counts, log, determinism,
overwrite protection, dynamic mode."""
import json

import numpy as np
import pytest
import tensorflow as tf

from gau_keras.data.tfrecord import load_dataset
from pretrain import prepare_corpus

SENTENCES = ["我爱北京天安门", "今天天气很好，我们去公园散步吧！", "hello world 2023年",
             "机器学习是人工智能的一个分支。", "他说：这本书真好看。"]
LONG = "天气很好我们去公园" * 8  # 72 characters: more than one example at maxlen 32


def _vocab(path):
    chars = sorted(set("".join(SENTENCES + [LONG])) - set(" "))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "2023"] + chars
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def _corpus(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    lines = [json.dumps({"text": SENTENCES[0]}, ensure_ascii=False).encode(),   # 1 ok
             json.dumps({"text": ""}).encode(),                                 # 2 empty
             b'{"text": "broken',                                               # 3 invalid JSON
             json.dumps({"body": SENTENCES[1]}, ensure_ascii=False).encode(),   # 4 no text key
             b'{"text": "\xff\xfe"}',                                           # 5 undecodable
             b"",                                                               # 6 blank
             json.dumps({"text": "\u0001\u200b"}).encode(),                     # 7 no tokens
             json.dumps({"text": LONG}, ensure_ascii=False).encode()]           # 8 ok, long
    lines += [json.dumps({"text": s}, ensure_ascii=False).encode() for s in SENTENCES * 6]  # 9..38 ok
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    text = tmp_path / "b.txt"
    text.write_bytes("\n".join(SENTENCES).encode() + b"\n\xc3\x28 bad\n   \n" + SENTENCES[2].encode() + b"\n")
    return [str(jsonl), str(text)]


def _run(tmp_path, out, *extra):
    files = _corpus(tmp_path)
    argv = files + ["--vocab", str(_vocab(tmp_path / "vocab.txt")), "--output-dir", str(tmp_path / out),
                    "--maxlen", "32", "--shards", "2", "--docs-per-task", "4"] + list(extra)
    return prepare_corpus.main(argv)


def _records(directory):
    return [r.numpy() for r in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(f"{directory}/shard-*")))]


def test_summary_counts_log_and_determinism(tmp_path, capsys):
    summary = _run(tmp_path, "a", "--workers", "2", "--seed", "1")
    assert summary["documents_read"] == 38 + 8
    assert summary["skipped_by_reason"] == {"undecodable": 2, "invalid_json": 1, "no_text_key": 1,
                                            "empty": 3, "no_tokens": 1}
    assert summary["documents_used"] == 38 + 8 - 8 == summary["documents_read"] - summary["documents_skipped"]
    # one example per short document, three for LONG (72 tokens, 30 per example)
    assert summary["examples"] == summary["documents_used"] + 2
    assert len(_records(tmp_path / "a")) == summary["examples"]
    assert 0.05 < summary["masked_word_fraction"] < 0.3
    assert summary["tokens"] == summary["content_tokens"] + 2 * summary["examples"]
    assert "documents read 46, used 38, skipped 8" in capsys.readouterr().out
    log = (tmp_path / "a" / "skipped.log").read_text(encoding="utf-8").splitlines()
    jsonl, text = _corpus(tmp_path)
    assert [line.split(": ")[0:2] for line in log] == [
        [f"{jsonl}:2", "empty"], [f"{jsonl}:3", "invalid_json"], [f"{jsonl}:4", "no_text_key"],
        [f"{jsonl}:5", "undecodable"], [f"{jsonl}:6", "empty"], [f"{jsonl}:7", "no_tokens"],
        [f"{text}:6", "undecodable"], [f"{text}:7", "empty"]]
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["examples"] == summary["examples"]

    # same seed, other worker count: identical shards; another seed: different masks
    _run(tmp_path, "b", "--workers", "1", "--seed", "1")
    for name in ("shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    with pytest.raises(SystemExit, match="--overwrite"):
        _run(tmp_path, "b", "--workers", "1", "--seed", "2")
    summary = _run(tmp_path, "b", "--workers", "1", "--seed", "2", "--overwrite", "--dynamic-mask",
                   "--shards", "3")
    assert sorted(p.name for p in (tmp_path / "b").glob("shard-*")) == [
        f"shard-0000{i}-of-00003.tfrecord" for i in range(3)]  # the two old shards are gone
    assert summary["mode"] == "dynamic" and summary["masked_word_fraction"] is None
    feature = tf.train.Example.FromString(_records(tmp_path / "b")[0]).features.feature
    assert set(feature) == {"token_ids", "word_starts"}
    tokens, labels = next(iter(load_dataset(str(tmp_path / "b" / "shard-*"), batch_size=64, maxlen=32,
                                            dynamic_mask=True, mask_token_id=4,
                                            random_token_ids=np.arange(5, 20))))
    assert tokens["Input-Token"].shape == (summary["examples"], 32) and (labels.numpy() != 0).any()
