"""The bert4keras-idiom scripts of tests/bert4keras_scripts/, run on the bundled
model with a few rows of ../shared/data (issue 24, item 6).

Each script is a user's script: ``from gau_keras.X import ...`` exactly as a
bert4keras script imports ``bert4keras.X``, a ``main()`` that trains for one
short epoch and returns what it produced. They run in this process (one
TensorFlow start for all of them); a script whose data is absent is skipped.
They build the bundled model with its first ``LAYERS`` layer only (a bert4keras
``num_hidden_layers`` override): tracing a training step costs ~2 s a layer on
CPU, and what is checked here is the bert4keras API, not the model's quality
(classification trains at 5e-4: at the script's 1e-3 Adam overshoots on one layer).
"""

import os
import pathlib
import runpy
import sys

import numpy as np
import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "bert4keras_scripts"
sys.path.insert(0, str(SCRIPTS))  # the scripts import their shared prologue (prologue.py) as a sibling
LAYERS = 1


def run_script(name, **kwargs):
    """(the script's globals, ``main(**kwargs)``), or a skip naming the missing data file."""
    import keras

    namespace = runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name=f"bert4keras_script_{name}")
    missing = [path for path in namespace["required_files"] if not os.path.exists(path)]
    if missing:
        pytest.skip(f"{name}: data file(s) {missing} absent (set GAU_KERAS_DATA to ../shared/data)")
    keras.utils.set_random_seed(1234)
    return namespace, namespace["main"](num_hidden_layers=LAYERS, **kwargs)


def assert_finite_history(history, key="loss"):
    assert history[key] and np.all(np.isfinite(history[key])), history


def assert_probabilities(probas, shape):
    assert probas.shape == shape
    np.testing.assert_allclose(probas.sum(axis=-1), 1.0, rtol=1e-4)
    assert np.all(probas >= 0)


def test_classification_with_lambda_and_dense():
    _, result = run_script("classification", learning_rate=5e-4)
    assert_finite_history(result["history"])
    assert len(result["history"]["loss"]) == 1 and result["steps"] == 4
    assert result["loss_after"] < result["loss_before"], result
    assert_probabilities(result["predictions"], (32, 2))
    assert 0.0 <= result["accuracy"] <= 1.0


def test_pair_similarity_with_pool():
    _, result = run_script("pair_similarity")
    assert_finite_history(result["history"])
    assert result["pooled_shape"] == (None, 256)  # with_pool: one [CLS] vector per pair
    assert_probabilities(result["probas"], (8, 2))
    # each row holds both sentences: segment 0 then segment 1
    assert np.all(result["segment_ids"].max(axis=1) == 1) and np.all(result["segment_ids"][:, 0] == 0)


def test_crf_sequence_labelling_and_viterbi():
    namespace, result = run_script("crf_ner")
    num_tags = namespace["num_tags"]
    assert result["loss_after"] < result["loss_before"], result
    assert_finite_history(result["history"])
    assert result["trans"].shape == (num_tags, num_tags)
    tokenizer = namespace["tokenizer"]
    for text, path, entities in result["decoded"]:
        assert len(path) == len(tokenizer.tokenize(text, maxlen=namespace["maxlen"]))
        assert 0 <= min(path) and max(path) < num_tags
        assert path[0] == 0 and path[-1] == 0  # starts=[0], ends=[0]: [CLS] / [SEP] tagged O
        for surface, category in entities:
            assert surface and surface in text and category in namespace["categories"]


def test_global_pointer_ner():
    # EfficientGlobalPointer runs the same script (`global_pointer_ner.py efficient`); one pointer here keeps it short
    namespace, result = run_script("global_pointer_ner")
    assert result["loss_after"] < result["loss_before"], result
    scores = result["scores"]
    length = len(namespace["tokenizer"].tokenize(result["texts"][0], maxlen=namespace["maxlen"]))
    assert scores.shape == (len(namespace["categories"]), length, length)
    below = np.tril(np.ones((length, length), bool), k=-1)
    assert np.all(scores[:, below] < -1e3)  # tril_mask: an end before its start never scores
    for text, found in zip(result["texts"], result["entities"]):
        for surface, category in found:
            assert surface in text and category in namespace["categories"]


