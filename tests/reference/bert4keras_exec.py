"""Run a snippet of code against the ORIGINAL bert4keras (0.11.5) in its own process.

Used through ``tests/reference/harness.py::run_bert4keras_code``; never imported by
the test process (bert4keras needs Keras 2, the tests run Keras 3)::

    python bert4keras_exec.py --code snippet.py --inputs in.npz --output out.npz [--graph]

The snippet runs with these names defined: ``np``, ``tf``, ``keras`` (tf_keras),
``K`` (its backend), ``bert4keras`` and ``inputs`` (a dict of the arrays of
``in.npz``; strings are stored as numpy unicode arrays), and in graph mode
``session()``, the Keras session. It puts what it
computed into the dict ``outputs`` (values converted with ``np.asarray``;
tensors are evaluated first, in the session in graph mode).

Compatibility shim, applied inside this process only (the library itself is not
modified), on top of ``bert4keras_forward.py``'s (tf_keras, TF1 names):

  * ``--graph``: TF1 graph mode (``tf.compat.v1.disable_v2_behavior()``), the
    mode bert4keras's ``K.update``-based optimizers were written for, with
    resource variables. Without
    it the snippet runs eagerly (enough for the backend functions and layers).
  * ``keras.optimizers.Optimizer`` is tf_keras's *legacy* optimizer base class
    (``_set_hyper``, ``_resource_apply_dense``, slots), which bert4keras's
    optimizers subclass: tf_keras >= 2.11 made ``keras.optimizers.Optimizer``
    the new API, which has none of those, so bert4keras's optimizers cannot be
    constructed without this alias.
"""

import argparse
import os
import sys

import numpy as np

EXIT_MISSING_PACKAGE = 3


def _import(graph):
    os.environ["TF_KERAS"] = "1"
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
        import tf_keras  # noqa: F401  (TF_USE_LEGACY_KERAS needs it)
    except ModuleNotFoundError as e:
        print("missing package: %s" % e.name, file=sys.stderr)
        sys.exit(EXIT_MISSING_PACKAGE)
    if graph:
        tf.compat.v1.disable_v2_behavior()
        # resource variables (as Keras makes): the legacy optimizer's slots cannot
        # be made from the ref-typed initial values of TF1's classic variables
        tf.compat.v1.enable_resource_variables()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    if not hasattr(tf, "Session"):
        tf.Session = tf.compat.v1.Session
    if not hasattr(tf.train, "Saver"):
        tf.train.Saver = tf.compat.v1.train.Saver
    keras = tf.keras
    keras.optimizers.Optimizer = keras.optimizers.legacy.Optimizer
    try:
        import bert4keras
        import bert4keras.backend  # noqa: F401
        import bert4keras.layers  # noqa: F401
        import bert4keras.models  # noqa: F401
        import bert4keras.optimizers  # noqa: F401
        import bert4keras.snippets  # noqa: F401
    except ModuleNotFoundError as e:
        print("missing package: %s" % e.name, file=sys.stderr)
        sys.exit(EXIT_MISSING_PACKAGE)
    return tf, keras, bert4keras


def _session():
    from tf_keras.src import backend

    return backend.get_session()


def _evaluate(outputs, tf, keras, graph):
    tensors = {k: v for k, v in outputs.items() if tf.is_tensor(v) or isinstance(v, tf.Variable)}
    if tensors and graph:
        values = _session().run(list(tensors.values()))
        outputs.update(zip(tensors, values))
    elif tensors:
        outputs.update({k: v.numpy() for k, v in tensors.items()})
    return {k: np.asarray(v) for k, v in outputs.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--code", required=True, help="Python file to run")
    p.add_argument("--inputs", help="npz of named input arrays")
    p.add_argument("--output", required=True, help="npz to write the snippet's `outputs` into")
    p.add_argument("--graph", action="store_true", help="TF1 graph mode")
    p.add_argument("--seed", type=int, default=0, help="numpy and TF seed")
    args = p.parse_args(argv)
    tf, keras, bert4keras = _import(args.graph)
    np.random.seed(args.seed)
    if args.graph:
        tf.compat.v1.set_random_seed(args.seed)
    else:
        tf.random.set_seed(args.seed)
    inputs = {}
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            inputs = {k: data[k] for k in data.files}
    namespace = {
        "np": np,
        "tf": tf,
        "keras": keras,
        "K": keras.backend,
        "bert4keras": bert4keras,
        "inputs": inputs,
        "outputs": {},
        "__name__": "__bert4keras_snippet__",
        "session": _session if args.graph else None,
    }
    with open(args.code, encoding="utf-8") as f:
        source = f.read()
    exec(compile(source, args.code, "exec"), namespace)
    np.savez(args.output, **_evaluate(namespace["outputs"], tf, keras, args.graph))


if __name__ == "__main__":
    main()
