"""``tfgshare sweep``: a grid of simulations from one YAML file, on a process pool or Dask.

A grid is policies x loads x cluster sizes x workload models x seeds (see
``docs/sweep_example.yaml``). Each point draws a synthetic trace (:mod:`tfgshare.sim.synth`,
seeded by the point's seed, at its load for its cluster) into a temp folder, replays it
under the point's policy and keeps the run's summary metrics (mean JCT, mean wait, the
utilisations, as ``tfgshare simulate`` reports them). All policies of one (load, cluster,
seed) see the same trace, so they are compared pairwise. Each finished run is written to
``OUT/runs/<point>.json`` at once; a rerun into the same folder skips the points whose file
is there with the same settings (resumable). Then ``OUT/runs.csv`` (every run),
``OUT/summary.csv`` and ``OUT/summary.md`` (per cell, the mean and 95 % t-interval across
seeds) and ``OUT/jct_vs_load.png`` are written (:mod:`tfgshare.sim.sweep_report`).

Engines. By default a local ``concurrent.futures.ProcessPoolExecutor`` (``--workers N``,
default ``os.cpu_count()``). With ``--address tcp://HOST:PORT`` the points go to a Dask
distributed scheduler there; its workers need tfgshare installed (the trace sources are
fitted here once and sent to them, so they need no trace files). Dask was chosen over Ray
on install size, measured with ``pip download --no-deps`` (2026-12-04, CPython 3.11,
x86-64): ``distributed`` 2026.8.0 is a 1.0 MB wheel (3.3 MB unpacked) plus ``dask`` 1.5 MB
(5.9 MB), and ``pip install distributed`` with all its dependencies grew this venv by
38 MB; ``ray`` 2.60.0 is a 79 MB wheel, 202 MB unpacked before its own dependencies. Dask
is the optional extra ``tfgshare[sweep]``, imported only on the ``--address`` path.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from .utilisation import DEFAULT_WORKLOAD, WORKLOADS

AXES = ("policies", "loads", "clusters", "workloads", "seeds")
KEYS = AXES + ("jobs", "tick", "policy_params", "sim_params")
METRIC_FIELDS = ("jobs", "finished", "jct_mean", "jct_median", "jct_p95", "wait_mean",
                 "util_allocated", "util_effective", "util_device", "util_device_busy",
                 "makespan", "queue_mean", "suspends", "resumes", "migrations", "move_cost_s")
COLUMNS = ("policy", "load", "cluster", "workload", "seed", "num_gpus", "offered_load",
           *METRIC_FIELDS, "rounds", "wall_s")


class GridError(ValueError):
    """A sweep grid file that cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class Point:
    """One run of a grid: a policy at a load on a cluster, a workload model and a seed."""

    policy: str
    load: float
    cluster: str
    workload: str
    seed: int

    def key(self) -> str:
        """A file-safe name for the point, unique within its grid."""
        text = f"{self.policy}_L{self.load:g}_{self.cluster}_{self.workload}_s{self.seed}"
        return "".join(c if c.isalnum() or c in "._-" else "+" for c in text)


@dataclass(frozen=True)
class Grid:
    """A parsed sweep file: the axes and the settings every run shares."""

    policies: tuple[str, ...]
    loads: tuple[float, ...]
    clusters: tuple[str, ...]
    workloads: tuple[str, ...]
    seeds: tuple[int, ...]
    jobs: int = 1000
    tick: float = 60.0
    policy_params: dict = field(default_factory=dict)
    sim_params: dict = field(default_factory=dict)

    def points(self) -> list[Point]:
        """Every point, in axis order (cluster, workload, load, policy, seed)."""
        return [Point(p, ld, c, w, s) for c, w, ld, p, s in itertools.product(
            self.clusters, self.workloads, self.loads, self.policies, self.seeds)]

    def settings(self) -> dict:
        """What every run shares (recorded with each run, compared on resume)."""
        return {"jobs": self.jobs, "tick": self.tick, "policy_params": self.policy_params,
                "sim_params": self.sim_params}


