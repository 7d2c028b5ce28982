"""A per-op time table of a jitted step from a ``jax.profiler`` trace (issue 34, item 1).

``op_times(trace_dir, hlo_text, steps)`` reads the newest ``*.xplane.pb`` under ``trace_dir`` with
``jax.profiler.ProfileData``, sums the time of every event that names its XLA instruction (the
``hlo_op`` stat: kernels on a GPU's ``Stream #…`` lines, thunks on a CPU's threads, ops on a TPU's
lines) and attributes each instruction, through the compiled program's text, to a category (matrix
product, fused attention, element-wise/reduction fusion, layout and dtype, …), a pass (forward or
backward or the optimizer's update, from its ``op_name``) and the model code it came from (its ``op_name``
metadata with layer numbers folded, so that all layers of one kind add up). ``table`` renders it.
"""

import collections
import pathlib
import re

COMMENT = re.compile(r"/\*.*?\*/")  # XLA prints /*index=5*/ inside long tuples
HEADER = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s+\(.*\)\s*->\s*.*\{\s*$")
INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\([^=]*?\)|\S+)\s+"
    r"(?P<opcode>[\w\-]+)\((?P<rest>.*)$"
)
OP_NAME = re.compile(r'op_name="([^"]*)"')
TARGET = re.compile(r'custom_call_target="([^"]*)"')
KIND = re.compile(r"\bkind=(k\w+)")
DOT_KINDS = ("dot", "convolution")


def instructions(hlo_text):
    """{instruction name: (opcode, fusion kind or custom-call target, op_name)} of a compiled program."""
    found = {}
    for line in _lines(hlo_text):
        match = INSTRUCTION.match(line)
        if not match:
            continue
        rest = match["rest"]
        detail = TARGET.search(rest) or KIND.search(rest)
        op_name = OP_NAME.search(rest)
        found[match["name"]] = (match["opcode"], detail.group(1) if detail else "", op_name.group(1) if op_name else "")
    return found


def fusions_with_products(hlo_text):
    """Names of the fusion instructions whose fused computation holds a dot or convolution."""
    computations, current = {}, None
    for line in _lines(hlo_text):
        header = HEADER.match(line)
        if header:
            current = computations.setdefault(header["name"], [])
        elif line.strip() == "}":
            current = None
        elif current is not None:
            current.append(line)
    with_products = {
        name for name, body in computations.items() if any(re.search(rf"\s({'|'.join(DOT_KINDS)})\(", b) for b in body)
    }
    fusions = set()
    for line in _lines(hlo_text):
        match = INSTRUCTION.match(line)
        if match and match["opcode"] == "fusion":
            called = re.search(r"calls=%?([\w.\-]+)", match["rest"])
            if called and called.group(1) in with_products:
                fusions.add(match["name"])
    return fusions


def _lines(hlo_text):
    return [COMMENT.sub("", line) for line in hlo_text.splitlines()]


def module_name(hlo_text):
    match = re.search(r"^HloModule\s+([^\s,]+)", hlo_text, re.M)
    return match.group(1) if match else None


def category(opcode, detail, has_product):
    target = detail.lower()
    if opcode in DOT_KINDS or has_product or "gemm" in target or "matmul" in target or "cublas" in target:
        return "matrix product"
    if "fmha" in target or "attention" in target or "flash" in target:
        return "fused attention"
    if opcode == "fusion":
        return "element-wise / reduction fusion"
    if opcode in ("copy", "transpose", "convert", "bitcast", "reshape", "copy-start", "copy-done"):
        return "layout and dtype"
    if opcode in ("reduce", "reduce-window", "scatter", "gather", "dynamic-slice", "dynamic-update-slice"):
        return opcode
    if opcode == "custom-call":
        return f"custom-call {detail}"
    return opcode


