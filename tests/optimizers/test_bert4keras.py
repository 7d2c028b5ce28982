"""gau_keras.optimizers against the original bert4keras 0.11.5 optimizers, step by step.

One reference process (tests/reference) runs every case below on the same
initial weights and gradient sequences; each case here must end on its
weights (≤ 1e-6 of the largest weight) after STEPS updates, enough for
several accumulation cycles, lookahead syncs and schedule knots.
"""

import numpy as np
import pytest

import gau_keras.optimizers as ours
from tests.reference.harness import run_bert4keras_code

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

STEPS = 9
# (path, shape): "Norm" and "bias" are exclusion patterns below; the 6x5 kernel
# is factored by AdaFactor with min_dim_size_to_factor=4; lazy optimisation
# acts on "Embedding" (its gradients have all-zero rows).
VARIABLES = [
    ("Encoder-Dense/kernel", (6, 5)),
    ("Encoder-Dense/bias", (5,)),
    ("Encoder-Norm/gamma", (5,)),
    ("Embedding-Token/embeddings", (7, 3)),
]
GAU_ALPHA = ["weight_decay", "layer_adaptation", "piecewise_linear_lr", "gradient_accumulation"]
# name: (base class, extensions innermost first, constructor arguments)
CASES = {
    "adam": ("Adam", [], {"learning_rate": 0.01}),
    "adam_no_bias_correction": ("Adam", [], {"learning_rate": 0.01, "bias_correction": False}),
    "weight_decay": (
        "Adam",
        ["weight_decay"],
        {"learning_rate": 0.01, "weight_decay_rate": 0.1, "exclude_from_weight_decay": ["Norm", "bias"]},
    ),
    "layer_adaptation": (
        "Adam",
        ["layer_adaptation"],
        {"learning_rate": 0.01, "exclude_from_layer_adaptation": ["Norm"]},
    ),
    "piecewise_linear_lr": ("Adam", ["piecewise_linear_lr"], {"learning_rate": 0.02, "lr_schedule": {2: 1.0, 5: 0.2}}),
    "gradient_accumulation": ("Adam", ["gradient_accumulation"], {"learning_rate": 0.01, "grad_accum_steps": 3}),
    "lookahead": ("Adam", ["lookahead"], {"learning_rate": 0.01, "steps_per_slow_update": 3, "slow_step_size": 0.6}),
    "lazy_optimization": (
        "Adam",
        ["lazy_optimization"],
        {"learning_rate": 0.01, "include_in_lazy_optimization": ["Embedding"]},
    ),
    "exponential_moving_average": (
        "Adam",
        ["exponential_moving_average"],
        {"learning_rate": 0.01, "ema_momentum": 0.8},
    ),
    "parameter_wise_lr": (
        "Adam",
        ["parameter_wise_lr"],
        {"learning_rate": 0.01, "paramwise_lr_schedule": {"Norm": 0.1, "Dense": 3.0, "kernel": 0.5}},
    ),
    # GAU-α's train.py: its settings, and again with exclusions and a schedule that moves within STEPS.
    "gau_alpha_train_py": (
        "Adam",
        GAU_ALPHA,
        {
            "learning_rate": 1.76e-3,
            "bias_correction": False,
            "weight_decay_rate": 0.01,
            "grad_accum_steps": 4,
            "lr_schedule": {0: 1, 160000: 0.5, 640000: 0.1, 1280000: 0.01},
        },
    ),
    "gau_alpha_fast_schedule": (
        "Adam",
        GAU_ALPHA,
        {
            "learning_rate": 0.05,
            "bias_correction": False,
            "weight_decay_rate": 0.1,
            "exclude_from_weight_decay": ["Norm", "bias"],
            "grad_accum_steps": 2,
            "lr_schedule": {2: 1.0, 6: 0.3},
        },
    ),
    "adafactor": ("AdaFactor", [], {"min_dim_size_to_factor": 4}),
    "adafactor_relative_step": (
        "AdaFactor",
        [],
        {
            "learning_rate": None,
            "beta1": 0.5,
            "beta2": 0.99,
            "min_dim_size_to_factor": 4,
            "exclude_from_parameter_scale": ["bias"],
        },
    ),
    "lion": ("Lion", [], {"learning_rate": 0.01}),
    # Other orders: decay outside accumulation acts at every micro-step; lookahead inside accumulation
    # syncs on delayed updates only; a long AdaFactor chain.
    "weight_decay_outside_accumulation": (
        "Adam",
        ["gradient_accumulation", "weight_decay"],
        {"learning_rate": 0.01, "weight_decay_rate": 0.05, "grad_accum_steps": 2},
    ),
    "accumulated_lookahead_paramwise": (
        "Adam",
        ["parameter_wise_lr", "lookahead", "gradient_accumulation"],
        {
            "learning_rate": 0.01,
            "paramwise_lr_schedule": {"bias": 4.0},
            "steps_per_slow_update": 2,
            "grad_accum_steps": 2,
            "bias_correction": False,
        },
    ),
    "adafactor_chain": (
        "AdaFactor",
        ["piecewise_linear_lr", "lazy_optimization", "layer_adaptation", "exponential_moving_average"],
        {
            "learning_rate": 0.01,
            "min_dim_size_to_factor": 4,
            "lr_schedule": {3: 1.0},
            "include_in_lazy_optimization": ["Embedding"],
            "exclude_from_layer_adaptation": ["gamma"],
            "ema_momentum": 0.9,
        },
    ),
}
EMA_CASES = [k for k, (_, exts, _) in CASES.items() if "exponential_moving_average" in exts]

