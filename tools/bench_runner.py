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
     variables, alternating, medians.

Usage: python tools/bench_runner.py [--overhead-only | --moves-only] [--models ...]
       [--before REF]
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


def bench_overhead(model: str, batch: int, blocks: int, steps: int, work: Path) -> dict:
    """Median step time of the runner loop vs a bare loop, alternating blocks.

    Each runner block is a ``train_loop`` call that ends with a checkpoint (not
    counted in step times); sampling is off so blocks do not also checkpoint
    after their sample.
    """
    from tfgshare.runner import graph as runner_graph

    config = TrainConfig(train_dir=str(work / f"overhead-{model}"), model_name=model,
                         batch_size=batch, optimizer="momentum", learning_rate=0.01,
                         save_interval_secs=0, log_every_n_steps=10, num_sample_steps=0,
                         events_file=str(work / f"overhead-{model}.jsonl"),
                         max_number_of_steps=10**9)
    config.check()
    Path(config.train_dir).mkdir(parents=True)
    built = runner_graph.build_training_graph(config)
    session = _session(built, config)
    runner_times: list[float] = []
    bare_times: list[float] = []

    sink = EventSink(config.events_file, lambda event: None, "bench")
    step = 0
    key = built.step_key
    for _ in range(3):   # warm-up
        session.run(built.train_tensor)
    for _ in range(blocks):
        # the bare loop feeds the same step key, so both draw fresh dropout masks
        # each step (as TF-Slim's stateful random ops would)
        tick = time.perf_counter()
        for i in range(steps):
            session.run(built.train_tensor, {key: i})
            now = time.perf_counter()
            bare_times.append(now - tick)
            tick = now
        # the runner's own loop; it reports each step's time in its timer
        times: list[float] = []
        config.max_number_of_steps = step + steps
        timer_add = runner.StepTimer.add

        def recording_add(self, seconds, _add=timer_add):
            times.append(seconds)
            return _add(self, seconds)

        runner.StepTimer.add = recording_add
        try:
            result = runner.train_loop(config, built, session, sink, threading.Event(), step,
                                       latest=None)
        finally:
            runner.StepTimer.add = timer_add
        step = result.global_step
        runner_times.extend(times)
    session.close()
    bare, ours = statistics.median(bare_times), statistics.median(runner_times)
    return {"model": model, "batch": batch, "steps": len(bare_times),
            "bare_ms": bare * 1e3, "runner_ms": ours * 1e3,
            "overhead_pct": (ours / bare - 1) * 100}


