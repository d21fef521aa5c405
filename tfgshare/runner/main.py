"""The job runner: trains one TF-Slim job, samples its speed, suspends and resumes it.

Run as ``tfgshare train FLAGS`` or ``python -m tfgshare.runner FLAGS`` (flags as
in TF-Slim's train_image_classifier.py, see ``runner_config``), or in-process
with ``train(TrainConfig(...), on_event=..., stop_event=...)``. The contract
with the agent (exit codes, signals, events) is in ``runner_protocol``.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig, parse_args
from tfgshare.runner.cpu import cpu_share, cpu_times, usable_cores
from tfgshare.runner.events import EventSink
from tfgshare.runner.neighbours import Neighbours
from tfgshare.runner.stop import StopRequest, install_stop_signals
from tfgshare.runner.timing import StepTimer
from tfgshare.sampling import SamplePlan, plan_sampling

SAMPLE_FILE = rp.SAMPLE_FILE
# set by ``python -m tfgshare.runner``: called with the exit code right after the final
# event (``finished`` or ``suspended``, its checkpoint written), to end the process there
# instead of closing the session and tearing down TensorFlow first (seconds on a loaded
# machine, with the job's GPU still held); None in-process (tests, ``tfgshare train``)
EXIT_AT_FINAL_EVENT: Callable[[int], None] | None = None


@dataclass
class TrainResult:
    """How a training run ended."""

    status: str                  # "finished" or "suspended"
    exit_code: int               # rp.EXIT_OK or rp.EXIT_SUSPENDED
    global_step: int
    loss: float | None
    restored_from: str | None
    checkpoint: str | None       # the checkpoint written last
    sample: dict | None          # the sample event, when this run sampled
    devices: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _stderr_muted():
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow and find its devices with the C++ start-up chatter muted.

    TensorFlow writes some lines (CUDA probing, CPU features) before its log level
    applies; they are noise on a CPU node. Later messages obey TF_CPP_MIN_LOG_LEVEL.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for message in ("`layer.apply` is deprecated", "`tf.layers.flatten` is deprecated"):
        warnings.filterwarnings("ignore", message=message)
    if "tensorflow" in sys.modules:
        return
    with _stderr_muted():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")
    tf.get_logger().setLevel("ERROR")


def peak_memory(devices: list[str]) -> tuple[float, str]:
    """Peak memory in MB: the GPU allocator's peak with GPUs, else the process's peak RSS."""
    import tensorflow as tf

    gpus = sorted({d for d in devices if d.startswith("/gpu")})
    if gpus:
        try:
            peaks = [tf.config.experimental.get_memory_info(d.replace("/gpu", "GPU"))["peak"]
                     for d in gpus]
            return max(peaks) / 2**20, "gpu_allocator_peak"
        except (ValueError, RuntimeError):
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_rss_peak"


@contextlib.contextmanager
def _op_determinism(enabled: bool):
    """TensorFlow op determinism on (when ``enabled``) for the block, then as it was.

    Restoring matters to in-process callers: determinism makes unseeded random
    ops raise, which would break their later TensorFlow work.
    """
    if not enabled:
        yield
        return
    import tensorflow as tf

    try:
        from tensorflow.python.util import _pywrap_determinism as switch
    except ImportError:  # a TensorFlow without the switch: enable and leave it on
        switch = None
    was_on = switch.is_enabled() if switch else True
    env_before = os.environ.get("TF_DETERMINISTIC_OPS")
    os.environ["TF_DETERMINISTIC_OPS"] = "1"
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if switch and not was_on:
            switch.enable(False)
            if env_before is None:
                os.environ.pop("TF_DETERMINISTIC_OPS", None)
            else:
                os.environ["TF_DETERMINISTIC_OPS"] = env_before


def train(config: TrainConfig, on_event: Callable[[dict], None] | None = None,
          stop_event: threading.Event | None = None) -> TrainResult:
    """Train ``config`` from its train_dir's latest checkpoint (or from scratch).

    Stops after ``max_number_of_steps`` (status "finished"), or, once
    ``stop_event`` is set or ``sample_only`` sampling is done, after the current
    step with a checkpoint (status "suspended"). Raises BadInputError or
    CheckpointError on bad flags or an unusable checkpoint.
    """
    config.check()
    _import_tensorflow_quietly()
    stop_event = stop_event or StopRequest()
    sink = EventSink(config.events_file, on_event, config.job_id)
    Path(config.train_dir).mkdir(parents=True, exist_ok=True)
    with _op_determinism(config.deterministic):
        from tfgshare.runner import graph as runner_graph

        not_applied = runner_graph.make_devices(config)
        if not_applied:
            _warn(sink, not_applied)
        if config.in_gang:
            from tfgshare.runner import replicas
            return replicas.train_member(config, sink, stop_event)
        return _build_and_train(config, sink, stop_event)


def _build_and_train(config: TrainConfig, sink: EventSink,
                     stop_event: threading.Event) -> TrainResult:
    import tensorflow as tf

    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph

    start_s = _process_age_s()
    ckpt.claim(config.train_dir, config.epoch)   # no older attempt may save from now on
    candidates = ckpt.candidates(config.train_dir)
    tick = time.perf_counter()
    built, source = _training_graph(config, sink)
    graph_s = time.perf_counter() - tick
    proto = runner_graph.session_config(config)
    with tf.compat.v1.Session(graph=built.graph, config=proto) as session:
        tick = time.perf_counter()
        # a restore sets every variable, so only a fresh start runs the initializers; it
        # starts the input stream in the same run, at the position the checkpoint holds
        restored = _restore_newest_good(config, built, session, candidates, sink,
                                        start_input=True)
        restore_s = time.perf_counter() - tick if restored else 0.0
        if restored is None:
            session.run(built.init_op)
            runner_graph.start_input(session, built)
            step = int(session.run(built.global_step))
        else:
            step = restored.global_step
        latest = restored.path if restored else None
        sink.emit("started", global_step=step, restored=latest is not None,
                  device=",".join(built.devices), memory_fraction=config.memory_fraction)
        phases = {"start_s": start_s, "graph_s": graph_s, "graph_source": source,
                  "restore_s": restore_s, "restored_from": latest}
        return train_loop(config, built, session, sink, stop_event, step, latest, phases)


def _training_graph(config: TrainConfig, sink: EventSink):
    """The job's graph, imported from its train dir when it matches, else built and exported."""
    from tfgshare.runner import graph as runner_graph
    from tfgshare.runner import graph_file

    key = graph_file.graph_key(config, runner_graph.tower_devices(config.num_gpus))
    built, why = graph_file.load(key, config)
    if built is not None:
        return built, "imported"
    if why != "no graph file":
        _warn(sink, f"graph file not used, rebuilding: {why}")
    built = runner_graph.build_training_graph(config)
    try:
        graph_file.export(built, key, config.train_dir)
    except OSError as exc:   # a full disk: the file only spares a resume the rebuild
        _warn(sink, f"cannot write the graph file: {exc}; a resume rebuilds the graph")
    return built, "built"


