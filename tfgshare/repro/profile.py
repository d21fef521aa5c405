"""``tfgshare profile``: measure models on the devices present and write a simulator profile.

Every measurement is a real runner process (``python -m tfgshare.runner``) whose JSON
events are read back (``runner.protocol``); this process never imports TensorFlow.
Jobs are started as the node agent starts them: handed to a warm runner (``--warm``,
TensorFlow already imported) once it is ready, so the start-up measured is the one a
live cluster with a spare runner pays (the next one imports meanwhile on the cores the
measured runner does not use, as the agent's spare does); a bare ``import tensorflow`` is timed once and
``cold_startup_s`` = that plus the warm start-up (a start with no spare ready).

Per model and batch size, one fresh run gives:

- ``startup_s``: hand-over to the warm runner until its ``started`` event (graph
  build, session initialisation), plus what its first step took beyond a steady step
  (``first_step_extra_s``: TensorFlow's first-run set-up, paid by every start before the
  job trains at its step time; the simulator's start-up stands for both, and
  ``tfgshare replay`` measures a live start the same way); ``graph_build_s`` is the
  runner's own ``graph_s``;
- ``step_time_s``, ``images_per_s`` and ``memory_mb``: the runner's ``sample`` event
  (mean step time after the warm-up; peak GPU allocator memory on a GPU, peak RSS on
  the CPU); the step time is the mean over the steady steps after the sample (the
  sample's own mean, what the scheduler sees, is kept as ``sampled_step_time_s``);
- ``gpu_util``: single-tenant utilisation over the steady steps after the sample:
  NVML's device utilisation on a GPU; on virtual GPUs the runner's CPU seconds per
  wall second (one busy core = a fully used virtual GPU, as the agent reports it);
- ``save_s`` and ``checkpoint_mb``: the suspend that ends the run (its save ops already
  built by the post-sample checkpoint, as a real suspend pays);

- ``cpu_share`` (on the CPU): the share of its core the runner got while it wanted one,
  from the hand-over to the last steady step (``cpushare``); the times above are at that
  share, and ``tfgshare replay`` compares it with the share its live runners got;

and a second run on the same train dir gives ``resume_startup_s`` (its start-up: the
exported graph imported, the checkpoint read, and its first step's excess) and ``restore_s`` (its runner's own
restore phase). Few steps are run (``WARMUP``, ``SAMPLED``,
``STEADY``: a slow model such as vgg_16 on a CPU takes seconds per step, and its
1.5 GB checkpoint is written twice and read once), enough for a mean step time within
a few per cent on these deterministic loops. With ``--colocate`` each pair of
models runs at once on one device (half the memory each on a GPU) until both made
``PAIR_STEPS`` steps together; ``slowdown`` = shared step time / alone step time, and
``sim.colocation.Colocation`` is fitted to those pairs (least squares on relative
error); the fit error is printed and written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import psutil
import yaml

from tfgshare.agent.gpus import core_sets, process_stat
from tfgshare.agent.supervisor import die_with_parent, pin_threads
from tfgshare.runner import protocol as rp

from .cpushare import ran_waited, share

# steps of a profiling run: warm-up, sampled, then steady steps measured for utilisation
WARMUP, SAMPLED, STEADY = 1, 3, 3
STEADY_MIN_S = 3.0       # ... and the steady steps span at least this long
PAIR_STEPS = 3           # steady steps each job of a co-located pair makes alongside the other


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


class _NvmlUtil:
    """Samples GPU 0's utilisation (NVML) while a run goes on."""

    def __init__(self) -> None:
        import pynvml
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read(self) -> float:
        return self.nv.nvmlDeviceGetUtilizationRates(self.handle).gpu / 100.0

    def close(self) -> None:
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

    def poll(self, nvml: _NvmlUtil | None) -> None:
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
        return next((e for e in self.events if e["event"] == name), None)

    def all(self, name: str) -> list[dict]:
        return [e for e in self.events if e["event"] == name]

    def log_tail(self) -> str:
        out = Path(str(self.events_file) + ".log")
        return "\n".join(out.read_text(errors="replace").splitlines()[-12:]) if out.exists() else ""


def _warm_runner(device: Device, work: Path) -> tuple[subprocess.Popen, Path]:
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