def source(op_name):
    """(pass, model code) of an instruction's op_name, layer numbers folded into '*'; the pass is
    'backward' under ``transpose(``, 'forward' under ``jvp(``, else 'update' (the optimizer's)."""
    phase = "backward" if "transpose(" in op_name else "forward" if "jvp(" in op_name else "update"
    path, unwrapped = op_name, None
    while unwrapped != path:  # jit(step)/transpose(jvp(model))/… → step/model/…
        unwrapped, path = path, re.sub(r"\b(?:jvp|transpose|vmap|remat|checkpoint|jit|pjit)\(([^()]*)\)", r"\1", path)
    path = re.sub(r"^step/", "", path)
    path = re.sub(r"-\d+-", "-*-", re.sub(r"_\d+(?=/|$)", "", path))
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "?", "(no op_name)"
    return phase, "/".join(parts[-3:])


def newest_trace(trace_dir):
    files = sorted(pathlib.Path(trace_dir).glob("**/*.xplane.pb"), key=lambda f: f.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"{trace_dir}: no *.xplane.pb trace under it")
    return files[-1]


def op_events(path, module=None):
    """{hlo_op: total ns} of the events of XLA module ``module`` (any, if None) on the trace's device
    planes (a GPU's stream lines), or on the host's when the program ran on the CPU."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(path))
    device = [p for p in data.planes if p.name.startswith("/device:")]
    totals = _op_events(device, module, streams_only=True) if device else collections.Counter()
    if not totals and not device:
        totals = _op_events([p for p in data.planes if p.name.startswith("/host:")], module, streams_only=False)
    if not totals:
        where = "its device planes" if device else "its host planes"
        raise ValueError(
            f"{path}: no event of {module or 'any module'} in {where} names its XLA instruction "
            "(hlo_op); on a GPU, XLA_FLAGS=--xla_gpu_enable_command_buffer= keeps kernels apart"
        )
    return totals


def _op_events(planes, module, streams_only):
    totals = collections.Counter()
    for plane in planes:
        for line in plane.lines:
            if streams_only and plane.name.startswith("/device:GPU") and not line.name.startswith("Stream"):
                continue  # a GPU's derived lines (XLA Ops, XLA Modules) repeat its streams' kernels
            for event in line.events:
                op, of = _stat(event, "hlo_op"), _stat(event, "hlo_module")
                if op and (module is None or of is None or of == module):
                    totals[op] += event.duration_ns
    return totals


def _stat(event, key):
    for name, value in event.stats:
        if name == key:
            return value
    return None


def op_times(trace_dir, hlo_text, steps):
    """Rows {op, category, pass, source, ms (a step)} of the newest trace under ``trace_dir``, largest
    first; ``steps`` = the steps the trace holds."""
    known, with_products = instructions(hlo_text), fusions_with_products(hlo_text)
    rows = []
    for op, ns in op_events(newest_trace(trace_dir), module_name(hlo_text)).items():
        opcode, detail, op_name = known.get(op, ("?", "", ""))
        phase, where = source(op_name)
        rows.append(
            {
                "op": op,
                "category": category(opcode, detail, op in with_products),
                "pass": phase,
                "source": where,
                "ms": ns / 1e6 / steps,
            }
        )
    return sorted(rows, key=lambda r: -r["ms"])


def table(rows, title, top=15):
    """Markdown: time by category, by model code and pass, and the ``top`` instructions."""
    total = sum(r["ms"] for r in rows) or float("nan")
    lines = [
        f"### {title}: {total:.3g} ms a step summed over {len(rows)} instructions (concurrent ones "
        "add up: not the step's wall time)",
        "",
    ]
    for key, header in (("category", "category"), (("source", "pass"), "model code (pass)")):
        sums = collections.Counter()
        for r in rows:
            sums[r[key] if isinstance(key, str) else f"{r['source']} ({r['pass']})"] += r["ms"]
        lines += [f"| {header} | ms | share |", "|---|---|---|"]
        lines += [f"| {name} | {ms:.3g} | {ms / total:.0%} |" for name, ms in sums.most_common(top)]
        lines.append("")
    lines += ["| instruction | category | pass | model code | ms | share |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['op']} | {r['category']} | {r['pass']} | {r['source']} | {r['ms']:.3g} | {r['ms'] / total:.0%} |"
        for r in rows[:top]
    ]
    return "\n".join(lines)