def _restore_newest_good(config: TrainConfig, built, session, candidates: list[str],
                         sink: EventSink, start_input: bool = False):
    """Restore the newest checkpoint that reads back whole; its CheckpointInfo (with the
    global step it holds), or None for a fresh start.

    With ``start_input``, the input stream starts at the checkpoint's position in the
    restore's own ``session.run``. A corrupt or partial checkpoint is skipped with a
    warning (and dropped from the kept list); one written for another job, or no
    readable one at all, is an error.
    """
    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph

    expected = runner_graph.job_spec(config, built.image_size, built.num_classes)
    bad: list[str] = []
    for path in candidates:
        try:
            info = ckpt.inspect_checkpoint(path, expected, built.global_step.op.name)
            built.checkpoint.restore(
                session, path, also=[built.input_init] if start_input else [],
                feed={built.start_example: info.input_position} if start_input else None)
        except ckpt.CorruptCheckpointError as exc:
            bad.append(path)
            _warn(sink, f"{exc}; falling back to an older checkpoint")
            continue
        if bad:
            kept = [p for p in reversed(candidates) if p not in bad]
            ckpt.set_current(config.train_dir, kept, config.epoch)
            _warn(sink, f"resuming from {path}, not the newest ({bad[0]}), which is unreadable")
        return info
    if bad:
        raise rp.CheckpointError(f"no readable checkpoint in {config.train_dir}: "
                                 f"{', '.join(bad)} are corrupt or partial")
    return None