def _runner(src: Path, train_dir: Path, model: str, steps: int, events: Path,
            warm: bool = False) -> float:
    """Run the runner of source tree ``src`` until step ``steps``; seconds to its first step.

    With ``warm``, a warm runner is started and waited for first, and the time counts
    from handing it the job.
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
        start = time.perf_counter()
        proc.stdin.write(warm_job_line(flags, {}, None))
        proc.stdin.close()
    else:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    first = None
    while proc.poll() is None and first is None:
        from tfgshare.runner.protocol import read_events
        new, _ = read_events(events, offset)
        if any(e["event"] == "progress" for e in new):
            first = time.perf_counter() - start
        time.sleep(0.02)
    err = proc.stderr.read()
    proc.wait(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"runner of {src} failed ({proc.returncode}): {err[-2000:]}")
    return first if first is not None else time.perf_counter() - start


def bench_resume(model: str, src: Path, work: Path, tag: str, warm: bool = False) -> dict:
    """A first attempt of one step, then the timed resumes to the second (and third, warm)."""
    train_dir, events = work / f"{tag}-{model}", work / f"{tag}-{model}.jsonl"
    _runner(src, train_dir, model, 1, events)
    seconds = _runner(src, train_dir, model, 2, events)
    phases = [e for e in _events(events) if e["event"] == "start_phases"]
    warm_s = _runner(src, train_dir, model, 3, events, warm=True) if warm else None
    return {"resume_s": seconds, "phases": phases[-1] if phases else None, "warm_s": warm_s}


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bench_floor_and_suspend(model: str, work: Path, repeats: int = 3) -> dict:
    """Saver restore + first step in a new session (the floor); runner save vs Saver save."""
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    config = TrainConfig(train_dir=str(work / f"floor-{model}"), model_name=model, batch_size=1,
                         optimizer="momentum", learning_rate=0.001, max_to_keep=1)
    config.check()
    Path(config.train_dir).mkdir(parents=True)
    built = runner_graph.build_training_graph(config)
    prefix = str(work / f"saver-{model}" / "model.ckpt")
    with built.graph.as_default():
        saver = tf.compat.v1.train.Saver(var_list=built.variables, max_to_keep=1)
    session = _session(built, config)
    _timed_step(session, built)
    saves, saver_saves = [], []
    for step in range(1, 1 + repeats):
        saved = built.checkpoint.save(session, step)
        saves.append(saved.seconds)
        with built.graph.as_default():
            start = time.perf_counter()
            saver.save(session, prefix, write_meta_graph=False)
            saver_saves.append(time.perf_counter() - start)
    session.close()

    session = _session(built, config)
    with built.graph.as_default():
        start = time.perf_counter()
        saver.restore(session, prefix)
        restore_s = time.perf_counter() - start
    first_step_s = _timed_step(session, built)
    session.close()
    return {"size_mb": saved.size_mb, "save_s": statistics.median(saves),
            "saver_save_s": statistics.median(saver_saves), "saver_restore_s": restore_s,
            "floor_s": restore_s + first_step_s}


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
    parser.add_argument("--before", metavar="REF",
                        help="also time the resume of this git revision's runner")
    parser.add_argument("--overhead-models", nargs="+", default=["lenet", "cifarnet"])
    parser.add_argument("--models", nargs="+",
                        default=["inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2"])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    runner._import_tensorflow_quietly()
    import tensorflow as tf

    print(f"# runner benchmark: {platform.node()}, {os.cpu_count()} CPUs, "
          f"GPUs: {len(tf.config.list_physical_devices('GPU'))}, TensorFlow {tf.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    with tempfile.TemporaryDirectory(prefix="bench_runner_") as tmp:
        work = Path(tmp)
        if not args.moves_only:
            print("| model | batch | steps each | bare loop median ms | runner median ms "
                  "| overhead |")
            print("|---|---|---|---|---|---|")
            for model in args.overhead_models:
                r = bench_overhead(model, 32, args.blocks, args.steps, work)
                print(f"| {r['model']} | {r['batch']} | {r['steps']} | {r['bare_ms']:.2f} "
                      f"| {r['runner_ms']:.2f} | {r['overhead_pct']:+.1f}% |", flush=True)
            print()
        if not args.overhead_only:
            before = _source_tree(args.before, work) if args.before else None
            label = f"before ({args.before})" if before else None
            print("| model | image | checkpoint MB | "
                  + (f"resume s, {label} | " if label else "")
                  + "resume s, now | of which start (import) s | graph s (source) | restore s "
                  "| first step s | resume s, now, warm runner "
                  "| floor: Saver restore + first step s | warm / floor "
                  "| suspend: save s | Saver save s | save / Saver |")
            print("|---" * (13 + bool(label)) + "|")
            for model in args.models:
                old = bench_resume(model, before, work, "before") if before else None
                new = bench_resume(model, REPO, work, "now", warm=True)
                r = bench_floor_and_suspend(model, work)
                ph = new["phases"]
                size = _default_size(model)
                print(f"| {model} | {size} | {r['size_mb']:.0f} | "
                      + (f"{old['resume_s']:.1f} | " if old else "")
                      + f"{new['resume_s']:.1f} | {ph['start_s']:.1f} | {ph['graph_s']:.1f} "
                      f"({ph['graph_source']}) | {ph['restore_s']:.2f} | "
                      f"{ph['first_step_s']:.2f} | {new['warm_s']:.1f} | {r['floor_s']:.2f} | "
                      f"{new['warm_s'] / r['floor_s']:.1f}x | {r['save_s']:.2f} | "
                      f"{r['saver_save_s']:.2f} | {r['save_s'] / r['saver_save_s']:.2f}x |",
                      flush=True)
    return 0


def _default_size(model: str) -> int:
    from slim_models import nets_factory

    return nets_factory.default_image_size(model)


if __name__ == "__main__":
    sys.exit(main())
