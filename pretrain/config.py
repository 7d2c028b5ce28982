"""Pretraining run configs: JSON with sections model / data / optimizer / train.

Every key is checked: an unknown key or a missing required one is an error
naming the file and the key, so a typo never silently falls back to a default.
"""
import copy
import json

DEFAULTS = {
    "model": "gau_alpha",
    "model_config": None,            # bert_config.json keys, inline
    "model_config_path": None,       # or a bert_config.json file
    "vocab": None,
    "data": {"train": None, "eval": None, "maxlen": 512, "batch_size": 128, "dynamic_mask": False,
             "shuffle_buffer": 10000, "seed": 0, "max_predictions": None},
    "optimizer": {"learning_rate": 1.76e-3, "weight_decay_rate": 0.01, "epsilon": 1e-6,
                  "beta_1": 0.9, "beta_2": 0.999, "bias_correction": False,
                  "exclude_from_weight_decay": ["Norm", "bias"],
                  "exclude_from_layer_adaptation": ["Norm", "bias"],
                  "gradient_accumulation_steps": 1, "schedule": {"0": 1.0}},
    "train": {"steps": 1000, "save_every": 500, "keep_checkpoints": 3, "log_every": 10,
              "eval_every": 0, "eval_batches": 0, "output_dir": None, "init_checkpoint": None,
              "xla": True, "seed": 42},
}
SECTIONS = ("data", "optimizer", "train")
REQUIRED = [("vocab",), ("data", "train"), ("train", "output_dir")]


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
            raise ValueError(f"{where}: unknown key(s) {unknown} in '{key}'; "
                             f"expected some of {sorted(DEFAULTS[key])}")
        merged[key].update(value)
    return merged


def load(path, args=None):
    """Reads ``path``, applies command-line overrides from ``args`` and validates."""
    try:
        with open(path, encoding="utf-8") as f:
            given = json.load(f)
    except OSError as e:
        raise SystemExit(f"error: cannot read config {path!r}: {e}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: config {path!r} is not valid JSON: {e}")
    try:
        config = _merge(given, path)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    if args is not None:
        overrides = {("data", "train"): args.data, ("data", "eval"): args.eval_data,
                     ("train", "output_dir"): args.output_dir, ("train", "steps"): args.steps,
                     ("train", "init_checkpoint"): args.init_checkpoint}
        for (section, key), value in overrides.items():
            if value is not None:
                config[section][key] = value
    for keys in REQUIRED:
        value = config
        for key in keys:
            value = value[key]
        if value in (None, ""):
            raise SystemExit(f"error: config {path!r} must set {'.'.join(keys)}")
    if (config["model_config"] is None) == (config["model_config_path"] is None):
        raise SystemExit(f"error: config {path!r} must set exactly one of model_config, model_config_path")
    config["config_path"] = path
    return config


def model_config(config):
    """The bert_config.json dict of a run config."""
    if config["model_config"] is not None:
        return dict(config["model_config"])
    with open(config["model_config_path"], encoding="utf-8") as f:
        return json.load(f)
