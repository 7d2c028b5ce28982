"""The documentation stays true: design-note references and every relative link (and its anchor)
of the Markdown files resolve, every `python3 ...` / `gau-keras ...` command in them names a real
script, subcommand, flag and repository file, README.md is a short guide whose test command is the
one `.ci/run` runs and whose Python runs, the porting section that error messages name exists, and
docs/porting.md's train_step runs and its table of bert4keras's public names is complete and true."""

import ast
import contextlib
import fnmatch
import importlib
import importlib.util
import io
import pathlib
import re
import shlex
import textwrap

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

SOURCES = ("gau_keras", "pretrain", "finetune", "benchmarks", "examples", "tests", "docs")
README = REPO_ROOT / "README.md"
PORTING_DOC = REPO_ROOT / "docs" / "porting.md"
#: the folders of this repository that a command's path argument may name
REPO_FOLDERS = ("pretrain", "benchmarks", "finetune", "gau_keras", "examples", "tests", "docs", "notebooks")
#: `gau-keras` subcommands: the modules whose source defines their flags
SUBCOMMANDS = {
    "fill-mask": ("gau_keras/__main__.py", "gau_keras/flags.py"),
    "generate": ("gau_keras/__main__.py", "gau_keras/generate.py", "gau_keras/flags.py"),
    "export": ("gau_keras/__main__.py", "gau_keras/export.py", "gau_keras/flags.py"),
    "prepare-corpus": ("gau_keras/training/pretrain",),
    "pretrain": ("gau_keras/training/pretrain",),
    "compare": ("gau_keras/training/finetune",),
    "finetune": ("gau_keras/training/finetune",),
}
#: modules run with `python -m` that are not part of this repository
EXTERNAL_MODULES = {"pytest", "pip", "venv"}
BERT4KERAS_MODULES = ("backend", "layers", "models", "optimizers", "snippets", "tokenizers")
#: public names of bert4keras that its modules import rather than define
BERT4KERAS_IMPORTED = {"backend": {"keras", "K"}, "snippets": {"uniout"}}


def _files():
    for folder in SOURCES:
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".cc") and "__pycache__" not in path.parts:
                yield path
    yield README


def _markdown_files():
    return sorted(p for p in _files() if p.suffix == ".md")


def _rel(path):
    return str(path.relative_to(REPO_ROOT))


def test_design_note_references_resolve():
    missing, outside = [], []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        for reference in re.findall(r"docs/[\w./-]+\.md", text):
            if not (REPO_ROOT / reference).is_file():
                missing.append(f"{path.relative_to(REPO_ROOT)}: {reference}")
        if "DESIGN.md" in text and path.name != "test_docs.py":
            outside.append(str(path.relative_to(REPO_ROOT)))
    assert not missing, missing
    assert not outside, f"references to a design file outside the repository: {outside}"
    for link in re.findall(r"\]\(([\w./-]+\.md)\)", (REPO_ROOT / "docs" / "README.md").read_text()):
        assert (REPO_ROOT / "docs" / link).is_file(), link


# --- Markdown structure -------------------------------------------------------------------------

FENCE = re.compile(r"^( *)```([\w-]*)[^\n]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def _fences(text):
    """(language, dedented body) of every fenced block, indented ones (in list items) included."""
    return [(lang, textwrap.dedent(body)) for _, lang, body in FENCE.findall(text)]


def _prose(text):
    """The text outside fenced blocks."""
    return FENCE.sub("", text)


def _slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path):
    seen, anchors = {}, set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(path.read_text(encoding="utf-8")), re.MULTILINE):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_markdown_links_and_anchors_resolve():
    """Every relative link of every Markdown file names an existing file, and its #anchor a heading."""
    broken = []
    for path in _markdown_files():
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", _prose(path.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{_rel(path)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{_rel(path)}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


# --- commands ------------------------------------------------------------------------------------

#: a command: at the start of a shell line or span, or after `&&`, `;`, `|`, `(` or `do`
COMMAND = re.compile(r"(?:^\s*|(?:&&|;|\||\(|\bdo)\s*)((?:python3?|gau-keras)(?=\s|$)[^;&|<>#\n]*)")
#: commands that are meant not to run, with the reason
NOT_COMMANDS = {}


def _command_texts(text):
    """Shell lines of bash / plain fenced blocks (continuations joined) and inline code spans."""
    for lang, body in _fences(text):
        if lang in ("", "bash", "sh", "shell"):
            # a backslash continues a line; so does an indented `[--option]` line of a usage block
            yield from re.sub(r"\n\s+(?=\[|--)", " ", body.replace("\\\n", " ")).splitlines()
    for span in re.findall(r"`([^`]+)`", _prose(text)):
        yield " ".join(span.split())