def _spawn(name: str, device: Device, model: str, batch: int, image_size: int | None,
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
    proc, spare_log = device.spare or _warm_runner(device, train_dir.parent)
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
    device.spare = _warm_runner(device, train_dir.parent)
    run = Run(name, proc, events, spawned)
    if sched0 is not None:
        run.sched.append((spawned, *sched0))
    return run


def _share_until(run: Run, t1: float) -> float | None:
    """The CPU share (``cpushare``) the run's process got from its hand-over to ``t1``."""
    inside = [r for r in run.sched if r[0] <= t1]
    if len(inside) < 2:
        return None
    return share(inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2])


def _wait(runs: list[Run], nvml: _NvmlUtil | None, timeout_s: float, until=None) -> None:
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


def _busy_between(readings: list[tuple[float, float]], t0: float, t1: float,
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


def _steady(run: Run, after: float) -> list[dict]:
    return [e for e in run.all("progress") if e["time"] > after]


def _stop(runs: list[Run]) -> None:
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


def _first_step_extra(phases: dict, step_time_s: float) -> float:
    """A run's first step (its ``start_phases`` event) less a steady step, at least 0."""
    try:
        first = float(phases.get("first_step_s"))
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, first - step_time_s) if math.isfinite(first) else 0.0


def profile_one(device: Device, model: str, batch: int, image_size: int | None, work: Path,
                nvml: _NvmlUtil | None, timeout_s: float = 900.0) -> dict:
    """Measure one (model, batch size): see the module doc for each figure."""
    train_dir = work / f"{model}-b{batch}"
    extra = ["--warmup_steps", str(WARMUP), "--num_sample_steps", str(SAMPLED),
             "--log_every_n_steps", "1"]
    run = _spawn(f"{model}/{batch}", device, model, batch, image_size, 10**6, train_dir, extra,
                 timeout_s)

    def steady_start() -> float | None:
        ckpt = run.first("checkpoint")      # the save right after the sample
        return None if ckpt is None else ckpt["time"]

    def enough() -> bool:
        t0 = steady_start()
        steps = [] if t0 is None else _steady(run, t0)
        return len(steps) >= STEADY and steps[-1]["time"] - t0 >= STEADY_MIN_S

    try:
        _wait([run], nvml, timeout_s, until=enough)
    finally:
        _stop([run])
    run.poll(nvml)
    started, sample, t0 = run.first("started"), run.first("sample"), steady_start()
    ckpts = run.all("checkpoint")
    if started is None or sample is None or t0 is None or len(ckpts) < 2:
        raise RuntimeError(f"{model}/{batch}: runner ended before its steady steps:\n"
                           + run.log_tail())
    steady = _steady(run, t0)
    steady = [e for e in steady if e["time"] <= ckpts[-1]["time"]]
    cpu_share = _share_until(run, steady[-1]["time"])
    util = _busy_between(run.readings, t0, steady[-1]["time"], device.gpu)
    step_time = sum(e["step_time_s"] for e in steady) / len(steady)
    # restore: start again on the same train dir for one more step
    done = ckpts[-1]["step"]
    again = _spawn(f"{model}/{batch} restore", device, model, batch, image_size, done + 1,
                   train_dir, ["--warmup_steps", "0", "--num_sample_steps", "1"], timeout_s)
    _wait([again], nvml, timeout_s)
    restarted = again.first("started")
    if restarted is None or not restarted.get("restored"):
        raise RuntimeError(f"{model}/{batch}: the restore run did not restore:\n"
                           + again.log_tail())
    phases = run.first("start_phases") or {}
    again_phases = again.first("start_phases") or {}
    # what the first step took beyond a steady one (TensorFlow's first-run set-up): paid
    # by every start before the job trains at its step time, so part of the start-up
    first_extra = _first_step_extra(phases, step_time)
    resume_extra = _first_step_extra(again_phases, step_time)
    startup = started["time"] - run.spawned + first_extra
    return {
        "model": model, "batch_size": batch, "image_size": image_size,
        "step_time_s": step_time, "sampled_step_time_s": sample["step_time_mean_s"],
        "images_per_s": batch / step_time, "memory_mb": sample["peak_memory_mb"],
        "memory_source": sample["memory_source"],
        "gpu_util": None if util is None else min(1.0, max(util, 0.01)),
        "startup_s": startup, "graph_build_s": phases.get("graph_s"),
        # the runner's own restore phase (a restart also imports the exported graph
        # instead of building it, so its start-up less the fresh one can be negative)
        "restore_s": float(again_phases.get("restore_s") or 0.0),
        "resume_startup_s": restarted["time"] - again.spawned + resume_extra,
        "first_step_extra_s": first_extra,
        "cpu_share": cpu_share,
        "save_s": ckpts[-1]["seconds"], "first_save_s": ckpts[0]["seconds"],
        "checkpoint_mb": ckpts[-1]["size_mb"],
    }


