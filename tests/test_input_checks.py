"""gau_keras.input_checks: ids and lengths of eager inputs checked against the model's tables (issue 51,
items 8 and 9), on both backends."""

import numpy as np
import pytest

from gau_keras import input_checks
from gau_keras.fill_mask import fill_mask
from gau_keras.models import build_transformer_model
from gau_keras.pretrained import default_model_dir, load_pretrained

pytestmark = pytest.mark.both_backends

TINY = dict(
    vocab_size=20,
    hidden_size=8,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=16,
    hidden_act="gelu",
    max_position_embeddings=16,
    type_vocab_size=2,
)


def tiny(model="bert", **overrides):
    return build_transformer_model(None, None, model=model, **dict(TINY, **overrides))


def ids(length=5, value=3):
    return [np.full((2, length), value), np.zeros((2, length), dtype="int64")]


@pytest.mark.parametrize("call", ["predict", "predict_on_batch", "evaluate", "fit", "train_on_batch"])
@pytest.mark.parametrize(
    "x, message",
    [
        (ids(value=20), r"input Input-Token holds the id 20, outside \[0, 20\) \(the model's vocab_size=20\)"),
        (ids(value=-1), r"input Input-Token holds the id -1, outside \[0, 20\)"),
        (
            [np.ones((2, 5)), np.full((2, 5), 2)],
            r"input Input-Segment holds the id 2, outside \[0, 2\) "
            r"\(the model's type_vocab_size=2\)",
        ),
        (ids(length=17), r"input Input-Token is 17 tokens long, longer than the model's 16 positions"),
    ],
)
def test_ids_outside_the_tables_and_lengths_past_the_positions_are_named(call, x, message):
    model = tiny()
    model.compile("sgd", "mse")
    y = np.zeros((2, x[0].shape[1], 8))
    run = {
        "predict": lambda: model.predict(x, verbose=0),
        "predict_on_batch": lambda: model.predict_on_batch(x),
        "evaluate": lambda: model.evaluate(x, y, verbose=0),
        "fit": lambda: model.fit(x, y, verbose=0),
        "train_on_batch": lambda: model.train_on_batch(x, y),
    }[call]
    with pytest.raises(ValueError, match=f"{call}: {message}"):
        run()


def test_in_range_inputs_nested_lists_and_dicts_are_checked_and_run():
    model = tiny()
    assert model.predict(ids(length=16, value=19), verbose=0).shape == (2, 16, 8)
    with pytest.raises(ValueError, match="input Input-Token holds the id 25"):
        model.predict([[[1, 25]], [[0, 0]]], verbose=0)  # nested lists, as Keras 2 read them
    with pytest.raises(ValueError, match="input Input-Segment holds the id -3"):
        model.predict({"Input-Token": np.ones((1, 3)), "Input-Segment": np.full((1, 3), -3)}, verbose=0)


def test_rope_models_have_no_position_table_and_no_length_limit():
    model = tiny("roformer_v2")
    assert input_checks.max_length(model) is None
    assert input_checks.id_bounds(model)["Input-Token"] == (20, "vocab_size")
    assert model.predict(ids(length=40), verbose=0).shape == (2, 40, 8)
    with pytest.raises(ValueError, match="input Input-Token holds the id 20"):
        model.predict(ids(length=40, value=20), verbose=0)


def test_fill_mask_names_a_foreign_vocab_and_a_text_past_the_positions():
    model, tokenizer = load_pretrained(default_model_dir(), with_mlm=True)
    small = tiny(with_mlm=True, vocab_size=100)
    with pytest.raises(ValueError, match=r"the tokenizer has \d+ tokens but the model's token table has 100 rows"):
        fill_mask(small, tokenizer, "今天[MASK]。")
    bert = tiny(with_mlm=True, vocab_size=tokenizer.vocab_size)
    with pytest.raises(ValueError, match=r"the text has 2\d tokens, more than the model's 16 positions"):
        fill_mask(bert, tokenizer, "今天天气很[MASK]，" * 3)
    assert len(fill_mask(model, tokenizer, "今天天气很[MASK]。" * 70)) == 70  # GAU-alpha: RoPE, 562 tokens