def _commands(text):
    for line in _command_texts(text):
        for command in COMMAND.findall(line):
            try:
                words = shlex.split(command)
            except ValueError:
                words = command.split()
            if command.strip() not in NOT_COMMANDS:
                yield command.strip(), [w.strip("[]|") for w in words]


def _flag_sources(locations):
    texts = []
    for location in locations:
        path = REPO_ROOT / location
        for file in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            texts.append(file.read_text(encoding="utf-8"))
        if location == "gau_keras/training/finetune":
            texts.append(_finetune_flags())
    return "\n".join(texts)


def _finetune_flags():
    """Every fine-tuning task's flags, quoted as a source would: the runner makes most of them
    from the fields of its `Options` dataclass."""
    from gau_keras.training.finetune import runner, tasks

    return " ".join(f'"{flag}"' for task in tasks.names() for flag in runner.build_parser(task)._option_string_actions)


def _task_names():
    from gau_keras.training.finetune import tasks

    return set(tasks.names())


def _entry_sources(path):
    """A script entry point's flag sources: itself, and the gau_keras.training modules (with their
    folders) it runs: the thin scripts of pretrain/ and finetune/ define no flag of their own."""
    sources = [_rel(path)]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gau_keras.training"):
            module = REPO_ROOT / (node.module.replace(".", "/") + ".py")
            sources += [_rel(module), _rel(module.parent)] if module.is_file() else []
    return tuple(sources)


def _resolve(words):
    """(problem or None, the source locations of the command's flags, the words after its target)."""
    if words[0] == "gau-keras" or words[:3] in (["python", "-m", "gau_keras"], ["python3", "-m", "gau_keras"]):
        rest = words[1:] if words[0] == "gau-keras" else words[3:]
        if not rest or not rest[0][:1].isalpha() or rest[0].isupper():
            return None, None, []
        if rest[0] not in SUBCOMMANDS:
            return f"no subcommand {rest[0]!r}", None, []
        if rest[0] == "finetune" and len(rest) > 1 and rest[1][:1].islower() and rest[1] not in _task_names():
            return f"no fine-tuning task {rest[1]!r}", None, []
        return None, SUBCOMMANDS[rest[0]], rest[1:]
    if len(words) < 2:
        return None, None, []
    if words[1] == "-m" and len(words) > 2:
        module = words[2]
        if module.split(".")[0] in EXTERNAL_MODULES or not re.fullmatch(r"\w+(\.\w+)*", module):
            return None, None, []
        path = REPO_ROOT / (module.replace(".", "/") + ".py")
        package_main = REPO_ROOT / module.replace(".", "/") / "__main__.py"
        if package_main.is_file() and module.split(".")[0] != "gau_keras":  # python -m finetune TASK
            rest = words[3:]
            if rest and rest[0][:1].isalpha() and rest[0].islower() and rest[0] not in _task_names():
                return f"no fine-tuning task {rest[0]!r}", None, []
            return None, _entry_sources(package_main), rest[1:] if rest and rest[0][:1].isalpha() else rest
        if not path.is_file():
            return f"no module {module!r} in the repository", None, []
        return None, (_rel(path.parent),), words[3:]
    if words[1].endswith(".py"):
        path = REPO_ROOT / words[1]
        if not path.is_file():
            return f"no script {words[1]!r}", None, []
        if path.parent == REPO_ROOT:
            return None, (_rel(path),), words[2:]
        return None, _entry_sources(path) + (_rel(path.parent),), words[2:]
    return None, None, []


def _repo_paths(word):
    for piece in re.split(r"[,=]", word):
        if re.fullmatch(rf"(?:{'|'.join(REPO_FOLDERS)})/[\w./-]+", piece) and "..." not in piece:
            yield piece


def test_commands_name_real_scripts_flags_and_files():
    """Every `python3 ...`, `python -m ...` and `gau-keras ...` command of the Markdown files runs a
    script or subcommand that exists, with flags that its parser defines and repository paths
    that exist."""
    problems, checked = [], 0
    for path in _markdown_files():
        for command, words in _commands(path.read_text(encoding="utf-8")):
            problem, sources, rest = _resolve(words)
            if problem:
                problems.append(f"{_rel(path)}: {command}: {problem}")
                continue
            if sources is None:
                continue
            checked += 1
            source = _flag_sources(sources)
            for word in rest:
                for flag in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", word):
                    if flag != "--help" and f'"{flag}"' not in source and f"'{flag}'" not in source:
                        problems.append(f"{_rel(path)}: {command}: flag {flag} is defined nowhere in {sources}")
                for piece in _repo_paths(word):
                    if not (REPO_ROOT / piece).exists():
                        problems.append(f"{_rel(path)}: {command}: no file {piece}")
    assert checked >= 30, f"only {checked} commands found: is the extraction broken?"
    assert not problems, "\n".join(problems)