def _axis(data: dict, key: str, where: str, default=None) -> list:
    value = data.get(key, default)
    if value is None:
        raise GridError(f"{where}: missing key {key!r} (a list)")
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise GridError(f"{where}: {key}: empty list")
    seen = set()
    for v in items:
        if isinstance(v, (list, dict)) or v in seen:
            raise GridError(f"{where}: {key}: {'duplicate' if v in seen else 'bad'} "
                            f"entry {v!r}")
        seen.add(v)
    return items


def _load(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
            math.isfinite(v) and v > 0):
        raise GridError(f"{where}: loads: bad load {v!r} (a finite number > 0)")
    return float(v)


def parse_grid(data, where: str = "grid") -> Grid:
    """A :class:`Grid` from parsed YAML; :class:`GridError` naming ``where`` and the key."""
    from tfgshare.policies.registry import POLICY_NAMES, get_policy

    from .cluster import load_cluster
    from .config import SimConfig
    if not isinstance(data, dict):
        raise GridError(f"{where}: expected a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(map(str, data)) - set(KEYS))
    if unknown:
        raise GridError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(KEYS)}")
    policies = [str(p) for p in _axis(data, "policies", where)]
    params = data.get("policy_params") or {}
    if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
        raise GridError(f"{where}: policy_params: expected POLICY: {{KEY: VALUE}}")
    for name in params:
        if name not in policies:
            raise GridError(f"{where}: policy_params: policy {name!r} is not in policies")
    for name in policies:
        try:
            get_policy(name, **params.get(name, {}))
        except (ValueError, TypeError) as err:
            msg = str(err)
            if msg.startswith("unknown policy"):
                msg = f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)} " \
                      f"or ORDER/PLACEMENT (e.g. fifo/fgd)"
            raise GridError(f"{where}: policies: {msg}") from None
    loads = [_load(v, where) for v in _axis(data, "loads", where)]
    clusters = [str(c) for c in _axis(data, "clusters", where)]
    for c in clusters:
        try:
            load_cluster(c)
        except (ValueError, OSError) as err:
            raise GridError(f"{where}: clusters: {err}") from None
    workloads = [str(w) for w in _axis(data, "workloads", where, [DEFAULT_WORKLOAD])]
    for w in workloads:
        if w not in WORKLOADS:
            raise GridError(f"{where}: workloads: unknown workload model {w!r}; valid: "
                            f"{', '.join(WORKLOADS)}")
    seeds = data.get("seeds", 3)
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise GridError(f"{where}: seeds: a count must be >= 1, got {seeds}")
        seeds = list(range(seeds))
    seeds = _axis({"seeds": seeds}, "seeds", where)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise GridError(f"{where}: seeds: expected a count or a list of integers >= 0")
    jobs, tick = data.get("jobs", 1000), data.get("tick", 60.0)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise GridError(f"{where}: jobs: expected an integer >= 1, got {jobs!r}")
    if isinstance(tick, bool) or not isinstance(tick, (int, float)) or not tick > 0:
        raise GridError(f"{where}: tick: expected seconds > 0, got {tick!r}")
    sim = data.get("sim_params") or {}
    fields = {f.name for f in dataclasses.fields(SimConfig)} - {"colocation", "seed", "tick_s"}
    if not isinstance(sim, dict) or set(sim) - fields:
        bad = sorted(set(sim) - fields) if isinstance(sim, dict) else sim
        raise GridError(f"{where}: sim_params: unknown {bad}; valid: {', '.join(sorted(fields))}")
    try:
        SimConfig(**sim)
    except (ValueError, TypeError) as err:
        raise GridError(f"{where}: sim_params: {err}") from None
    return Grid(tuple(policies), tuple(loads), tuple(clusters), tuple(workloads), tuple(seeds),
                jobs=jobs, tick=float(tick), policy_params=params, sim_params=sim)


