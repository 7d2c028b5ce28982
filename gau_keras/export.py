"""Export for serving: a TensorFlow SavedModel with a named signature.

    python -m gau_keras export --model-dir chinese_GAU-alpha-char_L-24_H-768 --output serving/gau_alpha/1
    python -m gau_keras export --keras runs/tnews/tnews_best.keras --output serving/tnews/1

The SavedModel is written by Keras's export machinery (``keras.export.ExportArchive``)
and needs neither Keras nor gau_keras to run: ``tf.saved_model.load`` or TF
Serving call its ``serving_default`` signature with the model's inputs,

* ``token_ids`` int32 [B, L] and ``segment_ids`` int32 [B, L] for an encoder
  (other inputs keep their layer names in snake case: ``mask_positions`` ...),

(ids outside ``[0, vocab_size)`` / ``[0, type_vocab_size)`` are an error naming
the input: a negative id would otherwise index the embeddings from the end),
and get a dict:

* a model directory (MLM head): ``probabilities`` [B, L, V];
* a classifier (logits [B, C]): ``logits``, ``probabilities`` (softmax) and
  ``labels`` (argmax, int32 [B]);
* any other head (spans, GlobalPointer, ...): ``logits`` as the model outputs them.

SRU++ layers are traced with their XLA loops (plain TensorFlow ops), not the
native CPU kernel, which a serving binary would not have.
"""
import os
import re

#: model input names -> signature input names
INPUT_NAMES = {"Input-Token": "token_ids", "Input-Segment": "segment_ids"}
#: the builder's id inputs: floatx in the model (as bert4keras's), int32 in the serving signature
ID_INPUTS = ("Input-Token", "Input-Segment", "Input-Position")
#: signature input -> (the embedding layer that bounds its ids, the config key of that bound)
ID_RANGES = {"token_ids": ("Embedding-Token", "vocab_size"), "segment_ids": ("Embedding-Segment", "type_vocab_size")}


def signature_name(layer_name):
    """``Input-Token`` -> ``token_ids``; anything else in snake case."""
    return INPUT_NAMES.get(layer_name) or re.sub(r"[^0-9a-zA-Z]+", "_", layer_name).strip("_").lower()


def _outputs_probabilities(model):
    last = model.layers[-1]
    activation = getattr(last, "activation", None)
    return getattr(activation, "__name__", "") == "softmax"


def serving_outputs(model, outputs):
    """The signature's output dict for ``model``'s raw ``outputs``."""
    from keras import ops

    if _outputs_probabilities(model):
        return {"probabilities": outputs}
    if len(outputs.shape) == 2:
        return {"logits": outputs, "probabilities": ops.softmax(ops.cast(outputs, "float32"), axis=-1),
                "labels": ops.cast(ops.argmax(outputs, axis=-1), "int32")}
    return {"logits": outputs}


def export_saved_model(model, output):
    """Writes ``model`` (a functional ``keras.Model``) as a SavedModel at ``output``."""
    import keras

    from gau_keras import optional

    tf = optional.tensorflow("SavedModel export")
    if isinstance(model.output, (list, tuple)):
        raise ValueError("export: models with several outputs are not supported; export each head on its own")
    layer_names = [x.name.split(":")[0] for x in model.inputs]
    dtypes = [tf.int32 if name.endswith(ID_INPUTS) else tf.as_dtype(x.dtype) for name, x in zip(layer_names,
                                                                                               model.inputs)]
    specs = [tf.TensorSpec((None,) * len(x.shape), dtype, name=signature_name(name))
             for x, name, dtype in zip(model.inputs, layer_names, dtypes)]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"export: the model's inputs map to clashing signature names {names}")

    bounds = id_bounds(model, names)

    def serve(*inputs):
        checks = [_check_ids(x, name, *bounds[name]) for x, name in zip(inputs, names) if name in bounds]
        with tf.control_dependencies(checks):
            inputs = [tf.cast(x, tf.as_dtype(spec.dtype)) for x, spec in zip(inputs, model.inputs)]
        return serving_outputs(model, model(list(inputs), training=False))

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(name="serving_default", fn=serve, input_signature=specs)
    archive.write_out(output, verbose=False)
    return names


def id_bounds(model, names):
    """``{signature input: (number of ids, config key)}`` for the inputs that index an embedding."""
    bounds = {}
    for name in names:
        if name not in ID_RANGES:
            continue
        layer_name, key = ID_RANGES[name]
        try:
            layer = model.get_layer(layer_name)
        except ValueError:
            continue
        if getattr(layer, "input_dim", None):
            bounds[name] = (int(layer.input_dim), key)
    return bounds


def _check_ids(ids, name, size, key):
    """An assertion that every id of the input ``name`` is in [0, size)."""
    import tensorflow as tf

    message = f"serving_default: input {name} holds an id outside [0, {size}) ({key}={size})"
    ids = tf.cast(ids, tf.int64)
    return tf.debugging.Assert(tf.reduce_all((ids >= 0) & (ids < size)),
                               [message, "min", tf.reduce_min(ids), "max", tf.reduce_max(ids)], summarize=1)


def load_for_export(model_dir=None, keras_file=None, model="gau_alpha"):
    """The model to export: the MLM model of a model directory, or a .keras file."""
    os.environ["GAU_KERAS_SRU_KERNEL"] = "xla"      # plain TF ops in the graph, no custom op
    if keras_file:
        import zipfile

        import keras

        if not os.path.isfile(keras_file):
            raise FileNotFoundError(f"export: no .keras file {keras_file!r}")
        if not zipfile.is_zipfile(keras_file):
            raise ValueError(f"export: --keras {keras_file} is not a .keras archive, or truncated")
        try:
            return keras.saving.load_model(keras_file)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise ValueError(f"export: --keras {keras_file} is not a .keras archive, or truncated "
                             f"({e})") from None
    from gau_keras.pretrained import load_pretrained

    return load_pretrained(model_dir, model=model, with_mlm=True)[0]


def check_output(output, overwrite):
    """``--output`` must be a folder that is absent, empty, or replaced (``overwrite``)."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise FileExistsError(f"export: --output {output} is a file, not a folder")
    if os.path.isdir(output) and os.listdir(output) and not overwrite:
        raise FileExistsError(f"export: {output} exists and is not empty; pass --overwrite to replace it")


def main(args):
    """``python -m gau_keras export`` (arguments parsed by ``gau_keras.__main__``).

    The SavedModel is written into ``<output>.partial`` and moved to
    ``--output`` when complete, so a failed or killed export never leaves a
    half-written SavedModel where a server would load it."""
    import shutil

    check_output(args.output, args.overwrite)
    network = load_for_export(args.model_dir, args.keras, args.model)
    output = os.path.normpath(args.output)
    partial = output + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        names = export_saved_model(network, partial)
        if os.path.isdir(output):
            shutil.rmtree(output)
        os.replace(partial, output)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"wrote a SavedModel to {args.output}: signature serving_default({', '.join(names)})")
    return 0
