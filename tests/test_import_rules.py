"""The layering the package docstrings promise, checked on what Python actually loads.

Each check imports every module of one part in a fresh interpreter and looks at
``sys.modules``: a rule broken through any chain of imports fails here.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def modules(package: str) -> list[str]:
    """Every module under ``package`` (a dotted name), found on disk."""
    root = REPO.joinpath(*package.split("."))
    names = [package]
    for info in pkgutil.walk_packages([str(root)], prefix=package + "."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return names


def loaded_after_importing(names: list[str]) -> list[str]:
    """The module names in ``sys.modules`` after a fresh interpreter imports ``names``."""
    code = ("import importlib, json, sys\n"
            f"for n in {names!r}: importlib.import_module(n)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def under(loaded: list[str], *prefixes: str) -> list[str]:
    return [m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes)]


TF = ("tensorflow", "tf_slim", "tf_keras", "keras")
# The runner contract and flag parsing are read by the agent and coordinator: no TF there either.
LIGHT_RUNNER = ["tfgshare.runner", "tfgshare.runner.protocol", "tfgshare.runner.config",
                "tfgshare.runner.timing", "tfgshare.runner.events", "tfgshare.runner.stop",
                "tfgshare.runner.cpu"]


def test_nothing_outside_the_runner_and_slim_models_imports_tensorflow():
    names = [m for m in modules("tfgshare") if not m.startswith("tfgshare.runner")]
    names += modules("philly") + LIGHT_RUNNER
    assert len(names) > 40
    assert under(loaded_after_importing(names), *TF) == []


def test_the_runner_does_import_tensorflow_so_the_check_above_can_fail():
    assert under(loaded_after_importing(["tfgshare.runner.graph"]), "tensorflow")


# What no part but the runner itself (and repro's measuring tools) may import: the
# runner and the model zoo; the runner contract is ``tfgshare.runner_wire``, the model
# names ``tfgshare.model_table``, and an agent starts a runner by module name.
RUNNER_AND_ZOO = ("tfgshare.runner", "slim_models")
LIGHT_PARTS = ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.client", "tfgshare.policies",
               "tfgshare.sim")


@pytest.mark.parametrize("part, forbidden", [
    ("tfgshare.policies", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.sim",
                           "tfgshare.client") + RUNNER_AND_ZOO),
    ("tfgshare.sim", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.client")
     + RUNNER_AND_ZOO),
    ("tfgshare.client", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.sim")
     + RUNNER_AND_ZOO),
    ("tfgshare.agent", ("tfgshare.coordinator", "tfgshare.client", "tfgshare.sim",
                        "tfgshare.policies") + RUNNER_AND_ZOO),
    ("tfgshare.coordinator", ("tfgshare.agent", "tfgshare.client", "tfgshare.sim")
     + RUNNER_AND_ZOO),
    ("tfgshare.repro", ("tfgshare.coordinator", "tfgshare.agent.node")),
])
def test_each_part_imports_only_what_its_docstring_allows(part, forbidden):
    assert under(loaded_after_importing(modules(part)), *forbidden) == []


def imported_names(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import statement in one file, those inside functions too."""
    rows = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            rows += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: resolve against the file's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            rows += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}")
                                             for a in node.names]
    return rows


@pytest.mark.parametrize("part", LIGHT_PARTS)
def test_no_light_part_imports_the_runner_or_the_zoo_even_lazily(part):
    root = REPO.joinpath(*part.split("."))
    found = []
    for path in sorted(root.rglob("*.py")):
        package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
        for line, name in imported_names(path, package):
            if under([name], *RUNNER_AND_ZOO):
                found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert found == []


# The runner's own modules: no import circle, even through an import inside a function,
# and no import inside a function but one that keeps TensorFlow out of a module that
# must load without it (``main`` checks the flags before TensorFlow is imported quietly).
RUNNER = REPO / "tfgshare" / "runner"
TF_PACKAGES = {"tensorflow", "tf_slim", "tf_keras", "keras"}


def _top_level_statements(body: list) -> list:
    """The statements a module runs at load: its body, into ``if``/``try``/``with`` blocks,
    leaving out function and class bodies and ``if TYPE_CHECKING:`` blocks."""
    found = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found += _top_level_statements(node.orelse)
            continue
        found.append(node)
        for block in ("body", "orelse", "finalbody"):
            found += _top_level_statements(getattr(node, block, []))
        for handler in getattr(node, "handlers", []):
            found += _top_level_statements(handler.body)
    return found


