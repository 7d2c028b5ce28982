"""What ``pip install`` puts in site-packages: gau_keras and its subpackages only (the apps are
gau_keras.training.*), and nothing in gau_keras imports the checkout's top-level pretrain/ or
finetune/ folders, which hold only script entry points and configs."""

import ast
import re

from setuptools import find_packages

from tests.conftest import REPO_ROOT

#: the checkout's folders of script entry points: never imported by the library
APP_FOLDERS = ("pretrain", "finetune")


def _setup_call():
    tree = ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))
    return next(
        node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    )


def _keyword(call, name):
    return next(k.value for k in call.keywords if k.arg == name)


def test_setup_installs_only_gau_keras():
    packages = _keyword(_setup_call(), "packages")
    assert isinstance(packages, ast.Call) and packages.func.id == "find_packages"
    found = find_packages(where=str(REPO_ROOT), **{k.arg: ast.literal_eval(k.value) for k in packages.keywords})
    assert "gau_keras" in found and "gau_keras.training.pretrain" in found and "gau_keras.training.finetune" in found
    assert all(name == "gau_keras" or name.startswith("gau_keras.") for name in found), found
    assert set(ast.literal_eval(_keyword(_setup_call(), "package_data"))) == {"gau_keras"}


def test_the_library_never_imports_the_top_level_app_folders():
    found = []
    for path in sorted((REPO_ROOT / "gau_keras").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # importlib's module names
                names = [node.value] if re.fullmatch(r"(pretrain|finetune)\.\w+(\.\w+)*", node.value) else []
            found += [
                f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] in APP_FOLDERS
            ]
    assert not found, found


def test_the_app_folders_are_entry_points_only():
    """pretrain/ and finetune/ hold scripts that import gau_keras.training and nothing of their own."""
    for folder in APP_FOLDERS:
        assert not (REPO_ROOT / folder / "__init__.py").exists(), f"{folder}/ is not a package any more"
        for path in (REPO_ROOT / folder).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
            imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
            assert not defined, f"{path.relative_to(REPO_ROOT)} defines {defined}: logic belongs in gau_keras"
            assert any(m.startswith("gau_keras.training") for m in imported), path


#: docs/architecture.md, "The floors": each module of gau_keras imports only from its floor and below
FLOORS = {
    1: (
        "errors",
        "registration",
        "ops",
        "recurrence",
        "initializers",
        "optional",
        "uniout",
        "tokenizers",
        "segmenters",
        "input_checks",
        "keras_archive",
        "hf_weights",
    ),
    2: ("snippets", "activations"),
    3: ("layers", "losses", "optimizers", "metrics"),
    4: ("models", "generation", "checkpoints", "data", "pretrained", "export", "distribution"),
    5: ("backend", "bert4keras"),
    6: ("training", "fill_mask", "generate", "__main__", "flags", "cli_env"),
}


def _floor(module):
    room = module.split(".")[1] if "." in module else None
    return next((floor for floor, rooms in FLOORS.items() if room in rooms), None)


def _module_imports():
    """(module, imported gau_keras module) for every import in gau_keras (lazy ones too)."""
    for path in sorted((REPO_ROOT / "gau_keras").rglob("*.py")):
        module = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        yield module, None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gau_keras"):
                targets = (
                    [node.module] if node.module != "gau_keras" else [f"gau_keras.{alias.name}" for alias in node.names]
                )
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names if alias.name.startswith("gau_keras")]
            else:
                continue
            for target in targets:
                yield module, target


def test_imports_follow_the_floors():
    unplaced, upward = set(), set()
    for module, target in _module_imports():
        if module == "gau_keras":
            continue  # the package's __init__ gathers the public names of every floor
        if _floor(module) is None:
            unplaced.add(module)
        elif target is not None and target != "gau_keras" and (_floor(target) or 0) > _floor(module):
            upward.add(f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)})")
    assert not unplaced, f"modules on no floor (add them to FLOORS and docs/architecture.md): {sorted(unplaced)}"
    assert not upward, sorted(upward)


def _import_cycles(edges):
    """The import circles of a module graph ``{module: {imported module}}``, each as a sorted list
    (Tarjan's strongly connected components of more than one module, or a module importing itself)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in edges.get(module, ()):
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_circle_in_gau_keras_function_level_imports_included():
    """Imports run one way: no module reaches, directly or through others, back to itself, counting
    the imports inside functions (a package's ``__init__`` gathering its own submodules is no edge
    back from them unless one of them imports the package)."""
    edges = {}
    for module, target in _module_imports():
        edges.setdefault(module, set())
        if target is not None and target != module and target != "gau_keras":
            edges[module].add(target)
    edges.pop("gau_keras", None)  # the package's __init__ gathers the public names of every floor
    for targets in edges.values():
        targets.discard("gau_keras")
    assert _import_cycles(edges) == []