@pytest.mark.both_backends
def test_unilm_seq2seq_with_autoregressive_decoder():
    namespace, result = run_script("unilm_seq2seq")
    assert_finite_history(result["history"])
    tokenizer = namespace["tokenizer"]
    assert_probabilities(result["first_step_probas"], (tokenizer._vocab_size,))
    decoded = result["beam"] + result["samples"]
    assert len(result["beam"]) == 2 and len(result["samples"]) == 2
    for text in decoded:
        assert isinstance(text, str) and "[SEP]" not in text and "[CLS]" not in text
        assert len(tokenizer.tokenize(text)) - 2 <= namespace["target_maxlen"]


def test_mlm_with_loss_layer_metric_and_lamb_chain():
    _, result = run_script("mlm_lamb")
    assert result["optimizer_class"] == "LAMBLR"
    assert result["iterations"] == result["steps"]
    assert_finite_history(result["history"])
    assert_finite_history(result["history"], "mlm_acc")  # add_metric reaches fit's logs
    for logs in result["evaluated"]:
        assert "mlm_acc" in logs and 0.0 <= logs["mlm_acc"] <= 1.0
    assert result["loss_after"] < result["loss_before"], result


def test_exponential_moving_average_apply_and_reset():
    _, result = run_script("ema")
    trajectory, momentum = result["trajectory"], result["momentum"]
    assert result["iterations"] == len(trajectory) == 4
    assert not np.allclose(result["ema"], result["raw"], atol=1e-6)
    np.testing.assert_array_equal(result["restored"], result["raw"])
    np.testing.assert_array_equal(trajectory[-1], result["raw"])
    # the averages start at zero and are divided by 1 - momentum ** t when applied
    average = np.zeros_like(result["raw"])
    for weights in trajectory:
        average = momentum * average + (1 - momentum) * weights
    np.testing.assert_allclose(result["ema"], average / (1 - momentum ** len(trajectory)), rtol=1e-5, atol=1e-7)


def test_gradient_accumulation_equals_the_big_batch_update():
    _, result = run_script("gradient_accumulation")
    assert result["small_iterations"] == 3 and result["big_iterations"] == 1
    start_kernel = result["initial"][-2]
    kernels = result["kernels"]  # the classifier kernel after each batch of 4
    assert start_kernel.shape == kernels[0].shape
    np.testing.assert_array_equal(kernels[0], start_kernel)  # batch 0: nothing accumulated yet
    np.testing.assert_array_equal(kernels[1], start_kernel)  # batch 1: accumulating
    assert np.abs(kernels[2] - start_kernel).max() > 1e-4  # batch 2: the update of batches 0-1
    moved = max(float(np.abs(a - b).max()) for a, b in zip(result["big_batch"], result["initial"]))
    assert moved > 1e-4
    for big, accumulated in zip(result["big_batch"], result["accumulated"]):
        np.testing.assert_allclose(accumulated, big, rtol=1e-4, atol=1e-5)


def test_to_dataset_under_mirrored_strategy():
    import tensorflow as tf

    _, result = run_script("to_dataset_mirrored")
    inputs, targets = result["element_spec"]
    assert set(inputs) == {"Input-Token", "Input-Segment"}
    # names=(..., ('Probas',)): one target name gives the bare tensor (Keras 3 matches no dict to one output)
    assert isinstance(targets, tf.TensorSpec)
    for spec in [*inputs.values(), targets]:
        assert spec.dtype == tf.float32
    assert inputs["Input-Token"].shape.as_list() == [None, None] and targets.shape.as_list() == [None, 1]
    x, y = result["first_batch"]
    assert x["Input-Token"].shape[0] == 8 and x["Input-Token"].shape == x["Input-Segment"].shape
    lengths = np.count_nonzero(x["Input-Token"].numpy(), axis=1)
    assert lengths.max() == x["Input-Token"].shape[1] and lengths.min() < lengths.max()  # padded per batch
    assert y.shape == (8, 1)
    assert result["replicas"] == len(result["devices"]) >= 1
    assert_finite_history(result["history"])
    assert_finite_history(result["history"], "sparse_categorical_accuracy")


