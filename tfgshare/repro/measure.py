"""Runner processes under measurement for ``tfgshare profile``: the device, a job handed
to a warm runner as the node agent hands it, and what is read back while it runs.

Every measurement is a real runner process (``python -m tfgshare.runner``) whose JSON
events are read back (``runner.protocol``); this process never imports TensorFlow. A
watched run keeps its events, its busy readings (NVML utilisation on a GPU, CPU seconds
on a virtual GPU) and its threads' time ran and waited runnable (``cpushare``).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import psutil

from tfgshare.agent.gpus import core_sets, process_stat
from tfgshare.agent.supervisor import die_with_parent, pin_threads
from tfgshare.runner import protocol as rp

from .cpushare import ran_waited, share

STEADY_MIN_S = 3.0       # steady steps (alone, or a pair's together) span at least this long

@dataclass
class Device:
    """Where the profile runs: a GPU through NVML, or the CPU as a virtual GPU."""

    name: str
    gpu: bool
    threads: int = 1     # runner threads on the CPU (the agent's default is 1)
    # CPU cores a virtual GPU's runners are pinned to, as the agent pins them (both jobs
    # of a co-located pair share them, as two tenants of one virtual GPU do)
    cores: tuple[int, ...] | None = None
    # the next warm runner, importing TensorFlow ahead on the other cores (as the agent's
    # spare does while its jobs run): (process, its log)
    spare: tuple[subprocess.Popen, Path] | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """Environment for a runner on this device."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        env["CUDA_VISIBLE_DEVICES"] = "0" if self.gpu else ""
        return env

    def flags(self) -> list[str]:
        """Runner flags for this device."""
        if self.gpu:
            return []
        return ["--intra_op_threads", str(self.threads), "--inter_op_threads", str(self.threads)]


def find_device(force_cpu: bool = False, threads: int = 1) -> Device:
    """The first NVML GPU, else the CPU (as a virtual GPU of ``threads`` threads)."""
    if not force_cpu:
        try:
            import pynvml
            pynvml.nvmlInit()
            try:
                if pynvml.nvmlDeviceGetCount() > 0:
                    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
                    return Device(name.decode() if isinstance(name, bytes) else str(name), True)
            finally:
                pynvml.nvmlShutdown()
        except Exception:   # no driver, no library: the CPU it is
            pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    sets = core_sets(max(1, (cores or 1) // threads))   # the agent's split, one set per vGPU
    return Device(f"CPU virtual GPU ({threads} thread{'s' * (threads > 1)} of {cores} cores: "
                  f"{cpu})", False, threads, sets.get(0) or None)


class NvmlUtil:
    """Samples GPU 0's utilisation (NVML) while a run goes on."""

    def __init__(self) -> None:
        import pynvml
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read(self) -> float:
        """GPU 0's utilisation now, 0-1."""
        return self.nv.nvmlDeviceGetUtilizationRates(self.handle).gpu / 100.0

    def close(self) -> None:
        """Shut NVML down."""
        self.nv.nvmlShutdown()


@dataclass
class Run:
    """One runner process being watched: its events and (time, busy) readings."""

    name: str
    proc: subprocess.Popen
    events_file: Path
    spawned: float
    events: list[dict] = field(default_factory=list)
    offset: int = 0
    readings: list[tuple[float, float]] = field(default_factory=list)  # (wall time, cpu s or util)
    ps: psutil.Process | None = None
    # (wall time, s ran, s waited runnable) of the process's threads (cpushare), from the
    # hand-over on
    sched: list[tuple[float, float, float]] = field(default_factory=list)

    def poll(self, nvml: NvmlUtil | None) -> None:
        """Read the run's new events and one busy and schedstat reading."""
        new, self.offset = rp.read_events(self.events_file, self.offset)
        self.events += new
        now = time.time()
        rw = ran_waited(self.proc.pid) if self.proc.poll() is None else None
        if rw is not None:
            self.sched.append((now, *rw))
        if nvml is not None:
            self.readings.append((now, nvml.read()))
        else:
            if self.ps is None:
                try:
                    self.ps = psutil.Process(self.proc.pid)
                except psutil.Error:
                    return
            stat = process_stat(self.ps)
            if stat is not None:
                self.readings.append((now, stat[0]))

    def first(self, name: str) -> dict | None:
        """The run's first event named ``name``, if any."""
        return next((e for e in self.events if e["event"] == name), None)

    def all(self, name: str) -> list[dict]:
        """The run's events named ``name``."""
        return [e for e in self.events if e["event"] == name]

    def log_tail(self) -> str:
        """The last lines of the runner's output (for an error message)."""
        out = Path(str(self.events_file) + ".log")
        return "\n".join(out.read_text(errors="replace").splitlines()[-12:]) if out.exists() else ""


def warm_runner(device: Device, work: Path) -> tuple[subprocess.Popen, Path]:
    """A runner process importing TensorFlow to wait for a job (``--warm``), on the cores
    the measured runners do not use (any core when there is no other)."""
    others = None
    if device.cores and hasattr(os, "sched_getaffinity"):
        others = tuple(sorted(set(os.sched_getaffinity(0)) - set(device.cores))) or None
    log_path = work / f"spare-{time.time_ns()}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tfgshare.runner", rp.WARM_FLAG],
                                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                env=device.env(), preexec_fn=die_with_parent(os.getpid(), others))
    return proc, log_path


