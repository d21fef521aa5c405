"""The job runner: trains one TF-Slim job, samples its speed, suspends and resumes it.

Run as ``tfgshare train FLAGS`` or ``python -m tfgshare.runner FLAGS`` (flags as
in TF-Slim's train_image_classifier.py, see ``runner_config``), or in-process
with ``train(TrainConfig(...), on_event=..., stop_event=...)``. The contract
with the agent (exit codes, signals, events) is in ``runner_protocol``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig, parse_args
from tfgshare.runner.cpu import cpu_times, solo_share, thread_times, usable_cores
from tfgshare.runner.events import EventSink, warn
from tfgshare.runner.neighbours import Neighbours
from tfgshare.runner.stop import StopRequest, install_stop_signals
from tfgshare.runner.timing import StepTimer
from tfgshare.runner.tf_setup import (gpu_peak_mb, import_tensorflow_quietly, op_determinism,
                                      peak_memory)
from tfgshare.runner import train_dir as train_dirs
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


def train(config: TrainConfig, on_event: Callable[[dict], None] | None = None,
          stop_event: threading.Event | None = None) -> TrainResult:
    """Train ``config`` from its train_dir's latest checkpoint (or from scratch).

    Stops after ``max_number_of_steps`` (status "finished"), or, once
    ``stop_event`` is set or ``sample_only`` sampling is done, after the current
    step with a checkpoint (status "suspended"). Raises BadInputError or
    CheckpointError on bad flags or an unusable checkpoint.
    """
    config.check()
    train_dirs.refuse_unrelated(config.train_dir, config.events_file)
    began = time.perf_counter()
    import_tensorflow_quietly()
    stop_event = stop_event or StopRequest()
    sink = EventSink(config.events_file, on_event, config.job_id)
    Path(config.train_dir).mkdir(parents=True, exist_ok=True)
    with op_determinism(config.deterministic):
        from tfgshare.runner import graph as runner_graph

        not_applied = runner_graph.make_devices(config)
        if not_applied:
            warn(sink, not_applied)
        if config.in_gang:
            from tfgshare.runner import replicas
            return replicas.train_member(config, sink, stop_event)
        return _build_and_train(config, sink, stop_event, began)


def _build_and_train(config: TrainConfig, sink: EventSink,
                     stop_event: threading.Event, began: float) -> TrainResult:
    import tensorflow as tf

    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph

    start_s = _process_age_s()
    held = train_dirs.newest_held(config)   # another model's checkpoint: refused unchanged
    ckpt.claim(config.train_dir, config.epoch)   # no older attempt may save from now on
    if held is not None and held.step >= config.max_number_of_steps:
        return _already_finished(config, sink, held)
    candidates = ckpt.candidates(config.train_dir)
    tick = time.perf_counter()
    built, source = train_dirs.training_graph(config, sink)
    graph_s = time.perf_counter() - tick
    proto = runner_graph.session_config(config)
    with tf.compat.v1.Session(graph=built.graph, config=proto) as session:
        tick = time.perf_counter()
        # a restore sets every variable, so only a fresh start runs the initializers; it
        # starts the input stream in the same run, at the position the checkpoint holds
        restored = train_dirs.restore_newest_good(config, built, session, candidates, sink,
                                                  start_input=True)
        restore_s = time.perf_counter() - tick if restored else 0.0
        if restored is None:
            session.run(built.init_op)
            runner_graph.start_input(session, built)
            step = int(session.run(built.global_step))
        else:
            step = restored.global_step
            print(f"resuming from step {step} of {config.max_number_of_steps} "
                  f"({restored.path})", flush=True)
        latest = restored.path if restored else None
        sink.emit("started", global_step=step, restored=latest is not None,
                  device=",".join(built.devices), memory_fraction=config.memory_fraction)
        phases = {"start_s": start_s, "graph_s": graph_s, "graph_source": source,
                  "restore_s": restore_s, "restored_from": latest}
        return train_loop(config, built, session, sink, stop_event, step, latest, phases,
                          began)


def _already_finished(config: TrainConfig, sink: EventSink, held) -> TrainResult:
    """A run on a train dir whose checkpoint holds all its steps: say so, build nothing."""
    from tfgshare.runner import graph as runner_graph

    print(f"already finished: {config.train_dir} holds step {held.step} of "
          f"{config.max_number_of_steps}; nothing to do", flush=True)
    sink.emit("started", global_step=held.step, restored=True,
              device=",".join(runner_graph.tower_devices(config.num_gpus)),
              memory_fraction=config.memory_fraction)
    sink.emit("finished", step=held.step, loss=None)
    if EXIT_AT_FINAL_EVENT is not None:
        EXIT_AT_FINAL_EVENT(rp.EXIT_OK)
    return TrainResult("finished", rp.EXIT_OK, held.step, None, held.path, held.path, None)




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
               phases: dict | None = None, began: float | None = None) -> TrainResult:
    """Run ``built``'s steps in ``session`` from ``step`` until done or asked to stop.

    Samples, reports progress, checkpoints after the sample (on a fresh start only),
    periodically and at the end. ``latest`` is the checkpoint the session was
    restored from (None for a fresh start). ``phases``, when given, is sent as the
    ``start_phases`` event with the first step's time added. ``began`` (perf_counter
    time, default the loop's start) is when the run began, for its closing line.
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
    # (wall time, process CPU run, CPU wait, each thread's) when the sampled steps began
    window = None
    fetches = built.train_tensor
    key = built.step_key
    loss = None
    sample = None
    last_saved_step = step if latest else None
    last_saved_path = latest
    last_save_time = time.monotonic()
    run_start = tick = time.perf_counter()
    first_step = step

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
                               (tf.errors.OpError, OSError), lambda m: warn(sink, m))
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
            window = (time.time(), *cpu_times(), thread_times())
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
                    warn(sink, f"cannot write {SAMPLE_FILE}: {exc}; a resume samples again")
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
    took = time.perf_counter() - (run_start if began is None else began)
    where = Path(last_saved_path).parent if last_saved_path else train_dir
    if step >= total:
        done = f"{step - first_step} steps in {took:.1f} s"
        if first_step:
            done += f" (resumed at step {first_step}, now {step} of {total})"
        print(f"finished: {done}, checkpoint in {where}", flush=True)
        sink.emit("finished", step=step, loss=loss)
        if EXIT_AT_FINAL_EVENT is not None:
            EXIT_AT_FINAL_EVENT(rp.EXIT_OK)
        return TrainResult("finished", rp.EXIT_OK, step, loss, latest, last_saved_path,
                           sample, built.devices)
    requested = getattr(stop_event, "set_at", None)
    sink.emit("stop_phases", stop_wait_s=None if requested is None else stopped_at - requested,
              save_s=time.monotonic() - stopped_at)
    print(f"suspended at step {step} of {total} after {took:.1f} s, checkpoint in {where}; "
          "the same command resumes it", flush=True)
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
                  window: tuple, neighbours: Neighbours) -> dict:
    stats = timer.sample_stats()
    ran, waited = cpu_times()
    peak_mb, source = peak_memory(built.devices)
    remaining = remaining_steps * stats["step_time_mean_s"]
    return {**stats, "peak_memory_mb": peak_mb, "memory_source": source,
            "predicted_remaining_s": remaining, "predicted_total_s": elapsed_s + remaining,
            "window_start": window[0],
            # what it would use of its cores alone: its busiest thread's waits for a
            # core (a neighbour's start-up, a co-tenant) taken out (runner.cpu.solo_share)
            "cpu_util": solo_share(time.time() - window[0], ran - window[1], window[3],
                                   thread_times()),
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
        import_tensorflow_quietly()
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
        peak = gpu_peak_mb()
        print(f"tfgshare train: out of memory (peak {peak:.0f} MiB): {exc}".splitlines()[0],
              file=sys.stderr, flush=True)
        sink.emit("out_of_memory", peak_memory_mb=peak, limit_mb=None,
                  message=str(exc).splitlines()[0][:500])
        return rp.EXIT_OUT_OF_MEMORY
    return result.exit_code


def _fail(sink: EventSink, message: str, code: int) -> int:
    print(f"tfgshare train: {message}", file=sys.stderr, flush=True)
    sink.emit("error", message=message)
    return code


if __name__ == "__main__":
    sys.exit(main())