def load_grid(path: str | Path) -> Grid:
    """Read and check a sweep YAML file (:class:`GridError` on a bad one)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise GridError(f"{path}: cannot read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise GridError(f"{path}: not valid YAML: {err}") from None
    return parse_grid(data, str(path))


# -- one run ------------------------------------------------------------------------------
_SOURCES = None   # the trace sources a pool worker was started with (see _init_worker)


def _init_worker(sources) -> None:
    global _SOURCES
    _SOURCES = sources


@lru_cache(maxsize=4)
def _profiles(workload: str):
    from .profiles import load_profiles, published_profiles_path
    return load_profiles(published_profiles_path() if workload == "measured" else None)


def run_point(point: Point, settings: dict, sources=None) -> dict:
    """Draw the point's trace into a temp folder, simulate it, return the run's row."""
    from tfgshare.policies.registry import get_policy

    from . import synth
    from .cluster import load_cluster
    from .config import SimConfig
    from .engine import simulate
    from .workload import load_workload

    cluster = load_cluster(point.cluster)
    src = sources if sources is not None else _SOURCES
    trace = synth.generate(settings["jobs"], cluster.num_gpus, point.load, point.seed, src)
    profiles = _profiles(point.workload)
    knobs = dict(profiles.sim_overrides())
    knobs.update(settings.get("sim_params") or {})
    knobs.update(seed=point.seed, tick_s=settings["tick"])
    with tempfile.TemporaryDirectory(prefix="tfgshare-sweep-") as tmp:
        path = synth.write_pod_list(trace, Path(tmp) / "trace.csv")
        work = load_workload(str(path), profiles, cluster.num_gpus, seed=point.seed,
                             workload=point.workload)
    policy = get_policy(point.policy, **(settings.get("policy_params") or {}).get(
        point.policy, {}))
    result = simulate(cluster, work.jobs, profiles, policy, SimConfig(**knobs))
    report = result.report.as_dict()
    row = dataclasses.asdict(point)
    row.update(num_gpus=cluster.num_gpus, offered_load=trace.offered_load())
    row.update({k: report[k] for k in METRIC_FIELDS})
    row.update(rounds=result.rounds, wall_s=result.wall_s)
    return row


# -- the sweep ----------------------------------------------------------------------------
def _run_file(out: Path, point: Point) -> Path:
    return out / "runs" / f"{point.key()}.json"


def done_row(out: Path, point: Point, settings: dict) -> dict | None:
    """The stored row of ``point`` under ``out`` if it ran with these settings, else None."""
    path = _run_file(out, point)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = doc.get("settings") == json.loads(json.dumps(settings))
    return doc.get("row") if same and doc.get("point") == dataclasses.asdict(point) else None


def _save(out: Path, point: Point, settings: dict, row: dict) -> None:
    path = _run_file(out, point)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"point": dataclasses.asdict(point), "settings": settings,
                               "row": row}, indent=1))
    tmp.replace(path)


def _local(pending: list[Point], settings: dict, workers: int | None, sources):
    """(point, row or exception) as each local pool run ends."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                             initargs=(sources,)) as pool:
        futures = {pool.submit(run_point, p, settings): p for p in pending}
        for fut in as_completed(futures):
            err = fut.exception()
            yield futures[fut], err if err is not None else fut.result()


