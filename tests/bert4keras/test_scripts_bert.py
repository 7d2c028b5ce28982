"""bert4keras-idiom scripts on bert4keras's default model='bert' (and model='albert'), from
checkpoints the ORIGINAL bert4keras wrote (issue 38, item 5).

tests/bert4keras/test_scripts.py runs the scripts of tests/bert4keras_scripts/ on the bundled
GAU-alpha; the *_bert.py / *_albert.py scripts there are what a bert4keras user with a Google
BERT / ALBERT checkpoint writes: ``build_transformer_model(config_path, checkpoint_path)`` with
the default model (or ``model='albert'``), reading the folder named by ``$BERT_DIR`` /
``$ALBERT_DIR`` (prologue.checkpoint_folder). Here that folder holds a tiny model with the real
12000-token vocab of ../shared/data: bert4keras (0.11.5, in a subprocess:
tests/reference/harness.py) builds it with every head (pooler, NSP, MLM), moves its weights off
their initial values with seeded noise and saves it with its own ``save_weights_as_checkpoint``;
the variables come back as arrays and are written with ``gau_keras.checkpoints.save_checkpoint``
(the reference's results are cached, so the JAX pass starts no bert4keras). Every script trains
one short epoch (the MLM one step) on a few rows of ../shared/data; the tests are skipped when
that data is absent.
"""

import json
import os
import pathlib
import runpy
import shutil
import sys

import numpy as np
import pytest

from tests.bert4keras.test_scripts import assert_finite_history, assert_probabilities
from tests.conftest import SHARED_DATA
from tests.reference.harness import run_bert4keras_code

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "bert4keras_scripts"
sys.path.insert(0, str(SCRIPTS))  # the scripts import their shared prologue (prologue.py) as a sibling
VOCAB = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"

#: bert_config.json of the tiny checkpoints (ALBERT adds a factorised embedding of 16)
BERT_CONFIG = {
    "vocab_size": 12000,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}
ALBERT_CONFIG = dict(BERT_CONFIG, embedding_size=16)

#: run by the original bert4keras (TF1 graph mode): a random model with every head, its weights
#: moved by seeded noise of std 0.2 (about Glorot's scale at width 32: at BERT's 0.02
#: initialisation the [CLS] vector hardly depends on the text; the noise also moves biases and
#: norms off 0 / 1), saved as bert4keras saves a checkpoint and read back: ``outputs`` maps each
#: checkpoint variable's name to its value, and ``probe:mlm`` to the MLM probabilities of ``inputs``
WRITE_CHECKPOINT = """
import os
import tempfile

from bert4keras.models import build_transformer_model

bert = build_transformer_model(None, model=%(model)r, with_pool=True, with_nsp=True, with_mlm=True,
                               return_keras_model=False, **%(config)r)
noise = np.random.RandomState(%(seed)d)
values = K.batch_get_value(bert.model.weights)
K.batch_set_value([(w, v + 0.2 * noise.randn(*v.shape).astype(v.dtype))
                   for w, v in zip(bert.model.weights, values)])
outputs['probe:mlm'] = bert.model.predict([inputs['token_ids'], inputs['segment_ids']])[-1]
with tempfile.TemporaryDirectory() as folder:
    prefix = os.path.join(folder, 'bert_model.ckpt')
    bert.save_weights_as_checkpoint(prefix)
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
        outputs[name] = reader.get_tensor(name)
"""


#: the MLM script's sentence and the positions it masks ([CLS] is 0): bert4keras fills them in too
PROBE_TEXT, PROBE_MASKED = "我们在北京大学学习中文", (4, 5)  # 北京


def probe_inputs():
    """The token and segment ids [1, L] of PROBE_TEXT with PROBE_MASKED masked."""
    from gau_keras.tokenizers import Tokenizer

    tokenizer = Tokenizer(str(VOCAB), do_lower_case=True)
    token_ids, segment_ids = tokenizer.encode(PROBE_TEXT)
    for i in PROBE_MASKED:
        token_ids[i] = tokenizer._token_mask_id
    return {"token_ids": np.array([token_ids]), "segment_ids": np.array([segment_ids])}


