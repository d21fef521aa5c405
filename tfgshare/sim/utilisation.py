"""The workload model: what a trace job uses of a GPU alone, from production measurements.

Two models, chosen by ``tfgshare simulate --workload``:

* ``measured`` (the default): each job's single-tenant GPU utilisation is drawn, seeded
  by the job's id, from Philly's published GPU utilisation of passed jobs of its size
  (``tfgshare/data/philly_utilization.yaml``: Jeon et al., ATC '19, Figure 5, read from
  the trace authors' notebook), by inverse transform of the published CDF; its memory and
  step time are its model's, from the profile (by default the published profile
  ``data/profiles/published.yaml``). A job of a GPU-sharing trace that asks for a share
  of a GPU uses at most that share.
* ``profile``: the old model, every job of a model and batch size at its profile's
  utilisation (by default ``data/model_profiles.yaml``, P100 estimates).

The Philly figure counts GPU-minutes, not jobs: a job's own mean has the same mean
(0.49 for one-GPU jobs) but less spread, which the published figure cannot give; a
minute at 0 % (29 % of them) is a job waiting on input or stalled, and a job drawn there
gets ``FLOOR`` instead, since a job holding a GPU uses some of it. Both are estimates,
stated here and in the report.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from philly.jobs import TraceJob

WORKLOADS = ("measured", "profile")
DEFAULT_WORKLOAD = "measured"
FLOOR = 0.05     # ESTIMATE: the least a job holding a GPU uses of it (see the module doc)
STATUS = "passed"


@dataclass(frozen=True)
class UtilCdf:
    """One size class's published CDF: utilisation points (0-1) and their shares."""

    label: str
    utils: tuple[float, ...]
    shares: tuple[float, ...]

    def quantile(self, u: float) -> float:
        """The utilisation at CDF share ``u`` (linear between the published points; past
        the last point, linear up to 1 at share 1)."""
        shares = self.shares + (1.0,)
        utils = self.utils + (1.0,)
        i = bisect.bisect_left(shares, u)
        if i == 0:
            return utils[0]
        s0, s1, x0, x1 = shares[i - 1], shares[i], utils[i - 1], utils[i]
        return x1 if s1 <= s0 else x0 + (x1 - x0) * (u - s0) / (s1 - s0)


def default_path() -> Path:
    """The shipped Philly utilisation figures."""
    return Path(str(resources.files("tfgshare") / "data" / "philly_utilization.yaml"))


@lru_cache(maxsize=4)
def load_cdfs(path: str | None = None) -> dict[str, UtilCdf]:
    """Each size class's CDF of passed jobs (``1``, ``2-4``, ``5-8``, ``>8``)."""
    p = Path(path) if path else default_path()
    data = yaml.safe_load(p.read_text())
    out = {}
    for label, cls in data["size_classes"].items():
        cdf = cls[STATUS]["published"]["cdf_at_util_percent"]
        points = sorted((float(k) / 100.0, float(v)) for k, v in cdf.items())
        out[str(label)] = UtilCdf(str(label), tuple(x for x, _ in points),
                                  tuple(s for _, s in points))
    return out


def size_class(num_gpus: int) -> str:
    """The size class of Philly's figure a job of this many GPUs falls in."""
    if num_gpus <= 1:
        return "1"
    if num_gpus <= 4:
        return "2-4"
    if num_gpus <= 8:
        return "5-8"
    return ">8"


def _uniform(seed: int, job_id: str) -> float:
    digest = hashlib.blake2b(f"util\x00{seed}\x00{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def draw_util(num_gpus: int, job_id: str, seed: int, share: float | None = None) -> float:
    """A job's single-tenant utilisation under the ``measured`` model (see the module doc)."""
    cdf = load_cdfs()[size_class(num_gpus)]
    util = max(FLOOR, cdf.quantile(_uniform(seed, job_id)))
    return min(util, share) if share is not None else util


def apply_workload(jobs: list[TraceJob], model: str, seed: int) -> list[TraceJob]:
    """The jobs with their utilisation under workload ``model`` (``profile``: unchanged)."""
    if model not in WORKLOADS:
        raise ValueError(f"unknown workload model {model!r}; valid: {', '.join(WORKLOADS)}")
    if model == "profile":
        return jobs
    return [j.copy_with(gpu_util=draw_util(j.num_gpus, j.id, seed, j.gpu_fraction))
            for j in jobs]


def describe(model: str) -> str:
    """One line for the report: which workload model was used and where it comes from."""
    if model == "profile":
        return ("workload profile: each job at its model profile's utilisation and memory")
    return ("workload measured: utilisation drawn per job from Philly's published GPU "
            "utilisation by job size (Jeon et al. ATC '19, Fig. 5; floor "
            f"{FLOOR:g}, an estimate), memory from the model's profile")
