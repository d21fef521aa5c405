"""One training attempt: start-up, the train loop, its saves and samples, its result.

``run`` is the one start-up sequence, for a job of one process and for a gang member
alike: claim the train dir (its chief), find the checkpoints to restore, build or
import the graph, open the session, restore or initialise, start the input stream,
send ``started``, then ``train_loop`` (``start_phases`` with the first step). A gang
member (``runner.replicas``) also starts its servers first, waits for its chief or
runs the replication set-up, and ends with its gang when the gang is lost.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import tensorflow as tf

from tfgshare.runner import checkpoint as ckpt
from tfgshare.runner import graph as runner_graph
from tfgshare.runner import protocol as rp
from tfgshare.runner import replicas
from tfgshare.runner import train_dir as train_dirs
from tfgshare.runner.config import TrainConfig
from tfgshare.runner.cpu import busiest_thread, cpu_times, solo_share, thread_times, usable_cores
from tfgshare.runner.events import EventSink, warn
from tfgshare.runner.neighbours import Neighbours
from tfgshare.runner.saving import periodic_save_due, save_patiently
from tfgshare.runner.tf_setup import peak_memory
from tfgshare.runner.timing import StepTimer, job_age_s, job_waited_s
from tfgshare.sampling import SamplePlan, plan_sampling

SAMPLE_FILE = rp.SAMPLE_FILE
FinalHook = Callable[[int], None]   # called with the exit code right after the final event


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


def run(config: TrainConfig, sink: EventSink, stop_event: threading.Event, began: float,
        at_final_event: FinalHook | None = None) -> TrainResult:
    """Run one attempt of ``config`` (checked, TensorFlow imported) to its result.

    ``began`` (perf_counter time) is when the run began, for its closing line;
    ``at_final_event``, when given, is called with the exit code right after the final
    event (``runner.main.EXIT_AT_FINAL_EVENT``).
    """
    not_applied = runner_graph.make_devices(config)
    if not_applied:
        warn(sink, not_applied)
    start_s = job_age_s()
    member = replicas.Member(config) if config.in_gang else None   # its servers listen now
    # another model's checkpoint is refused before the train dir changes (a gang's chief
    # refuses it at its restore)
    held = train_dirs.newest_held(config) if member is None else None
    candidates: list[str] = []
    if config.is_chief:
        ckpt.claim(config.train_dir, config.epoch)   # no older attempt may save from now on
        if held is not None and held.step >= config.max_number_of_steps:
            return _already_finished(config, sink, held, at_final_event)
        candidates = ckpt.candidates(config.train_dir)
    tick = time.perf_counter()
    if member is None:
        built, source = train_dirs.training_graph(config, sink)
    else:   # a gang member's graph is built each time (it has no graph file)
        built, source = runner_graph.build_training_graph(config), "built"
    phases = {"start_s": start_s, "graph_s": time.perf_counter() - tick,
              "graph_source": source, "runner_wait_s": job_waited_s()}
    if member is None:
        session = tf.compat.v1.Session(graph=built.graph,
                                       config=runner_graph.session_config(config))
        # closed at the end; a gang member's session is not (it can block the exit)
        opened = session
    else:
        session = tf.compat.v1.Session(member.target, graph=built.graph,
                                       config=member.session_config)
        opened = contextlib.nullcontext(session)
    with opened:
        return _start(config, built, session, sink, stop_event, member, candidates, phases,
                      began, at_final_event)


def _start(config: TrainConfig, built, session, sink: EventSink, stop_event: threading.Event,
           member: replicas.Member | None, candidates: list[str], phases: dict,
           began: float, at_final_event: FinalHook | None) -> TrainResult:
    """Restore or initialise ``session``, start the input, send ``started``, train."""
    tick = time.perf_counter()
    restored = None
    if member is None:
        # a restore sets every variable, so only a fresh start runs the initializers; it
        # starts the input stream in the same run, at the position the checkpoint holds
        restored = train_dirs.restore_newest_good(config, built, session, candidates, sink,
                                                  start_input=True)
    elif config.is_chief:
        restored = train_dirs.restore_newest_good(config, built, session, candidates, sink)
    elif not member.wait_until_ready(session, built, stop_event):
        sink.emit("suspended", step=0)
        return TrainResult("suspended", rp.EXIT_SUSPENDED, 0, None, None, None, None,
                           built.devices)
    phases["restore_s"] = time.perf_counter() - tick if restored else 0.0
    phases["init_s"] = phases["input_s"] = 0.0
    if member is not None:
        if restored is None and config.is_chief:
            tick = time.perf_counter()
            session.run(built.init_op)
            phases["init_s"] = time.perf_counter() - tick
        member.start_replication(session, built)
        runner_graph.start_input(session, built)
        step = int(session.run(built.global_step))
    elif restored is None:
        tick = time.perf_counter()
        session.run(built.init_op)
        phases["init_s"] = time.perf_counter() - tick
        runner_graph.start_input(session, built)
        step = int(session.run(built.global_step))
        phases["input_s"] = time.perf_counter() - tick - phases["init_s"]
    else:
        step = restored.global_step
        print(f"resuming from step {step} of {config.max_number_of_steps} "
              f"({restored.path})", flush=True)
    latest = restored.path if restored else None
    sink.emit("started", global_step=step, restored=latest is not None,
              device=",".join(built.devices), memory_fraction=config.memory_fraction)
    phases["restored_from"] = latest
    if member is None:
        return train_loop(config, built, session, sink, stop_event, step, latest, phases,
                          began, at_final_event)
    print(f"worker {config.task} of {config.worker_replicas} "
          f"({'chief' if config.is_chief else 'not chief'}) at step {step}", flush=True)
    done = member.stop_after_grace(stop_event, built, session, sink)
    try:
        return train_loop(config, built, session, sink, stop_event, step, latest, phases,
                          at_final_event=at_final_event)
    except tf.errors.OpError as exc:
        if config.is_chief:
            raise
        return _gang_lost(config, sink, built, exc, stop_event)
    finally:
        done.set()


def _already_finished(config: TrainConfig, sink: EventSink, held,
                      at_final_event: FinalHook | None) -> TrainResult:
    """A run on a train dir whose checkpoint holds all its steps: say so, build nothing."""
    print(f"already finished: {config.train_dir} holds step {held.step} of "
          f"{config.max_number_of_steps}; nothing to do", flush=True)
    sink.emit("started", global_step=held.step, restored=True,
              device=",".join(runner_graph.tower_devices(config.num_gpus)),
              memory_fraction=config.memory_fraction)
    sink.emit("finished", step=held.step, loss=None)
    if at_final_event is not None:
        at_final_event(rp.EXIT_OK)
    return TrainResult("finished", rp.EXIT_OK, held.step, None, held.path, held.path, None)


def _gang_lost(config: TrainConfig, sink: EventSink, built, exc, stop_event) -> TrainResult:
    """A worker's step failed because its chief or a parameter server went away."""
    last = ckpt.latest_checkpoint(config.train_dir)
    saved_step = int(last.rsplit("-", 1)[1]) if last else 0
    if saved_step >= config.max_number_of_steps:   # the chief finished the job
        sink.emit("finished", step=saved_step, loss=None)
        return TrainResult("finished", rp.EXIT_OK, saved_step, None, None, last, None,
                           built.devices)
    if stop_event.is_set() or config.sample_only:   # the chief stopped first: not a loss
        sink.emit("suspended", step=saved_step)
        return TrainResult("suspended", rp.EXIT_SUSPENDED, saved_step, None, None, last, None,
                           built.devices)
    first = str(getattr(exc, "message", exc)).strip().splitlines()
    raise rp.RunnerError(f"worker {config.task} lost its gang (chief or parameter server "
                         f"gone): {type(exc).__name__}: {first[0] if first else ''}")


