"""Field access for CLUE records: typed reads whose failures are the reader's
"malformed record" (skipped, counted, reported) or "left out" outcomes."""

import re


class Malformed(Exception):
    """Internal: the record is unusable for the reason given."""


class Skip(Exception):
    """Internal: the record is valid but deliberately left out (reason given)."""


def field(record, key, kind=str):
    """record[key], checked to be of `kind` (a type or tuple of types); ints may come as digit strings."""
    if not isinstance(record, dict):
        raise Malformed(f"expected a JSON object, got {type(record).__name__}")
    if record.get(key) is None:
        raise Malformed(f"missing field {key!r}")
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if int in kinds and str not in kinds and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise Malformed(f"field {key!r} is {type(value).__name__}, expected {expected}")
    return value


def string_list(record, key):
    values = field(record, key, list)
    if not all(isinstance(v, str) for v in values):
        raise Malformed(f"field {key!r} must be a list of strings")
    return tuple(values)


def record_id(record, index):
    """The record's "id" (or "idx", as in wsc); its 0-based position when it has none."""
    for key in ("id", "idx"):
        if isinstance(record, dict) and record.get(key) is not None:
            return record[key]
    return index


def class_label(record, spec, labelled):
    """Label index of a classification record, None when unlabelled."""
    if not labelled:
        return None
    value = field(record, "label", (str, int))
    text = str(value).strip()
    if spec.no_label_marker is not None and text == spec.no_label_marker:
        raise Skip(f"no gold label ({spec.no_label_marker!r})")
    if text not in spec.labels:
        shown = list(spec.labels) if len(spec.labels) <= 20 else f"{spec.labels[0]!r}..{spec.labels[-1]!r}"
        raise ValueError(f"label {value!r} is not in the {spec.name} label set {shown}")
    return spec.labels.index(text)
