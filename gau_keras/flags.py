"""argparse types of numeric command-line flags: a bad value is a usage
error (exit status 2, before any work) naming the flag and the range.

    parser.add_argument("--lr", type=flags.positive_float)
    parser.add_argument("--epochs", type=flags.at_least(0))
"""

import argparse
import math
import os
import sys
import tempfile


def _number(text, kind):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def at_least(least):
    """An integer >= ``least``."""

    def check(text):
        value = _number(text, int)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {value}")
        return value

    check.__name__ = f"integer >= {least}"
    check.bad = ("x", "1.5", str(least - 1))
    return check


positive_int = at_least(1)
non_negative_int = at_least(0)


def positive_float(text):
    """A finite number > 0 (rates, time limits)."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value:g}")
    return value


def non_negative_float(text):
    """A finite number >= 0 (weight decay)."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value:g}")
    return value


def fraction(text):
    """A number in [0, 1]."""
    value = _number(text, float)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value:g}")
    return value


def rate_below_one(text):
    """A number in [0, 1) (dropout)."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value:g}")
    return value


def positive_floats(text):
    """Comma-separated numbers > 0 (a grid of rates)."""
    values = [positive_float(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


#: values each type refuses (the command-line test tries them on every flag)
positive_float.bad = ("x", "nan", "inf", "0", "-3e-4")
non_negative_float.bad = ("x", "nan", "-0.01")
fraction.bad = ("x", "nan", "-0.1", "1.5")
rate_below_one.bad = ("x", "nan", "-0.1", "1")
positive_floats.bad = ("x", "1e-3,0", "1e-3,-1", ",")


def check_value(name, value, kind):
    """The library's side of a flag type: ``value`` (a number, not text) checked by the
    same rule as the flag; a ValueError names the argument ``name``, not a flag."""
    try:
        kind(str(value))
    except (argparse.ArgumentTypeError, ValueError) as error:  # a plain type such as int raises ValueError
        message = (
            str(error)
            if isinstance(error, argparse.ArgumentTypeError)
            else f"must be of type {getattr(kind, '__name__', kind)}, got {value!r}"
        )
        raise ValueError(f"{name} {message}" if message.startswith("must") else f"{name}: {message}") from None
    return value


def command_status(main, argv=None):
    """Runs a command's ``main(argv)``; returns its exit status. A
    ``SystemExit`` with a message (how the commands stop on a bad path, config
    or data) is printed as that one line with status 2, the usage-error status."""
    try:
        result = main(argv)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 2
        raise
    return result if isinstance(result, int) else 0


def add_model_option(parser, help="the encoder", default="gau_alpha", segment_ids=None):
    """``--model``: a name of the model registry (`gau_keras.models.registry.MODELS`, its
    aliases too; ``segment_ids=True``: of the models that read segment ids); the help lists
    one name per model (``default`` None: ``help`` says what it is)."""
    from gau_keras.models.registry import MODELS, model_names

    names = model_names(segment_ids)
    accepted = sorted(alias for alias, cls in MODELS.items() if any(MODELS[n] is cls for n in names))
    parser.add_argument(
        "--model",
        type=str.lower,
        choices=accepted,
        default=default,
        metavar="{" + ",".join(names) + "}",
        help=f"{help}: {', '.join(names)}" + (" (default: %(default)s)" if default is not None else ""),
    )


def check_writable_folder(directory, option, error=ValueError):
    """Creates the local folder ``directory`` and checks that this process can write it; ``error``
    naming it and ``option`` (the flag or key that gave it) otherwise. TensorFlow-free."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise error(f"{option} {directory} is a file, not a folder")
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise error(f"{option} {directory} is not writable ({e.strerror or e})") from None