def train_loop(config: TrainConfig, built, session, sink: EventSink,
               stop_event: threading.Event, step: int, latest: str | None,
               phases: dict | None = None, began: float | None = None,
               at_final_event: FinalHook | None = None) -> TrainResult:
    """Run ``built``'s steps in ``session`` from ``step`` until done or asked to stop.

    Samples, reports progress, checkpoints after the sample (on a fresh start only),
    periodically and at the end. ``latest`` is the checkpoint the session was
    restored from (None for a fresh start). ``phases``, when given, is sent as the
    ``start_phases`` event with the first step's time added. ``began`` (perf_counter
    time, default the loop's start) is when the run began, for its closing line.
    ``at_final_event``, when given, is called with the exit code right after the final
    event (``finished`` or ``suspended``).
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
            sample = {**_sample_event(timer, built, total - step, now - run_start, window,
                                      neighbours), "step": step}
            sink.emit("sample", **sample)
            if config.is_chief:   # a gang's chief writes its sample file
                try:
                    _write_json(train_dir / SAMPLE_FILE, {**sample,
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
        if step < total and periodic_save_due(config, step, last_save_time):
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
        if at_final_event is not None:
            at_final_event(rp.EXIT_OK)
        return TrainResult("finished", rp.EXIT_OK, step, loss, latest, last_saved_path,
                           sample, built.devices)
    requested = getattr(stop_event, "set_at", None)
    if requested is not None and requested > stopped_at:
        requested = None   # asked after the run had stopped on its own (its sample done)
    sink.emit("stop_phases", stop_wait_s=None if requested is None else stopped_at - requested,
              save_s=time.monotonic() - stopped_at)
    print(f"suspended at step {step} of {total} after {took:.1f} s, checkpoint in {where}; "
          "the same command resumes it", flush=True)
    sink.emit("suspended", step=step)
    if at_final_event is not None:
        at_final_event(rp.EXIT_SUSPENDED)
    return TrainResult("suspended", rp.EXIT_SUSPENDED, step, loss, latest, last_saved_path,
                       sample, built.devices)


def _sample_event(timer: StepTimer, built, remaining_steps: int, elapsed_s: float,
                  window: tuple, neighbours: Neighbours) -> dict:
    stats = timer.sample_stats()
    ran, _ = cpu_times()
    threads = thread_times()
    busiest_ran, busiest_waited = busiest_thread(window[3], threads)
    peak_mb, source = peak_memory(built.devices)
    remaining = remaining_steps * stats["step_time_mean_s"]
    return {**stats, "peak_memory_mb": peak_mb, "memory_source": source,
            "predicted_remaining_s": remaining, "predicted_total_s": elapsed_s + remaining,
            "window_start": window[0],
            # what it would use of its cores alone: its busiest thread's waits for a
            # core (a neighbour's start-up, a co-tenant) taken out (runner.cpu.solo_share)
            "cpu_util": solo_share(time.time() - window[0], ran - window[1], window[3],
                                   threads),
            # over the sampled steps, the time its busiest thread waited for a core (the
            # steps' critical path: threads that wait at once would not all run at once),
            # and the longer of its CPU time over the cores it may use and that thread's
            # run: its steps alone are that much shorter, and no shorter than that
            # (tfgshare.policies.prediction.solo_step_s)
            "cpu_wait_s": max(0.0, busiest_waited),
            "cpu_run_s": max(max(0.0, ran - window[1]) / usable_cores(), busiest_ran),
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