def end_spare(device: Device) -> None:
    """Stop the warm runner waiting ahead, if any (an empty stdin ends it)."""
    spare, device.spare = device.spare, None
    if spare is not None:
        spare[0].stdin.close()
        try:
            spare[0].wait(timeout=10)
        except subprocess.TimeoutExpired:
            spare[0].kill()
            spare[0].wait()


def spawn(name: str, device: Device, model: str, batch: int, image_size: int | None,
           steps: int, train_dir: Path, extra: list[str], timeout_s: float = 900.0) -> Run:
    """Start one job as the agent does: handed to a warm runner once it has imported
    TensorFlow (``spawned`` is the hand-over), pinned to the virtual GPU's cores; the
    next warm runner then starts importing on the other cores."""
    events = train_dir.parent / f"{train_dir.name}.{int(time.time() * 1e3)}.events"
    argv = ["--model_name", model, "--batch_size", str(batch), "--max_number_of_steps",
            str(steps), "--train_dir", str(train_dir), "--events_file", str(events),
            "--save_interval_secs", "0", "--max_sample_share", "1.0", *device.flags(), *extra]
    if image_size:
        argv += ["--image_size", str(image_size)]
    proc, spare_log = device.spare or warm_runner(device, train_dir.parent)
    device.spare = None
    end = time.monotonic() + timeout_s
    while rp.WARM_READY not in spare_log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"warm runner for {name} did not get ready:\n"
                               + spare_log.read_text(errors="replace")[-2000:])
        time.sleep(0.05)
    if device.cores:
        pin_threads(proc.pid, device.cores)
    sched0 = ran_waited(proc.pid)
    spawned = time.time()
    proc.stdin.write(rp.warm_job_line(argv, {}, str(events) + ".log").encode())
    proc.stdin.close()
    device.spare = warm_runner(device, train_dir.parent)
    run = Run(name, proc, events, spawned)
    if sched0 is not None:
        run.sched.append((spawned, *sched0))
    return run


def share_until(run: Run, t1: float) -> float | None:
    """The CPU share (``cpushare``) the run's process got from its hand-over to ``t1``."""
    inside = [r for r in run.sched if r[0] <= t1]
    if len(inside) < 2:
        return None
    return share(inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2])


def sched_between(run: Run, t0: float, t1: float) -> tuple[float, float] | None:
    """Seconds the run's threads ran and waited runnable between its first schedstat
    reading at or after ``t0`` and its last at or before ``t1``; None with fewer than two."""
    inside = [r for r in run.sched if t0 <= r[0] <= t1]
    if len(inside) < 2:
        return None
    return inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2]


def wait_runs(runs: list[Run], nvml: NvmlUtil | None, timeout_s: float, until=None) -> None:
    """Poll ``runs`` until all exit (or ``until()`` is true); raise with the log on failure."""
    end = time.monotonic() + timeout_s
    while True:
        for r in runs:
            r.poll(nvml)
        if until is not None and until():
            return
        if all(r.proc.poll() is not None for r in runs):
            for r in runs:
                r.poll(nvml)
            bad = [r for r in runs if r.proc.returncode not in (rp.EXIT_OK, rp.EXIT_SUSPENDED)]
            if bad:
                r = bad[0]
                raise RuntimeError(f"runner {r.name} exited with {r.proc.returncode}:\n"
                                   + r.log_tail())
            return
        if time.monotonic() > end:
            for r in runs:
                r.proc.kill()
                r.proc.wait()
            raise TimeoutError(f"runners {[r.name for r in runs]} took over {timeout_s:g}s")
        time.sleep(0.2)


def busy_between(readings: list[tuple[float, float]], t0: float, t1: float,
                  gpu: bool) -> float | None:
    """Mean utilisation over [t0, t1] from the readings (NVML samples or CPU seconds)."""
    inside = [(t, v) for t, v in readings if t0 <= t <= t1]
    if gpu:
        return sum(v for _, v in inside) / len(inside) if inside else None
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def tensorflow_version() -> str:
    """The installed TensorFlow's version, read from its package metadata."""
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def import_seconds(device: Device) -> float:
    """Seconds a bare ``import tensorflow`` takes in a fresh process here."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow"], env=device.env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def steady_after(run: Run, after: float) -> list[dict]:
    """The run's ``progress`` events after time ``after``."""
    return [e for e in run.all("progress") if e["time"] > after]


def stop_runs(runs: list[Run]) -> None:
    """Ask running runners to checkpoint and exit; kill any that do not within 2 minutes."""
    for r in runs:
        if r.proc.poll() is None:
            rp.request_suspend(r.proc.pid)
    for r in runs:
        try:
            r.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()


def first_step_extra(phases: dict, step_time_s: float) -> float:
    """A run's first step (its ``start_phases`` event) less a steady step, at least 0."""
    try:
        first = float(phases.get("first_step_s"))
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, first - step_time_s) if math.isfinite(first) else 0.0

