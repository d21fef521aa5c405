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
