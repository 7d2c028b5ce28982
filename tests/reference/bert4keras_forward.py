"""Run the ORIGINAL bert4keras (0.11.5 from PyPI) GAU-alpha / RoFormerV2 in its own process.

This script must never share a process with Keras 3: it switches ``tf.keras``
to Keras 2 (``tf_keras``) and runs bert4keras the way it was written, as TF1
graph-mode code. Run it through ``tests/reference/harness.py``.

Forward mode (hidden states of the last layer, optionally the MLM head)::

    python bert4keras_forward.py --config bert_config.json --checkpoint model.ckpt \
        --model gau_alpha --inputs in.npz --output out.npz [--with-mlm [ACT]] \
        [--application encoder|lm|unilm[,...]] [--softmax-plus-min-len N]

Random-checkpoint mode (writes a checkpoint with bert4keras's own
``save_weights_as_checkpoint`` and prints ``variable<TAB>name<TAB>shape`` lines)::

    python bert4keras_forward.py --config bert_config.json --model gau_alpha \
        --init-random --save-checkpoint out/model.ckpt [--seed 0] [--inputs ... --output ...]

Probe mode (exit 0 and print the versions, exit 3 when bert4keras or tf_keras is
not installed)::

    python bert4keras_forward.py --probe

``in.npz`` holds int arrays ``token_ids`` and ``segment_ids`` [B, L]. ``out.npz``
gets ``hidden`` [B, L, H] and, with ``--with-mlm`` (always for lm/unilm, as in
bert4keras), ``mlm_logits`` [B, L, V] (input of ``Output-MLM-Activation``) and
``mlm_output`` [B, L, V] (its output: probabilities for the default softmax).
With several applications the keys read ``encoder:hidden``, ``lm:mlm_logits``, ...
(the first build's weights are saved/loaded so all share them).

Compatibility shim (the only things changed, all inside this process, never in
the installed library):
  * ``TF_KERAS=1`` and ``TF_USE_LEGACY_KERAS=1`` so bert4keras's ``keras`` is tf_keras 2.x;
  * TF1 graph mode (``tf.compat.v1.disable_v2_behavior()``): bert4keras's
    ``save_weights_as_checkpoint`` builds a ``tf.Graph`` and reads the model
    variables through a Keras session, which only works on graph-mode variables;
  * ``tf.Session`` and ``tf.train.Saver`` are aliased to their ``tf.compat.v1``
    versions (the only TF1-only names in the code paths used here);
  * ``--softmax-plus-min-len N`` (N != 16) replaces ``attention_normalize`` as
    seen by ``bert4keras.layers`` with 0.11.5's computation, floor on n = N instead
    of 16. N = 1 gives bert4keras 0.11.3's (April 2022) results except
    on rows where exactly one key is visible: there ln 1 = 0 turns 0.11.5's -inf
    masking into NaN, while 0.11.3 (finite -1e12 masking) spreads the attention
    uniformly over all keys, padding included. Compare such rows with neither.

``GAU_alpha`` is not part of bert4keras: the released model's class lives in the
GAU-alpha repository (a RoFormerV2 subclass whose layers are bert4keras's
``GatedAttentionUnit``). ``GAUAlpha`` below rebuilds that class on bert4keras's
own layers; its checkpoint mapping is made from the layer's weights by identity,
because bert4keras 0.11.4 changed the creation order of the GAU sub-layers.
"""

import argparse
import json
import os
import sys

import numpy as np

REFERENCE_VERSION = "0.11.5"
BERT4KERAS_SOFTMAX_PLUS_MIN_LEN = 16
EXIT_MISSING_PACKAGE = 3
APPLICATIONS = ("encoder", "lm", "unilm")


def _configure_environment():
    """Select Keras 2 before TensorFlow is imported."""
    os.environ["TF_KERAS"] = "1"
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _import_bert4keras():
    """Import TF in TF1 graph mode, apply the TF1-name aliases, import bert4keras."""
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    if not hasattr(tf, "Session"):
        tf.Session = tf.compat.v1.Session
    if not hasattr(tf.train, "Saver"):
        tf.train.Saver = tf.compat.v1.train.Saver
    import bert4keras
    import bert4keras.models  # noqa: F401  (registers layers and custom objects)

    return tf, bert4keras


def _set_softmax_plus_floor(min_len):
    """Make bert4keras's softmax_plus floor n at ``min_len`` instead of 16.

    Same computation as ``bert4keras.backend.attention_normalize`` (0.11.5):
    n = number of keys left visible by the key mask AND any boolean bias (per
    query row), floored, then softmax(a * ln n / ln 512).
    """
    from bert4keras import layers
    from bert4keras.backend import K, sequence_masking

    original = layers.attention_normalize

    def attention_normalize(a, mask=None, axis=-1, method="softmax", bias=None):
        if method != "softmax_plus":
            return original(a, mask, axis, method, bias)
        a, mask = sequence_masking(a, mask, -np.inf, axis, bias, True)
        if mask is None:
            n = K.cast(K.shape(a)[-1], K.floatx())
        else:
            n = K.sum(K.cast(mask, K.floatx()), axis=axis, keepdims=True)
        n = K.maximum(n, float(min_len))
        return K.softmax(a * K.log(n) / np.log(512), axis=axis)

    layers.attention_normalize = attention_normalize


