"""``tfgshare sweep``: the grid, its errors, a tiny sweep on the local pool (written,
summarised with t-intervals, resumed) and the same on Dask's in-process LocalCluster."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from tfgshare.cli import main as tfgshare
from tfgshare.sim import sweep
from tfgshare.sim.sweep import GridError, Point, load_grid, parse_grid
from tfgshare.sim.sweep_report import summarise, t975, t_interval

REPO = Path(__file__).resolve().parents[1]
TINY = {"policies": ["fifo", "fgs"], "loads": [2.0], "clusters": ["4x8"], "seeds": 2,
        "jobs": 300}


def _write(tmp_path, data, name="grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_the_grid_is_every_combination_in_axis_order():
    g = parse_grid({"policies": ["fifo", "sjf", "fgs"], "loads": [0.5, 1], "clusters":
                    ["4x8", "8x8"], "workloads": ["measured", "profile"], "seeds": 3})
    points = g.points()
    assert len(points) == 3 * 2 * 2 * 2 * 3
    assert len({p.key() for p in points}) == len(points)
    assert g.seeds == (0, 1, 2) and g.loads == (0.5, 1.0)
    assert points[0] == Point("fifo", 0.5, "4x8", "measured", 0)
    assert points[1] == Point("fifo", 0.5, "4x8", "measured", 1)
    assert points[3] == Point("sjf", 0.5, "4x8", "measured", 0)
    assert points[-1] == Point("fgs", 1.0, "8x8", "profile", 2)
    one = parse_grid({"policies": "fifo", "loads": 0.9, "clusters": "4x8", "seeds": [5]})
    assert one.points() == [Point("fifo", 0.9, "4x8", "measured", 5)]
    assert Point("fifo/fgd", 0.5, "vc:a b", "measured", 0).key() == "fifo+fgd_L0.5_vc+a+b_measured_s0"


def test_the_example_grid_is_valid_and_has_at_least_100_runs():
    g = load_grid(REPO / "docs" / "sweep_example.yaml")
    assert len(g.points()) >= 100


@pytest.mark.parametrize("change, message", [
    ({"policies": ["fifo", "nope"]}, "policies: unknown policy 'nope'; valid: fifo"),
    ({"loads": [1, -2]}, "loads: bad load -2"),
    ({"loads": [0]}, "loads: bad load 0"),
    ({"loads": ["high"]}, "loads: bad load 'high'"),
    ({"loads": [float("nan")]}, "loads: bad load nan"),
    ({"loads": []}, "loads: empty list"),
    ({"loads": None}, "missing key 'loads'"),
    ({"loads": [1, 1]}, "loads: duplicate entry 1"),
    ({"clusters": ["bogus"]}, "clusters: bad cluster spec 'bogus'"),
    ({"workloads": ["real"]}, "workloads: unknown workload model 'real'"),
    ({"seeds": 0}, "seeds: a count must be >= 1"),
    ({"seeds": [1, -1]}, "seeds: expected a count or a list of integers >= 0"),
    ({"jobs": 0}, "jobs: expected an integer >= 1"),
    ({"tick": -1}, "tick: expected seconds > 0"),
    ({"polices": ["fifo"]}, "unknown key(s) polices"),
    ({"policy_params": {"sjf": {"x": 1}}}, "policy_params: policy 'sjf' is not in policies"),
    ({"policy_params": {"fgs": {"nonsense": 1}}}, "policies: "),
    ({"sim_params": {"warp": 9}}, "sim_params: unknown ['warp']"),
    ({"sim_params": {"refresh_s": 0}}, "sim_params: refresh_s must be positive"),
])
def test_a_bad_grid_names_the_file_and_the_key(tmp_path, capsys, change, message):
    data = {k: v for k, v in {**TINY, **change}.items() if v is not None}
    path = _write(tmp_path, data)
    with pytest.raises(GridError) as err:
        load_grid(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert tfgshare(["sweep", str(path), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_a_file_that_is_not_a_grid(tmp_path):
    with pytest.raises(GridError, match="not valid YAML"):
        load_grid(_write(tmp_path, "policies: [fifo\n"))
    with pytest.raises(GridError, match="expected a mapping"):
        load_grid(_write(tmp_path, "- fifo\n"))
    with pytest.raises(GridError, match="cannot read"):
        load_grid(tmp_path / "missing.yaml")


def test_t_interval_matches_the_t_table():
    assert t975(1) == pytest.approx(12.706) and t975(30) == pytest.approx(2.042)
    assert t975(40) == pytest.approx(2.0211, abs=2e-4)
    assert t975(120) == pytest.approx(1.9799, abs=2e-4)
    mean, lo, hi = t_interval([1.0, 2.0, 3.0])   # sd 1, n 3: half = 4.303 / sqrt(3)
    assert (mean, hi - mean) == pytest.approx((2.0, 4.303 / math.sqrt(3)))
    assert lo == pytest.approx(2 * mean - hi)
    assert math.isnan(t_interval([4.0])[1]) and t_interval([4.0])[0] == 4.0
    assert math.isnan(t_interval([])[0])


def test_summary_groups_runs_by_cell_over_seeds():
    rows = [{"cluster": "4x8", "workload": "measured", "load": 1.0, "policy": p, "seed": s,
             "jct_mean": 10.0 * s + (p == "fgs"), "wait_mean": 0.0}
            for p in ("fifo", "fgs") for s in (0, 1, 2)]
    cells = summarise(rows, metrics=("jct_mean", "wait_mean"))
    assert [(c["policy"], c["n"], c["seeds"]) for c in cells] == [("fifo", 3, "0 1 2"),
                                                                  ("fgs", 3, "0 1 2")]
    assert cells[1]["jct_mean"] == pytest.approx(11.0)
    assert cells[0]["jct_mean_hi"] - 10.0 == pytest.approx(t975(2) * 10.0 / math.sqrt(3))
    assert cells[0]["wait_mean_lo"] == cells[0]["wait_mean_hi"] == 0.0


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """The tiny grid (2 policies x 2 seeds, 300 jobs on 4x8) run on a local pool of 2."""
    tmp = tmp_path_factory.mktemp("sweep")
    grid, out = _write(tmp, TINY), tmp / "out"
    rc = tfgshare(["sweep", str(grid), "--out", str(out), "--workers", "2"])
    return rc, grid, out


def test_a_tiny_sweep_writes_every_run_and_a_summary_with_intervals(tiny_sweep):
    rc, _, out = tiny_sweep
    assert rc == 0
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert sorted((r["policy"], r["seed"]) for r in runs) == [
        ("fgs", "0"), ("fgs", "1"), ("fifo", "0"), ("fifo", "1")]
    assert all(r["jobs"] == r["finished"] == "300" and r["num_gpus"] == "32" for r in runs)
    assert all(float(r["jct_mean"]) >= float(r["wait_mean"]) >= 0 for r in runs)
    assert all(abs(float(r["offered_load"]) - 2.0) < 0.2 for r in runs)
    # one trace per (load, cluster, seed): both policies replay the same jobs
    by = {(r["policy"], r["seed"]): r for r in runs}
    assert by["fifo", "0"]["offered_load"] == by["fgs", "0"]["offered_load"]
    with open(out / "summary.csv") as f:
        cells = list(csv.DictReader(f))
    assert [(c["policy"], c["n"]) for c in cells] == [("fifo", "2"), ("fgs", "2")]
    for c in cells:
        lo, mean, hi = (float(c[k]) for k in ("jct_mean_lo", "jct_mean", "jct_mean_hi"))
        assert lo < mean < hi
    text = (out / "summary.md").read_text()
    assert "| 4x8 | measured | 2 |" in text and "±" in text
    # each table's caption comes before it, as a reader meets it
    assert text.startswith("jct_mean: mean ± 95 % t-interval half-width over 2 seeds per cell")
    assert (out / "jct_vs_load.png").stat().st_size > 1000


def test_a_rerun_skips_the_runs_already_there(tiny_sweep, capsys):
    rc, grid, out = tiny_sweep
    assert rc == 0
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    assert len(stamps) == 4
    assert tfgshare(["sweep", str(grid), "--out", str(out), "--workers", "1",
                     "--no-plot"]) == 0
    assert "4 already in" in capsys.readouterr().err
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}


def test_a_stored_run_counts_only_with_the_same_settings(tmp_path):
    g = parse_grid(TINY)
    point, settings = g.points()[0], g.settings()
    (tmp_path / "runs").mkdir()
    sweep._save(tmp_path, point, settings, {"jct_mean": 1.0})
    assert sweep.done_row(tmp_path, point, settings) == {"jct_mean": 1.0}
    assert sweep.done_row(tmp_path, point, {**settings, "jobs": 301}) is None
    assert sweep.done_row(tmp_path, g.points()[1], settings) is None
    (tmp_path / "runs" / f"{point.key()}.json").write_text("{not json")
    assert sweep.done_row(tmp_path, point, settings) is None


def test_the_dask_path_on_an_in_process_local_cluster(tmp_path, tiny_sweep):
    distributed = pytest.importorskip("distributed")
    g = parse_grid({**TINY, "policies": ["fifo"]})
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        rows, failed = sweep.run_sweep(g, tmp_path, address=client)
    assert failed == [] and len(rows) == 2
    stored = json.loads((tiny_sweep[2] / "runs" / f"{g.points()[1].key()}.json").read_text())
    # the same point on the local pool and on Dask: the same run
    for k in ("offered_load", "jct_mean", "wait_mean", "util_allocated"):
        assert rows[1][k] == pytest.approx(stored["row"][k])


def test_sweep_help_reads_as_written(capsys):
    with pytest.raises(SystemExit):
        tfgshare(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "95 % t-interval" in out and "%%" not in out