def _imported(node) -> list[str]:
    """The dotted names one import statement loads (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return []


def runner_imports(root: Path = RUNNER) -> dict[str, dict]:
    """Per runner module (by file stem): the sibling modules it imports at load
    (``load``), those it imports only inside a function (``lazy``, with lines), and
    whether it imports TensorFlow itself at load (``tf``)."""
    siblings = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    prefix = "tfgshare.runner."
    table = {}
    for path in sorted(root.glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text(), str(path))
        at_load = {id(n) for n in _top_level_statements(tree.body)}
        info = {"load": set(), "lazy": {}, "tf": False}
        for node in ast.walk(tree):
            for name in _imported(node):
                top = name.split(".")[0]
                sibling = name[len(prefix):].split(".")[0] if name.startswith(prefix) else None
                if id(node) in at_load:
                    info["tf"] |= top in TF_PACKAGES
                    if sibling in siblings:
                        info["load"].add(sibling)
                elif sibling in siblings:
                    info["lazy"].setdefault(sibling, []).append(node.lineno)
        table[path.stem] = info
    return table


def loads_tensorflow(table: dict, module: str, seen: frozenset = frozenset()) -> bool:
    """Whether importing ``module`` loads TensorFlow, itself or through its siblings."""
    info = table[module]
    return info["tf"] or any(loads_tensorflow(table, m, seen | {module})
                             for m in info["load"] if m not in seen)


def import_cycle(table: dict) -> list[str] | None:
    """One circle of imports among the runner's modules, lazy ones counted; None if none."""
    edges = {m: info["load"] | set(info["lazy"]) for m, info in table.items()}
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def runner_import_problems(root: Path = RUNNER) -> list[str]:
    """What breaks the runner's import rules: a circle, or an import inside a function
    that does not keep TensorFlow out of a module that loads without it."""
    table = runner_imports(root)
    problems = []
    cycle = import_cycle(table)
    if cycle:
        problems.append("import circle: " + " -> ".join(cycle))
    for module, info in sorted(table.items()):
        for sibling, lines in sorted(info["lazy"].items()):
            if loads_tensorflow(table, module) or not loads_tensorflow(table, sibling):
                problems.append(f"{module}.py:{lines[0]} imports {sibling} inside a function")
    return problems


def test_the_runner_modules_import_each_other_without_a_circle():
    table = runner_imports()
    assert {"main", "attempt", "replicas", "gang_graph", "graph"} <= set(table)
    assert loads_tensorflow(table, "attempt") and not loads_tensorflow(table, "main")
    assert runner_import_problems() == []


def test_the_runner_import_check_finds_a_circle_and_a_lazy_import(tmp_path):
    def write(name: str, text: str) -> None:
        (tmp_path / f"{name}.py").write_text(text)

    write("a", "import tensorflow\nfrom tfgshare.runner import b\n")
    write("b", "import tensorflow\n\ndef f():\n    from tfgshare.runner import a\n")
    write("c", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
               "    from tfgshare.runner import a\n\ndef g():\n    from tfgshare.runner import a\n")
    problems = runner_import_problems(tmp_path)
    assert problems[0] == "import circle: a -> b -> a"
    assert problems[1:] == ["b.py:4 imports a inside a function"]   # c's keeps out TF


def fgs_imports_out_of_layer() -> list[str]:
    """fgs's modules' run-time imports of fgs modules not before them in ``fgs.LAYERS``
    (an import under ``if TYPE_CHECKING:`` is for types only and allowed)."""
    from tfgshare.policies import fgs

    root = REPO / "tfgshare" / "policies" / "fgs"
    layers = list(fgs.LAYERS)
    found = {p.stem for p in root.glob("*.py")} - {"__init__"}
    problems = [f"{name}.py is in no layer" for name in sorted(found - set(layers))]
    for name in layers:
        tree = ast.parse((root / f"{name}.py").read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
                    and id(node) not in typing_only):
                other = node.module.split(".")[0]
                if other not in layers or layers.index(other) >= layers.index(name):
                    problems.append(f"{name}.py:{node.lineno} imports .{node.module}")
    return problems


def test_each_fgs_phase_imports_only_the_modules_before_it():
    assert fgs_imports_out_of_layer() == []
