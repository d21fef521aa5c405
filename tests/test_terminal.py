"""A terminal that helps (issue 31): tables fit 100 columns, times carry their units, each
abbreviation is explained where it is printed, and the demo and the logs say in words what
happens. Each checked on what the user reads: the command's printed output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli_helpers import fake_cluster, run
from tfgshare import schema as s
from tfgshare.cli import main as tfgshare
from tfgshare.client import tables
from tfgshare.demo import Script, demo_jobs
from tfgshare.metrics import Report, format_duration, format_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))


@pytest.fixture(autouse=True)
def _not_a_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)   # a pipe: 100 columns


@pytest.fixture
def cluster(tmp_path):
    with fake_cluster(tmp_path) as both:
        yield both


def widest(text: str) -> int:
    return max(len(line.rstrip()) for line in text.splitlines())


# ---- times with their units -----------------------------------------------------------


@pytest.mark.parametrize("seconds, said", [
    (None, "-"), (float("nan"), "-"), (0, "0s"), (42.4, "42s"), (192, "3m12s"),
    (3599.4, "59m59s"), (3900, "1h05m"), (2 * 86400 + 4 * 3600, "2d04h"),
])
def test_times_are_written_with_their_units(seconds, said):
    assert format_duration(seconds) == said


# ---- the report table ------------------------------------------------------------------


def report(**kw) -> Report:
    fields = dict(jobs=20, finished=20, jct_mean=3900, jct_median=2000, jct_p95=12000,
                  wait_mean=700, util_allocated=.453, util_effective=.31, makespan=40000,
                  suspends=12, resumes=10, migrations=3, move_cost_s=1, pred_error_mean=.76,
                  pred_error_median=.5, pred_error_p90=2.28, util_device=.31,
                  util_device_busy=.6)
    return Report(**{**fields, **kw})


def test_one_policy_report_has_no_ratio_columns_and_explains_every_column():
    text = format_table({"fgs": report()})
    header = text.splitlines()[0].split()
    assert "JCT" in header and "/" not in header and "x" not in header   # no JCT / util x eff x
    assert widest(text) <= 100
    assert text.splitlines()[2].split()[2] == "1h05m"   # the mean JCT, with its units
    for name in ("JCT:", "wait:", "alloc%:", "eff%:", "dev%:", "busy%:", "span:", "s/r/m:",
                 "pred err:"):
        assert name in text, name
    assert "suspends/resumes/migrations" in text and "times as 42s, 3m12s, 1h05m" in text


def test_many_policies_fit_100_columns_and_the_legend_names_what_was_hidden():
    reports = {name: report() for name in ("fifo", "tiresias", "fgs sim (live start-ups)")}
    text = format_table(reports, baseline="fifo")
    assert widest(text) <= 100
    text = text.replace("\n", " ")     # the legend, wrapped
    assert "JCT /" in text.splitlines()[0]
    assert "JCT /: fifo's mean JCT / this policy's" in text
    assert "Hidden to fit 100 columns: p50" in text
    wide = format_table(reports, baseline="fifo", width=None, legend=False)
    assert wide.splitlines()[0].split() == [
        "policy", "jobs", "JCT", "p50", "p95", "wait", "alloc%", "eff%", "dev%", "busy%", "span",
        "s/r/m", "pred", "err", "JCT", "/", "util", "x", "eff", "x"]


def test_simulate_prints_a_report_of_at_most_100_columns(tmp_path, capsys):
    from test_sim_cli import _trace
    rc = tfgshare(["simulate", "--trace", str(_trace(tmp_path)), "--cluster", "2x2", "--policy",
                   "fifo,gandiva,tiresias,fgs", "--out", str(tmp_path / "out"), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 0 and widest(out) <= 100, out
    assert "alloc%: GPU memory held" in out and "JCT /" in out
    rc = tfgshare(["simulate", "--trace", str(_trace(tmp_path)), "--cluster", "2x2", "--policy",
                   "fgs", "--out", str(tmp_path / "one"), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 0 and widest(out) <= 100 and "JCT /" not in out and "util x" not in out


# ---- status and watch ------------------------------------------------------------------


def job(i: int, **kw) -> dict:
    j = dict(id=f"j{i}", owner=None, model="inception_v3", state="running",
             fragments=[("node1:0", 0.5), ("node1:1", 0.5)], steps_done=1234, total_steps=6000,
             predicted_remaining_s=3900, waited_s=192, suspends=1, migrations=1,
             over_memory=None, reason="")
    return {**j, **kw}


def test_a_job_that_ended_has_no_time_left_in_the_tables():
    ended = [job(i, state=state, predicted_remaining_s=641.0)
             for i, state in enumerate(("cancelled", "failed", "finished"))]
    running = job(9, predicted_remaining_s=641.0)
    assert [tables.left(j) for j in ended] == ["-", "-", "-"]
    assert tables.left(running) == "10m41s"


def test_moves_read_in_words():
    assert tables.moves(job(1)) == "1 susp, 1 mig"
    assert tables.moves(job(1, suspends=0, migrations=0)) == "-"
    assert tables.moves(job(1, suspends=2, migrations=0)) == "2 susp"


def test_status_table_drops_columns_to_fit_and_says_which(capsys):
    from tfgshare.client.commands import _print_fitted
    jobs = [job(1), job(2, owner="alice", state="failed",
                        reason="exit 1 (bad input: the dataset dir holds no train-* files)")]
    for width in (100, 80):
        _print_fitted(*tables.jobs_table(jobs, width), width)
        out = capsys.readouterr().out
        assert widest(out) <= width, out
        assert "LEFT: predicted time to finish" in out and "1h05m" in out
        said = " ".join(out.split())     # the legend, wrapped
        assert f"Hidden to fit {width} columns: MOVES" in said and "--wide" in said
    _print_fitted(*tables.jobs_table(jobs, None), None)
    out = capsys.readouterr().out
    assert "1 susp, 1 mig" in out and "3m12s" in out and "Hidden" not in out
    assert "MOVES: suspends (susp) and migrations (mig)" in out


def test_status_and_watch_at_100_columns_with_their_legends(capsys, cluster):
    ct, agent = cluster
    addr = ["--coordinator", ct.address]
    for _ in range(2):
        code, out, _ = run(capsys, "submit", *addr, "inception_v3", "--max_number_of_steps",
                           "400", "--memory_fraction", "0.5", "--name", "a-long-job-name")
        assert code == 0
    agent.wait_command(s.StartJob, "j1")
    agent.event("j1", "progress", step=10, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
                predicted_remaining_s=192.0)
    code, out, _ = run(capsys, "status", *addr)
    assert code == 0 and widest(out) <= 100, out
    assert "LEFT: predicted time to finish" in out and "MOVES" in out and "-" in out
    code, out, _ = run(capsys, "status", *addr, "--wide")
    assert code == 0 and "WAITED" in out and "MOVES" in out
    code, out, _ = run(capsys, "status", *addr, "--report")
    assert code == 0 and widest(out) <= 100, out
    assert "alloc%: GPU memory held" in out and "JCT /" not in out
    assert "susp, mig: suspends, migrations" in out
    code, out, _ = run(capsys, "watch", *addr, "--once")
    assert code == 0 and widest(out) <= 100 and "10/400" in out
    assert "LEFT: predicted time to finish" in out
    code, out, _ = run(capsys, "nodes", *addr)
    assert code == 0 and widest(out) <= 100, out


@pytest.mark.parametrize("command, words", [
    ("status", ["LEFT", "predicted time to finish", "WAITED", "MOVES", "--wide"]),
    ("watch", ["LEFT", "predicted time to finish", "--wide"]),
    ("simulate", ["--wide"]),
])
def test_help_explains_the_columns(capsys, command, words):
    with pytest.raises(SystemExit) as done:
        tfgshare([command, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for word in words:
        assert word in out, word


# ---- the demo's narration and the logs -------------------------------------------------


class FakeClient:
    def submit(self, specs):
        return ["j3"]


def test_demo_narrates_the_short_job_sampling_before_it_waits():
    script = Script(demo_jobs()[1], ["j1", "j2"])
    run_ = {"j1": {"id": "j1", "state": "running"}, "j2": {"id": "j2", "state": "running"}}
    script.step(FakeClient(), run_, now=0.0)
    assert script.step(FakeClient(), run_, now=100.0) == ["j3"]
    for state in ("queued", "sampling", "sampled", "running"):
        script.step(FakeClient(), {**run_, "j3": {"id": "j3", "state": state}}, now=101.0)
    script.step(FakeClient(), {**run_, "j1": {"id": "j1", "state": "suspending"}}, now=102.0)
    notes = script.notes
    assert "so it waits" not in notes[0] and "while the long jobs hold both GPUs" in notes[0]
    sampling = next(i for i, n in enumerate(notes) if n.startswith("j3 is sampled:"))
    waits = next(i for i, n in enumerate(notes) if "sampled and waits" in n)
    assert sampling < waits
    assert notes[-2] == "j3 runs now"
    assert notes[-1] == "j1 is suspended by fgs to make room: it saves a checkpoint"


def sampled_job_log(capsys, cluster) -> str:
    """``tfgshare logs`` of a job that sampled (0.25 s a step) and was started again."""
    ct, agent = cluster
    addr = ["--coordinator", ct.address]
    run(capsys, "submit", *addr, "inception_v3", "--max_number_of_steps", "100")
    agent.wait_command(s.StartJob, "j1")
    ct.coord.cluster.jobs["j1"].sample_only = True
    agent.sample("j1", step_time=0.25, peak_mb=3000.0)
    agent.wait_command(s.StartJob, "j1")
    code, out, _ = run(capsys, "logs", *addr, "j1")
    assert code == 0
    return out


def test_logs_say_in_words_what_sampling_found(capsys, cluster):
    out = sampled_job_log(capsys, cluster)
    assert "sampled: speed and memory measured; waits for a place to run" in out
    assert "sampled: sampled" not in out
    assert "predicted to run " in out and "s a step alone" in out
    assert "a first guess: none measured yet" in out or "as measured" in out
    for jargon in ("newcomers", "outside x", "(prior)", "(placed)"):
        assert jargon not in out, jargon


def test_the_predictions_benchmark_reads_the_prediction_the_logs_show(capsys, cluster):
    """tools/bench_predictions.py prints, per job, the sharing and step its prediction
    assumed, parsed from the job's log: it reads the line as the coordinator writes it."""
    import bench_predictions

    parts = bench_predictions.run_parts(sampled_job_log(capsys, cluster).splitlines())
    assert parts["sampled_step_s"] == pytest.approx(0.25)
    assert parts["sharing"] is not None and parts["sharing"][-1] in "mp"
    assert parts["assumed_step_s"] > 0 and parts["restart_s"] >= 0 and parts["after"] >= 1