def colocate_pair(device: Device, a: tuple[str, int, int | None], b: tuple[str, int, int | None],
                  alone: dict[tuple[str, int], float], work: Path, nvml: _NvmlUtil | None,
                  timeout_s: float = 900.0) -> dict:
    """Run jobs ``a`` and ``b`` at once on one device; their slowdowns against running alone."""
    extra = ["--warmup_steps", "1", "--num_sample_steps", "2", "--log_every_n_steps", "1"]
    if device.gpu:
        extra += ["--memory_fraction", "0.45"]
    runs = [_spawn(f"{m}/{bs} pair", device, m, bs, size, 100000,
                   work / f"pair-{m}-{bs}-{i}", extra, timeout_s)
            for i, (m, bs, size) in enumerate((a, b))]

    def overlap_start() -> float | None:
        firsts = [r.first("sample") for r in runs]
        return None if None in firsts else max(e["time"] for e in firsts)

    def in_overlap(r: Run) -> list[float]:
        t = overlap_start()
        return [] if t is None else [e["step_time_s"] for e in r.all("progress") if e["time"] > t]

    def enough() -> bool:
        t = overlap_start()
        return t is not None and all(len(in_overlap(r)) >= PAIR_STEPS for r in runs) \
            and time.time() - t >= STEADY_MIN_S

    try:   # the faster job keeps stepping until the slower one has made its share
        _wait(runs, nvml, timeout_s, until=enough)
    finally:
        _stop(runs)
    out = {"models": [f"{m}/{bs}" for m, bs, _ in (a, b)], "slowdown": []}
    for r, (m, bs, _) in zip(runs, (a, b)):
        times = in_overlap(r)
        out["slowdown"].append(sum(times) / len(times) / alone[(m, bs)])
    return out


def fit_colocation(pairs: list[dict], utils: dict[str, float]) -> dict:
    """Fit ``Colocation(overhead, exponent)`` to measured pair slowdowns (grid least squares).

    Returns the parameters and the mean and largest relative error of the fit.
    """
    from tfgshare.sim.colocation import Colocation

    points = []   # (total util, measured slowdown)
    for p in pairs:
        total = sum(utils[k] for k in p["models"])
        points += [(total, s) for s in p["slowdown"]]
    if not points:
        raise ValueError("no co-located pairs to fit")
    best = None
    for oi in range(0, 201):
        for ei in range(0, 61):
            c = Colocation(overhead=oi * 0.01, exponent=ei * 0.05)
            err = sum(((c.slowdown(2, u) - s) / s) ** 2 for u, s in points)
            if best is None or err < best[0]:
                best = (err, c)
    c = best[1]
    rel = [abs(c.slowdown(2, u) - s) / s for u, s in points]
    return {"overhead": c.overhead, "exponent": c.exponent,
            "fit_error_mean": sum(rel) / len(rel), "fit_error_max": max(rel),
            "points": len(points)}


