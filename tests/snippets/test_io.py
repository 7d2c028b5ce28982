"""gau_keras.snippets.open: the built-in file plus bert4keras's line index."""

import json

import pytest

from gau_keras.snippets import open as b4k_open

LINES = ["第一行\n", "second line\n", "\n", "最后一行，没有换行"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(LINES), encoding="utf-8")
    return path


def test_iteration_keeps_newlines_like_the_builtin(corpus):
    with b4k_open(corpus, encoding="utf-8") as f:
        assert list(f) == LINES
    f = b4k_open(corpus, encoding="utf-8")
    assert f.next() == LINES[0] and next(f) == LINES[1]
    f.close()
    assert f.closed


def test_indexable_random_access(corpus):
    f = b4k_open(corpus, encoding="utf-8", indexable=True)
    assert len(f) == len(LINES)
    assert [f[i] for i in (3, 0, 2, 1, -1)] == [LINES[3], LINES[0], LINES[2], LINES[1], LINES[3]]
    f.seek(0)
    assert f.readline() == LINES[0]
    position = f.tell()
    assert f.read() == "".join(LINES[1:])
    f.seek(position)
    assert f.readlines() == LINES[1:]
    f.close()


def test_index_cache_file_is_written_then_read(corpus, tmp_path):
    cache = tmp_path / "corpus.idx"
    first = b4k_open(corpus, encoding="utf-8", indexable=str(cache))
    offsets = json.loads(cache.read_text())
    assert offsets == first.offsets and len(offsets) == len(LINES)
    cache.write_text(json.dumps(offsets[:2]))  # a stale cache is trusted, as in bert4keras
    assert len(b4k_open(corpus, encoding="utf-8", indexable=str(cache))) == 2


def test_write_and_binary_modes(tmp_path):
    path = tmp_path / "out.txt"
    with b4k_open(path, "w", encoding="utf-8") as f:
        f.write("中文\n")
        f.write(b"bytes\n")  # bytes are decoded first
    assert path.read_text(encoding="utf-8") == "中文\nbytes\n"
    with b4k_open(path, "rb") as f:
        assert f.readline() == "中文\n".encode()


def test_without_index_item_access_is_a_clear_error(corpus):
    with b4k_open(corpus) as f, pytest.raises(TypeError, match="indexable"):
        f[0]
