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
* a classifier (logits [B, C]): ``logits``, ``probabilities`` (softmax),
  ``labels`` (argmax, int32 [B]) and, when its label names are known,
  ``label_names`` (string [B]): read from ``--labels FILE`` (one name per line,
  in label-id order) or, for a fine-tuning run's ``<task>_best.keras``, from the
  task named in the run's ``<task>_metrics.json``;
* any other head (spans, GlobalPointer, ...): ``logits`` as the model outputs them.

SRU++ layers are traced with their XLA loops (plain TensorFlow ops), not the
native CPU kernel, which a serving binary would not have. On JAX the model is
converted by jax2tf (Keras's export for that backend); the id checks and the
label names are TensorFlow ops around it, so both backends write the same signature.

``--output`` is checked before any work: it must be a new folder, an empty one,
or (with ``--overwrite``) an earlier export, i.e. a folder holding a SavedModel
and nothing else; "", ".", the working directory or a folder above it, and a
folder holding the source are refused. The SavedModel is written into a fresh
temporary folder next to ``--output`` and renamed into place when complete; only
what the run made is removed.
"""

import contextlib
import json
import os
import re

from gau_keras import input_checks
from gau_keras.errors import first_line

#: model input names -> signature input names
INPUT_NAMES = {"Input-Token": "token_ids", "Input-Segment": "segment_ids"}
#: the builder's id inputs: floatx in the model (as bert4keras's), int32 in the serving signature
ID_INPUTS = ("Input-Token", "Input-Segment", "Input-Position")


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
    if is_classifier(model):
        return {
            "logits": outputs,
            "probabilities": ops.softmax(ops.cast(outputs, "float32"), axis=-1),
            "labels": ops.cast(ops.argmax(outputs, axis=-1), "int32"),
        }
    return {"logits": outputs}


def is_classifier(model):
    """Whether the export of ``model`` has a ``labels`` output (logits [B, C])."""
    return not _outputs_probabilities(model) and len(model.output.shape) == 2


#: the endpoint that runs the model; serving_default wraps it (id checks, label names), so it is no signature
_MODEL_ENDPOINT = "model_outputs"


def export_saved_model(model, output, label_names=None):
    """Writes ``model`` (a functional ``keras.Model``) as a SavedModel at ``output``; ``label_names``
    (a classifier's, in label-id order) add the ``label_names`` output. Returns the input names.
    SRU++ layers are traced with their XLA loops (``plain_recurrence``)."""
    with plain_recurrence():
        return _export_saved_model(model, output, label_names)


def _export_saved_model(model, output, label_names=None):
    import keras

    from gau_keras import optional

    tf = optional.tensorflow("SavedModel export")
    if isinstance(model.output, (list, tuple)):
        raise ValueError("export: models with several outputs are not supported; export each head on its own")
    layer_names = [x.name.split(":")[0] for x in model.inputs]
    dtypes = [
        tf.int32 if name.endswith(ID_INPUTS) else tf.as_dtype(x.dtype) for name, x in zip(layer_names, model.inputs)
    ]
    specs = [
        tf.TensorSpec((None,) * len(x.shape), dtype, name=signature_name(name))
        for x, name, dtype in zip(model.inputs, layer_names, dtypes)
    ]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"export: the model's inputs map to clashing signature names {names}")
    bounds = id_bounds(model, layer_names)
    longest = input_checks.max_length(model)

    def outputs(*inputs):  # backend ops only: traced by TensorFlow, or converted from JAX by jax2tf
        inputs = [keras.ops.cast(x, spec.dtype) for x, spec in zip(inputs, model.inputs)]
        return serving_outputs(model, model(inputs, training=False))

    archive = keras.export.ExportArchive()
    archive.track(model)
    options = {"jax2tf_kwargs": jax2tf_options(specs, layer_names, longest)} if keras.backend.backend() == "jax" else {}
    run_model = archive.add_endpoint(_MODEL_ENDPOINT, outputs, input_signature=specs, **options)
    archive._endpoint_names.remove(_MODEL_ENDPOINT)  # saved as serve's callee, not as a signature of its own

    @tf.function(input_signature=specs, autograph=False)
    def serve(*inputs):
        checks = [
            check
            for x, name in zip(inputs, names)
            if name in bounds
            for check in _check_ids(x, name, *bounds[name], longest)
        ]
        with tf.control_dependencies(checks):
            inputs = [tf.identity(x) for x in inputs]
        result = dict(run_model(*inputs))
        if label_names:
            result["label_names"] = tf.gather(tf.constant(list(label_names)), result["labels"])
        return result

    serve.get_concrete_function()
    archive.add_endpoint(name="serving_default", fn=serve)
    archive.write_out(output, verbose=False)
    return names


def jax2tf_options(specs, layer_names, longest=None):
    """jax2tf's arguments: the inputs' symbolic shapes, and with a learned position table of ``longest``
    rows the constraint ``length <= longest`` (the slice of the table then has the inputs' length; a
    longer input is refused by serving_default's check first)."""
    # serving needs no gradient, and jax2tf's gradient pass ignores the constraint
    options = {"polymorphic_shapes": polymorphic_shapes(specs, layer_names), "with_gradient": False}
    if longest is not None:
        options["polymorphic_constraints"] = (f"length <= {longest}",)
    return options


def polymorphic_shapes(specs, layer_names):
    """jax2tf's shapes of the inputs: one batch and one length for the id inputs (their shapes must agree
    where the model adds their embeddings), a dimension of its own for anything else."""
    shapes = []
    for i, (spec, name) in enumerate(zip(specs, layer_names)):
        dims = ["batch", "length" if name.endswith(ID_INPUTS) else f"d{i}_1"] + [
            f"d{i}_{j}" for j in range(2, len(spec.shape))
        ]
        shapes.append(f"({', '.join(dims[: len(spec.shape)])})")
    return shapes


def id_bounds(model, layer_names):
    """``{signature input: (number of ids, config key)}`` for the inputs that index an embedding
    (``gau_keras.input_checks.id_bounds``, by signature name)."""
    return {
        signature_name(layer): bound for layer, bound in input_checks.id_bounds(model).items() if layer in layer_names
    }


def _check_ids(ids, name, size, key, longest=None):
    """Assertions that every id of the input ``name`` is in [0, size) and, with ``longest`` (a learned
    position table's size), that it is at most ``longest`` long: an error naming both lengths."""
    import tensorflow as tf

    message = f"serving_default: input {name} holds an id outside [0, {size}) ({key}={size})"
    ids = tf.cast(ids, tf.int64)
    checks = [
        tf.debugging.Assert(
            tf.reduce_all((ids >= 0) & (ids < size)),
            [message, "min", tf.reduce_min(ids), "max", tf.reduce_max(ids)],
            summarize=1,
        )
    ]
    if longest is not None:
        message = (
            f"serving_default: input {name} is longer than the {longest} positions of the model "
            f"(max_position_embeddings={longest}); its length"
        )
        checks.append(tf.debugging.Assert(tf.shape(ids)[-1] <= longest, [message, tf.shape(ids)[-1]]))
    return checks


@contextlib.contextmanager
def plain_recurrence():
    """SRU++ layers traced with their XLA loops (plain TensorFlow ops, no custom op a serving binary
    would lack) inside the block; the process's ``GAU_KERAS_SRU_KERNEL`` is restored after it."""
    from gau_keras.recurrence.switches import sru_kernel_set

    with sru_kernel_set("xla"):
        yield


def load_for_export(model_dir=None, keras_file=None, model="gau_alpha"):
    """The model to export: the MLM model of a model directory, or a .keras file."""
    if keras_file:
        return _load_keras(keras_file)
    from gau_keras.models.registry import resolve_model_class
    from gau_keras.pretrained import load_pretrained

    if not resolve_model_class(model).has_mlm_head:
        raise ValueError(
            f"export: --model {model} has no MLM head to export from --model-dir {model_dir}: "
            f"fine-tune it (gau-keras finetune TASK --model {model} --model-dir {model_dir}) and "
            f"export the run's <task>_best.keras with --keras"
        )
    return load_pretrained(model_dir, model=model, with_mlm=True)[0]


def _load_keras(path):
    """``keras.saving.load_model(path)``; a missing, empty, truncated or damaged file is one error naming it."""
    import zipfile

    import keras

    from gau_keras import keras_archive

    keras_archive.check(path, f"export: --keras {path}")
    broken = f"export: --keras {path} is not a .keras archive, or truncated"
    try:
        return keras.saving.load_model(path)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{broken} ({e})") from None
    except (ValueError, KeyError, TypeError) as e:  # a damaged config.json, an unknown layer ...
        first = first_line(e)
        raise ValueError(f"export: --keras {path} could not be loaded: {first}") from None


def read_label_names(labels_file=None, keras_file=None):
    """``(names, where)``: the label names of ``--labels FILE`` (one a line), or of the fine-tuning run
    that wrote ``keras_file`` (the task its ``<task>_metrics.json`` names); ``(None, None)`` if unknown."""
    if labels_file:
        try:
            with open(labels_file, encoding="utf-8") as f:
                names = [line.rstrip("\r\n") for line in f]
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"export: --labels {labels_file} cannot be read ({e})") from None
        while names and not names[-1]:
            names.pop()
        if not names or not all(names):
            raise ValueError(f"export: --labels {labels_file} must hold one non-empty label name a line")
        return names, labels_file
    if not keras_file or not keras_file.endswith("_best.keras"):
        return None, None
    metrics = keras_file[: -len("_best.keras")] + "_metrics.json"
    try:
        with open(metrics, encoding="utf-8") as f:
            task = json.load(f).get("task")
        from gau_keras.data.clue import TASKS
    except (OSError, ValueError, AttributeError, ImportError):
        return None, None
    spec = TASKS.get(task) if isinstance(task, str) else None
    return (list(spec.labels), f"task {task} ({metrics})") if spec is not None and spec.labels else (None, None)


def label_names_for(model, labels_file=None, keras_file=None):
    """The ``label_names`` of ``model``'s export, or None (a note says why when a classifier has none)."""
    names, where = read_label_names(labels_file, keras_file)
    if not is_classifier(model):
        if labels_file:
            raise ValueError(
                f"export: --labels {labels_file} given, but the model is no classifier "
                f"(its output is {tuple(model.output.shape)}, not [B, C])"
            )
        return None
    classes = model.output.shape[-1]
    if names is not None and len(names) != classes:
        if labels_file:
            raise ValueError(
                f"export: --labels {labels_file} holds {len(names)} names but the model has {classes} labels"
            )
        print(f"note: {where} has {len(names)} labels, the model {classes}: no label_names output")
        return None
    if names is None:
        print(
            "note: the label names are unknown, so the SavedModel has no label_names output "
            "(pass --labels FILE, one name a line)"
        )
    return names


def _real(path):
    return os.path.realpath(os.path.abspath(path))


def _inside(path, folder):
    """Whether ``path`` is ``folder`` or inside it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


#: what a SavedModel folder holds (tf.saved_model.save, Keras's export): anything else is not ours to replace
SAVED_MODEL_ENTRIES = {"saved_model.pb", "variables", "assets", "fingerprint.pb", "keras_metadata.pb"}


def is_saved_model(folder):
    """Whether ``folder`` holds a SavedModel and nothing but what a SavedModel writes."""
    entries = set(os.listdir(folder))
    if "saved_model.pb" not in entries or not entries <= SAVED_MODEL_ENTRIES:
        return False
    variables = os.path.join(folder, "variables")
    return not os.path.exists(variables) or (
        os.path.isdir(variables)
        and all(name == "variables.index" or name.startswith("variables.data-") for name in os.listdir(variables))
    )


def check_output(output, overwrite, sources=()):
    """Refuses an ``--output`` the export must not write or replace (a ValueError, FileExistsError or
    PermissionError naming it): see the module's docstring. ``sources``: the files the model is read from."""
    if not output or os.path.normpath(output) == ".":
        raise ValueError(
            f"export: --output {output!r} names no new folder (an unset variable?): "
            f"give the folder of the SavedModel, e.g. serving/NAME/1"
        )
    real = _real(output)
    if _inside(_real(os.getcwd()), real):
        raise ValueError(f"export: --output {output} is the working directory or a folder above it")
    for source in sources:
        if source and _inside(_real(source), real):
            raise ValueError(f"export: --output {output} is or holds the source {source}; name another folder")
    if os.path.islink(output):
        raise ValueError(f"export: --output {output} is a symbolic link; name the folder itself")
    if os.path.exists(output) and not os.path.isdir(output):
        raise FileExistsError(f"export: --output {output} is a file, not a folder")
    if os.path.isdir(output) and os.listdir(output):
        if not is_saved_model(output):
            raise FileExistsError(
                f"export: --output {output} is a folder that holds other files than a "
                f"SavedModel; it is not replaced, even with --overwrite: name a new folder"
            )
        if not overwrite:
            raise FileExistsError(f"export: {output} exists and is not empty; pass --overwrite to replace it")
    folder = os.path.dirname(real)  # the nearest existing folder above the output must be writable
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise FileExistsError(f"export: --output {output}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"export: --output {output}: the folder {folder} is not writable")


def _make_parents(folder):
    """Creates ``folder`` and the folders above it that are missing; returns those made, deepest first."""
    made = []
    while not os.path.isdir(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    for path in reversed(made):
        os.mkdir(path)
    return made


def write_export(network, output, label_names=None):
    """Exports ``network`` into a fresh temporary folder next to ``output``, then renames it into place
    (an empty folder or an earlier SavedModel at ``output`` is replaced). Only what this call made is
    removed when it fails. Returns the input names."""
    import shutil
    import tempfile

    output = _real(output)
    parent = os.path.dirname(output)
    prefix = f".{os.path.basename(output)}.partial-"
    made, staging, old = [], None, None
    try:
        made = _make_parents(parent)
        staging = tempfile.mkdtemp(dir=parent, prefix=prefix)
        names = export_saved_model(network, os.path.join(staging, "saved_model"), label_names)
        if os.path.isdir(output):
            old = tempfile.mkdtemp(dir=parent, prefix=prefix)
            os.replace(output, os.path.join(old, "earlier"))  # an empty folder or a checked SavedModel
        os.replace(os.path.join(staging, "saved_model"), output)
        made = []
    except OSError as e:
        if old and not os.path.exists(output):  # put the earlier export back
            os.replace(os.path.join(old, "earlier"), output)
        raise OSError(
            f"export: cannot write the SavedModel to {output}: {e.strerror or e} ({e.filename or parent})"
        ) from None
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        if old and os.path.exists(output):  # else the earlier export stays there, not lost
            shutil.rmtree(old, ignore_errors=True)
        for path in made:
            try:
                os.rmdir(path)
            except OSError:
                break
    return names


#: ELECTRA's discriminator head in a checkpoint (TF1 name; a Hugging Face one is read under it)
_DISCRIMINATOR = "discriminator_predictions/dense/kernel"


def _export_heads(model_class, checkpoint):
    """The heads an export keeps: the MLM head where the model has one, ELECTRA's discriminator
    where ``checkpoint`` (a reader) holds it."""
    if model_class.has_mlm_head:
        return {"with_mlm": "linear"}
    if model_class.__name__ == "ELECTRA" and _DISCRIMINATOR in checkpoint:
        return {"with_discriminator": "linear"}
    return {}


def hf_main(args):
    """``gau-keras export --hf DIR``: the model of ``--model-dir`` (a released TF1 directory or a
    Hugging Face one, with its MLM head or ELECTRA's discriminator where it has one) or of
    ``--keras``, written as a Hugging Face directory (``models.huggingface.hf_export``); an earlier
    export there is replaced only with ``--overwrite``."""
    from gau_keras.checkpoints import CheckpointReader
    from gau_keras.errors import OutputDirError
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.models.huggingface import hf_export, is_hf_directory, read_hf_directory
    from gau_keras.models.presets import VOCAB_FILES, model_files
    from gau_keras.models.registry import resolve_model_class

    taken = [n for n in ("config.json", "model.safetensors") if os.path.exists(os.path.join(args.hf, n))]
    if taken and not args.overwrite:
        raise OutputDirError(f"export: --hf {args.hf} already holds {taken}; pass --overwrite to replace them")
    vocab = None
    if args.keras:
        network = _load_keras(args.keras)
    elif is_hf_directory(args.model_dir):
        name, _, checkpoint = read_hf_directory(args.model_dir)
        heads = _export_heads(resolve_model_class(name), checkpoint)
        network = build_transformer_model(checkpoint_path=args.model_dir, model=None, **heads)
        vocab = next((v for v in (os.path.join(args.model_dir, n) for n in VOCAB_FILES) if os.path.isfile(v)), None)
    else:
        config, checkpoint, vocab = model_files(args.model_dir)
        heads = _export_heads(resolve_model_class(args.model), CheckpointReader(checkpoint))
        network = build_transformer_model(config, checkpoint, model=args.model, **heads)
    path = hf_export(network, args.hf, vocab if vocab and os.path.isfile(vocab) else None)
    print(f"wrote a Hugging Face model directory to {args.hf}: {os.path.basename(path)}, config.json")
    return 0


def main(args):
    """``python -m gau_keras export`` (arguments parsed by ``gau_keras.__main__``).

    ``--output`` is checked before the model is read; the SavedModel is written into a
    temporary folder next to it and renamed into place when complete, so a failed or killed
    export never leaves a half-written SavedModel where a server would load it."""
    from gau_keras import optional

    if getattr(args, "hf", None):
        return hf_main(args)
    optional.tensorflow("SavedModel export")  # on a JAX host without it: said before any work
    check_output(args.output, args.overwrite, sources=(args.keras, args.model_dir))
    with plain_recurrence():
        network = load_for_export(args.model_dir, args.keras, args.model)
        label_names = label_names_for(network, getattr(args, "labels", None), args.keras)
        names = write_export(network, args.output, label_names)
    extra = f"; label_names: {len(label_names)} labels" if label_names else ""
    print(f"wrote a SavedModel to {args.output}: signature serving_default({', '.join(names)}){extra}")
    return 0