def write_checkpoint_folder(folder, model, config, seed):
    """``folder`` in Google's layout (bert_config.json, bert_model.ckpt.*, vocab.txt) holding
    the checkpoint bert4keras writes for ``model``; returns its {variable name: array} and
    bert4keras's MLM probabilities of ``probe_inputs()`` ('probe:mlm')."""
    from gau_keras.checkpoints import save_checkpoint

    variables = run_bert4keras_code(
        WRITE_CHECKPOINT % {"model": model, "config": config, "seed": seed}, probe_inputs(), graph=True, seed=seed
    )
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(str(folder / "bert_model.ckpt"), {k: v for k, v in variables.items() if ":" not in k})
    (folder / "bert_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    shutil.copyfile(VOCAB, folder / "vocab.txt")
    return variables


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{'bert': (folder, variables), 'albert': (folder, variables)}, written once for the module."""
    if not VOCAB.is_file():
        pytest.skip(f"the vocab {VOCAB} is absent: these scripts need ../shared/data (set GAU_KERAS_DATA)")
    root = tmp_path_factory.mktemp("bert4keras_checkpoints")
    return {
        model: (root / model, write_checkpoint_folder(root / model, model, config, seed))
        for seed, (model, config) in enumerate([("bert", BERT_CONFIG), ("albert", ALBERT_CONFIG)], 1)
    }


def run_script(name, folder, variable="BERT_DIR", skip_main=False, **kwargs):
    """(the script's globals, ``main(**kwargs)`` or None with ``skip_main``) with ``$variable``
    naming ``folder``, or a skip naming the missing data file."""
    import keras

    before = os.environ.get(variable)
    os.environ[variable] = str(folder)  # read when the script starts (its config_path, its tokenizer)
    try:
        namespace = runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name=f"bert4keras_script_{name}")
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before
    missing = [path for path in namespace["required_files"] if not os.path.exists(path)]
    if missing:
        pytest.skip(f"{name}: data file(s) {missing} absent (set GAU_KERAS_DATA to ../shared/data)")
    assert namespace["config_path"] == str(folder / "bert_config.json")
    keras.utils.set_random_seed(1234)
    return namespace, None if skip_main else namespace["main"](**kwargs)


@pytest.mark.parametrize("model", ["bert", "albert"])
def test_classification_on_the_pooled_cls_vector(checkpoints, model):
    folder, variables = checkpoints[model]
    # 2e-3: the script's 2e-5 is for a pretrained BERT; this one is tiny and random
    _, result = run_script("classification_bert", folder, model=model, learning_rate=2e-3)
    assert result["pooled_shape"] == (None, BERT_CONFIG["hidden_size"])  # with_pool: one vector a text
    # the pooler is the checkpoint's (the script reads it right after building)
    np.testing.assert_array_equal(result["pooler_kernel"], variables["bert/pooler/dense/kernel"])
    assert_finite_history(result["history"])
    assert len(result["history"]["loss"]) == 1 and result["steps"] == 4
    assert np.isfinite(result["loss_before"]) and result["loss_after"] < result["loss_before"], result
    assert_probabilities(result["probas"], (32, 2))
    assert 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.both_backends
def test_albert_unilm_seq2seq_decoded_by_beam_search(checkpoints):
    folder, _ = checkpoints["albert"]
    namespace, result = run_script("unilm_seq2seq_albert", folder, variable="ALBERT_DIR")
    tokenizer, keep_tokens = namespace["tokenizer"], namespace["keep_tokens"]
    vocab_size = len(keep_tokens)
    assert vocab_size == tokenizer._vocab_size < BERT_CONFIG["vocab_size"]  # simplified, then kept
    assert result["output_shape"] == (None, None, vocab_size)  # unilm: the MLM head's probas
    assert_finite_history(result["history"])
    assert len(result["history"]["loss"]) == 1
    assert_probabilities(result["first_probas"], (vocab_size,))
    end_id, maxlen = tokenizer._token_end_id, namespace["max_keywords_len"]
    assert len(result["beams"]) == 2
    for output_ids, text in result["beams"]:
        output_ids = np.asarray(output_ids)
        assert output_ids.ndim == 1 and 1 <= len(output_ids) <= maxlen
        assert np.issubdtype(output_ids.dtype, np.integer)
        assert output_ids.min() >= 0 and output_ids.max() < vocab_size
        assert end_id not in output_ids[:-1]  # [SEP] ends a beam
        assert isinstance(text, str) and text == tokenizer.decode(output_ids)
        assert "[SEP]" not in text and "[CLS]" not in text
    # one beam is greedy decoding: each id is the argmax of predict on the ids before it (4 steps:
    # on JAX each new length costs a few seconds of tracing)
    generator = namespace["KeywordGenerator"](result["generator"].model, start_id=None, end_id=end_id, maxlen=4)
    abstract = namespace["load_data"](namespace["required_files"][0], 1)[0][0]
    token_ids, segment_ids = generator.encode(abstract)
    greedy = generator.beam_search([token_ids, segment_ids], topk=1)
    assert greedy[0] == result["first_probas"].argmax()
    for step in range(1, len(greedy)):
        probas, _ = generator.predict([np.array([token_ids]), np.array([segment_ids])], greedy[None, :step], None)
        assert probas.shape == (1, vocab_size) and greedy[step] == probas[0].argmax()
    assert greedy[-1] == end_id or len(greedy) == 4


def test_crf_ner_on_a_named_bert_layer(checkpoints):
    folder, _ = checkpoints["bert"]
    # 1e-3: the script's 2e-5 is for a pretrained BERT; this one is tiny and random
    namespace, result = run_script("crf_ner_bert", folder, learning_rate=1e-3)
    num_labels, categories = namespace["num_labels"], namespace["categories"]
    assert result["output_layer"] == "Transformer-1-FeedForward-Norm"  # bert4keras's name of the last block
    assert_finite_history(result["history"])
    assert_finite_history(result["history"], "sparse_accuracy")
    assert np.isfinite(result["loss_before"]) and result["loss_after"] < result["loss_before"], result
    assert result["trans"].shape == (num_labels, num_labels) and np.all(np.isfinite(result["trans"]))
    tokenizer = namespace["tokenizer"]
    assert len(result["decoded"]) == 8
    for text, path, spans in result["decoded"]:
        path = np.asarray(path)
        assert path.shape == (len(tokenizer.tokenize(text, maxlen=namespace["maxlen"])),)
        assert np.issubdtype(path.dtype, np.integer) and path.min() >= 0 and path.max() < num_labels
        assert path[0] == 0 and path[-1] == 0  # starts=[0], ends=[0]: [CLS] and [SEP] tagged O
        for start, end, category in spans:
            assert 0 <= start <= end < len(text) and category in categories
    f1, precision, recall = result["f1"]
    assert all(0.0 <= value <= 1.0 for value in (f1, precision, recall))
    # each path is the best one under the tagger's scores and trans (a dynamic programme here)
    for text, path, _ in result["decoded"][:3]:
        token_ids = tokenizer.encode(text, maxlen=namespace["maxlen"])[0]
        nodes = result["tagger"].predict([np.array([token_ids]), np.zeros((1, len(token_ids)))], verbose=0)[0]
        best = best_path_score(nodes, result["trans"])
        score = nodes[np.arange(len(path)), path].sum() + result["trans"][path[:-1], path[1:]].sum()
        np.testing.assert_allclose(score, best, rtol=1e-5)


def best_path_score(nodes, trans):
    """The highest score of a tag path starting and ending with tag 0: sum of node scores and transitions."""
    scores = np.full(nodes.shape[1], -np.inf)
    scores[0] = nodes[0, 0]
    for row in nodes[1:]:
        scores = (scores[:, None] + trans).max(axis=0) + row
    return scores[0]


def test_global_pointer_ner_with_sparse_targets(checkpoints):
    folder, _ = checkpoints["bert"]
    # 2e-3: the script's 2e-5 is for a pretrained BERT; this one is tiny and random
    namespace, result = run_script("global_pointer_ner_bert", folder, learning_rate=2e-3)
    categories, tokenizer = namespace["categories"], namespace["tokenizer"]
    assert_finite_history(result["history"])
    assert np.isfinite(result["loss_before"]) and result["loss_after"] < result["loss_before"], result
    scores = result["scores"]
    length = len(tokenizer.tokenize(result["texts"][0], maxlen=namespace["maxlen"]))
    assert scores.shape == (len(categories), length, length)
    below = np.tril(np.ones((length, length), bool), k=-1)
    assert np.all(scores[:, below] < -1e3)  # tril_mask: an end before its start never scores
    for text, found in zip(result["texts"], result["entities"]):
        for start, end, category in found:
            assert 0 <= start <= end < len(text) and category in categories
    assert all(0.0 <= value <= 1.0 for value in result["f1"])
    # the sparse loss is the multi-label loss of the dense 0/1 span targets (span (0, 0) left out)
    generator = namespace["data_generator"](namespace["load_data"](namespace["required_files"][0], 8), 8)
    x, y_true = next(iter(generator))
    assert y_true.ndim == 4 and y_true.shape[:2] == (8, len(categories)) and y_true.shape[3] == 2
    assert y_true.sum() > 0  # the first 8 texts hold entities
    y_pred = result["model"].predict(x, verbose=0)
    sparse = float(np.asarray(namespace["sparse_global_pointer_loss"](y_true.astype("float32"), y_pred)))
    np.testing.assert_allclose(sparse, dense_span_loss(y_true, y_pred), rtol=1e-4)


def dense_span_loss(spans, logits):
    """Mean over (text, category) of log(1 + sum_pos e^-s) + log(1 + sum_neg e^s) over its spans but (0, 0)."""
    losses = []
    for text_spans, text_logits in zip(spans, logits):
        for pairs, scores in zip(text_spans, text_logits):
            positive = np.zeros(scores.shape, bool)
            positive[pairs[:, 0], pairs[:, 1]] = True
            positive, scores = positive.ravel()[1:], scores.ravel()[1:].astype(np.float64)
            losses.append(
                np.logaddexp.reduce(np.append(-scores[positive], 0.0))
                + np.logaddexp.reduce(np.append(scores[~positive], 0.0))
            )
    return np.mean(losses)


def test_mlm_fills_in_masks_and_one_step_lowers_the_loss(checkpoints):
    folder, reference = checkpoints["bert"]
    namespace, result = run_script("mlm_bert", folder, text=PROBE_TEXT, masked=PROBE_MASKED)
    vocab_size = BERT_CONFIG["vocab_size"]
    assert result["output_shape"] == (None, None, vocab_size)  # with_mlm=True: probabilities
    np.testing.assert_array_equal(result["token_ids"], probe_inputs()["token_ids"][0])
    assert_probabilities(result["probas"], (len(PROBE_MASKED), vocab_size))
    # the head as bert4keras computes it from the same checkpoint
    np.testing.assert_allclose(result["probas"], reference["probe:mlm"][0, list(PROBE_MASKED)], rtol=1e-4, atol=1e-7)
    tokenizer = namespace["tokenizer"]
    assert result["predicted"] == tokenizer.decode(reference["probe:mlm"][0, list(PROBE_MASKED)].argmax(axis=1))
    assert isinstance(result["predicted"], str) and result["predicted"]
    x, y = result["x"], result["y"]
    assert np.count_nonzero(y) > 0 and np.all(x[0][y > 0] == tokenizer._token_mask_id)  # targets are masked
    assert np.isfinite(result["trained"]) and np.isfinite(result["loss_before"])
    assert result["loss_after"] < result["loss_before"], result
    assert all(0.0 <= value <= 1.0 for value in result["accuracy"])
    # the compiled loss is the cross entropy at the masked positions (the script's model, now trained)
    probas = result["model"].predict(x, verbose=0)
    expected = -np.log(np.take_along_axis(probas, y[..., None].astype(int), axis=-1)[..., 0][y > 0]).mean()
    np.testing.assert_allclose(result["loss_after"], expected, rtol=1e-4)


def test_mlm_accuracy_as_a_compiled_metric(checkpoints):
    """A metric function that reduces to a number on an output with a Keras mask (with_mlm: the token
    mask) is averaged as it is, as Keras 2 did (Keras 3 alone fails spreading the mask over it)."""
    folder, _ = checkpoints["bert"]
    namespace, _ = run_script("mlm_bert", folder, skip_main=True)
    model = namespace["build_transformer_model"](namespace["config_path"], namespace["checkpoint_path"], with_mlm=True)
    model.compile(loss=namespace["mlm_loss"], optimizer="adam", metrics=[namespace["mlm_acc"]])
    x, y = namespace["masked_batch"](namespace["load_texts"](namespace["required_files"][0], 8))
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    probas = model.predict(x, verbose=0)
    np.testing.assert_allclose(logs["mlm_acc"], (probas.argmax(-1) == y)[y > 0].mean(), rtol=1e-5)