def build_profile(device: Device, rows: list[dict], pairs: list[dict], fit: dict | None,
                  command: str, import_s: float) -> dict:
    """The profile document (the format ``sim.profiles.load_profiles`` reads)."""
    models: dict[str, dict] = {}
    for r in rows:
        m = models.setdefault(r["model"], {
            "image_size": r["image_size"], "optimizer_slots": 2,
            "checkpoint_mb": round(r["checkpoint_mb"], 2), "startup_s": [],
            "graph_build_s": [], "save_s": [], "restore_s": [], "resume_startup_s": [],
            "first_step_extra_s": [], "cpu_share": [], "batches": {}})
        m["startup_s"].append(r["startup_s"])
        m["graph_build_s"].append(r["graph_build_s"] or 0.0)
        m["save_s"].append(r["save_s"])
        m["restore_s"].append(r["restore_s"])
        m["resume_startup_s"].append(r["resume_startup_s"])
        m["first_step_extra_s"].append(r.get("first_step_extra_s", 0.0))
        if r.get("cpu_share") is not None:
            m["cpu_share"].append(r["cpu_share"])
        m["batches"][r["batch_size"]] = {
            "step_time_s": round(r["step_time_s"], 4), "images_per_s": round(r["images_per_s"], 2),
            "memory_mb": round(r["memory_mb"], 1),
            "gpu_util": round(r["gpu_util"] if r["gpu_util"] is not None else 1.0, 3)}
    for m in models.values():
        for k in ("startup_s", "graph_build_s", "save_s", "restore_s", "resume_startup_s",
                  "first_step_extra_s"):
            m[k] = round(sum(m[k]) / len(m[k]), 2)
        shares = m.pop("cpu_share")
        if shares:   # on the CPU: the share of its core the runner got while measured
            m["cpu_share"] = round(sum(shares) / len(shares), 3)
        # a start with no warm spare ready also pays the import
        m["cold_startup_s"] = round(m["startup_s"] + import_s, 2)
    mb = sum(r["checkpoint_mb"] for r in rows)
    secs = sum(r["save_s"] for r in rows)
    doc = {
        "reference_gpu": device.name,
        "device": device.name,
        "tensorflow": tensorflow_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "measured_by": command,
        "import_tensorflow_s": round(import_s, 2),
        "storage_mb_s": round(mb / secs, 1) if secs > 0 else None,
        "models": models,
    }
    if fit is not None:
        doc["colocation"] = {k: (round(v, 4) if isinstance(v, float) else v)
                             for k, v in fit.items()}
        doc["colocation"]["pairs"] = [{"models": p["models"],
                                       "slowdown": [round(s, 3) for s in p["slowdown"]]}
                                      for p in pairs]
    return doc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfgshare profile",
        description="Measure TF-Slim models on this machine's device (the first NVML GPU, "
                    "else the CPU as a virtual GPU) and write a simulator profile YAML.")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="model names; MODEL@SIZE sets the image size (e.g. vgg_16@224), "
                        "MODEL:B/B its own batch sizes instead of --batch-sizes (lenet:8)")
    p.add_argument("--batch-sizes", default="16,32,64", help="comma-separated (default 16,32,64)")
    p.add_argument("--colocate", action="store_true",
                   help="also run each pair of models at once on one device and fit the "
                        "co-location model")
    p.add_argument("--pairs", default=None,
                   help="with --colocate: only the first N pairs, or the pairs named as "
                        "A+B,C+D (model names)")
    p.add_argument("--out", default=None, help="profile YAML to write (default: print it)")
    p.add_argument("--cpu", action="store_true", help="profile the CPU even if a GPU is present")
    p.add_argument("--threads", type=int, default=1,
                   help="runner threads on the CPU (default 1, as the agent)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per runner (default 900)")
    return p


def choose_pairs(models: list[tuple], spec: str | None) -> list[tuple[tuple, tuple]]:
    """The pairs to co-locate: all, the first N (``spec`` a number) or ``A+B,C+D``."""
    combos = list(itertools.combinations(models, 2))
    if spec is None:
        return combos
    if spec.strip().isdigit():
        return combos[:int(spec)]
    by_name = {m[0]: m for m in models}
    out = []
    for item in spec.split(","):
        a, _, b = item.strip().partition("+")
        if a not in by_name or b not in by_name or a == b:
            raise ValueError(f"--pairs: {item!r} is not two different profiled models A+B "
                             f"(profiled: {', '.join(by_name)})")
        out.append((by_name[a], by_name[b]))
    return out


def _model_arg(text: str) -> tuple[str, int | None, list[int] | None]:
    """``MODEL[@SIZE][:B/B...]``: name, image size, this model's own batch sizes (or None)."""
    from slim_models import nets_factory
    head, _, sizes = text.partition(":")
    name, _, size = head.partition("@")
    try:
        image = int(size) if size else None
        own = [int(b) for b in sizes.split("/")] if sizes else None
    except ValueError:
        raise ValueError(f"{text!r}: expected MODEL[@SIZE][:BATCH/BATCH...]") from None
    if own is not None and min(own) < 1:
        raise ValueError(f"{text!r}: batch sizes must be positive")
    nets_factory.check_model(name, image)
    return name, image, own


