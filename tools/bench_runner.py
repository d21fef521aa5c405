"""Benchmark the job runner: its per-step overhead, and the cost of its moves.

1. Overhead: the runner's training loop and a bare ``session.run(train_op)``
   loop over the same graph and session, in alternating blocks; the median
   step time of each and the overhead of the runner (goal: at most 3%).
2. Moves, for the paper's four models at their default image sizes:
   - resume, request to first finished step: a runner process started on a
     suspended train dir, until its first progress event; with ``--before REF``
     also the runner of git revision REF (e.g. the code before a change), side by side;
   - the floor: a plain tf.compat.v1.train.Saver restore (ops built beforehand)
     plus the first step in a new session;
   - suspend: the runner's checkpoint save against a plain Saver save of the same
     variables, both writing a new numbered checkpoint and deleting the one they drop,
     in pairs, each pair in the other order than the last; medians of the wall and
     the CPU seconds (the wall time of one save swings with the machine: see
     ``bench_floor_and_suspend``).
3. With ``--migrate``: the end-to-end migration through a live agent. A local
   coordinator (default policy) and one agent with two virtual GPUs (as the demo
   and the live tests start them); one job per model is submitted, and once it
   trains after its sample (and the agent's spare runners are ready) it is
   migrated to the other GPU (what ``tfgshare migrate JOB GPU`` sends). Timed from
   the request: suspended (step in flight ended, checkpoint saved), runner exit
   reported (the coordinator starts the job on the target), and the first
   finished step there, with the phases the runners report (stop wait, save,
   start, graph, restore, first step); beside it the floor (a plain Saver restore
   plus one step in a new session, on one pinned core with one thread, as the
   agent runs a job).
4. With ``--suspend-only``: the runner's save against a Saver save, ``--repeats``
   alternating pairs per model, the first save of each (a new run signature) apart,
   each save's wall and CPU seconds, the time the process waited for a core, and the
   part of the runner's save after its SaveV2 run (pointer update, deletion).
5. With ``--grappler-only``: first and steady step times (wall and CPU seconds) of one
   graph under TensorFlow's default grappler passes, the runner's light CPU passes
   (``graph.CPU_GRAPH_PASSES``) and grappler off, side by side.

Usage: python tools/bench_runner.py [--overhead-only | --moves-only | --migrate | --grappler-only
       | --suspend-only]
       [--models ...] [--before REF]
Prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tfgshare.runner import main as runner  # noqa: E402
from tfgshare.runner.config import TrainConfig  # noqa: E402
from tfgshare.runner.events import EventSink  # noqa: E402


def _session(built, config):
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    session = tf.compat.v1.Session(graph=built.graph,
                                   config=runner_graph.session_config(config))
    session.run(built.init_op)
    runner_graph.start_input(session, built)
    return session


def bench_overhead(model: str, batch: int, blocks: int, steps: int, work: Path,
                   threads: int = 1) -> dict:
    """Median step time of the runner loop vs a bare loop, alternating blocks.

    Wall and CPU seconds (the process's, from one step's end to the next one's, so
    the runner's own work between steps counts) per step; ``threads``: TensorFlow's
    intra- and inter-op threads (1: as the agent runs a job; 0: its default). Each runner block is a ``train_loop`` call that ends with a checkpoint (not
    counted in step times); sampling is off so blocks do not also checkpoint
    after their sample.
    """
    from tfgshare.runner import attempt
    from tfgshare.runner import graph as runner_graph

    config = TrainConfig(train_dir=str(work / f"overhead-{model}"), model_name=model,
                         batch_size=batch, optimizer="momentum", learning_rate=0.01,
                         save_interval_secs=0, log_every_n_steps=10, num_sample_steps=0,
                         events_file=str(work / f"overhead-{model}.jsonl"),
                         max_number_of_steps=10**9, intra_op_threads=threads,
                         inter_op_threads=threads)
    config.check()
    Path(config.train_dir).mkdir(parents=True)
    built = runner_graph.build_training_graph(config)
    session = _session(built, config)
    runner_times: list[float] = []
    bare_times: list[float] = []
    runner_cpu: list[float] = []
    bare_cpu: list[float] = []

    sink = EventSink(config.events_file, lambda event: None, "bench")
    step = 0
    key = built.step_key
    for _ in range(3):   # warm-up
        session.run(built.train_tensor)
    for _ in range(blocks):
        # the bare loop feeds the same step key, so both draw fresh dropout masks
        # each step (as TF-Slim's stateful random ops would)
        tick, cpu_tick = time.perf_counter(), time.process_time()
        for i in range(steps):
            session.run(built.train_tensor, {key: i})
            now, cpu_now = time.perf_counter(), time.process_time()
            bare_times.append(now - tick)
            bare_cpu.append(cpu_now - cpu_tick)
            tick, cpu_tick = now, cpu_now
        # the runner's own loop; it reports each step's time in its timer
        times: list[float] = []
        cpu_marks: list[float] = []
        config.max_number_of_steps = step + steps
        timer_add = attempt.StepTimer.add

        def recording_add(self, seconds, _add=timer_add):
            times.append(seconds)
            cpu_marks.append(time.process_time())
            return _add(self, seconds)

        attempt.StepTimer.add = recording_add
        try:
            result = attempt.train_loop(config, built, session, sink, threading.Event(), step,
                                        latest=None)
        finally:
            attempt.StepTimer.add = timer_add
        step = result.global_step
        runner_times.extend(times)
        runner_cpu.extend(b - a for a, b in zip(cpu_marks, cpu_marks[1:]))
    session.close()
    bare, ours = statistics.median(bare_times), statistics.median(runner_times)
    bare_c, ours_c = statistics.median(bare_cpu), statistics.median(runner_cpu)
    return {"model": model, "batch": batch, "steps": len(bare_times),
            "bare_ms": bare * 1e3, "runner_ms": ours * 1e3,
            "overhead_pct": (ours / bare - 1) * 100,
            "bare_cpu_ms": bare_c * 1e3, "runner_cpu_ms": ours_c * 1e3,
            "cpu_overhead_pct": (ours_c / bare_c - 1) * 100}


def _runner(src: Path, train_dir: Path, model: str, steps: int, events: Path,
            warm: bool = False, cpu: list | None = None) -> float:
    """Run the runner of source tree ``src`` until step ``steps``; seconds to its first step.

    With ``warm``, a warm runner is started and waited for first, and the time counts
    from handing it the job. ``cpu``, when given, gets the CPU seconds the runner process
    spent over the same span appended.
    """
    flags = ["--train_dir", str(train_dir),
             "--model_name", model, "--batch_size", "1", "--optimizer", "momentum",
             "--learning_rate", "0.001", "--max_number_of_steps", str(steps),
             "--save_interval_secs", "0", "--num_sample_steps", "0", "--log_every_n_steps", "1",
             "--events_file", str(events)]
    env = {**os.environ, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "3",
           "CUDA_VISIBLE_DEVICES": ""}
    offset = events.stat().st_size if events.exists() else 0
    cmd = [sys.executable, "-m", "tfgshare.runner", *(["--warm"] if warm else flags)]
    if warm:
        from tfgshare.runner.protocol import warm_job_line
        from tfgshare.runner.warm import READY

        proc = subprocess.Popen(cmd, cwd=src, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while proc.stdout.readline().strip() != READY:
            if proc.poll() is not None:
                raise RuntimeError(f"warm runner failed: {proc.stderr.read()[-2000:]}")
        cpu_start = _process_cpu(proc.pid)
        start = time.perf_counter()
        proc.stdin.write(warm_job_line(flags, {}, None))
        proc.stdin.close()
    else:
        start, cpu_start = time.perf_counter(), 0.0
        proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    first = None
    while proc.poll() is None and first is None:
        from tfgshare.runner.protocol import read_events
        new, _ = read_events(events, offset)
        if any(e["event"] == "progress" for e in new):
            first = time.perf_counter() - start
            if cpu is not None:
                cpu.append(_process_cpu(proc.pid) - cpu_start)
        time.sleep(0.02)
    err = proc.stderr.read()
    proc.wait(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"runner of {src} failed ({proc.returncode}): {err[-2000:]}")
    return first if first is not None else time.perf_counter() - start


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_resume(model: str, src: Path, work: Path, tag: str, warm: bool = False) -> dict:
    """A first attempt of one step, then the timed resumes to the second (and third, warm)."""
    train_dir, events = work / f"{tag}-{model}", work / f"{tag}-{model}.jsonl"
    _runner(src, train_dir, model, 1, events)
    seconds = _runner(src, train_dir, model, 2, events)
    phases = [e for e in _events(events) if e["event"] == "start_phases"]
    warm_cpu: list[float] = []
    warm_s = _runner(src, train_dir, model, 3, events, warm=True, cpu=warm_cpu) if warm else None
    warm_phases = [e for e in _events(events) if e["event"] == "start_phases"][len(phases):]
    return {"resume_s": seconds, "phases": phases[-1] if phases else None, "warm_s": warm_s,
            "warm_phases": warm_phases[-1] if warm and warm_phases else None,
            "warm_cpu_s": warm_cpu[0] if warm_cpu else None}


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bench_floor_and_suspend(model: str, work: Path, repeats: int = 4,
                            threads: int = 0) -> dict:
    """Saver restore + first step in a new session (the floor); runner save vs Saver save.

    Both sessions use the runner's session config (``graph.session_config``). Both
    writers run one SaveV2 over the same tensors, and each save writes a new numbered
    checkpoint and deletes the one it drops (``max_to_keep=1``; the Saver with
    ``global_step``, as TF-Slim's training loop saves), so the last checkpoint stays
    readable while the next is written, which a resume needs. The first save of each (a
    new run signature) is kept apart, then one pair untimed (the first saves of a process
    were often slow for either writer); then ``repeats`` pairs (rounded up to even), each
    in the other order than the last, so each writer goes first in half of them: on this
    machine the first save of a pair is often the slower one whichever writer it is, and
    with an odd number of pairs that alone decided the medians (docs/benchmarks.md,
    issue 11). For each save: wall and CPU seconds (all threads of this process), the
    seconds its threads waited for a core, and whether it went first in its pair; for
    the runner's, the part after its SaveV2 run (pointer update and deletion of the
    dropped checkpoint).
    ``threads``: TensorFlow's intra- and inter-op threads (0: its default).
    """
    import tensorflow as tf

    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph
    from tfgshare.runner.cpu import cpu_times

    config = TrainConfig(train_dir=str(work / f"floor-{model}"), model_name=model, batch_size=1,
                         optimizer="momentum", learning_rate=0.001, max_to_keep=1,
                         intra_op_threads=threads, inter_op_threads=threads)
    config.check()
    Path(config.train_dir).mkdir(parents=True)
    built = runner_graph.build_training_graph(config)
    prefix = str(work / f"saver-{model}" / "model.ckpt")
    with built.graph.as_default():
        saver = tf.compat.v1.train.Saver(var_list=built.variables, max_to_keep=1)
    session = _session(built, config)
    _timed_step(session, built)
    runs = {"runner": [], "saver": []}   # (wall s, CPU s, waited s, went first) of each save
    pointers = []
    publish = ckpt.publish

    def timed_publish(*args, **kwargs):
        start = time.perf_counter()
        try:
            return publish(*args, **kwargs)
        finally:
            pointers.append(time.perf_counter() - start)

    def timed(writer: str, save, first: bool) -> None:
        start, (cpu, waited) = time.perf_counter(), cpu_times()
        save()
        cpu_end, waited_end = cpu_times()
        runs[writer].append((time.perf_counter() - start, cpu_end - cpu, waited_end - waited,
                             first))

    def runner_save(step: int, first: bool = False) -> None:
        timed("runner", lambda: built.checkpoint.save(session, step), first)

    def saver_save(step: int, first: bool = False) -> None:
        with built.graph.as_default():
            timed("saver", lambda: saver.save(session, prefix, global_step=step,
                                              write_meta_graph=False), first)

    ckpt.publish = timed_publish
    try:
        runner_save(1)
        saver_save(1)
        first_saves = {writer: times.pop()[0] for writer, times in runs.items()}
        saver_save(2)   # a warm-up pair, the other way round: the first saves of a
        runner_save(2)  # process were often slow for either writer
        for times in runs.values():
            times.clear()
        pointers.clear()
        for step in range(3, 3 + repeats + repeats % 2):
            pair = (saver_save, runner_save) if step % 2 else (runner_save, saver_save)
            for i, save in enumerate(pair):
                save(step, first=i == 0)
    finally:
        ckpt.publish = publish
    session.close()
    size_mb = sum(p.stat().st_size for p in Path(config.train_dir).glob("model.ckpt-*")) / 2**20

    session = _session(built, config)
    with built.graph.as_default():
        start, cpu_start = time.perf_counter(), time.process_time()
        saver.restore(session, saver.last_checkpoints[-1])
        restore_s = time.perf_counter() - start
    first_step_s = _timed_step(session, built)
    floor_cpu_s = time.process_time() - cpu_start
    session.close()

    def median(writer: str, i: int, first: bool | None = None) -> float:
        return statistics.median(t[i] for t in runs[writer] if first in (None, t[3]))

    return {"size_mb": size_mb, "save_s": median("runner", 0),
            "saver_save_s": median("saver", 0), "saver_restore_s": restore_s,
            "pointer_s": statistics.median(pointers),
            "saves": [t[0] for t in runs["runner"]],
            "saver_saves": [t[0] for t in runs["saver"]],
            "save_cpus": [t[1] for t in runs["runner"]],
            "saver_save_cpus": [t[1] for t in runs["saver"]],
            "first_save_s": first_saves["runner"], "saver_first_save_s": first_saves["saver"],
            "floor_s": restore_s + first_step_s, "floor_cpu_s": floor_cpu_s,
            "save_cpu_s": median("runner", 1), "saver_save_cpu_s": median("saver", 1),
            "save_wait_s": median("runner", 2), "saver_save_wait_s": median("saver", 2),
            "by_position": {(writer, first): median(writer, 0, first)
                            for writer in runs for first in (True, False)}}


def print_suspends(models: list[str], work: Path, repeats: int) -> None:
    """Runner save against Saver save for each model, ``repeats`` alternating pairs."""
    print("| model | load avg | checkpoint MB | first save s: runner / Saver "
          "| later saves, runner s (CPU s) | Saver s (CPU s) | runner median s "
          "| of which pointer and deletion s | Saver median s | runner / Saver "
          "| CPU s median: runner / Saver | CPU ratio "
          "| waited for a core s median: runner / Saver "
          "| save s, first in pair: runner / Saver; second: runner / Saver |")
    print("|---" * 14 + "|")
    for model in models:
        load = os.getloadavg()[0]
        r = bench_floor_and_suspend(model, work, repeats=repeats)
        _remove(work, model)
        each = ", ".join(f"{v:.2f} ({c:.2f})" for v, c in zip(r["saves"], r["save_cpus"]))
        saver_each = ", ".join(f"{v:.2f} ({c:.2f})"
                               for v, c in zip(r["saver_saves"], r["saver_save_cpus"]))
        print(f"| {model} | {load:.1f} | {r['size_mb']:.0f} | {r['first_save_s']:.2f} / "
              f"{r['saver_first_save_s']:.2f} | {each} | {saver_each} | {r['save_s']:.2f} "
              f"| {r['pointer_s']:.3f} | {r['saver_save_s']:.2f} "
              f"| {r['save_s'] / r['saver_save_s']:.2f}x "
              f"| {r['save_cpu_s']:.2f} / {r['saver_save_cpu_s']:.2f} "
              f"| {r['save_cpu_s'] / r['saver_save_cpu_s']:.2f}x "
              f"| {r['save_wait_s']:.2f} / {r['saver_save_wait_s']:.2f} "
              f"| {_by_position(r)} |", flush=True)


def bench_grappler(model: str, work: Path, blocks: int, steps: int) -> dict:
    """First step and steady step time of one graph under three grappler settings.

    TensorFlow's default passes, the runner's light CPU passes (``graph.CPU_GRAPH_PASSES``)
    and grappler off, each in its own session of the same graph (one thread, as the
    agent runs a job), first steps one after the other, then ``blocks`` rounds of
    ``steps`` steps each, the settings in turn (the order rotating each round).
    Wall and CPU seconds per step; medians.
    """
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    config = TrainConfig(train_dir=str(work / f"grappler-{model}"), model_name=model,
                         batch_size=1, optimizer="momentum", learning_rate=0.001,
                         intra_op_threads=1, inter_op_threads=1)
    config.check()
    built = runner_graph.build_training_graph(config)
    default = tf.compat.v1.ConfigProto()
    default.CopyFrom(runner_graph.session_config(config))
    default.graph_options.rewrite_options.Clear()
    light = tf.compat.v1.ConfigProto()
    light.CopyFrom(default)
    runner_graph.light_graph_passes(light)
    off = tf.compat.v1.ConfigProto()
    off.CopyFrom(default)
    off.graph_options.rewrite_options.disable_meta_optimizer = True
    names = ("default", "light", "off")
    sessions, first, losses = {}, {}, {}
    for name, proto in zip(names, (default, light, off)):
        session = tf.compat.v1.Session(graph=built.graph, config=proto)
        session.run(built.init_op)
        runner_graph.start_input(session, built)
        wall, cpu = time.perf_counter(), time.process_time()
        losses[name] = float(session.run(built.train_tensor, {built.step_key: 0}))
        first[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        sessions[name] = session
    walls = {name: [] for name in names}
    cpus = {name: [] for name in names}
    for block in range(blocks):
        for name in names[block % 3:] + names[:block % 3]:
            for i in range(steps):
                wall, cpu = time.perf_counter(), time.process_time()
                sessions[name].run(built.train_tensor, {built.step_key: 1 + block * steps + i})
                walls[name].append(time.perf_counter() - wall)
                cpus[name].append(time.process_time() - cpu)
    for session in sessions.values():
        session.close()
    return {"model": model, "first": first, "losses": losses,
            "wall": {n: statistics.median(v) for n, v in walls.items()},
            "cpu": {n: statistics.median(v) for n, v in cpus.items()},
            "steps": blocks * steps}


def print_grappler(models: list[str], work: Path, blocks: int, steps: int) -> None:
    """Run ``bench_grappler`` for each model on one pinned core; print the table."""
    from tfgshare.agent.supervisor import pin_threads

    print("| model | load avg | steps each | first step s (CPU s): default / light / off "
          "| steady step s (CPU s): default / light / off | light / default (CPU) "
          "| first loss default / light / off |")
    print("|---" * 7 + "|")
    everything = os.sched_getaffinity(0)
    pin_threads(os.getpid(), (min(everything),))   # as the agent runs a job: one core
    try:
        for model in models:
            load = os.getloadavg()[0]
            r = bench_grappler(model, work, blocks, steps)
            names = ("default", "light", "off")
            first = " / ".join(f"{r['first'][n][0]:.2f} ({r['first'][n][1]:.2f})" for n in names)
            steady = " / ".join(f"{r['wall'][n]:.3f} ({r['cpu'][n]:.3f})" for n in names)
            losses = " / ".join(f"{r['losses'][n]:.6f}" for n in names)
            print(f"| {model} | {load:.1f} | {r['steps']} | {first} | {steady} "
                  f"| {r['cpu']['light'] / r['cpu']['default']:.3f} | {losses} |", flush=True)
    finally:
        pin_threads(os.getpid(), tuple(everything))


# steps of a migrated job: its sample (at most a tenth of them) plus enough left that it
# still trains when its spare runners are ready (the replacement spare imports TensorFlow)
MIGRATE_STEPS = {"alexnet_v2": 300, "resnet_v1_50": 80, "inception_v3": 60, "vgg_16": 40}
NODE = "n1"


def bench_migrate(model: str, work: Path, timeout_s: float = 1200.0,
                  spare_wait_s: float | None = None) -> dict:
    """Migrate one job of ``model`` between the two virtual GPUs of a live agent; its times.

    ``spare_wait_s``: the agent's ``--spare-wait`` (None: its default)."""
    from tfgshare.localcluster import LocalCluster
    from tfgshare.schema import JobSpec

    root = work / f"migrate-{model}"
    cluster = LocalCluster(root)    # the default policy with its default parameters
    spec = JobSpec(model_name=model, name=f"migrate-{model}", batch_size=1,
                   max_number_of_steps=MIGRATE_STEPS.get(model, 5000), optimizer="momentum",
                   learning_rate=0.001,
                   extra=["--log_every_n_steps", "1", "--save_interval_secs", "0"])
    end = time.monotonic() + timeout_s
    try:
        cluster.start_coordinator()
        cluster.start_agent(NODE, "2x16GiB", threads=1, extra=None if spare_wait_s is None
                            else ["--spare-wait", f"{spare_wait_s:g}"])
        cluster.wait_nodes({NODE})
        with cluster.client(timeout_s=30) as client:
            _until(end, "two spare runners", lambda: _spares_ready(root) >= 2)
            (job,) = client.submit([spec])
            job_dir = root / "agents" / NODE / job

            def trains_after_sample():
                info = _job_state(client, job)
                if info["state"] != "running" or info["attempt"] < 2:
                    return None
                events = _attempt_events(job_dir, info["attempt"])
                return info if any(e["event"] == "progress" for e in events) else None

            info = _until(end, "the job to train after its sample", trains_after_sample)
            # a spare per GPU again (each start took one; its replacement imports meanwhile)
            _until(end, "the spare runners", lambda: _spares_ready(root) >= 2 + info["attempt"])
            info = client.job(job)
            if info["state"] != "running":
                raise RuntimeError(f"{job} is {info['state']} before its migration")
            source, attempt = info["fragments"][0][0], info["attempt"]
            target = f"{NODE}:1" if source == f"{NODE}:0" else f"{NODE}:0"
            requested, load = time.time(), os.getloadavg()[0]
            client.migrate(job, target)
            _until(end, "a step on the target", lambda: any(
                e["event"] == "progress" for e in _attempt_events(job_dir, attempt + 1)))
            lines = client.logs(job)
            client.cancel(job)
        before = _attempt_events(job_dir, attempt)
        after = _attempt_events(job_dir, attempt + 1)
    finally:
        cluster.stop_all(timeout_s=20)
    suspend_line = _log_time(lines, "suspend to migrate", requested)
    migrated_line = _log_time(lines, "migrated on", requested)
    suspended = _first(before, "suspended")
    stop = _first(before, "stop_phases")
    saved = [e for e in before if e["event"] == "checkpoint"][-1]
    started, phases = _first(after, "started"), _first(after, "start_phases")
    first_step = _first(after, "progress")
    return {"job": job, "from": source, "to": target, "size_mb": saved["size_mb"], "load": load,
            "received_s": suspend_line - requested,
            "suspended_s": suspended["time"] - requested,
            "stop_wait_s": stop["stop_wait_s"], "save_s": saved["seconds"],
            "exit_s": migrated_line - suspended["time"],
            "running_s": migrated_line - requested,
            "started_s": started["time"] - requested,
            "first_step_at_s": first_step["time"] - requested,
            "resume_s": first_step["time"] - migrated_line,
            "start_s": phases["start_s"], "graph_s": phases["graph_s"],
            "graph_source": phases["graph_source"], "restore_s": phases["restore_s"],
            "first_step_s": phases["first_step_s"]}


def _until(end: float, what: str, pred, every: float = 0.2):
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


def _spares_ready(root: Path) -> int:
    """How many spare runners of the agent have said they are ready, so far."""
    from tfgshare.runner.protocol import WARM_READY

    log = root / "agents" / NODE / "spare-runner.log"
    return log.read_text(errors="replace").count(WARM_READY) if log.exists() else 0


def _job_state(client, job: str) -> dict:
    info = client.job(job)
    if info["state"] in ("failed", "cancelled", "finished"):
        raise RuntimeError(f"{job} {info['state']} before its migration: {info['reason']}")
    return info


def _attempt_events(job_dir: Path, attempt: int) -> list[dict]:
    path = job_dir / f"attempt-{attempt}.events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:   # a line being written
            break
    return out


def _first(events: list[dict], name: str) -> dict:
    found = [e for e in events if e["event"] == name]
    if not found:
        raise RuntimeError(f"no {name} event in {[e['event'] for e in events]}")
    return found[0]


def _log_time(lines: list[str], text: str, near: float) -> float:
    """The wall time of the first coordinator log line holding ``text`` after ``near``
    (lines start with the local time of day, HH:MM:SS.mmm)."""
    day = time.localtime(near)
    midnight = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
    for line in lines:
        stamp, _, rest = line.partition(" ")
        if text not in rest:
            continue
        hours, minutes, seconds = stamp.split(":")
        at = midnight + int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        if at < near - 12 * 3600:   # past midnight
            at += 86400
        if at >= near - 1.0:        # the log's clock is read to the millisecond
            return at
    raise RuntimeError(f"no log line with {text!r} in {lines[-10:]}")


def print_migrations(models: list[str], work: Path,
                     spare_waits: list[float | None] | None = None) -> None:
    """Migrate a job of each model through a live agent; print the table.

    ``spare_waits``: the agent's ``--spare-wait`` values to run each model with, in turn
    (None: once, with its default)."""
    from tfgshare.agent.supervisor import pin_threads

    # the step in flight: the runner's stop_wait_s, from the signal's arrival (read on a
    # wakeup fd) to the end of the step; "rest" is what of "suspended" is neither it nor
    # the save (the coordinator's and agent's relay, the signal's delivery)
    print("| model | spare wait s | load avg | checkpoint MB | request -> suspended s "
          "| of which step in flight s | rest s | save s | exit s "
          "| request -> running on target s | start s | graph s (source) "
          "| restore s | first step s | request -> first step on target s "
          "| resume: running on target -> first step s | floor: Saver restore + first step s "
          "| resume / floor "
          "| floor's saves, one core: first save s runner / Saver; later save s runner / Saver |")
    print("|---" * 19 + "|")
    for model, wait in [(m, w) for m in models for w in (spare_waits or [None])]:
        m = bench_migrate(model, work, spare_wait_s=wait)
        everything = os.sched_getaffinity(0)
        pin_threads(os.getpid(), (min(everything),))   # as the agent runs a job: one core
        try:
            floor = bench_floor_and_suspend(model, work, repeats=1, threads=1)
        finally:
            pin_threads(os.getpid(), tuple(everything))
        _remove(work, model)
        wait_s = m["stop_wait_s"]
        rest = None if wait_s is None else m["suspended_s"] - m["save_s"] - wait_s
        print(f"| {model} | {'default' if wait is None else f'{wait:g}'} | {m['load']:.1f} | "
              f"{m['size_mb']:.0f} | {m['suspended_s']:.1f} | "
              f"{_opt(wait_s)} | "
              f"{_opt(rest)} | "
              f"{m['save_s']:.2f} | "
              f"{m['exit_s']:.2f} | {m['running_s']:.1f} | {m['start_s']:.2f} | "
              f"{m['graph_s']:.2f} ({m['graph_source']}) | {m['restore_s']:.2f} | "
              f"{m['first_step_s']:.2f} | {m['first_step_at_s']:.1f} | {m['resume_s']:.2f} | "
              f"{floor['floor_s']:.2f} | {m['resume_s'] / floor['floor_s']:.1f}x | "
              f"{floor['first_save_s']:.2f} / {floor['saver_first_save_s']:.2f}; "
              f"{floor['save_s']:.2f} / {floor['saver_save_s']:.2f} |", flush=True)


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _remove(work: Path, model: str) -> None:
    """Delete a model's train dirs and checkpoints (vgg_16's are a GB each)."""
    import shutil

    for name in (f"migrate-{model}", f"floor-{model}", f"saver-{model}", f"now-{model}",
                 f"before-{model}"):
        shutil.rmtree(work / name, ignore_errors=True)


def _source_tree(ref: str, work: Path) -> Path:
    """The files of git revision ``ref`` of this repository, unpacked under ``work``."""
    tree = work / f"src-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def _timed_step(session, built) -> float:
    start = time.perf_counter()
    session.run(built.train_tensor)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Run the runner benchmarks and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead-only", action="store_true")
    parser.add_argument("--moves-only", action="store_true")
    parser.add_argument("--suspend-only", action="store_true",
                        help="only the runner's save against a Saver save (--models, --repeats)")
    parser.add_argument("--repeats", type=int, default=6,
                        help="with --suspend-only or --moves-only: alternating pairs of "
                             "saves per model (rounded up to even)")
    parser.add_argument("--grappler-only", action="store_true",
                        help="only the first and steady steps under grappler's default, "
                             "light CPU and no passes (--models, --blocks, --steps)")
    parser.add_argument("--spare-wait", type=float, action="append", metavar="S",
                        help="with --migrate: the agent's --spare-wait, repeatable to run "
                             "each model with each value in turn (default: its default)")
    parser.add_argument("--migrate", action="store_true",
                        help="only the end-to-end migration through a live agent")
    parser.add_argument("--before", metavar="REF",
                        help="also time the resume of this git revision's runner")
    parser.add_argument("--overhead-models", nargs="+", default=["lenet", "cifarnet"])
    parser.add_argument("--models", nargs="+",
                        default=["inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2"])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    runner.import_tensorflow_quietly()
    import tensorflow as tf

    print(f"# runner benchmark: {platform.node()}, {os.cpu_count()} CPUs, "
          f"GPUs: {len(tf.config.list_physical_devices('GPU'))}, TensorFlow {tf.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    with tempfile.TemporaryDirectory(prefix="bench_runner_") as tmp:
        work = Path(tmp)
        if args.migrate:
            print_migrations(args.models, work, args.spare_wait)
            return 0
        if args.suspend_only:
            print_suspends(args.models, work, args.repeats)
            return 0
        if args.grappler_only:
            print_grappler(args.models, work, args.blocks, args.steps)
            return 0
        if not args.moves_only:
            print("| model | batch | load avg | steps each | bare loop median ms "
                  "| runner median ms | overhead (wall) | bare loop CPU ms | runner CPU ms "
                  "| overhead (CPU) |")
            print("|---" * 10 + "|")
            for model in args.overhead_models:
                load = os.getloadavg()[0]
                r = bench_overhead(model, 32, args.blocks, args.steps, work)
                print(f"| {r['model']} | {r['batch']} | {load:.1f} | {r['steps']} "
                      f"| {r['bare_ms']:.2f} | {r['runner_ms']:.2f} | {r['overhead_pct']:+.1f}% "
                      f"| {r['bare_cpu_ms']:.2f} | {r['runner_cpu_ms']:.2f} "
                      f"| {r['cpu_overhead_pct']:+.1f}% |", flush=True)
            print()
        if not args.overhead_only:
            before = _source_tree(args.before, work) if args.before else None
            label = f"before ({args.before})" if before else None
            print("| model | image | checkpoint MB | "
                  + (f"resume s, {label} | " if label else "")
                  + "resume s, now | of which start (import) s | graph s (source) | restore s "
                  "| first step s | load avg | resume s, warm runner "
                  "| of which graph / restore / first step s "
                  "| floor: Saver restore + first step s | resume (warm) / floor "
                  "| CPU s: resume (warm) / floor | CPU ratio "
                  "| suspend: save s | Saver save s | save / Saver "
                  "| save CPU s: runner / Saver | save CPU ratio "
                  "| save s, first in pair: runner / Saver; second: runner / Saver |")
            print("|---" * (21 + bool(label)) + "|")
            for model in args.models:
                old = bench_resume(model, before, work, "before") if before else None
                load = os.getloadavg()[0]
                new = bench_resume(model, REPO, work, "now", warm=True)
                r = bench_floor_and_suspend(model, work, repeats=args.repeats)
                ph, wp = new["phases"], new["warm_phases"]
                size = _default_size(model)
                print(f"| {model} | {size} | {r['size_mb']:.0f} | "
                      + (f"{old['resume_s']:.1f} | " if old else "")
                      + f"{new['resume_s']:.1f} | {ph['start_s']:.1f} | {ph['graph_s']:.2f} "
                      f"({ph['graph_source']}) | {ph['restore_s']:.2f} | "
                      f"{ph['first_step_s']:.2f} | {load:.1f} | {new['warm_s']:.2f} | "
                      f"{wp['graph_s']:.2f} / {wp['restore_s']:.2f} / {wp['first_step_s']:.2f} | "
                      f"{r['floor_s']:.2f} | {new['warm_s'] / r['floor_s']:.1f}x | "
                      f"{new['warm_cpu_s']:.2f} / {r['floor_cpu_s']:.2f} | "
                      f"{new['warm_cpu_s'] / r['floor_cpu_s']:.1f}x | "
                      f"{r['save_s']:.2f} | {r['saver_save_s']:.2f} "
                      f"| {r['save_s'] / r['saver_save_s']:.2f}x "
                      f"| {r['save_cpu_s']:.2f} / {r['saver_save_cpu_s']:.2f} "
                      f"| {r['save_cpu_s'] / r['saver_save_cpu_s']:.2f}x "
                      f"| {_by_position(r)} |", flush=True)
                _remove(work, model)
    return 0


def _by_position(r: dict) -> str:
    """Median save seconds of each writer when it went first, and second, in its pair."""
    pos = r["by_position"]
    return (f"{pos[('runner', True)]:.2f} / {pos[('saver', True)]:.2f}; "
            f"{pos[('runner', False)]:.2f} / {pos[('saver', False)]:.2f}")


def _default_size(model: str) -> int:
    from slim_models import nets_factory

    return nets_factory.default_image_size(model)


if __name__ == "__main__":
    sys.exit(main())
