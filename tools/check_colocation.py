"""The simulator's co-location model against published co-location measurements.

Run::

    .venv/bin/python tools/check_colocation.py [--points FILE] [--profile FILE] [--summary]

For every point of ``tfgshare/data/colocation_points.yaml`` (two or more training jobs on
one GPU, each job's published slowdown against running alone, each job's utilisation alone)
it evaluates ``tfgshare.sim.colocation.Colocation.slowdown(n, sum of utilisations alone)``
with two parameter sets: the model's defaults, and the fit stored in a measured profile
(default ``tfgshare/data/profiles/cpu-virtual-gpu.yaml``: the project's CPU virtual GPUs).
It prints, per job of each point, the predicted and the published slowdown and the relative
error (predicted - published) / published, then per parameter set and per source the mean
absolute relative error, the mean signed error (the bias) and the largest error. A point
whose utilisation alone was not published uses the ``util_assumed`` it states (the points
file says where that comes from); those rows are marked ``*``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.sim.colocation import Colocation  # noqa: E402
from tfgshare.sim.profiles import load_profiles  # noqa: E402


def default_points_path() -> Path:
    """The co-location points shipped with tfgshare."""
    return Path(str(resources.files("tfgshare") / "data" / "colocation_points.yaml"))


def default_profile_path() -> Path:
    """The measured profile whose fitted co-location parameters are checked beside the defaults."""
    return Path(str(resources.files("tfgshare") / "data" / "profiles" / "cpu-virtual-gpu.yaml"))


def load_points(path: str | Path | None = None) -> tuple[list[dict], dict[str, str]]:
    """The points and the ``sources`` mapping of a co-location points file."""
    path = Path(path) if path is not None else default_points_path()
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ValueError(f"{path}: expected a mapping with a 'points' list")
    return data["points"], dict(data.get("sources") or {})


def job_util(job: dict) -> tuple[float, bool]:
    """A job's utilisation alone for the model, and whether it is an assumption
    (``util_assumed``, used where ``util_alone`` was not published)."""
    if job.get("util_alone") is not None:
        return float(job["util_alone"]), False
    if job.get("util_assumed") is not None:
        return float(job["util_assumed"]), True
    raise ValueError(f"job {job.get('model')!r} has neither util_alone nor util_assumed")


def model_params(profile: str | Path | None = None) -> dict[str, Colocation]:
    """The parameter sets to check: the model's defaults and a measured profile's fit."""
    sets = {"default": Colocation()}
    path = Path(profile) if profile is not None else default_profile_path()
    fit = load_profiles(path).colocation
    if fit:
        sets[f"{path.stem} fit"] = Colocation(float(fit["overhead"]), float(fit["exponent"]))
    return sets


def evaluate(points: list[dict], model: Colocation) -> list[dict]:
    """One row per job of each point: the model's slowdown for that GPU's tenants, the
    published one, and the relative error (predicted - published) / published."""
    rows = []
    for point in points:
        utils = [job_util(job) for job in point["jobs"]]
        total = sum(u for u, _ in utils)
        predicted = model.slowdown(len(utils), total)
        for job, (util, assumed), published in zip(point["jobs"], utils, point["slowdown"]):
            rows.append({
                "id": point["id"], "source": point["source"], "gpu": point.get("gpu", ""),
                "model": job["model"], "batch_size": job["batch_size"], "util": util,
                "assumed": assumed, "total_util": total, "predicted": predicted,
                "published": float(published),
                "rel_error": (predicted - float(published)) / float(published)})
    return rows


def summarize(rows: list[dict]) -> dict:
    """Mean absolute and mean signed relative error, and the largest absolute one, of rows."""
    if not rows:
        return {"n": 0, "mean_abs": float("nan"), "mean_signed": float("nan"),
                "max_abs": float("nan")}
    errs = [r["rel_error"] for r in rows]
    return {"n": len(errs), "mean_abs": sum(abs(e) for e in errs) / len(errs),
            "mean_signed": sum(errs) / len(errs), "max_abs": max(abs(e) for e in errs)}


def _report(name: str, model: Colocation, rows: list[dict], detail: bool) -> None:
    print(f"\n== {name}: overhead {model.overhead:g}, exponent {model.exponent:g}")
    if detail:
        print(f"{'point':<18} {'job':<24} {'util':>6} {'sum':>6} {'pred':>7} {'pub':>7} "
              f"{'rel err':>8}")
        for r in rows:
            mark = "*" if r["assumed"] else " "
            print(f"{r['id']:<18} {r['model'] + '/' + str(r['batch_size']):<24} "
                  f"{r['util']:>5.2f}{mark} {r['total_util']:>6.2f} {r['predicted']:>7.3f} "
                  f"{r['published']:>7.3f} {100 * r['rel_error']:>7.1f}%")
    groups = {"all": rows}
    for r in rows:
        groups.setdefault(f"{r['source']} ({r['gpu']})", []).append(r)
    for label, group in groups.items():
        s = summarize(group)
        print(f"  {label:<36} jobs {s['n']:>4}  mean |error| {100 * s['mean_abs']:6.1f} %  "
              f"mean error {100 * s['mean_signed']:+6.1f} %  max |error| "
              f"{100 * s['max_abs']:6.1f} %")


def main(argv: list[str] | None = None) -> int:
    """Print predicted against published slowdowns for each parameter set."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", help="co-location points file (default: the shipped one)")
    p.add_argument("--profile", help="measured profile with a fitted 'colocation' "
                                     "(default: profiles/cpu-virtual-gpu.yaml)")
    p.add_argument("--summary", action="store_true", help="only the error summaries")
    args = p.parse_args(argv)
    points, sources = load_points(args.points)
    print(f"{len(points)} points from {', '.join(sorted(sources)) or 'no named source'}; "
          "* = utilisation assumed (not published), see the points file")
    for name, model in model_params(args.profile).items():
        _report(name, model, evaluate(points, model), not args.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
