"""The GPUs of one node: discovery and telemetry through NVML, or virtual GPUs.

A node with an NVIDIA driver is read through ``pynvml`` (name, total memory,
utilisation, and each process's memory from the compute-process list). Where
NVML is absent (no driver, a CPU machine) the node offers the virtual GPUs of a
spec such as ``2x16GiB``; their jobs run on the CPU, so their telemetry is the
runner processes' CPU use (one busy core = a fully used virtual GPU) and their
resident memory, read through ``psutil``. Where the machine has at least one CPU
core per virtual GPU, each virtual GPU gets its own cores (``core_sets``) and
its runners are pinned to them, so tenants of one virtual GPU compete for it
as on a real GPU and tenants of different ones do not.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import psutil

MIB = 1024 * 1024
_UNITS_MB = {"mib": 1, "mb": 1, "m": 1, "gib": 1024, "gb": 1024, "g": 1024,
             "tib": 1024 * 1024, "tb": 1024 * 1024, "t": 1024 * 1024}
_PART = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU a node offers (what ``register`` reports)."""

    index: int
    name: str
    memory_mb: int
    virtual: bool


@dataclass(frozen=True)
class GpuReading:
    """One GPU's telemetry at a moment: utilisation in [0, 1] and memory used."""

    index: int
    util: float
    memory_used_mb: float


@dataclass
class Telemetry:
    """A node's readings: per GPU, and per process its memory on each GPU index."""

    gpus: list[GpuReading] = field(default_factory=list)
    process_memory_mb: dict[int, dict[int, float]] = field(default_factory=dict)


class GpuSpecError(ValueError):
    """A virtual-GPU spec that cannot be read."""


def parse_virtual_gpus(spec: str) -> list[GpuInfo]:
    """Parse ``2x16GiB`` or ``1x8GiB,1x24GiB`` into virtual GPUs indexed from 0."""
    if not spec or not spec.strip():
        raise GpuSpecError("virtual GPU spec is empty (expected e.g. '2x16GiB')")
    gpus: list[GpuInfo] = []
    for part in spec.split(","):
        m = _PART.match(part)
        if not m:
            raise GpuSpecError(
                f"bad virtual GPU spec {part.strip()!r} in {spec!r}: "
                "expected COUNTxSIZE such as '2x16GiB' or '1x8GiB,1x24GiB'")
        count, size, unit = int(m.group(1)), float(m.group(2)), m.group(3).lower() or "gib"
        if unit not in _UNITS_MB:
            raise GpuSpecError(f"bad unit {m.group(3)!r} in virtual GPU spec {spec!r}: "
                               "use MiB or GiB")
        memory_mb = int(size * _UNITS_MB[unit])
        if count < 1 or memory_mb < 1:
            raise GpuSpecError(f"virtual GPU spec {part.strip()!r} needs a count >= 1 "
                               "and a size of at least 1 MiB")
        for _ in range(count):
            gpus.append(GpuInfo(len(gpus), f"virtual-{memory_mb // 1024}GiB"
                                if memory_mb % 1024 == 0 else f"virtual-{memory_mb}MiB",
                                memory_mb, True))
    return gpus


