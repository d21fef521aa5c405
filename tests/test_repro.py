"""tfgshare profile / replay / reproduce four-models, for real on the CPU (small settings)."""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfgshare.localcluster import LocalCluster
from tfgshare.sim.profiles import load_profiles

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)   # 1-2 minutes each on an idle 2-core machine

# the mapping draws among the paper's models the profile names; lenet stands in for them
TINY_PROFILE = """
reference_gpu: "test: CPU virtual GPU"
models:
  alexnet_v2:
    image_size: 195
    checkpoint_mb: 300
    startup_s: 12
    batches:
      1: {step_time_s: 0.3, memory_mb: 900, gpu_util: 1.0}
  lenet:
    checkpoint_mb: 40
    startup_s: 10
    batches:
      2: {step_time_s: 0.02, memory_mb: 800, gpu_util: 1.0}
"""


@pytest.fixture(scope="module")
def gpu_check_cpu(tmp_path_factory):
    """One run of ``tools/gpu_check.sh --allow-cpu``: its output, report and work dir.

    Its profile and reproduce steps are ``tfgshare profile`` and ``tfgshare reproduce``
    as a user runs them, so the tests of those commands read this run's results rather
    than start a dozen more TensorFlow processes (about a minute of the suite).
    """
    work = tmp_path_factory.mktemp("gpucheck")
    done = subprocess.run(
        ["bash", "tools/gpu_check.sh", "--allow-cpu", "--models", "lenet", "cifarnet",
         "--profile-batch-sizes", "1", "--share-steps", "30", "--continuity-steps", "40",
         "--reproduce-jobs", "2", "--work-dir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=1450,
        env={**__import__("os").environ, "PYTHON": sys.executable})
    report = yaml.safe_load(done.stdout.split("--- paste into")[0]) if done.stdout else {}
    return done, report or {}, work


@pytest.mark.timeout(1500)   # about 4 minutes idle: a dozen TensorFlow start-ups
def test_gpu_check_passes_its_allow_cpu_mode(gpu_check_cpu):
    done, _, _ = gpu_check_cpu
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    block = done.stdout.split("--- paste into docs/reproduction.md\n")[1].split("--- end")[0]
    for name in ("discovery", "sharing", "continuity", "profile", "reproduce"):
        assert f"- {name}: ok" in block
    assert "pair lenet/1 + cifarnet/1: slowdown" in block and "JCT /" in block


@pytest.mark.timeout(1500)
def test_profile_on_the_cpu_writes_a_profile_the_simulator_loads(gpu_check_cpu):
    from philly.jobs import TraceJob
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate

    done, report, work = gpu_check_cpu
    run = report.get("profile", {})
    assert run.get("ok"), done.stdout[-3000:] + done.stderr[-3000:]
    assert run["command"] == ("tfgshare profile lenet cifarnet --batch-sizes 1 --colocate "
                              f"--pairs 2 --out {work / 'profile' / 'profile.yaml'} --cpu")
    said = "\n".join(run["lines"])
    out = work / "profile" / "profile.yaml"
    # it says up front what it will run, numbers each run, and fits 100 columns
    assert "2 runs of a (model, batch size) one at a time, then 1 pair at once" in said
    assert "[1/2, " in said and "[2/2, " in said
    assert max(map(len, run["lines"])) <= 100, said
    # on the CPU the pair's slowdowns are taken at a whole core, from the measured shares
    assert "co-location fit (full core): overhead" in said
    assert "fit error mean" in said and "at a whole core" in said
    doc = yaml.safe_load(out.read_text())
    assert doc["device"].startswith("CPU virtual GPU") and doc["tensorflow"] != "unknown"
    assert doc["date"] and doc["colocation"]["pairs"][0]["models"] == ["lenet/1", "cifarnet/1"]
    assert doc["colocation"]["basis"] == "full core"
    assert 0 < doc["colocation"]["pairs"][0]["pair_share"] <= 1
    row = doc["models"]["lenet"]
    assert row["startup_s"] > row["graph_build_s"] > 0 and row["save_s"] > 0
    # the share of its core the runner got while measured (the times are at that share)
    assert 0 < row["cpu_share"] <= 1 and row["first_step_extra_s"] >= 0
    # started as the agent starts it, on a warm runner: a cold start adds the import
    assert row["cold_startup_s"] == pytest.approx(row["startup_s"] + doc["import_tensorflow_s"],
                                                  abs=0.02)
    assert doc["load_average"]["before"] and "failed" not in doc
    prof = load_profiles(out)
    lenet = prof.get("lenet", 1)
    assert 0 < lenet.step_time_s < 30 and 0 < lenet.gpu_util <= 1
    assert 10 < lenet.checkpoint_mb < 100     # lenet's 3.3 M parameters and their slots
    # the simulator runs on it, with its fitted co-location model
    config = SimConfig(tick_s=1.0, **prof.sim_overrides())
    assert config.colocation.overhead == doc["colocation"]["overhead"]
    jobs = [TraceJob(f"j{i}", 2.0 * i, 1, 60.0, model=m, batch_size=1, total_steps=200)
            for i, m in enumerate(["lenet", "cifarnet"] * 3)]
    result = simulate(load_cluster("1x2"), jobs, prof, get_policy("fgs"), config)
    assert result.report.finished == 6


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster", policy="fifo")
    try:
        c.start_coordinator()
        c.start_agent("n1", "2x16GiB")
        c.wait_nodes({"n1"})
        yield c
    finally:
        c.stop_all(timeout_s=10)


def test_replay_of_a_small_slice_finishes_every_job_and_reports_live_beside_sim(cluster,
                                                                                  tmp_path,
                                                                                  capsys):
    from tfgshare.repro import replay

    from tfgshare.repro.cpushare import RunnerShareProbe

    profile = tmp_path / "tiny.yaml"
    # lenet profiled at half a core: 0.04 s a step there, 0.02 s at a whole core
    profile.write_text(TINY_PROFILE.replace("    startup_s: 10\n",
                                            "    startup_s: 10\n    cpu_share: 0.5\n")
                       .replace("step_time_s: 0.02", "step_time_s: 0.04"))
    out = tmp_path / "replay"
    # the CPU share of the agent's runners, measured as tools/replay_local.py measures it
    probe = RunnerShareProbe(cluster.procs["agent-n1"].pid)
    code = replay.main(["--coordinator", cluster.address, "--speedup", "20000", "--jobs", "4",
                        "--as-model", "lenet:2",
                        "--start", "2017-10-09", "--profile", str(profile), "--out", str(out),
                        "--timeout", "240"], share_probe=probe)
    assert code == 0
    said = capsys.readouterr()
    wide = [line for line in (said.out + said.err).splitlines() if len(line) > 100]
    assert not wide, wide
    per_job = (out / "per_job.txt").read_text().splitlines()
    assert len(per_job) == 5 and per_job[0].startswith("job ")   # a header, a line a job
    assert f"beside its simulated one: {out / 'per_job.txt'}" in " ".join(said.out.split())
    doc = json.loads((out / "report.json").read_text())
    assert doc["jobs"] == 4 and doc["policy"] == "fifo" and doc["cluster"] == "1x2:16384"
    assert doc["live"]["report"]["finished"] == 4 == doc["sim"]["report"]["finished"]
    assert all(j["state"] == "finished" for j in doc["live"]["jobs"])
    assert doc["jct_mean_sim_vs_live"] is not None
    # the simulator again with the start-ups measured live: one fresh start per job here
    assert len(doc["live_startups_s"]["lenet"]) == 4
    assert all(0 < s < 240 for s in doc["live_startups_s"]["lenet"])
    assert doc["sim_live_startups"]["report"]["finished"] == 4
    assert doc["jct_mean_sim_live_startups_vs_live"] is not None
    spent = doc["live_time_spent"]
    assert len(spent) == 4 and all(r["starting_s"] > 0 and r["checkpoints_s"] > 0 for r in spent)
    # steps follow the compressed durations at a whole core: 66 s / 20000 is under a step;
    # 159,721 s / 20000 / 0.02 s
    assert [j["total_steps"] for j in doc["mapping"]][:3] == [1, 1, 399]
    # and the profile simulated at the share the live runners got
    assert 0 < doc["live_cpu_share"] <= 1
    assert doc["sim_live_share"]["report"]["finished"] == 4
    assert doc["jct_mean_sim_live_share_vs_live"] is not None
    with open(out / "report.csv") as f:
        assert [line.split(",")[0] for line in f.read().splitlines()[1:]] == \
            ["fifo live", "fifo sim", "fifo sim (live CPU share)", "fifo sim (live start-ups)"]


@pytest.mark.timeout(1500)
def test_reproduce_four_models_records_match_the_coordinators_store(gpu_check_cpu):
    done, report, work = gpu_check_cpu
    run = report.get("reproduce", {})
    assert run.get("ok"), done.stdout[-3000:] + done.stderr[-3000:]
    out = work / "reproduce" / "four-models"
    assert run["command"] == (f"tfgshare reproduce four-models --scale small --policy fifo,fgs "
                              f"--out {out} --config {work / 'reproduce' / 'batch.yaml'}")
    for name in ("report.txt", "report.csv", "jobs.json", "jct.png", "gantt.png"):
        assert (out / name).stat().st_size > 0, name
    # the simulator's prediction of the same run, beside the live figures
    with open(out / "predicted.csv") as f:
        predicted = {(r["policy"], r["figure"]): r for r in csv.DictReader(f)}
    assert float(predicted[("fifo", "JCT mean s")]["simulated"]) > 0
    assert ("fifo vs fgs", "JCT ratio") in predicted
    assert "the simulator on this run's measurements" in " ".join(run["lines"])
    table = (out / "report.txt").read_text().splitlines()
    assert table[0].split()[:2] == ["policy", "jobs"] and "JCT /" in table[0]
    assert [line.split()[0] for line in table[2:4]] == ["fifo", "fgs"]   # then its legend
    doc = json.loads((out / "jobs.json").read_text())
    assert doc["baseline"] == "fifo"
    for policy in ("fifo", "fgs"):
        jobs = doc["policies"][policy]["jobs"]
        assert [j["name"] for j in jobs] == ["01-lenet", "02-lenet"]
        db = sqlite3.connect(out / "clusters" / policy / "state.db")
        stored = {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM jobs")}
        db.close()
        assert set(stored) == {j["id"] for j in jobs}
        for j in jobs:
            s = stored[j["id"]]
            assert j["state"] == s["state"] == "finished"
            assert j["finish_time"] == pytest.approx(s["finish_time"])
            assert j["submit_time"] == pytest.approx(s["submit_time"])
            assert j["steps_done"] == s["steps_done"] == s["spec"]["max_number_of_steps"]
        assert doc["policies"][policy]["report"]["finished"] == 2
        # the CPU the policy's cluster used (its runners trained and started two jobs)
        assert doc["policies"][policy]["cpu_s"] > 1 and len(doc["policies"][policy]["load"]) == 6
        # the reset between policies deleted the batch's checkpoints
        assert not (out / "clusters" / policy / "checkpoints").exists()


def test_colocation_fit_recovers_the_model_that_made_the_slowdowns():
    from tfgshare.repro.colocate import fit_colocation
    from tfgshare.sim.colocation import Colocation

    truth = Colocation(overhead=0.15, exponent=1.3)
    utils = {"a/1": 0.9, "b/1": 0.5, "c/1": 0.3}
    pairs = [{"models": [x, y], "slowdown": [truth.slowdown(2, utils[x] + utils[y])] * 2}
             for x, y in (("a/1", "b/1"), ("a/1", "c/1"), ("b/1", "c/1"))]
    fit = fit_colocation(pairs, utils)
    assert fit["overhead"] == pytest.approx(0.15, abs=0.011)
    assert fit["exponent"] == pytest.approx(1.3, abs=0.051)
    assert fit["fit_error_max"] < 0.01 and fit["points"] == 6


def test_the_colocation_fit_on_a_shared_cpu_uses_each_runs_measured_share():
    from tfgshare.repro.colocate import fit_colocation, pair_share
    from tfgshare.sim.colocation import Colocation

    # a pair whose runners each ran 3 s and waited 7 s: 3 s for the partner, 4 s for other
    # work, so the pair had 6 / 10 of its core
    assert pair_share([(3.0, 7.0), (3.0, 7.0)]) == pytest.approx(0.6)
    assert pair_share([(2.0, 2.0), (2.0, 2.0)]) == pytest.approx(1.0)   # nobody else
    truth = Colocation(overhead=0.15, exponent=1.3)
    full_util = {"a/1": 0.9, "b/1": 0.5, "c/1": 0.3}
    alone_share = {"a/1": 0.5, "b/1": 0.25, "c/1": 0.9}      # the load changed between runs
    utils = {k: u * alone_share[k] for k, u in full_util.items()}   # busy share measured
    pairs = []
    for (x, y), s in zip((("a/1", "b/1"), ("a/1", "c/1"), ("b/1", "c/1")), (0.3, 0.8, 0.5)):
        true = truth.slowdown(2, full_util[x] + full_util[y])
        # step at share s in the pair over step at its own share alone
        pairs.append({"models": [x, y], "pair_share": s,
                      "slowdown": [true * alone_share[k] / s for k in (x, y)]})
    fit = fit_colocation(pairs, utils, alone_share)
    assert fit["basis"] == "full core"
    assert fit["overhead"] == pytest.approx(0.15, abs=0.011)
    assert fit["exponent"] == pytest.approx(1.3, abs=0.051)
    assert fit["fit_error_max"] < 0.01
    as_measured = fit_colocation(pairs, utils)     # without the shares: the load's noise
    assert as_measured["basis"] == "as measured" and as_measured["fit_error_max"] > 0.2


def test_replay_step_counts_use_a_cpu_profiles_steps_at_a_whole_core(tmp_path):
    from tfgshare.repro.replay import compressed_jobs

    prof = load_profiles(_tiny_profile(tmp_path))
    at_profile = compressed_jobs("philly", prof, 1000, num_jobs=20, start=0)
    at_core = compressed_jobs("philly", prof, 1000, num_jobs=20, start=0,
                              shares={"alexnet_v2": 0.25, "lenet": 0.25})
    assert [j.id for j in at_profile] == [j.id for j in at_core]
    for a, b in zip(at_profile, at_core):      # a step at a whole core is a quarter as long
        step = prof.get(a.model, a.batch_size).step_time_s
        assert a.total_steps == max(1, round(a.duration / step))
        assert b.total_steps == max(1, round(a.duration / (step * 0.25)))
    assert sum(b.total_steps for b in at_core) > sum(a.total_steps for a in at_profile)


def _tiny_profile(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_PROFILE)
    return path


def test_a_measured_profile_sets_the_simulators_colocation_and_checkpoint_bandwidth(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(TINY_PROFILE + "storage_mb_s: 42.5\ncolocation: {overhead: 0.3, "
                    "exponent: 0.7, fit_error_mean: 0.1}\n")
    prof = load_profiles(path)
    over = prof.sim_overrides()
    assert over["storage_mb_s"] == 42.5
    assert (over["colocation"].overhead, over["colocation"].exponent) == (0.3, 0.7)
    assert prof.get("alexnet_v2", 1).checkpoint_mb == 300
    path.write_text(TINY_PROFILE + "colocation: {overhead: -1, exponent: 1}\n")
    with pytest.raises(ValueError, match="colocation.overhead"):
        load_profiles(path)


def test_a_cpu_profiles_utilisation_is_taken_at_a_whole_core(tmp_path):
    # a runner that got 15 % of its core and kept it busy reads as 0.15 busy: alone on a
    # virtual GPU it uses all of it, which is what the co-location model must be given
    path = tmp_path / "p.yaml"
    path.write_text(TINY_PROFILE.replace("    startup_s: 10\n",
                                         "    startup_s: 10\n    cpu_share: 0.15\n")
                    .replace("memory_mb: 800, gpu_util: 1.0}", "memory_mb: 800, gpu_util: 0.15}"))
    prof = load_profiles(path)
    assert prof.get("lenet", 2).gpu_util == pytest.approx(1.0)
    assert prof.get("alexnet_v2", 1).gpu_util == 1.0            # no share: as written
    # a CPU profile's start-ups compute on the virtual GPU's core, beside its co-tenants
    assert prof.sim_overrides()["startup_on_device"] is True
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(TINY_PROFILE)
    assert "startup_on_device" not in load_profiles(gpu).sim_overrides()
    path.write_text(path.read_text().replace("gpu_util: 0.15}", "gpu_util: 0.06}"))
    assert load_profiles(path).get("lenet", 2).gpu_util == pytest.approx(0.4)
    path.write_text(path.read_text().replace("cpu_share: 0.15", "cpu_share: 1.5"))
    with pytest.raises(ValueError, match="lenet.cpu_share"):
        load_profiles(path)


def test_start_costs_read_from_a_jobs_coordinator_log():
    from tfgshare.repro.replay import checkpoint_seconds, start_costs

    log = ["12:00:01.000 submitted",
           "12:00:02.500 sample on n1:0 f=0.500 (attempt 1)",
           "12:00:09.500 n1 #1 started global_step=0 restored=False device=/cpu:0",
           "12:00:12.000 n1 #1 start_phases start_s=6.5 graph_s=3 first_step_s=2.5",
           "12:00:20.000 n1 #1 suspended step=5",
           "12:00:30.000 resume on n1:1 f=0.500 (attempt 2)",
           "12:00:34.000 n1 #2 started global_step=5 restored=True device=/cpu:0",
           "12:00:35.000 n1 #2 start_phases start_s=3 graph_s=1 first_step_s=0.4"]
    # decision to started, plus the first step beyond a plain 0.5 s step
    assert start_costs(log, 0.5) == [(pytest.approx(9.0), False), (pytest.approx(4.0), True)]
    log += ["12:00:19.000 n1 #1 checkpoint step=5 path=/x/ckpt-5 seconds=1.25 size_mb=40",
            "12:00:40.000 n1 #2 checkpoint step=9 path=/x/ckpt-9 seconds=0.5 size_mb=40"]
    assert checkpoint_seconds(log) == pytest.approx(1.75)


def test_runner_checkpoints_make_a_job_hold_its_gpu_while_it_saves(tmp_path):
    from philly.jobs import TraceJob
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate

    path = tmp_path / "p.yaml"
    path.write_text(TINY_PROFILE + "storage_mb_s: 20\n")   # lenet: 40 MB -> 2 s per save
    prof = load_profiles(path)
    # a: 100 steps, its sample (10 steps) ends before it: a save then and one at the end;
    # b: one step, only the last save
    jobs = [TraceJob("a", 0.0, 1, 2.0, model="lenet", batch_size=2, total_steps=100),
            TraceJob("b", 0.1, 1, 0.02, model="lenet", batch_size=2, total_steps=1)]
    jct = {}
    for saves in (False, True):
        config = SimConfig(tick_s=0.5, runner_checkpoints=saves, step_noise=0.0,
                           **prof.sim_overrides())
        result = simulate(load_cluster("1x1"), jobs, prof, get_policy("fifo"), config)
        jct[saves] = {r.id: r.jct for r in result.records}
    # fifo on one GPU: a ends 4 s later; b, queued behind it, 4 s + its own 2 s later
    assert jct[True]["a"] == pytest.approx(jct[False]["a"] + 4.0, abs=0.6)
    assert jct[True]["b"] == pytest.approx(jct[False]["b"] + 6.0, abs=1.1)


def test_a_restart_from_a_checkpoint_pays_the_profiles_measured_resume_startup(tmp_path):
    from philly.jobs import TraceJob
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate

    jct = {}
    for resume in (None, 1.0):
        path = tmp_path / "p.yaml"
        text = TINY_PROFILE + "storage_mb_s: 20\n"        # lenet: 40 MB -> 2 s per read
        if resume is not None:
            text = text.replace("    startup_s: 10\n",
                                f"    startup_s: 10\n    resume_startup_s: {resume}\n")
        path.write_text(text)
        prof = load_profiles(path)
        assert prof.get("lenet", 2).resume_startup_s == resume
        config = SimConfig(tick_s=0.5, step_noise=0.0, **prof.sim_overrides())
        # fgs samples the job first, then restarts it from the sample's checkpoint
        job = TraceJob("a", 0.0, 1, 2.0, model="lenet", batch_size=2, total_steps=100)
        result = simulate(load_cluster("1x1"), [job], prof, get_policy("fgs"), config)
        jct[resume] = result.records[0].jct
    # the restart: start-up 10 s + 2 s read without a measured resume, 1 s with one
    assert jct[None] - jct[1.0] == pytest.approx(11.0, abs=0.6)


def test_the_live_share_leaves_out_what_co_tenants_of_a_core_waited_for_each_other():
    from tfgshare.repro.cpushare import core_deltas

    # two runners on core 0 alone on the machine: each waited while the other ran
    assert core_deltas([(0.25, 0.25, (0,)), (0.25, 0.25, (0,))]) == (0.5, 0.0)
    # ... and with other work taking 0.2 s of the core: it is that 0.2 s they lost
    assert core_deltas([(0.15, 0.35, (0,)), (0.15, 0.35, (0,))]) == pytest.approx((0.3, 0.2))
    # a runner alone on core 1 keeps its whole wait; one that wanted no CPU is left out
    assert core_deltas([(0.3, 0.2, (1,)), (0.0, 0.0, (0,))]) == (0.3, 0.2)


def test_the_share_probe_measures_what_a_runner_below_the_agent_got():
    from tfgshare.repro.cpushare import RunnerShareProbe, ran_waited

    # a stand-in agent whose child is a busy "runner" (the probe finds runners by name)
    # (1.5 CPU seconds of work, however loaded the machine is)
    code = ("import subprocess, sys; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time\\n"
            "while time.process_time() < 1.5: pass', 'tfgshare.runner']); p.wait()")
    agent = subprocess.Popen([sys.executable, "-c", code])
    try:
        probe = RunnerShareProbe(agent.pid, period_s=0.2).start()
        agent.wait(timeout=30)
    finally:
        agent.kill()
    share = probe.stop()
    assert 0.5 < probe.ran < 1.6      # it saw the child's busy seconds ...
    assert share is not None and 0 < share <= 1
    assert ran_waited(agent.pid) is None      # ... and a process gone reads as None


def test_a_profile_at_another_cpu_share_scales_the_cpu_bound_times(tmp_path):
    from tfgshare.repro.replay import at_share, profile_shares

    path = tmp_path / "p.yaml"
    path.write_text(TINY_PROFILE.replace("    startup_s: 10\n",
                                         "    startup_s: 10\n    cpu_share: 0.9\n")
                    + "storage_mb_s: 100\n")
    shares = profile_shares(path)
    assert shares == {"lenet": 0.9}           # alexnet_v2 has none: left as it is
    slow = at_share(load_profiles(path), shares, 0.45)
    lenet, alex = slow.get("lenet", 2), slow.get("alexnet_v2", 1)
    assert lenet.step_time_s == pytest.approx(0.04) and lenet.startup_s == pytest.approx(20)
    # a save serialises on the runner's core: half the share, half the bandwidth
    assert slow.storage_mb_s == pytest.approx(50)
    assert lenet.checkpoint_mb == 40 and alex.step_time_s == 0.3 and alex.startup_s == 12
    with pytest.raises(ValueError, match="CPU share"):
        at_share(load_profiles(path), shares, 0.0)


def test_a_batch_yaml_names_its_optimizer_and_a_bad_one_is_refused(tmp_path):
    from tfgshare.repro.four_models import default_config, load_batch, schedule

    small = schedule(load_batch(default_config(), "small"))
    assert {spec.optimizer for _, spec in small} == {"sgd"}   # checkpoints a third of rmsprop's
    config = tmp_path / "batch.yaml"
    config.write_text(yaml.safe_dump({"scales": {"small": {
        "cluster": {"nodes": 1}, "optimizer": "adagrad",
        "jobs": [{"model": "lenet", "batch_size": 2, "steps": 3}]}}}))
    with pytest.raises(ValueError, match="optimizer: 'adagrad' is not one of sgd"):
        load_batch(config, "small")


def test_the_long_batch_leaves_every_job_steps_to_predict_after_its_sampling_run():
    """`--scale long` is the batch the paper models' prediction error is measured on
    (docs/reproduction.md, 6): every job has steps left once its sampling phase is over,
    where the small batch's vgg_16 job is all sampling."""
    from tfgshare.repro.four_models import default_config, load_batch
    from tfgshare.sampling import plan_sampling

    def left(scale):
        return [j["steps"] - plan_sampling(j["steps"]).steps
                for j in load_batch(default_config(), scale)["jobs"]]

    assert min(left("long")) >= 5 and min(left("small")) == 0
    long_models = {j["model"] for j in load_batch(default_config(), "long")["jobs"]}
    assert long_models == {"inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2"}


def test_reproduce_help_names_every_shipped_scale():
    from tfgshare.repro.four_models import _parser, default_config

    said = " ".join(_parser().format_help().split())
    for scale in yaml.safe_load(default_config().read_text())["scales"]:
        assert f"{scale} (" in said, scale
