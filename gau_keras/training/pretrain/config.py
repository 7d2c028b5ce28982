"""Pretraining run configs: JSON with sections model / data / optimizer / train.

Every key is checked: an unknown key or a missing required one is an error
naming the file and the key, so a typo never silently falls back to a default.

``stages`` (optional) trains the first updates with some settings changed: a
list of ``{"until": N, "data": {...}, "optimizer": {...}}``, each applying its
overrides to the updates from the previous stage's ``until`` up to its own;
the config itself applies after the last one, up to ``train.steps``
(docs/pretraining.md, "Stages").
"""

import copy
import json

from gau_keras.errors import ConfigError

DEFAULTS = {
    "model": "gau_alpha",
    "model_config": None,  # bert_config.json keys, inline
    "model_config_path": None,  # or a bert_config.json file
    "vocab": None,
    "data": {
        "train": None,
        "eval": None,
        "maxlen": 512,
        "batch_size": 128,
        "dynamic_mask": None,
        "shuffle_buffer": 10000,
        "seed": 0,
        "max_predictions": None,
        "char_mask_fraction": 0.0,
        "pair_segments": False,
    },
    "optimizer": {
        "learning_rate": 1.76e-3,
        "weight_decay_rate": 0.01,
        "epsilon": 1e-6,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "bias_correction": False,
        "exclude_from_weight_decay": ["Norm", "bias"],
        "exclude_from_layer_adaptation": ["Norm", "bias"],
        "gradient_accumulation_steps": 1,
        "schedule": {"0": 1.0},
    },
    "train": {
        "steps": 1000,
        "save_every": 500,
        "keep_checkpoints": 3,
        "log_every": 10,
        "eval_every": 0,
        "eval_batches": 0,
        "output_dir": None,
        "init_checkpoint": None,
        "xla": None,
        "precision": "auto",
        "seed": 42,
    },
    "stages": [],
}
SECTIONS = ("data", "optimizer", "train")

INT, NUMBER, BOOL, TEXT = "an integer", "a number", "true or false", "a string"
#: (section, key) -> (kind, least value or None, may be null)
SCHEMA = {
    ("data", "maxlen"): (INT, 3, False),
    ("data", "batch_size"): (INT, 1, False),
    ("data", "shuffle_buffer"): (INT, 1, False),
    ("data", "seed"): (INT, None, False),
    ("data", "max_predictions"): (INT, 1, True),
    ("data", "dynamic_mask"): (BOOL, None, True),
    ("data", "char_mask_fraction"): (NUMBER, 0, False),
    ("data", "pair_segments"): (BOOL, None, False),
    ("data", "train"): (TEXT, None, False),
    ("data", "eval"): (TEXT, None, True),
    ("optimizer", "learning_rate"): (NUMBER, 0, False),
    ("optimizer", "weight_decay_rate"): (NUMBER, 0, False),
    ("optimizer", "epsilon"): (NUMBER, 0, False),
    ("optimizer", "beta_1"): (NUMBER, 0, False),
    ("optimizer", "beta_2"): (NUMBER, 0, False),
    ("optimizer", "bias_correction"): (BOOL, None, False),
    ("optimizer", "gradient_accumulation_steps"): (INT, 1, True),
    ("train", "steps"): (INT, 1, False),
    ("train", "save_every"): (INT, 1, False),
    ("train", "keep_checkpoints"): (INT, 1, False),
    ("train", "log_every"): (INT, 1, False),
    ("train", "eval_every"): (INT, 0, False),
    ("train", "eval_batches"): (INT, 0, False),
    ("train", "output_dir"): (TEXT, None, False),
    ("train", "init_checkpoint"): (TEXT, None, True),
    ("train", "xla"): (BOOL, None, True),
    ("train", "precision"): (TEXT, None, False),
    ("train", "seed"): (INT, None, False),
}


def _fits(value, kind):
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == BOOL:
        return isinstance(value, bool)
    return isinstance(value, str)


def validate(config, where):
    """Type and range of every known value; errors name the file and the key."""
    for (section, key), (kind, least, nullable) in SCHEMA.items():
        value = config[section][key]
        if value is None and nullable:
            continue
        if value is None and kind == TEXT:
            continue  # required paths are checked by REQUIRED
        if not _fits(value, kind) or (least is not None and value < least):
            bound = f" >= {least}" if least is not None and kind in (INT, NUMBER) else ""
            raise ValueError(
                f"{where}: {section}.{key} must be {kind}{bound}{' or null' if nullable else ''}, "
                f"got {json.dumps(value)}"
            )
    if not config["data"]["char_mask_fraction"] <= 1:
        raise ValueError(f"{where}: data.char_mask_fraction must be <= 1, got {config['data']['char_mask_fraction']}")
    for key in ("beta_1", "beta_2"):
        if not config["optimizer"][key] < 1:
            raise ValueError(f"{where}: optimizer.{key} must be < 1, got {config['optimizer'][key]}")
    for key in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
        patterns = config["optimizer"][key]
        if patterns is not None and (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)):
            raise ValueError(f"{where}: optimizer.{key} must be a list of strings, got {json.dumps(patterns)}")
    schedule = config["optimizer"]["schedule"]
    if (
        not isinstance(schedule, dict)
        or not schedule
        or not all(str(k).isdigit() and _fits(v, NUMBER) for k, v in schedule.items())
    ):
        raise ValueError(
            f"{where}: optimizer.schedule must be an object {{update: multiplier}} "
            f'(e.g. {{"0": 1, "1000": 0.1}}), got {json.dumps(schedule)}'
        )
    for key in ("vocab", "model_config_path"):
        if config[key] is not None and not isinstance(config[key], str):
            raise ValueError(f"{where}: {key} must be a string path, got {json.dumps(config[key])}")
    if config["model_config"] is not None and not isinstance(config["model_config"], dict):
        raise ValueError(f"{where}: model_config must be an object of bert_config.json keys")