def _gau_alpha_class():
    """GAU-alpha on bert4keras's RoFormerV2: embeddings/head of RoFormerV2, GAU layers."""
    from bert4keras.layers import Add, Dropout, GatedAttentionUnit, LayerNormalization
    from bert4keras.models import RoFormerV2

    class GAUAlpha(RoFormerV2):
        def initializer(self, shape, dtype=None, order=3, gain=1.0):
            return super().initializer(shape, dtype, order, gain)

        def apply_main_layers(self, inputs, index):
            """GAU -> Dropout -> Add (residual) -> RMS norm."""
            name = "Transformer-%d-GatedAttentionUnit" % index
            bias = self.compute_attention_bias(index)
            rotary = self.compute_position_bias(inputs)
            gau_inputs = [inputs, rotary] if bias is None else [inputs, bias, rotary]
            x = self.apply(
                inputs=gau_inputs,
                layer=GatedAttentionUnit,
                # a_bias must be None (not False) when absent: bert4keras passes it on.
                arguments={"a_bias": None if bias is None else True, "p_bias": "rotary"},
                units=self.intermediate_size,
                key_size=self.attention_key_size,
                activation=self.hidden_act,
                use_bias=False,
                normalization="softmax_plus",
                attention_dropout=self.attention_dropout_rate,
                kernel_initializer=self.initializer,
                name=name,
            )
            x = self.apply(inputs=x, layer=Dropout, rate=self.dropout_rate, name=name + "-Dropout")
            x = self.apply(inputs=[inputs, x], layer=Add, name=name + "-Add")
            return self.apply(
                inputs=x,
                layer=LayerNormalization,
                zero_mean=False,
                scale=False,
                offset=False,
                name=name + "-Norm",
            )

        def variable_mapping(self):
            mapping = {
                "Embedding-Token": ["bert/embeddings/word_embeddings"],
                "Embedding-Segment": ["bert/embeddings/token_type_embeddings"],
            }
            for i in range(self.num_hidden_layers):
                layer_name = "Transformer-%d-GatedAttentionUnit" % i
                if layer_name in self.layers:
                    mapping[layer_name] = self._gau_variable_names(i, self.layers[layer_name])
            return mapping

        @staticmethod
        def _gau_variable_names(index, layer):
            """Checkpoint names in the order of ``layer.trainable_weights``."""
            prefix = "GAU_alpha/encoder/layer_%d/gau/" % index
            by_weight = {
                id(layer.i_dense.kernel): prefix + "i_dense/kernel",
                id(layer.o_dense.kernel): prefix + "o_dense/kernel",
                id(layer.q_scaleoffset.gamma): prefix + "q_scaleoffset/gamma",
                id(layer.k_scaleoffset.gamma): prefix + "k_scaleoffset/gamma",
            }
            return [by_weight[id(w)] for w in layer.trainable_weights]

    return GAUAlpha


def _last_hidden_layer(transformer, model):
    if transformer.num_hidden_layers == 0:
        return "Embedding-Norm"
    if model == "gau_alpha":
        return "Transformer-%d-GatedAttentionUnit-Norm" % (transformer.num_hidden_layers - 1)
    return "Transformer-%d-FeedForward-Norm" % (transformer.num_hidden_layers - 1)


def _build(args, tf, application, checkpoint):
    """Build in a fresh graph; random weights (graph seed ``args.seed``) when no checkpoint."""
    from bert4keras.models import build_transformer_model

    tf.compat.v1.keras.backend.clear_session()
    if checkpoint is None:
        # tf_keras draws the op seed of K.truncated_normal(seed=None) from numpy.
        np.random.seed(args.seed)
        tf.compat.v1.set_random_seed(args.seed)
    model_class = _gau_alpha_class() if args.model == "gau_alpha" else "roformer_v2"
    transformer = build_transformer_model(
        config_path=args.config,
        checkpoint_path=checkpoint,
        model=model_class,
        application=application,
        with_mlm=args.with_mlm,
        return_keras_model=False,
    )
    # Starts the Keras session (initialising the variables) on the model's graph.
    tf.compat.v1.keras.backend.get_session()
    return transformer


def _load_inputs(path):
    with np.load(path) as data:
        missing = [k for k in ("token_ids", "segment_ids") if k not in data.files]
        if missing:
            raise SystemExit("%s: missing array(s) %s (has %s)" % (path, missing, sorted(data.files)))
        return data["token_ids"], data["segment_ids"]