def _section(path, title):
    """The text of the Markdown file's section `title`, up to the next heading of its level or above."""
    lines, inside, level, fenced = [], None, None, False
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        heading = None if fenced else re.match(r"(#+) (.+?)\s*$", line)
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if heading and inside is None and heading.group(2) == title:
            inside, level = True, len(heading.group(1))
            continue
        if heading and inside and len(heading.group(1)) <= level:
            break
        if inside:
            lines.append(line)
    assert inside, f"{_rel(path)} has no section {title!r}"
    return "".join(lines)


def _readme_section(title):
    return _section(README, title)


def test_readme_test_command_is_what_ci_runs():
    setup = [body for lang, body in _fences(_readme_section("Set-up, the main job, the tests")) if lang == "bash"][0]
    lines = [line for line in setup.splitlines() if line.strip()]
    assert lines[0].startswith("pip install -e . && python -m gau_keras fill-mask ")  # not the test tools
    ci = [
        line
        for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
        if "pytest" in line and not line.lstrip().startswith("#")
    ]
    assert len(ci) == 1, ci
    assert ci[0].strip().replace("python3 -m pip ", "pip ") == lines[1].strip()


def test_readme_is_a_short_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the guide's limit is 150 (reports go to docs/)"


def test_porting_section_named_by_error_messages_exists():
    """gau_keras's errors for Keras 2 calls without a Keras 3 form name README's porting section
    (`PORTING`) and 'Patching the training function': the first must be in README and lead to
    docs/porting.md, the second a section of docs/porting.md."""
    from gau_keras.bert4keras import PORTING

    file_name, _, title = PORTING.partition(", ")
    section = _section(REPO_ROOT / file_name, title.strip("'"))
    assert "docs/porting.md" in section and "sed -i 's/bert4keras/gau_keras/'" in section
    assert "def train_step" in _section(PORTING_DOC, "Patching the training function")


# --- README's Python ----------------------------------------------------------------------------


def _python_blocks(section):
    return [body for lang, body in _fences(_readme_section(section)) if lang == "python"]


def test_readme_quickstart_runs():
    source = _python_blocks("In Python")[0]
    namespace, printed = {"__name__": "__readme__"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "README.md[quickstart]", "exec"), namespace)
    probs, token_ids = namespace["probs"], namespace["token_ids"]
    assert probs.shape == (1, len(token_ids), namespace["tokenizer"]._vocab_size)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-4)
    assert "好" in printed.getvalue()


