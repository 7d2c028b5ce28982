"""The options of a fine-tuning run: `Options` (one dataclass whose fields are the command
line's flags, each checked by one ``gau_keras.flags`` rule: the flag's argparse type on the
command line, `Options`' check for a library caller), and the command line that parses them."""

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from gau_keras import flags
from gau_keras.training.finetune import tasks

#: the options a task's registry row sets the default of (`gau_keras.data.clue.TaskSpec.defaults`)
TASK_DEFAULTS = ("epochs", "batch_size", "maxlen", "lr")
XLA_CHOICES = ("auto", "on", "off")
#: how errors name the output folder (`Options.out_dir`)
OUT_DIR_FLAG = "--out-dir"


def _option(default, check=None, help=None, flag=True):
    """A field of `Options`: ``check`` is a ``gau_keras.flags`` type (the flag's type, and the
    rule `Options` applies to a value); ``flag=False``: not a command-line flag of its own."""
    return field(default=default, metadata={"check": check, "help": help, "flag": flag})


@dataclass
class Options:
    """The options of one fine-tuning run. Every field but ``task_name`` and ``head_options``
    is the command-line flag of its name (``max_train_examples``: ``--max-train-examples``).

    task_name: the task whose files, labels and outputs the run uses (a `gau_keras.data.clue.TASKS` name).
    head_options: keywords of the task class's own options (e.g. cmrc2018's ``doc_stride``).
    """

    task_name: str = field(metadata={"flag": False})
    data_dir: str = field(
        metadata={
            "help": "folder holding the task's folder (e.g. ../shared/data/clue or the "
            "CLUE download folder) or the task's {train,dev,test}.json themselves"
        }
    )
    model_dir: Optional[str] = _option(
        None, help="bert_config.json + bert_model.ckpt.* + vocab.txt (default: the bundled GAU-alpha)"
    )
    model: str = _option("gau_alpha", flag=False)  # flags.add_model_option: the builder's registry
    from_scratch: bool = _option(False, help="random initialisation with the model's config (baseline runs)")
    out_dir: str = _option("finetune_outputs")
    overwrite: bool = _option(False, help="replace existing outputs")
    epochs: int = _option(3, flags.non_negative_int)
    batch_size: int = _option(16, flags.positive_int)
    maxlen: int = _option(128, flags.at_least(8))
    lr: float = _option(5e-5, flags.positive_float)
    weight_decay: float = _option(0.01, flags.non_negative_float)
    seed: int = _option(42, int)
    max_train_examples: Optional[int] = _option(
        None, flags.positive_int, "train on a random subset of this size (seeded)"
    )
    max_eval_examples: Optional[int] = _option(
        None,
        flags.positive_int,
        "evaluate on a random subset of N dev examples (the same subset "
        "for every --seed: dev files may be sorted by label)",
    )
    max_test_examples: Optional[int] = _option(
        None, flags.positive_int, "predict only the first N test examples (smoke runs; not a valid submission)"
    )
    predict_split: Optional[str] = _option(
        None, help="the unlabelled split to write predictions for (default: test, when the data has one)"
    )
    dropout: float = _option(0.1, flags.rate_below_one, "dropout of the task head (default: %(default)s)")
    devices: int = _option(
        1,
        flags.positive_int,
        "train on this many devices: MirroredStrategy over GPUs when there are enough, else "
        "logical CPU devices; on JAX keras.distribution.DataParallel over its devices "
        "(default: 1, no strategy)",
    )
    xla: str = _option("auto", help="jit-compile the train step; auto: on for GPU/TPU, off on CPU (default: auto)")
    coordinator: Optional[str] = _option(
        None,
        help="several JAX processes (KERAS_BACKEND=jax; one command per host, or per process on one host): "
        "process 0's HOST:PORT, which every process joins (default: JAX_COORDINATOR_ADDRESS)",
    )
    num_processes: Optional[int] = _option(
        None, flags.positive_int, "processes of the run (default: JAX_NUM_PROCESSES)"
    )
    process_id: Optional[int] = _option(
        None, flags.non_negative_int, "this process's index, 0 to N-1 (default: JAX_PROCESS_ID)"
    )
    coordinator_timeout: float = _option(
        300.0, flags.positive_float, "seconds to wait for the coordinator and the other processes (default 300)"
    )
    head_options: dict = field(default_factory=dict, metadata={"flag": False})

    def __post_init__(self):
        from gau_keras.models.registry import MODELS, model_names

        self.task_name = tasks.spec_of(self.task_name).name
        for option in dataclasses.fields(self):
            check, value = option.metadata.get("check"), getattr(self, option.name)
            if check is not None and value is not None:
                flags.check_value(option.name, value, check)
        if str(self.model).lower() not in MODELS:
            raise ValueError(f"model must be one of {', '.join(model_names(segment_ids=True))}, got {self.model!r}")
        if not MODELS[str(self.model).lower()].takes_segment_ids:
            raise ValueError(
                f"model {self.model!r} reads no segment ids, which the CLUE tasks feed: fine-tune one "
                f"of {', '.join(model_names(segment_ids=True))}"
            )
        if not MODELS[str(self.model).lower()].is_encoder:
            raise ValueError(
                f"model {self.model!r} is a language model (its output is the next-token distribution, not "
                f"hidden states to classify): fine-tune one of {', '.join(model_names(segment_ids=True))}"
            )
        if self.num_processes is not None and self.process_id is not None and self.process_id >= self.num_processes:
            raise ValueError(f"process_id {self.process_id}: must be below num_processes {self.num_processes}")
        if self.xla not in XLA_CHOICES:
            raise ValueError(f"xla must be one of {', '.join(XLA_CHOICES)}, got {self.xla!r}")

    @classmethod
    def for_task(cls, task, **options):
        """The options of a run of ``task`` with its registry defaults, then ``options``."""
        spec = tasks.spec_of(task)
        defaults = {key: spec.defaults[key] for key in TASK_DEFAULTS if key in spec.defaults}
        return cls(task_name=spec.name, **{"dropout": tasks.task_class(task).dropout_rate, **defaults, **options})

    def record(self):
        """The options as the metrics file records them: one flat dict, the head's options included."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "head_options"}
        return {**values, **self.head_options}


def build_parser(task, prog="gau-keras finetune"):
    """The command line of ``task`` (a fine-tuning task's name): `Options`' fields as flags,
    with the task's registry defaults, and its class's own options."""
    spec = tasks.spec_of(task)
    task_cls = tasks.task_class(task)
    parser = argparse.ArgumentParser(prog=f"{prog} {spec.name}", description=spec.about)
    defaults = {
        **{key: spec.defaults[key] for key in TASK_DEFAULTS if key in spec.defaults},
        "dropout": task_cls.dropout_rate,
    }
    for option in dataclasses.fields(Options):
        if not option.metadata.get("flag", True):
            if option.name == "model":
                flags.add_model_option(parser, help="the encoder the checkpoint is for", segment_ids=True)
            continue
        name = "--" + option.name.replace("_", "-")
        default = defaults.get(option.name, None if option.default is dataclasses.MISSING else option.default)
        kwargs = {"help": option.metadata.get("help")}
        if option.type is bool or option.type == "bool":
            parser.add_argument(name, action="store_true", **kwargs)
        elif option.name == "xla":
            parser.add_argument(name, choices=XLA_CHOICES, default=default, **kwargs)
        else:
            check = option.metadata.get("check")
            parser.add_argument(name, type=check, default=default, required=option.name == "data_dir", **kwargs)
        if option.name == "data_dir":
            parser.add_argument(
                "--task-name",
                default=spec.name,
                choices=tasks.same_model(task),
                help="run these defaults on another task of the same input and head: its files, "
                "labels and output names (default: %(default)s)",
            )
    task_cls.add_arguments(parser)
    return parser


def parse_options(task, argv=None, prog="gau-keras finetune"):
    """`Options` from a task's command line (a bad flag: argparse's usage error, status 2)."""
    parser = build_parser(task, prog)
    namespace = vars(parser.parse_args(argv))
    names = {f.name for f in dataclasses.fields(Options)}
    head_options = {key: value for key, value in namespace.items() if key not in names}
    try:
        return Options(**{key: value for key, value in namespace.items() if key in names}, head_options=head_options)
    except ValueError as error:  # a value the flags' types let through but Options refuses
        parser.error(str(error))
