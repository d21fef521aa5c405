"""Runner processes on one node: start them, tail their events, stop them.

Each job attempt is its own ``python -m tfgshare.runner`` process in its own
session, with ``CUDA_VISIBLE_DEVICES`` set to its GPUs (empty on virtual GPUs,
so it trains on the CPU) and its fragment's ``--memory_fraction``. Its events go
to an attempt-specific file under the work dir, its output to a log beside it.

A runner that has written its final event (``finished`` or ``suspended``, both
after its checkpoint is saved) but is still tearing down ``exit_grace_s`` later
is killed, and reported with the exit code that event announced.

A runner dies with the process that started it (``PR_SET_PDEATHSIG``): when an
agent is killed its runners go too, so no orphan can write to a ``train_dir``
that a new attempt elsewhere restores from. Runners survive a coordinator
restart (they belong to the agent, not the coordinator).

With ``warm`` on, the supervisor keeps ``spares`` spare runner processes (the agent:
one per GPU, at most two) that have imported TensorFlow and wait
(``python -m tfgshare.runner --warm``); a start hands the job to the oldest over stdin
(flags, environment with the job's ``CUDA_VISIBLE_DEVICES``, log file) instead of
starting a process, and a new spare is started at once. A spare holds no GPU memory (no
device is initialised before its job arrives). More than one matters when starts come
together (a batch submitted at once, a round that starts a job on each GPU): with one
spare, the second start of such a burst was cold and paid the whole import (tens of
seconds on a loaded 2-core machine); when there is no live spare a start is cold, as
without ``warm``.

The spare a job took is replaced at once by default. With ``spare_wait_s`` > 0 it is
replaced only once that job's runner has reported its first step (``start_phases`` or
``progress``), or has exited, or ``spare_wait_s`` after the hand-over, whichever comes
first, so the new spare's import does not compete with the job's graph import, restore
and first step for the CPU; the bound keeps a node whose job hangs before its first step
from going without a spare. Measured through a live agent (docs/benchmarks.md, Runner
section) waiting did not make a migration's resume faster beyond the noise, so it is off.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tfgshare import runner_wire as rp

_PR_SET_PDEATHSIG = 1
_SPARE_RETRY_S = 30.0   # a spare that died is replaced at most this often
SPARE_WAIT_S = 0.0      # longest a used spare's replacement waits for the job's first step

log = logging.getLogger(__name__)


@dataclass
class RunnerProc:
    """One running attempt of one job."""

    job: str
    attempt: int
    gpu_indices: tuple[int, ...]
    events_file: Path
    log_file: Path
    popen: subprocess.Popen
    sample_only: bool = False
    offset: int = 0
    step: int = 0
    stopping: str = ""            # "", "suspend", "cancel", "kill"
    deadline: float | None = None  # when a stop request escalates to SIGKILL
    note: str = ""                # why it was killed, for the exit report
    final_code: int | None = None  # exit code its last event promises (finished/suspended)
    final_at: float | None = None  # when that event was read
    stepped: bool = False          # it reported its first step (start_phases/progress)
    limit_mb: dict[int, float] = field(default_factory=dict)  # fragment per GPU (virtual GPUs)
    out_of_memory: bool = False    # killed for passing its fragment

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class EventOut:
    """A runner event to forward."""

    runner: RunnerProc
    event: dict


@dataclass
class ExitOut:
    """A runner that ended: its exit code (128+N for signal N) and why."""

    runner: RunnerProc
    exit_code: int
    reason: str


@dataclass
class Supervisor:
    """Starts and tracks the runner processes of one node."""

    work_dir: Path
    runner_cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "tfgshare.runner"])
    threads: int = 1               # CPU threads per runner (TF intra/inter-op)
    suspend_timeout_s: float = 60.0
    cancel_timeout_s: float = 5.0
    exit_grace_s: float = 3.0      # a runner still alive this long after its final event is killed
    runner_flags: list[str] = field(default_factory=list)   # added to every runner
    warm: bool = False             # keep spare runners with TensorFlow imported (runner_cmd's)
    spares: int = 1                # ... this many
    runners: dict[str, RunnerProc] = field(default_factory=dict)
    spare_pool: list[subprocess.Popen] = field(default_factory=list)   # oldest first
    spare_died_at: float = -_SPARE_RETRY_S
    spare_wait_s: float = SPARE_WAIT_S   # replace a used spare after the job's first step,
    #                                      or this long after the hand-over; 0: at once
    held: dict[str, float] = field(default_factory=dict)   # job -> when its spare is replaced

    @property
    def spare(self) -> subprocess.Popen | None:
        """The spare the next start gets (the oldest), or None."""
        return self.spare_pool[0] if self.spare_pool else None

    def start(self, job: str, attempt: int, args: list[str], train_dir: str | Path,
              fragments: list[tuple[int, float]], virtual: bool,
              sample_only: bool = False, cores: tuple[int, ...] | None = None,
              limits_mb: dict[int, float] | None = None) -> RunnerProc:
        """Start attempt ``attempt`` of ``job`` on ``fragments`` [(gpu_index, fraction)].

        ``cores``: pin the runner to these CPU cores (a virtual GPU's own cores).
        ``limits_mb``: its fragment in MiB per GPU, enforced by ``enforce_memory``.
        """
        if job in self.runners:
            raise ValueError(f"job {job} already has a runner here "
                             f"(attempt {self.runners[job].attempt})")
        if not fragments:
            raise ValueError(f"job {job}: no fragments to run on")
        for index, fraction in fragments:
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"job {job}: fraction {fraction} on GPU {index} "
                                 "is not in (0, 1]")
        job_dir = Path(self.work_dir) / job
        job_dir.mkdir(parents=True, exist_ok=True)
        events = job_dir / f"attempt-{attempt}.events.jsonl"
        log = job_dir / f"attempt-{attempt}.log"
        events.write_bytes(b"")
        indices = tuple(i for i, _ in fragments)
        fraction = min(f for _, f in fragments)
        cmd = [*self.runner_cmd, *args,
               "--train_dir", str(train_dir), "--events_file", str(events),
               "--memory_fraction", f"{fraction:g}", "--num_gpus", str(len(fragments)),
               "--job_id", job, "--epoch", str(attempt), *self.runner_flags]
        if sample_only:
            cmd.append("--sample_only")
        job_env = {"CUDA_VISIBLE_DEVICES": "" if virtual else ",".join(map(str, indices))}
        popen = self._hand_to_spare(cmd[len(self.runner_cmd):], job_env, log)
        if popen is not None and cores:
            pin_threads(popen.pid, cores)
        if popen is not None and self.spare_wait_s > 0:
            self.held[job] = time.monotonic() + self.spare_wait_s
        else:
            self.held.pop(job, None)
        if popen is None:
            with open(log, "ab") as out:
                popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         env={**self._env(), **job_env},
                                         start_new_session=True,
                                         preexec_fn=die_with_parent(os.getpid(), cores))
        proc = RunnerProc(job, attempt, indices, events, log, popen, sample_only)
        if limits_mb:
            proc.limit_mb = dict(limits_mb)
        self.runners[job] = proc
        self.keep_spare()
        return proc

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",   # CUDA numbering = NVML numbering
            "TF_NUM_INTRAOP_THREADS": str(self.threads),
            "TF_NUM_INTEROP_THREADS": str(self.threads),
            "OMP_NUM_THREADS": str(self.threads),
            "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def keep_spare(self) -> None:
        """With ``warm``, start spare runners until ``spares`` live ones wait, less one per
        job that took a spare and has not yet stepped (none while one died lately)."""
        if not self.warm:
            return
        now = time.monotonic()
        for job, until in list(self.held.items()):
            proc = self.runners.get(job)
            if proc is None or proc.stepped or proc.popen.poll() is not None or now >= until:
                del self.held[job]
        for dead in [p for p in self.spare_pool if p.poll() is not None]:
            log.warning("spare runner %d exited %s before it got a job; see %s",
                        dead.pid, dead.returncode, self._spare_log())
            self.spare_pool.remove(dead)
            self.spare_died_at = time.monotonic()
        if time.monotonic() - self.spare_died_at < _SPARE_RETRY_S:
            return
        while len(self.spare_pool) < self.spares - len(self.held):
            Path(self.work_dir).mkdir(parents=True, exist_ok=True)
            with open(self._spare_log(), "ab") as out:
                # CUDA_VISIBLE_DEVICES="" until the job's arrives: a spare that touched a GPU
                # by mistake would see none, not all of them
                self.spare_pool.append(subprocess.Popen(
                    [*self.runner_cmd, rp.WARM_FLAG], stdin=subprocess.PIPE, stdout=out,
                    stderr=subprocess.STDOUT, env={**self._env(), "CUDA_VISIBLE_DEVICES": ""},
                    start_new_session=True, preexec_fn=die_with_parent(os.getpid())))

    def _spare_log(self) -> Path:
        return Path(self.work_dir) / "spare-runner.log"

    def _hand_to_spare(self, argv: list[str], env: dict[str, str],
                       log_file: Path) -> subprocess.Popen | None:
        """Give a job to the oldest waiting spare runner; None when there is none to take it."""
        while self.spare_pool:
            spare = self.spare_pool.pop(0)
            if spare.poll() is not None:
                self.spare_died_at = time.monotonic()
                continue
            try:
                spare.stdin.write(rp.warm_job_line(argv, env, str(log_file)).encode())
                spare.stdin.close()
            except OSError:          # it died just now
                _kill_quietly(spare)
                continue
            return spare
        return None

    def end_spare(self) -> None:
        """Stop the spare runners, if any (an empty stdin ends each)."""
        pool, self.spare_pool = self.spare_pool, []
        self.held.clear()
        for spare in pool:
            try:
                spare.stdin.close()
            except OSError:
                pass
        for spare in pool:
            try:
                spare.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_quietly(spare)

    def suspend(self, job: str) -> RunnerProc:
        """Ask ``job``'s runner to checkpoint and exit (SIGUSR1), with a deadline."""
        proc = self._get(job)
        if not proc.stopping:
            proc.stopping = "suspend"
            proc.deadline = time.monotonic() + self.suspend_timeout_s
            _signal(proc, signal.SIGUSR1)
        return proc

    def cancel(self, job: str) -> RunnerProc:
        """Stop ``job``'s runner for good: SIGTERM, then SIGKILL after a short wait."""
        proc = self._get(job)
        if proc.stopping != "cancel":
            proc.stopping = "cancel"
            proc.deadline = time.monotonic() + self.cancel_timeout_s
            _signal(proc, signal.SIGTERM)
        return proc

    def kill(self, job: str, why: str = "killed on request") -> RunnerProc:
        """Kill ``job``'s runner at once (SIGKILL to its process group); ``why`` is reported."""
        proc = self._get(job)
        proc.stopping = "kill"
        proc.note = why
        _signal(proc, signal.SIGKILL, group=True)
        return proc

    def enforce_memory(self, used_mb: dict[int, dict[int, float]]) -> list[EventOut]:
        """Kill the runners whose memory passed their fragment (virtual GPUs: resident memory).

        ``used_mb``: pid -> GPU index -> MiB, as the telemetry read it. Each such
        runner gets an ``out_of_memory`` event with its measured peak and exits
        ``EXIT_OUT_OF_MEMORY``.
        """
        out = []
        for proc in list(self.runners.values()):
            if not proc.limit_mb or proc.stopping:
                continue
            used = used_mb.get(proc.pid, {})
            over = [(i, mb, proc.limit_mb[i]) for i, mb in used.items()
                    if i in proc.limit_mb and mb > proc.limit_mb[i]]
            if not over:
                continue
            i, mb, limit = max(over, key=lambda o: o[1])
            why = f"out of memory: {mb:.0f} MiB resident on GPU {i}, its fragment is {limit:.0f} MiB"
            self.kill(proc.job, why)
            proc.out_of_memory = True
            out.append(EventOut(proc, {"event": "out_of_memory", "time": time.time(),
                                       "peak_memory_mb": mb, "limit_mb": limit,
                                       "message": why}))
        return out

    def poll(self) -> list[EventOut | ExitOut]:
        """New events of every runner, then the exits of those that ended."""
        out: list[EventOut | ExitOut] = []
        now = time.monotonic()
        for job, proc in list(self.runners.items()):
            code = proc.popen.poll()
            out.extend(self._read_events(proc))
            if code is None:
                if proc.final_at is not None and now - proc.final_at >= self.exit_grace_s:
                    proc.note = (f"still exiting {self.exit_grace_s:g}s after its "
                                 f"{_FINAL[proc.final_code]} event: killed")
                    _signal(proc, signal.SIGKILL, group=True)
                    proc.final_at = None
                elif proc.deadline is not None and now >= proc.deadline:
                    waited = (self.suspend_timeout_s if proc.stopping == "suspend"
                              else self.cancel_timeout_s)
                    proc.note = f"{proc.stopping} not done after {waited:g}s: killed (SIGKILL)"
                    proc.deadline = None
                    _signal(proc, signal.SIGKILL, group=True)
                continue
            del self.runners[job]
            out.append(ExitOut(proc, *_exit_code_and_reason(code, proc)))
        self.keep_spare()     # after the events: a first step just read frees a held spare
        return out

    def stop_all(self, timeout_s: float = 30.0) -> list[EventOut | ExitOut]:
        """Suspend every runner, wait up to ``timeout_s``, kill what is left."""
        self.warm = False
        self.end_spare()
        for job in list(self.runners):
            self.suspend(job)
        out: list[EventOut | ExitOut] = []
        end = time.monotonic() + timeout_s
        while self.runners and time.monotonic() < end:
            out += self.poll()
            time.sleep(0.05)
        for job in list(self.runners):
            self.kill(job, f"still running {timeout_s:g}s after the agent stopped: killed")
        while self.runners:
            out += self.poll()
            time.sleep(0.02)
        return out

    def _get(self, job: str) -> RunnerProc:
        try:
            return self.runners[job]
        except KeyError:
            raise KeyError(f"no runner for job {job} on this node") from None

    def _read_events(self, proc: RunnerProc) -> list[EventOut]:
        events, proc.offset = rp.read_events(proc.events_file, proc.offset)
        for ev in events:
            for key in ("step", "global_step"):
                if isinstance(ev.get(key), int):
                    proc.step = ev[key]
            if ev.get("event") in ("start_phases", "progress"):
                proc.stepped = True
            code = _FINAL_EVENTS.get(ev.get("event"))
            if code is not None:
                proc.final_code, proc.final_at = code, time.monotonic()
        return [EventOut(proc, ev) for ev in events]


# events after which a runner has saved its checkpoint and only has to exit
_FINAL_EVENTS = {"finished": rp.EXIT_OK, "suspended": rp.EXIT_SUSPENDED}
_FINAL = {v: k for k, v in _FINAL_EVENTS.items()}


def _exit_code_and_reason(code: int, proc: RunnerProc) -> tuple[int, str]:
    if code == -signal.SIGKILL and proc.note.startswith("still exiting"):
        # its work was done and saved: report the exit its final event announced
        note, proc.note = proc.note, ""
        code, reason = _exit_code_and_reason(proc.final_code, proc)
        proc.note = note
        return code, f"{reason} ({note})"
    if proc.out_of_memory:
        return rp.EXIT_OUT_OF_MEMORY, proc.note
    if code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return 128 + sig, proc.note or f"killed by {name}"
    if proc.stopping in ("cancel", "kill"):
        return code, proc.note or f"cancelled (exit {code})"
    reason = {rp.EXIT_OK: "finished",
              rp.EXIT_SUSPENDED: "sampled" if proc.sample_only and not proc.stopping
              else "suspended",
              rp.EXIT_BAD_INPUT: "bad input",
              rp.EXIT_OUT_OF_MEMORY: "out of memory",
              rp.EXIT_CHECKPOINT_ERROR: "checkpoint error"}.get(code, f"crashed (exit {code})")
    if code not in (rp.EXIT_OK, rp.EXIT_SUSPENDED):
        reason += f"; see {proc.log_file}"
    return code, reason


def _signal(proc: RunnerProc, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(proc.pid, sig)   # the runner leads its own session/group
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def _kill_quietly(popen: subprocess.Popen) -> None:
    try:
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def pin_threads(pid: int, cores: tuple[int, ...]) -> None:
    """Pin every thread of a running process to ``cores`` (a warm runner's, at hand-over)."""
    for tid in psutil.Process(pid).threads():
        try:
            os.sched_setaffinity(tid.id, cores)
        except (ProcessLookupError, PermissionError):
            pass


def die_with_parent(parent_pid: int, cores: tuple[int, ...] | None = None):
    """A Popen preexec hook: the child gets SIGKILL when its parent dies (Linux),
    and runs on ``cores`` only when given."""
    def hook() -> None:
        if cores:
            os.sched_setaffinity(0, cores)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent_pid:     # the parent died before prctl
            os._exit(1)
    return hook