class NvmlGpus:
    """The node's real GPUs, read through NVML."""

    def __init__(self) -> None:
        import pynvml  # light: a ctypes binding, loads the driver library lazily
        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(pynvml.nvmlDeviceGetCount())]
        self.gpus = []
        for i, h in enumerate(self._handles):
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            total = pynvml.nvmlDeviceGetMemoryInfo(h).total
            self.gpus.append(GpuInfo(i, name, int(total // MIB), False))

    def read(self, pids: Mapping[int, Sequence[int]] | None = None) -> Telemetry:
        """Utilisation and memory of each GPU, and each compute process's memory."""
        nv = self._nvml
        out = Telemetry()
        for i, h in enumerate(self._handles):
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            except nv.NVMLError:
                util = 0.0
            used = nv.nvmlDeviceGetMemoryInfo(h).used / MIB
            out.gpus.append(GpuReading(i, util, used))
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except nv.NVMLError:
                procs = []
            for p in procs:
                mem = getattr(p, "usedGpuMemory", None)
                if mem is None:   # not available (e.g. some vGPU/MIG set-ups)
                    continue
                if pids is None or p.pid in pids:
                    out.process_memory_mb.setdefault(p.pid, {})[i] = mem / MIB
        return out

    def close(self) -> None:
        """Release NVML."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def core_sets(n: int, cores: Sequence[int] | None = None) -> dict[int, tuple[int, ...]]:
    """Split the cores this process may use (or ``cores``) into ``n`` equal disjoint sets.

    GPU ``i`` gets the ``i``-th set; cores left over by the division stay
    unused. Empty when there are fewer cores than GPUs (no pinning then).
    """
    if cores is None:
        try:
            cores = sorted(os.sched_getaffinity(0))
        except AttributeError:   # not on Linux: no pinning
            return {}
    per = len(cores) // n if n > 0 else 0
    if per < 1:
        return {}
    return {i: tuple(cores[i * per:(i + 1) * per]) for i in range(n)}


class VirtualGpus:
    """Virtual GPUs: jobs run on the CPU; telemetry comes from their processes."""

    def __init__(self, gpus: list[GpuInfo], pin: bool = True) -> None:
        self.gpus = gpus
        self._last: dict[int, tuple[float, float]] = {}   # pid -> (wall, cpu seconds)
        self._procs: dict[int, psutil.Process] = {}       # pid -> its process, while it lives
        # virtual GPU index -> the CPU cores its runners are pinned to (none: no pinning)
        sets = core_sets(len(gpus)) if pin else {}
        self.cores = {g.index: sets[n] for n, g in enumerate(gpus)} if sets else {}

    def cores_of(self, indices: Sequence[int]) -> tuple[int, ...] | None:
        """The cores a runner on these virtual GPUs is pinned to, or None (no pinning)."""
        if not self.cores:
            return None
        return tuple(sorted({c for i in indices for c in self.cores.get(i, ())})) or None

    def read(self, pids: Mapping[int, Sequence[int]] | None = None) -> Telemetry:
        """Each GPU's busy share (capped at 1) and resident memory of its runners.

        The busy share is CPU seconds per second over the GPU's pinned cores
        (one core when not pinned).
        """
        pids = pids or {}
        util = {g.index: 0.0 for g in self.gpus}
        used = {g.index: 0.0 for g in self.gpus}
        out = Telemetry()
        now = time.monotonic()
        seen: dict[int, tuple[float, float]] = {}
        procs: dict[int, psutil.Process] = {}
        for pid, indices in pids.items():
            if not indices:
                continue
            proc = self._procs.get(pid)
            if proc is None:
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:
                    continue
            stat = process_stat(proc)
            if stat is None:
                continue
            procs[pid] = proc
            cpu_s, rss_mb = stat
            seen[pid] = (now, cpu_s)
            prev = self._last.get(pid)
            busy = (cpu_s - prev[1]) / (now - prev[0]) if prev and now > prev[0] else 0.0
            share = rss_mb / len(indices)
            for i in indices:
                if i in util:
                    util[i] += busy / len(indices) / max(1, len(self.cores.get(i, ())))
                    used[i] += share
                out.process_memory_mb.setdefault(pid, {})[i] = share
        self._last, self._procs = seen, procs
        out.gpus = [GpuReading(i, min(1.0, util[i]), used[i]) for i in sorted(util)]
        return out

    def close(self) -> None:
        """Nothing to release."""


def process_stat(proc: psutil.Process) -> tuple[float, float] | None:
    """CPU seconds used (user + system) and resident memory (MiB) of a process; None once gone.

    ``psutil`` checks that the pid still names the process it was made for.
    """
    try:
        with proc.oneshot():
            cpu = proc.cpu_times()
            rss = proc.memory_info().rss
    except psutil.Error:      # gone, a zombie, or not ours to read
        return None
    return cpu.user + cpu.system, rss / MIB


def discover(virtual_spec: str | None = None, force_virtual: bool = False):
    """The node's GPU source: NVML when it finds GPUs, else the virtual GPUs.

    Returns ``(source, note)`` where ``note`` says which was chosen and why.
    Raises ``GpuSpecError`` if the virtual spec is bad, and ``RuntimeError``
    when there are neither real GPUs nor a virtual spec.
    """
    virtual = parse_virtual_gpus(virtual_spec) if virtual_spec else None
    if force_virtual:
        if virtual is None:
            raise GpuSpecError("--force-virtual needs --virtual-gpus")
        return VirtualGpus(virtual), "virtual GPUs (forced)"
    try:
        source = NvmlGpus()
        if source.gpus:
            return source, f"NVML: {len(source.gpus)} GPU(s)"
        source.close()
        why = "NVML found no GPUs"
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        why = f"NVML unavailable ({exc})"
    if virtual is None:
        raise RuntimeError(f"no GPUs: {why}, and no --virtual-gpus given (e.g. 2x16GiB)")
    return VirtualGpus(virtual), f"virtual GPUs: {why}"