def _warn(sink: EventSink, message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
    sink.emit("warning", message=message)


_job_start: float | None = None   # monotonic time a warm runner was handed its job


def mark_job_start(at: float) -> None:
    """Count a job's start from ``at`` (monotonic), not from the process start (warm runner)."""
    global _job_start
    _job_start = at


def _process_age_s() -> float | None:
    """Seconds since this job started: since its process started (Linux) or it was handed
    to a warm runner; None where that cannot be read."""
    if _job_start is not None:
        return time.monotonic() - _job_start
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


def _default_size(model_name: str) -> int:
    from slim_models import nets_factory

    return nets_factory.default_image_size(model_name)


def train_loop(config: TrainConfig, built, session, sink: EventSink,
               stop_event: threading.Event, step: int, latest: str | None,
               phases: dict | None = None) -> TrainResult:
    """Run ``built``'s steps in ``session`` from ``step`` until done or asked to stop.

    Samples, reports progress, checkpoints after the sample (on a fresh start only),
    periodically and at the end. ``latest`` is the checkpoint the session was
    restored from (None for a fresh start). ``phases``, when given, is sent as the
    ``start_phases`` event with the first step's time added.
    """
    saver = built.checkpoint
    train_dir = Path(config.train_dir)
    total = config.max_number_of_steps
    plan = plan_sampling(total - step, config.warmup_steps, config.num_sample_steps,
                         config.max_sample_share)
    if (train_dir / SAMPLE_FILE).exists() and not config.sample_only:
        # sampled before (a resume after its sample): no second sample, no extra
        # checkpoint; the warm-up is still left out of the running step time
        plan = SamplePlan(plan.warmup, 0)
    timer = StepTimer(plan, built.images_per_step)
    window = None   # (wall time, process CPU run, CPU wait) when the sampled steps began
    fetches = built.train_tensor
    key = built.step_key
    loss = None
    sample = None
    last_saved_step = step if latest else None
    last_saved_path = latest
    last_save_time = time.monotonic()
    run_start = tick = time.perf_counter()

    def save(final: bool = False) -> None:
        """Checkpoint now. A failed periodic save (a full disk) is a warning: training goes
        on and the next save tries again. A failed final one is tried again for
        ``FINAL_SAVE_PATIENCE_S`` (a full disk is often transient) before the run ends (exit 1)."""
        nonlocal step, last_saved_step, last_saved_path, last_save_time
        import tensorflow as tf

        if not config.is_chief:   # a gang's chief owns its checkpoint
            last_saved_step = step
            return
        if built.step_after is not None:
            # a gang: the other workers' gradients may have moved the global step on since
            # this worker's last step; the checkpoint is named and reported by what it holds
            step = max(step, int(session.run(built.global_step)))

        saved = save_patiently(lambda: saver.save(session, step), step, final,
                               (tf.errors.OpError, OSError), lambda m: _warn(sink, m))
        if saved is None:
            last_save_time = time.monotonic()
            return
        if built.step_after is not None:
            # the other workers' gradients can move the global step on while the save
            # runs: report the step the checkpoint holds, the one a resume continues at
            from tfgshare.runner import checkpoint as ckpt

            step = ckpt.stored_step(saved.path, built.global_step.op.name)
        last_saved_step, last_saved_path, last_save_time = step, saved.path, time.monotonic()
        sink.emit("checkpoint", step=step, path=saved.path, seconds=saved.seconds,
                  size_mb=saved.size_mb)

    sampled_only = False
    while step < total and not stop_event.is_set() and not sampled_only:
        if window is None and timer.steps_seen == timer.plan.warmup:
            window = (time.time(), *cpu_times())
            neighbours = Neighbours()
        if built.step_after is None:
            loss = float(session.run(fetches, feed_dict={key: step}))
            step += 1
        else:   # a gang member: the global step the gang reached
            loss, step = session.run((fetches, built.step_after), feed_dict={key: step})
            loss, step = float(loss), int(step)
        now = time.perf_counter()
        seconds, tick = now - tick, now
        if phases is not None:
            sink.emit("start_phases", **phases, first_step_s=seconds)
            phases = None
        if window is not None and not timer.sample_done and timer.steps_seen % 2 == 0:
            neighbours.scan()          # between steps, not timed as a step
            tick = time.perf_counter()
        if timer.add(seconds):
            sample = _sample_event(timer, built, total - step, now - run_start, window,
                                   neighbours)
            sink.emit("sample", **sample)
            if config.is_chief:   # a gang's chief writes its sample file
                try:
                    _write_json(train_dir / SAMPLE_FILE, {**sample, "step": step,
                                                          "job_id": config.job_id})
                except OSError as exc:   # a full disk: the event above still carries it
                    _warn(sink, f"cannot write {SAMPLE_FILE}: {exc}; a resume samples again")
            # a sampling run ends with its sample; a gang's with its chief's (a member
            # counts its own steps, so it may finish its sample first: were it to leave
            # then, the chief's next step would wait for its gradients for ever). A
            # member's step fails once the chief has saved and gone: ``_gang_lost``.
            sampled_only = config.sample_only and config.is_chief
            if not sampled_only and step < total and latest is None:
                # the scheduler may move the job now (a resumed job keeps its checkpoint)
                save()
                tick = time.perf_counter()
        if step % config.log_every_n_steps == 0 or step == total:
            remaining = timer.predicted_remaining_s(total - step)
            sink.emit("progress", step=step, loss=loss, step_time_s=seconds,
                      images_per_sec=built.images_per_step / seconds,
                      predicted_remaining_s=remaining)
            eta = "?" if remaining is None else f"{remaining:.0f}s"
            print(f"step {step}/{total}  loss {loss:.4f}  {seconds:.3f} s/step  "
                  f"{built.images_per_step / seconds:.1f} img/s  remaining {eta}", flush=True)
        if step < total and _periodic_save_due(config, step, last_save_time):
            save()
            tick = time.perf_counter()   # the save is not part of the next step's time
    stopped_at = time.monotonic()
    if last_saved_step != step:
        save(final=True)
    if step >= total:
        sink.emit("finished", step=step, loss=loss)
        if EXIT_AT_FINAL_EVENT is not None:
            EXIT_AT_FINAL_EVENT(rp.EXIT_OK)
        return TrainResult("finished", rp.EXIT_OK, step, loss, latest, last_saved_path,
                           sample, built.devices)
    requested = getattr(stop_event, "set_at", None)
    sink.emit("stop_phases", stop_wait_s=None if requested is None else stopped_at - requested,
              save_s=time.monotonic() - stopped_at)
    sink.emit("suspended", step=step)
    if EXIT_AT_FINAL_EVENT is not None:
        EXIT_AT_FINAL_EVENT(rp.EXIT_SUSPENDED)
    return TrainResult("suspended", rp.EXIT_SUSPENDED, step, loss, latest, last_saved_path,
                       sample, built.devices)


FINAL_SAVE_PATIENCE_S = 120.0   # how long a failed final save is tried again
FINAL_SAVE_PAUSE_S = 2.0        # between those tries


def save_patiently(save_once: Callable, step: int, final: bool, errors: tuple,
                   warn: Callable[[str], None], patience_s: float = FINAL_SAVE_PATIENCE_S,
                   pause_s: float = FINAL_SAVE_PAUSE_S):
    """Run ``save_once``; its result, or None after a failed periodic save (warned).

    A failed final save (its steps exist nowhere else) is tried again every ``pause_s``
    for ``patience_s``, so a disk that fills for a while does not cost the job its
    steps; then it raises ``RunnerError`` (exit 1).
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return save_once()
        except errors as exc:
            text = str(getattr(exc, "message", exc)).strip().splitlines()
            message = f"checkpoint at step {step} failed: {type(exc).__name__}: " \
                      f"{text[0] if text else ''}"
            if not final:
                warn(f"{message}; training on, the next save tries again")
                return None
            if time.monotonic() + pause_s > deadline:
                raise rp.RunnerError(f"{message} (tried for {patience_s:.0f} s)") from None
            warn(f"{message}; trying again in {pause_s:.0f} s")
            time.sleep(pause_s)


def _periodic_save_due(config: TrainConfig, step: int, last_save_time: float) -> bool:
    if config.save_interval_steps and step % config.save_interval_steps == 0:
        return True
    return bool(config.save_interval_secs) and \
        time.monotonic() - last_save_time >= config.save_interval_secs


def _sample_event(timer: StepTimer, built, remaining_steps: int, elapsed_s: float,
                  window: tuple[float, float, float], neighbours: Neighbours) -> dict:
    stats = timer.sample_stats()
    ran, waited = cpu_times()
    peak_mb, source = peak_memory(built.devices)
    remaining = remaining_steps * stats["step_time_mean_s"]
    return {**stats, "peak_memory_mb": peak_mb, "memory_source": source,
            "predicted_remaining_s": remaining, "predicted_total_s": elapsed_s + remaining,
            "window_start": window[0],
            "cpu_util": cpu_share(time.time() - window[0], ran + waited - window[1] - window[2]),
            # over the sampled steps, the time its threads waited for a core, and the
            # time they ran over the cores it may use: its steps alone are that much
            # shorter, and no shorter than that (tfgshare.policies.prediction.solo_step_s)
            "cpu_wait_s": max(0.0, waited - window[2]),
            "cpu_run_s": max(0.0, ran - window[1]) / usable_cores(),
            # the cluster's own processes competing for its cores then (runner.neighbours)
            "cluster_runnable": neighbours.mean()}


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    """Train one job from command-line flags; returns a runner_protocol exit code."""
    config = parse_args(list(sys.argv[1:] if argv is None else argv))
    if config.in_gang:   # a gang's servers and sessions can block an orderly exit
        code = _main(config)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return _main(config)


def _main(config: TrainConfig) -> int:
    if config.job_name == "ps":
        try:
            config.check()
        except rp.BadInputError as exc:
            return _fail(EventSink(config.events_file, None, config.job_id),
                         f"bad input: {exc}", exc.exit_code)
        _import_tensorflow_quietly()
        from tfgshare.runner import replicas
        return replicas.serve_ps(config)
    stop_event = StopRequest()
    if threading.current_thread() is threading.main_thread():
        install_stop_signals(stop_event)
    sink = EventSink(config.events_file, None, config.job_id)
    try:
        result = train(config, stop_event=stop_event)
    except rp.BadInputError as exc:
        return _fail(sink, f"bad input: {exc}", exc.exit_code)
    except rp.CheckpointError as exc:
        return _fail(sink, f"checkpoint error: {exc}", exc.exit_code)
    except rp.RunnerError as exc:
        return _fail(sink, str(exc), exc.exit_code)
    except Exception as exc:
        if type(exc).__name__ != "ResourceExhaustedError":   # TensorFlow's out of memory
            raise
        peak = _gpu_peak_mb()
        print(f"tfgshare train: out of memory (peak {peak:.0f} MiB): {exc}".splitlines()[0],
              file=sys.stderr, flush=True)
        sink.emit("out_of_memory", peak_memory_mb=peak, limit_mb=None,
                  message=str(exc).splitlines()[0][:500])
        return rp.EXIT_OUT_OF_MEMORY
    return result.exit_code


def _gpu_peak_mb() -> float:
    """The peak MiB TensorFlow's allocator reached on the visible GPUs (else peak RSS)."""
    import tensorflow as tf

    peak = 0.0
    for i, _ in enumerate(tf.config.list_logical_devices("GPU")):
        try:
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        except (ValueError, RuntimeError):
            continue
        peak = max(peak, info["peak"] / 2**20)
    if peak == 0.0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return peak


def _fail(sink: EventSink, message: str, code: int) -> int:
    print(f"tfgshare train: {message}", file=sys.stderr, flush=True)
    sink.emit("error", message=message)
    return code


if __name__ == "__main__":
    sys.exit(main())