@pytest.mark.filterwarnings("ignore:Layer 'lambda")
def test_porting_train_step_is_adversarial_training():
    """docs/porting.md's train_step (README's porting section links it): with epsilon 0 it is
    model.fit's own step (same weights after a step); with epsilon 0.5 the perturbed embeddings
    change the update."""
    import keras

    from gau_keras import build_transformer_model
    from tests.model_utils import TINY_GAU

    section = _section(PORTING_DOC, "Patching the training function")
    source = [body for lang, body in _fences(section) if lang == "python" and "def train_step" in body][0]
    namespace = {"__name__": "__porting__"}
    exec(compile(source, "docs/porting.md[train_step]", "exec"), namespace)
    adversarial = namespace["AdversarialModel"]
    config = {**TINY_GAU, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    rng = np.random.default_rng(0)
    x = [rng.integers(1, TINY_GAU["vocab_size"], (4, 7)), np.zeros((4, 7), "int32")]
    y = np.array([0, 1, 2, 1])

    keras.utils.set_random_seed(0)
    bert = build_transformer_model(config, model="gau_alpha", return_keras_model=False)
    output = keras.layers.Dense(3, activation="softmax")(keras.layers.Lambda(lambda h: h[:, 0])(bert.model.output))
    initial = keras.Model(bert.model.input, output).get_weights()

    def trained(cls, epsilon):  # the same layers and starting weights each time; eager, nothing traced
        model = cls(bert.model.input, output)
        model.set_weights(initial)
        model.epsilon = epsilon
        model.compile(
            loss="sparse_categorical_crossentropy",
            optimizer=keras.optimizers.Adam(1e-2),
            metrics=["sparse_categorical_accuracy"],
            run_eagerly=True,
        )
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history
        return model.get_weights(), history

    plain, _ = trained(keras.Model, 0.0)
    unperturbed, history = trained(adversarial, 0.0)
    perturbed, _ = trained(adversarial, 0.5)
    assert 0 < history["loss"][0] < 10 and "sparse_categorical_accuracy" in history
    assert max(np.abs(a - b).max() for a, b in zip(plain, unperturbed)) < 1e-6
    assert max(np.abs(a - b).max() for a, b in zip(plain, perturbed)) > 1e-4


# --- the porting table --------------------------------------------------------------------------


def _porting_table():
    """[(bert4keras module or None, [names or patterns], status)] of docs/porting.md's table."""
    rows = []
    for line in _section(PORTING_DOC, "bert4keras's public names").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 3 or cells[0] in ("bert4keras", "---"):
            continue
        module = cells[0].strip("`") if re.fullmatch(r"`\w+`", cells[0]) else None
        names = [n for n in re.findall(r"`([^`]+)`", cells[1]) if re.fullmatch(r"[A-Za-z_][\w*]*", n)]
        rows.append((module, names, cells[2]))
    return rows


def _bert4keras_public_names(module):
    """Module-level names a bert4keras 0.11.5 module defines (also under if/else), not private,
    not deleted again, plus those it exports by import."""
    spec = importlib.util.find_spec("bert4keras")
    source = pathlib.Path(spec.submodule_search_locations[0]) / f"{module}.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    defined, deleted = set(), set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(element, ast.Name):
                            defined.add(element.id)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Delete):
                deleted.update(t.id for t in node.targets if isinstance(t, ast.Name))

    visit(tree.body)
    return {n for n in defined - deleted if not n.startswith("_")} | BERT4KERAS_IMPORTED.get(module, set())


def test_porting_table_lists_every_public_name_of_bert4keras():
    if importlib.util.find_spec("bert4keras") is None:
        pytest.skip("bert4keras 0.11.5 is not installed (tests/reference/requirements.txt)")
    rows = _porting_table()
    assert all(status.startswith(("supported in `gau_keras.", "not supported: ")) for _, _, status in rows), rows
    for module in BERT4KERAS_MODULES:
        listed = [name for row_module, names, _ in rows if row_module == module for name in names]
        public = _bert4keras_public_names(module)
        unlisted = sorted(n for n in public if not any(fnmatch.fnmatchcase(n, p) for p in listed))
        unknown = sorted(p for p in listed if not any(fnmatch.fnmatchcase(n, p) for n in public))
        assert not unlisted, f"bert4keras.{module}: public names missing from docs/porting.md's table: {unlisted}"
        assert not unknown, f"docs/porting.md's table lists names bert4keras.{module} does not have: {unknown}"


def test_porting_table_unsupported_names_are_really_absent():
    """A name the table calls "not supported" must not import from the gau_keras module of the same
    name: the table would send a user away from what is there."""
    present = []
    for module_name, names, status in _porting_table():
        if not status.startswith("not supported") or module_name is None:
            continue
        module = importlib.import_module(f"gau_keras.{module_name}")
        present += [
            f"gau_keras.{module_name}.{name}"
            for name in names
            if "*" not in name and name in dir(module) and hasattr(module, name)
        ]
    assert not present, f"docs/porting.md's table calls these unsupported, but they exist: {present}"


def test_porting_table_supported_names_import_from_gau_keras():
    missing = []
    for _, names, status in _porting_table():
        target = re.match(r"supported in `(gau_keras[\w.]*)`", status)
        if not target:
            continue
        try:
            module = importlib.import_module(target.group(1))
        except Exception as error:  # a module that fails to import misses every name
            missing.append(f"{target.group(1)} ({type(error).__name__}: {error}): {', '.join(names)}")
            continue
        absent = []
        for name in names:
            with contextlib.suppress(Exception):  # a module's __getattr__ may raise ImportError
                getattr(module, name)
                continue
            try:  # `from gau_keras.snippets import uniout` may name a submodule
                importlib.import_module(f"{target.group(1)}.{name}")
            except ImportError:
                absent.append(name)
        if absent:
            missing.append(f"{target.group(1)}: {', '.join(absent)}")
    assert not missing, "docs/porting.md's table says supported, but these do not import:\n" + "\n".join(missing)
