"""Simulated clusters: GPUs (with a speed relative to the reference GPU) from a spec.

A spec is one of:

* ``philly`` / ``philly-revised``: Philly's official machine list (552 servers,
  2,490 GPUs) or the revised one inferred from its GPU utilisation log;
* ``vc:<name>``: one Philly virtual cluster, its node count (Helios's
  ``philly_vc.csv``) x 8 GPUs of 24 GB;
* ``NxG`` or ``NxG:MEM``: N nodes of G GPUs (MEM MB each, default 24576), e.g. ``64x8``;
* ``alibaba-2023``, or an Alibaba node list CSV (``sn,cpu_milli,memory_mib,gpu,model``):
  the GPU nodes of Alibaba's GPU-sharing trace (:mod:`tfgshare.sim.alibaba`);
* a YAML file, or the name of one shipped in ``tfgshare/data/clusters``::

      reserve_mb: 300            # optional, per-process CUDA context reserve
      nodes:
        - {count: 4, gpus: 8, memory_mb: 24576, name_prefix: n, speed: 1.0}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from tfgshare.policies.base import GPU

DEFAULT_MEMORY_MB = 24576
PHILLY_VC_GPUS_PER_NODE = 8
_SHORTHAND = re.compile(r"^(\d+)x(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class SimCluster:
    """A cluster to simulate: its GPUs and each GPU's speed factor (1 = reference)."""

    name: str
    gpus: tuple[GPU, ...]
    speed: dict[str, float] = field(default_factory=dict)   # GPU id -> factor, absent = 1
    reserve_mb: float = 300.0

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)


def _nodes_cluster(name: str, groups: list[tuple[str, int, int, int, float]],
                   reserve_mb: float = 300.0) -> SimCluster:
    """GPUs for groups of (name prefix, node count, GPUs per node, memory MB, speed)."""
    gpus: list[GPU] = []
    speed: dict[str, float] = {}
    used: dict[str, int] = {}
    for prefix, count, per_node, memory_mb, factor in groups:
        start = used.get(prefix, 0)
        for n in range(start, start + count):
            node = f"{prefix}{n}"
            for i in range(per_node):
                g = GPU(f"{node}:{i}", node, i, memory_mb)
                gpus.append(g)
                if factor != 1.0:
                    speed[g.id] = factor
        used[prefix] = start + count
    if not gpus:
        raise ValueError(f"cluster {name!r} has no GPUs")
    return SimCluster(name, tuple(gpus), speed, reserve_mb)


def _positive_int(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{where}: {value!r} must be a positive integer")
    return value


def cluster_from_yaml(path: str | Path) -> SimCluster:
    """A cluster from a YAML spec file (see the module doc)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'nodes' list, "
                         "e.g. nodes: [{count: 4, gpus: 8, memory_mb: 24576}]")
    groups = []
    for i, row in enumerate(data["nodes"]):
        where = f"{path}: nodes[{i}]"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a mapping with count, gpus, memory_mb")
        unknown = set(row) - {"count", "gpus", "memory_mb", "name_prefix", "speed"}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}")
        speed = row.get("speed", 1.0)
        if not isinstance(speed, (int, float)) or speed <= 0:
            raise ValueError(f"{where}.speed: {speed!r} must be a positive number")
        groups.append((str(row.get("name_prefix", "n")),
                       _positive_int(row.get("count", 1), f"{where}.count"),
                       _positive_int(row.get("gpus"), f"{where}.gpus"),
                       _positive_int(row.get("memory_mb", DEFAULT_MEMORY_MB), f"{where}.memory_mb"),
                       float(speed)))
    reserve = data.get("reserve_mb", 300.0)
    if not isinstance(reserve, (int, float)) or reserve < 0:
        raise ValueError(f"{path}: reserve_mb {reserve!r} must be a number >= 0")
    return _nodes_cluster(path.stem, groups, float(reserve))


def philly_cluster(kind: str = "official") -> SimCluster:
    """Philly's servers from its machine list, every GPU at reference speed."""
    from philly.machines import load_machine_list
    gpus = tuple(GPU(f"{m.id}:{i}", m.id, i, m.gpu_memory_mb)
                 for m in load_machine_list(kind) for i in range(m.num_gpus))
    return SimCluster("philly" if kind == "official" else f"philly-{kind}", gpus)


def vc_cluster(vc: str) -> SimCluster:
    """One Philly virtual cluster: its node count x 8 GPUs of 24 GB."""
    from philly.machines import vc_sizes
    sizes = vc_sizes()
    if vc not in sizes:
        raise ValueError(f"unknown Philly VC {vc!r}; known: {', '.join(sorted(sizes))}")
    return _nodes_cluster(f"vc:{vc}", [(f"{vc}-", sizes[vc], PHILLY_VC_GPUS_PER_NODE,
                                        DEFAULT_MEMORY_MB, 1.0)])


def shipped_clusters() -> list[str]:
    """Names of the cluster YAML files shipped with tfgshare."""
    folder = resources.files("tfgshare") / "data" / "clusters"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_cluster(spec: str) -> SimCluster:
    """The cluster a spec names (see the module doc); ValueError for a bad spec."""
    spec = str(spec).strip()
    if spec == "philly":
        return philly_cluster("official")
    if spec == "philly-revised":
        return philly_cluster("revised")
    if spec.startswith("vc:"):
        return vc_cluster(spec[3:])
    if spec == "alibaba-2023" or (spec.endswith((".csv", ".csv.gz")) and Path(spec).is_file()):
        from .alibaba import load_alibaba_cluster
        return load_alibaba_cluster(None if spec == "alibaba-2023" else spec)
    m = _SHORTHAND.match(spec)
    if m:
        nodes, per_node = int(m.group(1)), int(m.group(2))
        memory = int(m.group(3)) if m.group(3) else DEFAULT_MEMORY_MB
        if min(nodes, per_node, memory) <= 0:
            raise ValueError(f"cluster spec {spec!r}: node count, GPUs and memory must be positive")
        return _nodes_cluster(spec, [("n", nodes, per_node, memory, 1.0)])
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return cluster_from_yaml(path)
    shipped = resources.files("tfgshare") / "data" / "clusters" / f"{spec}.yaml"
    if shipped.is_file():
        return cluster_from_yaml(Path(str(shipped)))
    raise ValueError(
        f"bad cluster spec {spec!r}: use philly, philly-revised, vc:<name>, alibaba-2023, "
        f"NxG[:MEM] "
        f"(e.g. 64x8), a YAML file, or one of: {', '.join(shipped_clusters())}")
