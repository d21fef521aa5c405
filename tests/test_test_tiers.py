"""The test tiers of tests/conftest.py: the rule marks what it should, the fast tier is TF-free.

``make test-fast`` runs ``-m "not tf and not live and not slow"``. These checks run pytest in
a fresh interpreter and look at its ``sys.modules``: a test the rule failed to mark ``tf``
that imports TensorFlow in the fast tier shows up here (and fails there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import tiers_of_code

TESTS = Path(__file__).resolve().parent
FAST = "not tf and not live and not slow"

# Bodies of would-be tests, written in pieces: the rule reads a test's own strings as code it
# runs (python -c), and these are examples, not code this test runs.
EXAMPLES = [
    (("import", " tensorflow as tf\ntf.constant(1)"), {"tf"}),
    (("from", " tf_slim import layers"), {"tf"}),
    # a lazy import inside a function of the package, two calls away
    (("from", " slim_models.nets_factory import get_network_fn\nget_network_fn('lenet', 4)"),
     {"tf"}),
    (("from", " tfgshare.runner import main as runner\nrunner.train(None)"), {"tf"}),
    # a command line: a module run with -m, and the tfgshare commands that start a cluster
    (("import", " subprocess, sys\nsubprocess.run([sys.executable, '-m', 'tfgshare.runner'])"),
     {"tf"}),
    (("import", " subprocess, sys\n"
      "subprocess.run([sys.executable, '-m', 'tfgshare.cli', 'agent', '--node', 'n'])"),
     {"live"}),
    (("from", " tfgshare.localcluster import LocalCluster\n"
      "LocalCluster(tmp_dir).start_coordinator()"), {"live"}),
    # the light parts: no tier
    (("from", " tfgshare.sim.engine import simulate\nsimulate(None, None, None)"), set()),
    (("from", " tfgshare.runner.config import parse_args\nparse_args([])"), set()),
    (("from", " slim_models.nets_factory import check_model\ncheck_model('lenet', 28)"), set()),
    (("from", " coordinator_fakes import CoordinatorThread\nCoordinatorThread(None)"), set()),
]

PROBE = '''
import json, os, sys

def pytest_collection_finish(session):
    session.config._probe_ids = [item.nodeid for item in session.items]

def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["TIER_PROBE_OUT"], "w") as out:
        json.dump({"tf_loaded": "tensorflow" in sys.modules,
                   "ids": getattr(session.config, "_probe_ids", [])}, out)
'''


def pytest_run(tmp_path: Path, *args: str, cwd: Path = TESTS.parent) -> tuple[dict, str]:
    """Run pytest in a fresh interpreter with a probe: (what it saw, its output)."""
    (tmp_path / "tier_probe.py").write_text(PROBE)
    out = tmp_path / "probe.json"
    env = {**os.environ, "TIER_PROBE_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tier_probe",
                           "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout + done.stderr


def test_the_rule_marks_tensorflow_and_cluster_code_and_nothing_else():
    for pieces, tiers in EXAMPLES:
        code = "".join(pieces)
        assert tiers_of_code(code) == tiers, code


def test_the_fast_tier_selects_no_tensorflow_or_live_test_and_collects_without_tensorflow(
        tmp_path):
    seen, output = pytest_run(tmp_path, "--collect-only", "-q", "-m", FAST, str(TESTS))
    assert not seen["tf_loaded"], "collecting the fast tier imported TensorFlow"
    files = {i.split("::")[0] for i in seen["ids"]}
    assert "tests/test_sim_engine.py" in files and "tests/test_policies_fgs.py" in files
    for tf_or_live in ("test_runner_train.py", "test_slim_datasets.py", "test_runner_warm.py",
                       "test_cluster_e2e.py", "test_chaos.py", "test_coordinator_restart.py"):
        assert f"tests/{tf_or_live}" not in files, output[-2000:]
    ids = set(seen["ids"])
    # in a file of both kinds: its TF-free tests stay, the ones that build a net go
    assert "tests/test_slim_nets_factory.py::test_unknown_model_lists_valid_names" in ids
    assert not any("test_small_nets_run_forward" in i for i in ids)
    assert len(ids) > 300


def test_a_fast_run_of_a_mixed_file_never_loads_tensorflow(tmp_path):
    seen, output = pytest_run(tmp_path, "-q", "-m", FAST,
                              str(TESTS / "test_slim_nets_factory.py"))
    assert " passed" in output and " failed" not in output, output[-3000:]
    assert len(seen["ids"]) >= 5
    assert not seen["tf_loaded"], "a test of the fast tier imported TensorFlow"


def test_a_test_that_loads_tensorflow_without_the_mark_fails(tmp_path):
    # A test the rule cannot read (a module name built at run time) that loads "TensorFlow"
    # (a stand-in module, so this costs no real import): the guard fails it.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_hidden.py").write_text(
        "import sys, types\n\n"
        "def test_hidden():\n"
        "    name = ''.join(['tensor', 'flow'])\n"
        "    sys.modules[name] = types.ModuleType(name)\n")
    seen, output = pytest_run(tmp_path, "-q", "-p", "conftest", "-m", FAST, "test_hidden.py",
                              cwd=tmp_path)
    assert seen["ids"] == ["test_hidden.py::test_hidden"]
    assert "1 failed" in output and "did not mark it `tf`" in output, output[-3000:]
