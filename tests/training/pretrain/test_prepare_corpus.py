"""prepare_corpus CLI on a small corpus with bad lines: counts, log, determinism,
overwrite protection, dynamic mode."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from gau_keras import flags
from gau_keras.data.tfrecord import load_dataset
from gau_keras.training.pretrain import prepare_corpus
from tests.conftest import REPO_ROOT

SENTENCES = [
    "我爱北京天安门",
    "今天天气很好，我们去公园散步吧！",
    "hello world 2023年",
    "机器学习是人工智能的一个分支。",
    "他说：这本书真好看。",
]
LONG = "天气很好我们去公园" * 8  # 72 characters: more than one example at maxlen 32


def _vocab(path):
    chars = sorted(set("".join(SENTENCES + [LONG])) - set(" "))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "2023"] + chars
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def _corpus(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    lines = [
        json.dumps({"text": SENTENCES[0]}, ensure_ascii=False).encode(),  # 1 ok
        json.dumps({"text": ""}).encode(),  # 2 empty
        b'{"text": "broken',  # 3 invalid JSON
        json.dumps({"body": SENTENCES[1]}, ensure_ascii=False).encode(),  # 4 no text key
        b'{"text": "\xff\xfe"}',  # 5 undecodable
        b"",  # 6 blank
        json.dumps({"text": "\u0001\u200b"}).encode(),  # 7 no tokens
        json.dumps({"text": LONG}, ensure_ascii=False).encode(),
    ]  # 8 ok, long
    lines += [json.dumps({"text": s}, ensure_ascii=False).encode() for s in SENTENCES * 6]  # 9..38 ok
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    text = tmp_path / "b.txt"
    text.write_bytes("\n".join(SENTENCES).encode() + b"\n\xc3\x28 bad\n   \n" + SENTENCES[2].encode() + b"\n")
    return [str(jsonl), str(text)]


def _run(tmp_path, out, *extra):
    files = _corpus(tmp_path)
    argv = (
        files
        + [
            "--vocab",
            str(_vocab(tmp_path / "vocab.txt")),
            "--output-dir",
            str(tmp_path / out),
            "--maxlen",
            "32",
            "--shards",
            "2",
            "--docs-per-task",
            "4",
        ]
        + list(extra)
    )
    return prepare_corpus.main(argv)


def _records_of(path):
    return list(tf.data.TFRecordDataset([str(path)]))


def _records(directory):
    return [r.numpy() for r in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(f"{directory}/shard-*")))]


def test_summary_counts_log_and_determinism(tmp_path, capsys):
    summary = _run(tmp_path, "a", "--workers", "2", "--seed", "1")
    assert summary["documents_read"] == 38 + 8
    assert summary["skipped_by_reason"] == {
        "binary": 0,
        "undecodable": 2,
        "invalid_json": 1,
        "no_text_key": 1,
        "empty": 3,
        "no_tokens": 1,
    }
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
        [f"{jsonl}:2", "empty"],
        [f"{jsonl}:3", "invalid_json"],
        [f"{jsonl}:4", "no_text_key"],
        [f"{jsonl}:5", "undecodable"],
        [f"{jsonl}:6", "empty"],
        [f"{jsonl}:7", "no_tokens"],
        [f"{text}:6", "undecodable"],
        [f"{text}:7", "empty"],
    ]
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["examples"] == summary["examples"]
    # each shard's record count and size, and the vocab, as load_dataset checks them
    for name in summary["shards"]:
        assert summary["shard_records"][name] == len(_records_of(tmp_path / "a" / name))
        assert summary["shard_bytes"][name] == os.path.getsize(tmp_path / "a" / name)
    assert summary["vocab_size"] == len(_vocab(tmp_path / "vocab.txt").read_text().split())
    assert summary["vocab_checksum"].startswith("sha256:") and summary["status"] == "done"
    assert not list((tmp_path / "a").glob("*.tmp")) and not list((tmp_path / "a").glob("*.partial*"))

    # same seed, other worker count: identical shards; another seed: different masks
    _run(tmp_path, "b", "--workers", "1", "--seed", "1")
    for name in ("shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    with pytest.raises(SystemExit, match="--overwrite"):
        _run(tmp_path, "b", "--workers", "1", "--seed", "2")
    summary = _run(tmp_path, "b", "--workers", "1", "--seed", "2", "--overwrite", "--dynamic-mask", "--shards", "3")
    assert sorted(p.name for p in (tmp_path / "b").glob("shard-*")) == [
        f"shard-0000{i}-of-00003.tfrecord" for i in range(3)
    ]  # the two old shards are gone
    assert summary["mode"] == "dynamic" and summary["masked_word_fraction"] is None
    feature = tf.train.Example.FromString(_records(tmp_path / "b")[0]).features.feature
    assert set(feature) == {"token_ids", "word_starts"}
    tokens, labels = next(
        iter(
            load_dataset(
                str(tmp_path / "b" / "shard-*"),
                batch_size=64,
                maxlen=32,
                dynamic_mask=True,
                mask_token_id=4,
                random_token_ids=np.arange(5, 20),
            )
        )
    )
    assert tokens["Input-Token"].shape == (summary["examples"], 32) and (labels.numpy() != 0).any()


def test_worker_side_never_imports_tensorflow(tmp_path):
    vocab = _vocab(tmp_path / "vocab.txt")
    code = (
        "import sys; from gau_keras.training.pretrain import prepare_corpus as pc;"
        f"pc._init_worker({str(vocab)!r}, True, 'jieba', 32, 0.15, False, 0);"
        "pc.process_batch([(0, 'x:1', '我爱北京天安门')]);"
        "assert 'tensorflow' not in sys.modules, 'worker imported tensorflow'"
    )
    # the pool's workers inherit GAU_KERAS_TF_FREE=1 (process_corpus sets it while the pool lives)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, env=dict(os.environ, GAU_KERAS_TF_FREE="1"))


@pytest.mark.skipif(
    importlib.util.find_spec("LAC") is None or importlib.util.find_spec("paddle") is None,
    reason="LAC / paddlepaddle not installed (optional extra, see README)",
)
def test_lac_segmenter_in_workers(tmp_path):
    summary = _run(tmp_path, "lac", "--workers", "1", "--segmenter", "lac")
    assert summary["segmenter"] == "lac" and summary["documents_used"] == 38
    assert summary["examples"] == len(_records(tmp_path / "lac"))


def _argv(tmp_path, inputs, out, *extra):
    return (
        [str(i) for i in inputs]
        + [
            "--vocab",
            str(_vocab(tmp_path / "vocab.txt")),
            "--output-dir",
            str(tmp_path / out),
            "--maxlen",
            "32",
            "--shards",
            "2",
            "--workers",
            "1",
        ]
        + list(extra)
    )


def test_empty_or_binary_input_fails_after_the_summary(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(SystemExit, match="no usable document in 0 line"):
        prepare_corpus.main(_argv(tmp_path, [empty], "empty"))
    binary = tmp_path / "program.bin"
    binary.write_bytes(
        b"\x7fELF\x02\x01\x01\x00"
        + bytes(b for b in range(256) if b != 10) * 8
        + b"\n"
        + SENTENCES[0].encode()
        + b"\n"
        + b"\x00\x01\x02\n" * 5
    )
    with pytest.raises(SystemExit, match=r"6 of 7 lines \(86%\) were skipped \(binary 6"):
        prepare_corpus.main(_argv(tmp_path, [binary], "binary"))
    assert "documents read 7, used 1, skipped 6" in capsys.readouterr().out  # the summary is still printed
    summary = json.loads((tmp_path / "binary" / "summary.json").read_text())
    assert summary["skipped_by_reason"]["binary"] == 6
    assert summary["status"] == "failed" and "6 of 7 lines" in summary["error"]  # not "done"


def test_a_worker_that_cannot_start_stops_the_run(tmp_path):
    # the vocab turns bad after the argument checks: every worker fails at start-up
    argv = _argv(tmp_path, _corpus(tmp_path), "out", "--workers", "2")
    code = (
        "import sys; from gau_keras.training.pretrain import prepare_corpus as pc;"
        f"args = pc.parse_args({argv!r});"
        f"open({argv[argv.index('--vocab') + 1]!r}, 'a', encoding='utf-8').write('我\\n');"
        "pc.parse_args = lambda argv: args; pc.main([])"
    )  # main() reports the error raised in run()
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )  # before the fix: the pool restarted the workers forever
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("prepare_corpus: error: a worker failed at start-up:") and "duplicate token '我'" in last
    assert "Traceback" not in result.stderr
    assert os.listdir(tmp_path / "out") == []  # no empty shard, no summary.json


def test_a_bad_vocab_or_a_missing_lac_is_an_argument_error(tmp_path, capsys, monkeypatch):
    corpus = _corpus(tmp_path)
    argv = _argv(tmp_path, corpus, "out")
    vocab = argv[argv.index("--vocab") + 1]
    with open(vocab, "a", encoding="utf-8") as f:
        f.write("我\n")
    with pytest.raises(SystemExit) as stopped:
        prepare_corpus.main(argv)
    assert stopped.value.code == 2
    assert f"--vocab: {vocab}:" in capsys.readouterr().err and not (tmp_path / "out").exists()
    _vocab(tmp_path / "vocab.txt")

    def no_lac():
        raise ImportError("LAC is not installed. Install it (optional extra) with: pip install lac")

    monkeypatch.setattr(prepare_corpus, "lac_model_dir", no_lac)
    with pytest.raises(SystemExit) as stopped:
        prepare_corpus.main(argv + ["--segmenter", "lac"])
    assert stopped.value.code == 2 and "--segmenter lac: LAC is not installed" in capsys.readouterr().err


def test_shards_that_do_not_match_their_summary_are_errors_naming_them(tmp_path):
    corpus = _corpus(tmp_path)
    prepare_corpus.main(_argv(tmp_path, corpus, "out"))
    pattern = str(tmp_path / "out" / "shard-*")
    other = tmp_path / "other_vocab.txt"
    other.write_text(_vocab(tmp_path / "vocab.txt").read_text() + "extra\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"another vocab: {tmp_path / 'out' / 'summary.json'} .* but {other} has"):
        load_dataset(pattern, batch_size=2, maxlen=32, vocab=str(other))
    assert load_dataset(pattern, batch_size=2, maxlen=32, vocab=str(tmp_path / "vocab.txt")) is not None
    shard = tmp_path / "out" / "shard-00001-of-00002.tfrecord"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])  # cut in half
    with pytest.raises(
        ValueError,
        match=rf"{shard} is {len(data) // 2} bytes but .*summary.json records "
        rf"{len(data)} bytes \(\d+ records\): the shard is truncated",
    ):
        load_dataset(pattern, batch_size=2, maxlen=32)


def test_never_replaces_a_file_it_did_not_write(tmp_path):
    corpus = _corpus(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "skipped.log").write_text("my notes\n")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit, match=r"skipped\.log, which no summary\.json there lists"):
            prepare_corpus.main(_argv(tmp_path, corpus, "out", *extra))
    assert (out / "skipped.log").read_text() == "my notes\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(SystemExit, match="is a file, not a folder"):
        prepare_corpus.main(_argv(tmp_path, corpus, "a_file"))


def test_overwrite_replaces_an_interrupted_runs_files(tmp_path):
    corpus = _corpus(tmp_path)
    prepare_corpus.main(_argv(tmp_path, corpus, "out"))
    summary = tmp_path / "out" / "summary.json"
    summary.write_text(
        json.dumps({"status": "running", "shards": ["shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord"]})
    )
    (tmp_path / "out" / "skipped.log").unlink()  # killed before writing it
    with pytest.raises(SystemExit, match="--overwrite"):
        prepare_corpus.main(_argv(tmp_path, corpus, "out"))
    assert prepare_corpus.main(_argv(tmp_path, corpus, "out", "--overwrite"))["status"] == "done"


def test_dynamic_masking_parameters_are_carried_into_training(tmp_path):
    corpus = _corpus(tmp_path)
    summary = prepare_corpus.main(
        _argv(
            tmp_path,
            corpus,
            "dyn",
            "--dynamic-mask",
            "--mask-prob",
            "0.5",
            "--mask-ratio",
            "1.0",
            "--random-ratio",
            "0.0",
        )
    )
    assert (summary["mask_prob"], summary["mask_ratio"], summary["random_ratio"]) == (0.5, 1.0, 0.0)
    batches = load_dataset(
        str(tmp_path / "dyn" / "shard-*"),
        batch_size=64,
        maxlen=32,
        mask_token_id=4,
        random_token_ids=np.arange(5, 20),
        shuffle=False,
    )
    tokens, labels = (
        np.concatenate(parts) for parts in zip(*[(x["Input-Token"].numpy(), y.numpy()) for x, y in batches])
    )
    content = (tokens > 4).sum() + (labels > 0).sum()
    assert 0.4 < (labels > 0).sum() / content < 0.6  # half the words, not the default 15%
    assert ((tokens == 4) == (labels > 0)).all()  # mask_ratio 1: every selected token is [MASK]
    with pytest.raises(ValueError, match=r"mask_prob=0.15 but the shards' summary.json .* records mask_prob=0.5"):
        load_dataset(
            str(tmp_path / "dyn" / "shard-*"),
            batch_size=8,
            maxlen=32,
            mask_token_id=4,
            random_token_ids=np.arange(5, 20),
            mask_prob=0.15,
        )


def test_packing_joins_documents_without_splitting_them(tmp_path):
    corpus = _corpus(tmp_path)
    plain = prepare_corpus.main(_argv(tmp_path, corpus, "plain", "--seed", "4"))
    packed = prepare_corpus.main(_argv(tmp_path, corpus, "packed", "--seed", "4", "--pack"))
    assert packed["packed"] and packed["sequences"] < plain["sequences"] == plain["examples"]
    records = [tf.train.Example.FromString(r).features.feature for r in _records(tmp_path / "packed")]
    ids = [list(r["token_ids"].int64_list.value) for r in records]
    labels = [list(r["labels"].int64_list.value) for r in records]
    assert all(len(x) <= 32 and x[0] == 2 and x[-1] == 3 for x in ids)  # [CLS] ... [SEP]
    joined = sorted(tuple(seq[1:-1]) for x in ids for seq in [x] for _ in [0])
    pieces = sorted(p for x in ids for p in _split_at_sep(x))
    plain_pieces = sorted(
        p
        for r in _records(tmp_path / "plain")
        for p in _split_at_sep(list(tf.train.Example.FromString(r).features.feature["token_ids"].int64_list.value))
    )
    assert pieces == plain_pieces and joined  # same documents, same masks, none split
    assert sum(len(x) for x in labels) == sum(len(x) for x in ids)


def _split_at_sep(ids, sep=3):
    pieces, current = [], []
    for token in ids[1:]:
        if token == sep:
            pieces.append(tuple(current))
            current = []
        else:
            current.append(token)
    return pieces


def test_a_folder_among_the_inputs_is_read_recursively_in_sorted_order(tmp_path, capsys):
    folder = tmp_path / "corpus"
    (folder / "b").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # names starting with "." are left out
    (folder / ".notes.txt").write_text("private\n")
    (folder / "a.txt").write_text(SENTENCES[0] + "\n", encoding="utf-8")
    (folder / "b" / "z.jsonl").write_text(
        json.dumps({"text": SENTENCES[1]}, ensure_ascii=False)
        + "\n"
        + json.dumps({"body": SENTENCES[3]}, ensure_ascii=False)
        + "\n",
        encoding="utf-8",
    )
    loose = tmp_path / "loose.txt"
    loose.write_text(SENTENCES[2] + "\n", encoding="utf-8")
    summary = prepare_corpus.main(_argv(tmp_path, [folder, loose], "out"))
    assert summary["inputs"] == [str(folder / "a.txt"), str(folder / "b" / "z.jsonl"), str(loose)]
    # z.jsonl read as JSON lines, as a file given by name is: its line without "text" is skipped, not a document
    assert (summary["documents_used"], summary["skipped_by_reason"]["no_text_key"]) == (3, 1)
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / ".DS_Store").write_text("x")
    with pytest.raises(SystemExit) as stopped:
        prepare_corpus.parse_args(_argv(tmp_path, [loose, empty], "out"))
    assert stopped.value.code == 2
    assert (
        f"input {str(empty)!r}: a folder with no file in it (names starting with '.' left out)"
        in capsys.readouterr().err
    )


def _no_work(*args, **kwargs):
    raise AssertionError("the run started working")


def test_an_unwritable_output_dir_is_one_line_naming_it_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prepare_corpus, "run", _no_work)
    (tmp_path / "a_file").write_text("x")
    argv = _argv(tmp_path, _corpus(tmp_path), "a_file/sub")
    assert flags.command_status(prepare_corpus.main, argv) == 2
    assert capsys.readouterr().err == (
        f"prepare_corpus: --output-dir {tmp_path / 'a_file' / 'sub'} is not writable (Not a directory)\n"
    )


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_dir_is_one_line_naming_it_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prepare_corpus, "run", _no_work)
    read_only = tmp_path / "read_only"
    read_only.mkdir(mode=0o555)
    for out in ("read_only", "read_only/sub"):
        assert flags.command_status(prepare_corpus.main, _argv(tmp_path, _corpus(tmp_path), out)) == 2
        assert capsys.readouterr().err == (
            f"prepare_corpus: --output-dir {tmp_path / out} is not writable (Permission denied)\n"
        )
