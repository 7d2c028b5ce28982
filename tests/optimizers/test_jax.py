"""gau_keras.optimizers on Keras 3's JAX backend give TensorFlow's updates.

Every case of tests/optimizers/test_bert4keras.py (each bert4keras factory,
GAU-alpha's chain, AdaFactor, Lion, other orders) plus LAMB, the
PiecewiseLinearDecay schedule and Keras's own accumulation, on the same
weights and 10 gradients: this process (TensorFlow) against one JAX process,
which applies them eagerly (``optimizer.apply``) and inside ``jax.jit``
(``stateless_apply``, the path ``model.fit`` takes on JAX). Bound: 1e-6 of
the largest weight.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.optimizers import test_bert4keras as bert4keras_cases

STEPS = 10
PATTERNS = ["Norm", "bias"]
#: cases beyond the bert4keras ones: name -> (class name in gau_keras.optimizers, constructor arguments)
EXTRA = {
    "lamb": (
        "LAMB",
        {
            "learning_rate": 0.01,
            "weight_decay_rate": 0.05,
            "exclude_from_weight_decay": PATTERNS,
            "exclude_from_layer_adaptation": PATTERNS,
        },
    ),
    "lamb_piecewise_linear_decay": ("LAMB", {"learning_rate": "schedule", "weight_decay_rate": 0.01}),
    "adam_keras_accumulation": ("Adam", {"learning_rate": 0.01, "gradient_accumulation_steps": 3}),
}
CASES = list(bert4keras_cases.CASES) + list(EXTRA)

JAX_RUN = """
import sys
import numpy as np
from tests.optimizers import test_jax as T
np.savez(sys.argv[1], **T.results(jit=False), **{"jit/" + k: v for k, v in T.results(jit=True).items()})
"""


def make_optimizer(case):
    import gau_keras.optimizers as ours

    if case in bert4keras_cases.CASES:
        base, extensions, kwargs = bert4keras_cases.CASES[case]
        return bert4keras_cases.build_class(base, extensions)(**kwargs)
    name, kwargs = EXTRA[case]
    if kwargs["learning_rate"] == "schedule":
        kwargs = dict(kwargs, learning_rate=ours.PiecewiseLinearDecay(0.02, {2: 1.0, 6: 0.1}))
    return getattr(ours, name)(**kwargs)


def _jit_steps(optimizer, variables, gradients):
    """The steps through ``stateless_apply`` under ``jax.jit``; the final state assigned back."""
    import jax

    optimizer.build(variables)
    step = jax.jit(optimizer.stateless_apply)
    trainable, state = [v.value for v in variables], [v.value for v in optimizer.variables]
    for grads in gradients:
        trainable, state = step(state, grads, trainable)
    for v, value in zip(variables, trainable):
        v.assign(value)
    for v, value in zip(optimizer.variables, state):
        v.assign(value)


def run_case(case, inputs, jit=False):
    """Final weights (EMA weights for the EMA cases) after STEPS updates."""
    variables = bert4keras_cases.make_variables(inputs)
    optimizer = make_optimizer(case)
    gradients = [[inputs[f"g{i}"][step] for i in range(len(variables))] for step in range(STEPS)]
    if jit:
        _jit_steps(optimizer, variables, gradients)
    else:
        for grads in gradients:
            optimizer.apply(grads, variables)
    if hasattr(optimizer, "apply_ema_weights"):
        optimizer.apply_ema_weights()
    return [np.asarray(v.numpy()) for v in variables]


def results(jit):
    inputs = bert4keras_cases.make_inputs(STEPS)
    return {f"{case}/{i}": w for case in CASES for i, w in enumerate(run_case(case, inputs, jit=jit))}


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory, requires_jax):
    out = tmp_path_factory.mktemp("jax") / "weights.npz"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", JAX_RUN, str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out))


@pytest.fixture(scope="module")
def tensorflow_results():
    return results(jit=False)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", CASES)
def test_same_updates_on_jax_as_on_tensorflow(jax_results, tensorflow_results, case, jit):
    inputs = bert4keras_cases.make_inputs(STEPS)
    for i, (path, _) in enumerate(bert4keras_cases.VARIABLES):
        want = tensorflow_results[f"{case}/{i}"]
        got = jax_results[("jit/" if jit else "") + f"{case}/{i}"]
        assert np.abs(want - inputs[f"w{i}"]).max() > 1e-4, f"{case} {path}: did not move"
        relative = np.abs(got - want).max() / np.abs(want).max()
        assert relative <= 1e-6, f"{case} {path}: max relative difference {relative:.2e} on JAX"