def test_adversarial_training_as_a_train_step():
    _, result = run_script("adversarial_training")
    plain, zero, adversarial = result["plain"], result["epsilon_0"], result["adversarial"]
    for a, b in zip(plain["weights"], zero["weights"]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-8)  # epsilon 0: the ordinary step
    changed = max(float(np.abs(a - b).max()) for a, b in zip(plain["weights"], adversarial["weights"]))
    assert changed > 1e-7
    assert adversarial["loss"][0] > plain["loss"][0]  # taken at embeddings moved up the gradient
    # the perturbation is removed again: the matrix moved by one Adam step (<= learning rate) only
    step = np.abs(adversarial["embeddings"] - result["start_embeddings"]).max()
    assert step <= result["learning_rate"] * 1.01, step


# --- Keras 2's calls, run as bert4keras-era scripts write them (issue 35) ----------------------------


@pytest.mark.both_backends
def test_keras2_generator_methods_give_what_fit_evaluate_predict_give():
    options = dict(dropout_rate=0.0)  # the two runs must draw no different dropout masks
    _, keras2 = run_script("keras2_calls", keras2=True, **options)
    _, keras3 = run_script("keras2_calls", keras2=False, **options)
    assert keras2["num_classes"] == 2
    assert_finite_history(keras2["history"])
    assert keras2["history"]["loss"][1] < keras2["history"]["loss"][0]
    # fit_generator / evaluate_generator / predict_generator: fit / evaluate / predict on the same batches
    for key in ("loss", "kl_divergence"):
        np.testing.assert_allclose(keras2["history"][key], keras3["history"][key], rtol=1e-6)
    np.testing.assert_allclose(keras2["evaluated"], keras3["evaluated"], rtol=1e-6)
    np.testing.assert_allclose(keras2["predicted"], keras3["predicted"], rtol=1e-6, atol=1e-7)
    assert_probabilities(keras2["predicted"], (24, 2))
    # the loss on float64 one-hot targets (cast to the output's dtype) equals the KL metric on them
    np.testing.assert_allclose(keras2["history"]["loss"], keras2["history"]["kl_divergence"], rtol=1e-4)
    # nested Python lists predict what arrays predict; 'best_model.model' reloads as the same model
    np.testing.assert_array_equal(keras2["nested"], keras2["as_arrays"])
    np.testing.assert_array_equal(keras2["reloaded"], keras2["nested"])
    assert keras2["reloaded_type"] == "Model"


@pytest.mark.both_backends
def test_a_shared_layer_answers_get_output_at_for_each_call():
    namespace, result = run_script("shared_layer_outputs")
    assert_finite_history(result["history"])
    assert_probabilities(result["probas"], (8, 2))
    assert result["pool_calls"] == 2 and result["first_input_is_a"]
    assert result["pool_input_shapes"] == [(None, None, 256)] * 2
    assert result["pool_output_shapes"] == [(None, 256)] * 2
    assert result["hidden_layer"].endswith("-Add") and result["hidden_is_output"]


@pytest.mark.both_backends
def test_layer_surgery_trains_the_successor_inside_the_mixed_model():
    _, result = run_script("layer_surgery")
    assert_finite_history(result["history"])
    assert result["successor_moved"] > 1e-4  # its layers, applied to the predecessor's inputs, trained
    assert result["predecessor_moved"] == 0.0  # frozen, as the script asks
    assert_probabilities(result["student_probas"], (8, 2))
    # in inference every switch takes the successor's side: the mixed graph is the successor's own model
    np.testing.assert_allclose(result["theseus_probas"], result["student_probas"], rtol=1e-5, atol=1e-6)
