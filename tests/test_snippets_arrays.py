"""gau_keras.snippets.arrays (bert4keras parity: tests/test_snippets_parity.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gau_keras.snippets import arrays


def test_to_array_one_or_several():
    assert isinstance(arrays.to_array([1, 2]), np.ndarray)
    a, b = arrays.to_array([[1]], [2.5])
    assert a.shape == (1, 1) and b.dtype == np.float64


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(1, 9), max_size=7), min_size=1, max_size=5),
       st.one_of(st.none(), st.integers(0, 9)), st.sampled_from(["post", "pre"]), st.integers(-2, 2))
def test_sequence_padding_shapes_and_values(seqs, length, mode, value):
    out = arrays.sequence_padding(seqs, length=length, value=value, mode=mode)
    target = max(len(s) for s in seqs) if length is None else length
    assert out.shape == (len(seqs), target)
    for row, s in zip(out, seqs):
        kept = s[:target]
        pad = [value] * (target - len(kept))
        assert row.tolist() == (kept + pad if mode == "post" else pad + kept)


def test_sequence_padding_dtypes_and_seq_dims():
    assert arrays.sequence_padding([[1, 2], [3]]).dtype == np.int64
    floats = arrays.sequence_padding([np.ones((2, 3), "float32"), np.ones((1, 3), "float32")], value=-1)
    assert floats.dtype == np.float32 and floats.shape == (2, 2, 3) and (floats[1, 1] == -1).all()
    grids = [np.ones((2, 2)), np.ones((3, 3))]
    out = arrays.sequence_padding(grids, seq_dims=2)
    assert out.shape == (2, 3, 3) and out[0, 2].sum() == 0 and out[0, :2, :2].sum() == 4
    out = arrays.sequence_padding(grids, length=[2, 4], seq_dims=2, mode="pre")
    assert out.shape == (2, 2, 4) and out[0, :, :2].sum() == 0


def test_sequence_padding_errors():
    with pytest.raises(ValueError, match="mode"):
        arrays.sequence_padding([[1]], mode="middle")
    with pytest.raises(ValueError, match="empty"):
        arrays.sequence_padding([])


def test_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1001.0, 999.0], [0.0, 0.0, 0.0]])
    p = arrays.softmax(x)
    assert np.allclose(p.sum(-1), 1) and np.allclose(p[1], 1 / 3)
    assert p[0].argmax() == 1
    assert np.allclose(arrays.softmax(x, axis=0).sum(0), 1)


def test_orthogonally_resize_keeps_norm_and_blocks():
    a = np.arange(1.0, 9.0).reshape(2, 4)
    b = arrays.orthogonally_resize(a, (2, 8))
    assert b.shape == (2, 8)
    assert np.isclose(np.linalg.norm(b), np.linalg.norm(a))
    assert np.allclose(b[0] / b[0, 0], [1, 2, 1, 2, 3, 4, 3, 4])    # windows of 2 repeated
    with pytest.raises(ValueError, match="new_shape"):
        arrays.orthogonally_resize(a, (2,))