def _forward(transformer, model_name, token_ids, segment_ids, tf):
    """{'hidden': [B, L, H], with the MLM head 'mlm_logits', 'mlm_output': [B, L, V]}."""
    model = transformer.model
    outputs = {"hidden": model.get_layer(_last_hidden_layer(transformer, model_name)).output}
    if transformer.with_mlm:
        head = model.get_layer("Output-MLM-Activation")
        outputs["mlm_logits"], outputs["mlm_output"] = head.input, head.output
    run = tf.compat.v1.keras.backend.function(model.inputs, list(outputs.values()))
    values = run([token_ids.astype("float32"), segment_ids.astype("float32")])
    return dict(zip(outputs, values))


def _save_checkpoint(transformer, path, tf):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    transformer.save_weights_as_checkpoint(path)
    for name, shape in tf.train.list_variables(path):
        print("variable\t%s\t%s" % (name, json.dumps(shape)))


def _applications(value):
    names = value.split(",")
    for name in names:
        if name not in APPLICATIONS:
            raise argparse.ArgumentTypeError("unknown application %r (choose from %s)" % (name, APPLICATIONS))
    return names


def _with_mlm(value):
    return {"true": True, "false": False}.get(value.lower(), value)


def _import_or_exit():
    """Import bert4keras under the shim; exit EXIT_MISSING_PACKAGE if a package is absent."""
    _configure_environment()
    try:
        import tf_keras  # noqa: F401  (TF_USE_LEGACY_KERAS needs it)

        return _import_bert4keras()
    except ModuleNotFoundError as e:
        print("missing package: %s" % e.name, file=sys.stderr)
        sys.exit(EXIT_MISSING_PACKAGE)


def _probe():
    """Print the versions in use."""
    tf, bert4keras = _import_or_exit()
    import tf_keras

    print(
        "bert4keras %s, tf_keras %s, tensorflow %s, tf.keras -> %s"
        % (bert4keras.__version__, tf_keras.__version__, tf.__version__, tf.keras.__name__)
    )


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="bert_config.json")
    p.add_argument("--checkpoint", help="TF1 checkpoint prefix to load")
    p.add_argument("--model", required=True, choices=["gau_alpha", "roformer_v2"])
    p.add_argument("--inputs", help="npz with token_ids, segment_ids [B, L]")
    p.add_argument("--output", help="npz to write hidden (and mlm_logits, mlm_output)")
    p.add_argument(
        "--with-mlm",
        nargs="?",
        const=True,
        default=False,
        type=_with_mlm,
        help="add the MLM head; optional activation name (default softmax)",
    )
    p.add_argument(
        "--application",
        default="encoder",
        type=_applications,
        help="encoder, lm or unilm; a comma-separated list runs each in turn "
        "(output keys then read 'APPLICATION:hidden', ...)",
    )
    p.add_argument(
        "--softmax-plus-min-len",
        type=int,
        default=BERT4KERAS_SOFTMAX_PLUS_MIN_LEN,
        help="floor on softmax_plus's n (bert4keras 0.11.5: 16; 0.11.3: 1)",
    )
    p.add_argument("--init-random", action="store_true", help="random init instead of --checkpoint")
    p.add_argument("--save-checkpoint", help="write the weights with save_weights_as_checkpoint")
    p.add_argument("--seed", type=int, default=0, help="numpy and TF graph seed for --init-random")
    args = p.parse_args(argv)
    if args.init_random == bool(args.checkpoint):
        p.error("give exactly one of --checkpoint and --init-random")
    if bool(args.inputs) != bool(args.output):
        p.error("--inputs and --output go together")
    if not (args.inputs or args.save_checkpoint):
        p.error("nothing to do: give --inputs/--output and/or --save-checkpoint")
    if args.init_random and len(args.application) > 1 and not args.save_checkpoint:
        p.error("--init-random with several applications needs --save-checkpoint (they share its weights)")
    if args.softmax_plus_min_len < 1:
        p.error("--softmax-plus-min-len must be >= 1, got %d" % args.softmax_plus_min_len)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--probe"]:
        return _probe()
    args = _parse_args(argv)
    tf, bert4keras = _import_or_exit()
    if bert4keras.__version__ != REFERENCE_VERSION:
        print(
            "warning: bert4keras %s, the reference is %s" % (bert4keras.__version__, REFERENCE_VERSION), file=sys.stderr
        )
    if args.softmax_plus_min_len != BERT4KERAS_SOFTMAX_PLUS_MIN_LEN:
        _set_softmax_plus_floor(args.softmax_plus_min_len)
    inputs = _load_inputs(args.inputs) if args.inputs else None
    checkpoint, results = args.checkpoint, {}
    for application in args.application:
        transformer = _build(args, tf, application, checkpoint)
        if checkpoint is None and args.save_checkpoint:
            _save_checkpoint(transformer, args.save_checkpoint, tf)
            checkpoint = args.save_checkpoint
        if inputs is not None:
            outputs = _forward(transformer, args.model, inputs[0], inputs[1], tf)
            prefix = "" if len(args.application) == 1 else application + ":"
            results.update({prefix + key: value for key, value in outputs.items()})
    if inputs is not None:
        np.savez(args.output, **results)


if __name__ == "__main__":
    main()