def _dask(pending: list[Point], settings: dict, address, sources):
    """(point, row or exception) as each run on the Dask cluster at ``address`` ends."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise RuntimeError("--address needs Dask distributed: pip install 'tfgshare[sweep]'") \
            from None
    try:
        client = address if isinstance(address, Client) else Client(address)
    except (OSError, TimeoutError, ValueError) as err:
        raise RuntimeError(f"--address {address}: no Dask scheduler there ({err})") from None
    try:
        src = client.scatter(sources, broadcast=True)
        futures = client.map(run_point, pending, settings=settings, sources=src, pure=False)
        where = {f.key: p for f, p in zip(futures, pending)}
        for fut in as_completed(futures):
            err = fut.exception()
            yield where[fut.key], err if err is not None else fut.result()
    finally:
        if client is not address:
            client.close()


def run_sweep(grid: Grid, out: str | Path, *, workers: int | None = None, address=None,
              log=None) -> tuple[list[dict], list[tuple[Point, str]]]:
    """Run every point of ``grid`` not already stored under ``out``.

    ``address`` (a ``tcp://`` address or a ``distributed.Client``) runs on Dask, else on
    a local process pool of ``workers``. Returns (every point's row in grid order, the
    failed points with their errors)."""
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    settings = json.loads(json.dumps(grid.settings()))
    points = grid.points()
    pending = [p for p in points if done_row(out, p, settings) is None]
    say = log or (lambda _msg: None)
    say(f"{len(points)} runs, {len(points) - len(pending)} already in {out}, "
        f"{len(pending)} to run on "
        f"{'Dask at ' + str(address) if address is not None else f'{workers or os.cpu_count()} local workers'}")
    failed: list[tuple[Point, str]] = []
    if pending:
        from .synth import fit_sources
        sources = fit_sources()
        runs = (_dask(pending, settings, address, sources) if address is not None
                else _local(pending, settings, workers, sources))
        t0 = time.monotonic()
        for i, (point, row) in enumerate(runs, 1):
            if isinstance(row, BaseException):
                failed.append((point, f"{type(row).__name__}: {row}"))
                say(f"[{i}/{len(pending)}] {point.key()} FAILED: {failed[-1][1]}")
                continue
            _save(out, point, settings, row)
            say(f"[{i}/{len(pending)}] {point.key()}: JCT {row['jct_mean'] / 3600:.2f} h, "
                f"wait {row['wait_mean'] / 3600:.2f} h ({row['wall_s']:.1f} s; "
                f"{time.monotonic() - t0:.0f} s in)")
    rows = [r for r in (done_row(out, p, settings) for p in points) if r is not None]
    return rows, failed


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfgshare sweep",
        description="Run a grid of simulations (policies x loads x clusters x workload "
                    "models x seeds) from a YAML file, each on its own synthetic trace; "
                    "write every run (runs.csv), the mean and 95 % t-interval across seeds "
                    "per cell (summary.csv, summary.md) and a plot of mean JCT against load. "
                    "Points already in --out are skipped.")
    p.add_argument("grid", help="the sweep YAML file (see docs/sweep_example.yaml)")
    p.add_argument("--out", default=None,
                   help="output folder; rerun into it to resume (default: a new temp folder)")
    p.add_argument("--workers", type=int, default=None,
                   help="local worker processes (default: os.cpu_count())")
    p.add_argument("--address", default=None, metavar="tcp://HOST:PORT",
                   help="run on the Dask scheduler at this address instead "
                        "(needs tfgshare[sweep] here and on the workers)")
    p.add_argument("--dry-run", action="store_true", help="list the points and stop")
    p.add_argument("--no-plot", action="store_true", help="skip jct_vs_load.png")
    return p


def main(argv: list[str] | None = None) -> int:
    """``tfgshare sweep GRID.yaml``; 0 on success, 2 on a bad grid, 1 if a run failed."""
    args = _parser().parse_args(argv)
    err = "tfgshare sweep: error:"
    if args.workers is not None and args.workers < 1:
        print(f"{err} --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    try:
        grid = load_grid(args.grid)
    except GridError as e:
        print(f"{err} {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for p in grid.points():
            print(p.key())
        print(f"{len(grid.points())} runs of {grid.jobs} jobs each")
        return 0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfgshare-sweep-"))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
    try:
        rows, failed = run_sweep(grid, out, workers=args.workers, address=args.address,
                                 log=log)
    except RuntimeError as e:
        print(f"{err} {e}", file=sys.stderr)
        return 2
    from .sweep_report import write_report
    print(write_report(rows, grid, out, plot=not args.no_plot))
    for point, why in failed:
        print(f"failed: {point.key()}: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
