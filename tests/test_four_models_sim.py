"""The simulator's prediction of a four-models run, from the run's own measurements."""

from __future__ import annotations

import pytest

from tfgshare.repro import four_models as fm
from tfgshare.repro.four_models_sim import comparison, format_comparison, measured_profiles, predict

NODES = [{"name": "node1", "state": "up", "gpus": [{"index": 0, "memory_mb": 16384}]}]


def records(schedule, policy, step_s=0.1, util=0.5, start_s=3.0, restart_s=6.0):
    """Job records as ``Client.jobs()`` gives them: fifo's jobs ran once, alone and
    unsampled; the others sampled and started again."""
    fifo = policy == "fifo"
    return [{"name": spec.name, "measured_step_s": step_s * (1 if fifo else 1.3),
             "attempt": 1 if fifo else 2, "restart_s": start_s if fifo else restart_s,
             "sample": None if fifo else {"step_time_s": step_s * 1.3, "gpu_util": util,
                                          "peak_memory_mb": 400.0, "co_tenants": 1}}
            for _, spec in schedule]


def batch_of(n=4, steps=600):
    batch = fm.load_batch(fm.default_config(), "underused-long")
    batch["jobs"] = [{"model": "lenet", "batch_size": 32, "steps": steps}] * n
    return batch, fm.schedule(batch)


def test_the_profile_takes_fifos_step_alone_and_the_samples_utilisation_and_starts():
    _, schedule = batch_of()
    results = {p: {"jobs": records(schedule, p)} for p in ("fifo", "fgs")}
    prof = measured_profiles(schedule, results).get("lenet", 32)
    assert prof.step_time_s == pytest.approx(0.1)          # fifo's, not the shared sample's
    assert prof.gpu_util == pytest.approx(0.5) and prof.memory_mb == 400.0
    assert prof.startup_s == pytest.approx(3.0) and prof.resume_startup_s == pytest.approx(6.0)


def test_fifo_runs_the_jobs_one_after_another_and_fgs_packs_an_underused_device():
    _, schedule = batch_of()
    results = {p: {"jobs": records(schedule, p)} for p in ("fifo", "fgs")}
    sim = predict(schedule, results, NODES)
    alone = 600 * 0.1 + 3.0
    assert sim["fifo"].makespan == pytest.approx(4 * alone, rel=0.1)
    assert sim["fifo"].util_device == pytest.approx(0.5, abs=0.05)
    assert sim["fgs"].makespan < 0.8 * sim["fifo"].makespan
    assert sim["fgs"].util_device > 1.3 * sim["fifo"].util_device
    # a device each job saturates: packing no longer shortens the batch
    full = {p: {"jobs": records(schedule, p, util=1.0)} for p in ("fifo", "fgs")}
    assert predict(schedule, full, NODES)["fgs"].makespan > 0.95 * sim["fifo"].makespan


def test_the_comparison_gives_each_figure_live_beside_simulated_and_the_ratios():
    _, schedule = batch_of()
    results = {p: {"jobs": records(schedule, p)} for p in ("fifo", "fgs")}
    sim = predict(schedule, results, NODES)
    live = {"fifo": sim["fifo"], "fgs": sim["fifo"]}          # as if fgs had gained nothing
    rows = {(r["policy"], r["figure"]): r for r in comparison(live, sim)}
    jct = rows[("fifo vs fgs", "JCT ratio")]
    assert jct["live"] == pytest.approx(1.0)
    assert jct["simulated"] == pytest.approx(sim["fifo"].jct_mean / sim["fgs"].jct_mean, rel=1e-2)
    assert rows[("fgs", "makespan s")]["sim_vs_live"] < -0.2
    text = format_comparison(list(rows.values()))
    assert max(map(len, text.splitlines())) <= 80 and "device util ratio" in text


def test_a_model_the_cpu_profile_lacks_is_a_clear_error():
    batch, schedule = batch_of()
    schedule = [(at, spec.__class__(**{**{f: getattr(spec, f) for f in spec.__struct_fields__},
                                       "model_name": "inception_resnet_v2"}))
                for at, spec in schedule]
    results = {"fifo": {"jobs": records(schedule, "fifo")}}
    with pytest.raises(ValueError, match="inception_resnet_v2"):
        measured_profiles(schedule, results)