REFERENCE = """
import bert4keras.optimizers as O
CASES, PATHS, STEPS = %r, %r, %d
for case, (base, extensions, kwargs) in CASES.items():
    cls = getattr(O, base)
    for extension in extensions:
        cls = getattr(O, "extend_with_" + extension)(cls)
    variables = [tf.Variable(inputs["w%%d" %% i], name=path) for i, path in enumerate(PATHS)]
    optimizer = cls(**kwargs)
    for step in range(STEPS):
        optimizer.apply_gradients([(tf.constant(inputs["g%%d" %% i][step]), v) for i, v in enumerate(variables)])
    if "exponential_moving_average" in extensions:
        optimizer.apply_ema_weights()
    for i, v in enumerate(variables):
        outputs["%%s__%%d" %% (case, i)] = v.numpy()
outputs["names"] = np.array([v.name for v in variables])
"""


def make_inputs(steps=STEPS):
    rng = np.random.default_rng(24)
    inputs = {}
    for i, (path, shape) in enumerate(VARIABLES):
        inputs[f"w{i}"] = rng.normal(size=shape).astype("float32")
        grads = rng.normal(size=(steps,) + shape).astype("float32")
        if path.startswith("Embedding"):
            grads *= rng.random((steps, shape[0], 1)) < 0.5  # rows not looked up: zero gradient
        inputs[f"g{i}"] = grads
    return inputs


@pytest.fixture(scope="module")
def reference():
    inputs = make_inputs()
    code = REFERENCE % (CASES, [p for p, _ in VARIABLES], STEPS)
    return inputs, run_bert4keras_code(code, inputs)


def build_class(base, extensions):
    cls = getattr(ours, base)
    for extension in extensions:
        cls = getattr(ours, "extend_with_" + extension)(cls)
    return cls


def make_variables(inputs):
    import keras

    variables = []
    for i, (path, _) in enumerate(VARIABLES):
        scope, leaf = path.split("/")
        with keras.name_scope(scope):
            variables.append(keras.Variable(inputs[f"w{i}"], name=leaf))
    assert [v.path for v in variables] == [p for p, _ in VARIABLES]
    return variables


def run_ours(case, inputs, steps=STEPS):
    base, extensions, kwargs = CASES[case]
    variables = make_variables(inputs)
    optimizer = build_class(base, extensions)(**kwargs)
    for step in range(steps):
        optimizer.apply([inputs[f"g{i}"][step] for i in range(len(variables))], variables)
    if "exponential_moving_average" in extensions:
        optimizer.apply_ema_weights()
    return [v.numpy() for v in variables]


def test_reference_sees_tf1_names_the_patterns_also_match(reference):
    _, outputs = reference
    assert list(outputs["names"]) == [p + ":0" for p, _ in VARIABLES]


@pytest.mark.parametrize("case", list(CASES))
def test_same_weights_as_bert4keras(reference, case):
    inputs, outputs = reference
    got = run_ours(case, inputs)
    for i, (path, _) in enumerate(VARIABLES):
        want = outputs[f"{case}__{i}"]
        moved = np.abs(want - inputs[f"w{i}"]).max()
        assert moved > 1e-4, f"{case} {path}: the reference did not move ({moved})"
        relative = np.abs(got[i] - want).max() / np.abs(want).max()
        assert relative <= 1e-6, f"{case} {path}: max relative difference {relative:.2e}"


def test_exclusions_and_options_change_the_result(reference):
    """Guards the parity test: the options exercised there have visible effects."""
    inputs, outputs = reference
    differs = lambda case, i: np.abs(outputs[f"{case}__{i}"] - outputs[f"adam__{i}"]).max() > 1e-5
    assert differs("weight_decay", 0) and not differs("weight_decay", 1) and not differs("weight_decay", 2)
    assert differs("layer_adaptation", 0) and not differs("layer_adaptation", 2)
    assert differs("lazy_optimization", 3) and not differs("lazy_optimization", 0)
    assert differs("gau_alpha_fast_schedule", 0)
