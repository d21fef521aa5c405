"""A short seeded chaos run: every kind of fault once, and every job still finishes whole."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import chaos  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def test_seeded_faults_leave_every_job_finished_from_its_checkpoints(tmp_path):
    args = chaos.parser().parse_args(
        # long enough jobs and a short full disk, so the five faults usually fit in the batch
        ["--seed", "3", "--jobs", "3", "--steps", "300", "--save-every", "20", "--faults", "5",
         "--node-timeout", "5", "--gap-s", "5", "--disk-full-s", "6", "--timeout", "800",
         "--netns", "off"])     # the loopback cluster it was sized on; tools/chaos.py runs netns
    result = chaos.run_batch(tmp_path, args, faults=True)
    print(chaos.report(result, None, args.steps))
    assert chaos.check(result, args.steps) == []
    # The schedule is seeded but faults wait for recoveries, so how many fit before the batch
    # ends depends on this machine's speed: at least three kinds, every one of them recovered.
    kinds = {f.kind for f in result["faults"]}
    assert len(kinds) >= 3 and kinds <= set(chaos.KINDS)
    for job in result["jobs"]:
        assert job.state == "finished" and job.steps_done == args.steps
        assert job.resumed_right and job.redone <= job.bound