def main(argv: list[str] | None = None) -> int:
    """Run the profile command; 0 on success, 2 on bad input, 1 if a measurement fails."""
    args = _parser().parse_args(argv)
    try:
        models = [_model_arg(m) for m in args.models]
        if args.colocate:
            choose_pairs(models, args.pairs)          # a bad --pairs fails before measuring
        batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
        if not batches or min(batches) < 1:
            raise ValueError(f"--batch-sizes needs positive integers, got {args.batch_sizes!r}")
        if args.threads < 1:
            raise ValueError("--threads must be >= 1")
    except ValueError as err:
        print(f"tfgshare profile: error: {err}", file=sys.stderr)
        return 2
    device = find_device(args.cpu, args.threads)
    print(f"device: {device.name}; TensorFlow {tensorflow_version()}", flush=True)
    nvml = _NvmlUtil() if device.gpu else None
    command = "tfgshare profile " + " ".join(argv if argv is not None else sys.argv[1:])
    t_all = time.monotonic()
    load_before = _load_average()
    failed: list[str] = []
    rows, pairs, fit = [], [], None
    try:
        with tempfile.TemporaryDirectory(prefix="tfgshare-profile-") as tmp:
            work = Path(tmp)
            import_s = import_seconds(device)
            print(f"import tensorflow: {import_s:.1f} s (load average {load_before})", flush=True)
            for (model, size, own), batch in ((m, b) for m in models for b in (m[2] or batches)):
                try:
                    row = profile_one(device, model, batch, size, work, nvml, args.timeout)
                except (RuntimeError, TimeoutError) as err:   # the other models still count
                    print(f"{model:>14} b{batch:<4} failed: {err}", file=sys.stderr, flush=True)
                    failed.append(f"{model}/{batch}: {str(err).splitlines()[0]}")
                    continue
                rows.append(row)
                print(f"{model:>14} b{batch:<4} {row['step_time_s']:.3f} s/step "
                      f"{row['images_per_s']:7.1f} img/s  {row['memory_mb']:7.0f} MB  "
                      f"util {row['gpu_util'] or 0:.2f}  start {row['startup_s']:.1f} s "
                      f"(graph {row['graph_build_s'] or 0:.1f})  "
                      f"save {row['save_s']:.2f} s  restore {row['restore_s']:.1f} s "
                      f"(resume start {row['resume_startup_s']:.1f} s)  "
                      f"ckpt {row['checkpoint_mb']:.0f} MB"
                      + ("" if row["cpu_share"] is None else
                         f"  CPU share {row['cpu_share']:.2f}"), flush=True)
            if args.colocate and len(models) > 1:
                alone = {(r["model"], r["batch_size"]): r["step_time_s"] for r in rows}
                utils = {f"{r['model']}/{r['batch_size']}": r["gpu_util"] or 1.0 for r in rows}
                for (ma, sa, oa), (mb, sb, ob) in choose_pairs(models, args.pairs):
                    a, b = (ma, min(oa or batches), sa), (mb, min(ob or batches), sb)
                    if (ma, a[1]) not in alone or (mb, b[1]) not in alone:
                        continue          # one of them failed alone: no baseline
                    try:   # each at its smallest batch
                        pair = colocate_pair(device, a, b, alone, work, nvml, args.timeout)
                    except (RuntimeError, TimeoutError) as err:
                        print(f"pair {ma} + {mb} failed: {err}", file=sys.stderr, flush=True)
                        failed.append(f"pair {ma}+{mb}: {str(err).splitlines()[0]}")
                        continue
                    pairs.append(pair)
                    print(f"pair {' + '.join(pair['models'])}: slowdown "
                          + ", ".join(f"{s:.2f}" for s in pair["slowdown"]), flush=True)
                if pairs:
                    fit = fit_colocation(pairs, utils)
                    print(f"co-location fit: overhead {fit['overhead']:.2f}, exponent "
                          f"{fit['exponent']:.2f}; fit error mean "
                          f"{100 * fit['fit_error_mean']:.1f} %, max "
                          f"{100 * fit['fit_error_max']:.1f} % over {fit['points']} jobs",
                          flush=True)
    except (RuntimeError, TimeoutError) as err:
        print(f"tfgshare profile: measurement failed: {err}", file=sys.stderr)
        return 1
    finally:
        end_spare(device)
        if nvml is not None:
            nvml.close()
    if not rows:
        print("tfgshare profile: no model could be measured", file=sys.stderr)
        return 1
    doc = build_profile(device, rows, pairs, fit, command, import_s)
    doc["profiling_wall_s"] = round(time.monotonic() - t_all, 1)
    doc["load_average"] = {"before": load_before, "after": _load_average()}
    if failed:
        doc["failed"] = failed
    text = yaml.safe_dump(doc, sort_keys=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(f"# Written by `{command}`; see tfgshare/repro/profile.py "
                                  "for what each figure is.\n" + text)
        print(f"wrote {args.out} ({doc['profiling_wall_s']:.0f} s)")
    else:
        print(text)
    return 1 if failed else 0


def _load_average() -> str:
    """The machine's 1/5/15-minute load averages, as ``uptime`` shows them."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"