REQUIRED = [("vocab",), ("data", "train"), ("train", "output_dir")]
#: what a stage may change: settings the checkpointed model, optimizer and data iterator do not depend on
STAGE_KEYS = {
    "data": ("char_mask_fraction", "pair_segments"),
    "optimizer": ("learning_rate", "schedule", "weight_decay_rate"),
}


def _merge(given, where):
    """DEFAULTS updated with ``given``; unknown keys are errors naming ``where``."""
    if not isinstance(given, dict):
        raise ValueError(f"{where}: the config must be a JSON object")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(DEFAULTS)}")
    merged = copy.deepcopy(DEFAULTS)
    for key, value in given.items():
        if key not in SECTIONS:
            merged[key] = value
            continue
        if not isinstance(value, dict):
            raise ValueError(f"{where}: '{key}' must be an object")
        unknown = sorted(set(value) - set(DEFAULTS[key]))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown} in '{key}'; expected some of {sorted(DEFAULTS[key])}")
        merged[key].update(value)
    return merged


def load(path, args=None):
    """Reads ``path``, applies command-line overrides from ``args`` and validates."""
    try:
        with open(path, encoding="utf-8") as f:
            given = json.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config {path!r}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"config {path!r} is not valid JSON: {e}") from None
    try:
        config = _merge(given, path)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    file_steps = config["train"]["steps"]
    if args is not None:
        overrides = {
            ("data", "train"): args.data,
            ("data", "eval"): args.eval_data,
            ("train", "output_dir"): args.output_dir,
            ("train", "steps"): args.steps,
            ("train", "init_checkpoint"): args.init_checkpoint,
        }
        for (section, key), value in overrides.items():
            if value is not None:
                config[section][key] = value
    for keys in REQUIRED:
        value = config
        for key in keys:
            value = value[key]
        if value in (None, ""):
            raise ConfigError(f"config {path!r} must set {'.'.join(keys)}")
    if (config["model_config"] is None) == (config["model_config_path"] is None):
        raise ConfigError(f"config {path!r} must set exactly one of model_config, model_config_path")
    try:
        validate(config, path)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not _fits(file_steps, INT):
        file_steps = config["train"]["steps"]
    try:  # every stage, also those beyond a --steps that cuts the run short
        stage_configs({**config, "train": {**config["train"], "steps": file_steps}}, path, file_steps)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    config["config_path"] = path
    return config


def stage_configs(config, where="config", file_steps=None):
    """``[(end, config)]``: each stage's config (``config_path`` naming the
    stage) and the update it ends at, then the config itself up to
    ``train.steps``. With ``file_steps`` (the config file's own
    ``train.steps``) a stage must end before it; without, a ``train.steps``
    overridden below a stage's end cuts the run there. Errors name ``where``
    and the stage."""
    stages = config["stages"]
    if not isinstance(stages, list):
        raise ValueError(f'{where}: stages must be a list of {{"until": N, ...}} objects')
    steps = config["train"]["steps"]
    result, start = [], 0
    for i, stage in enumerate(stages):
        name = f"{where}: stages[{i}]"
        if not isinstance(stage, dict):
            raise ValueError(f"{name} must be an object")
        until = stage.get("until")
        if not _fits(until, INT) or not start < until or (file_steps is not None and until >= file_steps):
            after = f"above {start} (the previous stage's end)" if i else "at least 1"
            raise ValueError(
                f"{name}.until must be an integer {after} and below train.steps="
                f"{steps if file_steps is None else file_steps}, got {json.dumps(until)}"
            )
        staged = copy.deepcopy(config)
        staged["stages"] = []
        staged["config_path"] = f"{config.get('config_path', where)}: stages[{i}]"
        for section, values in stage.items():
            if section == "until":
                continue
            if section not in STAGE_KEYS:
                raise ValueError(
                    f"{name}: '{section}' cannot be set by a stage; a stage sets 'until' and "
                    f"objects 'data' / 'optimizer'"
                )
            if not isinstance(values, dict):
                raise ValueError(f"{name}: '{section}' must be an object, got {json.dumps(values)}")
            for key, value in values.items():
                if key not in STAGE_KEYS[section]:
                    raise ValueError(
                        f"{name}: {section}.{key} cannot change between stages (the checkpointed "
                        f"model, optimizer or data iterator depend on it); a stage may set "
                        f"{section}.{{{', '.join(STAGE_KEYS[section])}}}"
                    )
                staged[section][key] = value
        validate(staged, name)
        if until >= steps:  # train.steps overridden (--steps) within this stage: the run ends in it
            return result + [(steps, staged)]
        result.append((until, staged))
        start = until
    final = copy.deepcopy(config)
    final["stages"] = []
    return result + [(steps, final)]


def model_config(config):
    """The bert_config.json dict of a run config."""
    if config["model_config"] is not None:
        return dict(config["model_config"])
    with open(config["model_config_path"], encoding="utf-8") as f:
        return json.load(f)
