"""The layering the package docstrings promise, checked on what Python actually loads.

Each check imports every module of one part in a fresh interpreter and looks at
``sys.modules``: a rule broken through any chain of imports fails here.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("part, forbidden", [
    ("tfgshare.policies", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.sim",
                           "tfgshare.client", "tfgshare.runner")),
    ("tfgshare.sim", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.client",
                      "tfgshare.runner")),
    ("tfgshare.client", ("tfgshare.coordinator", "tfgshare.agent", "tfgshare.sim")),
    ("tfgshare.agent", ("tfgshare.coordinator", "tfgshare.client", "tfgshare.sim",
                        "tfgshare.policies")),
    ("tfgshare.coordinator", ("tfgshare.agent", "tfgshare.client", "tfgshare.sim")),
    ("tfgshare.repro", ("tfgshare.coordinator", "tfgshare.agent.node")),
])
def test_each_part_imports_only_what_its_docstring_allows(part, forbidden):
    assert under(loaded_after_importing(modules(part)), *forbidden) == []
