"""Benchmark the job runner: its per-step overhead, and suspend/resume costs.

1. Overhead: the runner's training loop and a bare ``session.run(train_op)``
   loop over the same graph and session, in alternating blocks; the median
   step time of each and the overhead of the runner (goal: at most 3%).
2. Suspend and resume for the paper's four models at their default image
   sizes: tf.train.Checkpoint save (suspend) and restore plus the first step
   after it (resume), the checkpoint's size, and a plain tf.compat.v1.train.Saver
   save/restore of the same variables.

Usage: python tools/bench_runner.py [--overhead-only | --suspend-only] [--models ...]
Prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.runner import main as runner  # noqa: E402
from tfgshare.runner.config import TrainConfig  # noqa: E402
from tfgshare.runner.events import EventSink  # noqa: E402


def _session(built, config):
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    session = tf.compat.v1.Session(graph=built.graph,
                                   config=runner_graph.session_config(config))
    session.run(built.init_op)
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


def bench_suspend(model: str, batch: int, work: Path, repeats: int = 3) -> dict:
    """Checkpoint save/restore times and size for ``model`` at its default size.

    Saves alternate between tf.train.Checkpoint (the runner's) and a plain Saver of
    the same variables, ``repeats`` times each, so disk and load noise hit both.
    """
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    train_dir = work / f"suspend-{model}"
    config = TrainConfig(train_dir=str(train_dir), model_name=model, batch_size=batch,
                         optimizer="momentum", learning_rate=0.001, max_to_keep=1)
    config.check()
    start = time.perf_counter()
    built = runner_graph.build_training_graph(config)
    build_s = time.perf_counter() - start
    prefix = str(work / f"saver-{model}" / "model.ckpt")
    with built.graph.as_default():
        start = time.perf_counter()
        saver = tf.compat.v1.train.Saver(var_list=built.variables, max_to_keep=1)
        saver_build_s = time.perf_counter() - start
    session = _session(built, config)
    _timed_step(session, built)
    first = built.checkpoint.save(session, 1)          # suspend: the first save builds its ops
    saves, saver_saves = [], []
    for step in range(2, 2 + repeats):
        _timed_step(session, built)
        saved = built.checkpoint.save(session, step)
        saves.append(saved.seconds)
        with built.graph.as_default():
            start = time.perf_counter()
            saver.save(session, prefix, write_meta_graph=False)
            saver_saves.append(time.perf_counter() - start)
    session.close()

    session = _session(built, config)                  # resume: restore, then one step
    restore_s = built.checkpoint.restore(session, saved.path)
    resume_step_s = _timed_step(session, built)
    saver_restores = []
    with built.graph.as_default():
        for _ in range(repeats):
            start = time.perf_counter()
            saver.restore(session, prefix)
            saver_restores.append(time.perf_counter() - start)
    session.close()
    return {"model": model, "size": built.image_size, "build_s": build_s,
            "size_mb": saved.size_mb, "first_save_s": first.seconds,
            "save_s": statistics.median(saves), "restore_s": restore_s,
            "resume_s": restore_s + resume_step_s, "saver_build_s": saver_build_s,
            "saver_save_s": statistics.median(saver_saves),
            "saver_restore_s": statistics.median(saver_restores)}


def _timed_step(session, built) -> float:
    start = time.perf_counter()
    session.run(built.train_tensor)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Run the runner benchmarks and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead-only", action="store_true")
    parser.add_argument("--suspend-only", action="store_true")
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
        if not args.suspend_only:
            print("| model | batch | steps each | bare loop median ms | runner median ms "
                  "| overhead |")
            print("|---|---|---|---|---|---|")
            for model in args.overhead_models:
                r = bench_overhead(model, 32, args.blocks, args.steps, work)
                print(f"| {r['model']} | {r['batch']} | {r['steps']} | {r['bare_ms']:.2f} "
                      f"| {r['runner_ms']:.2f} | {r['overhead_pct']:+.1f}% |", flush=True)
            print()
        if not args.overhead_only:
            print("| model | image | graph build s | checkpoint MB | suspend: first save s "
                  "| later saves, median s | resume: restore + first step s | restore alone s "
                  "| Saver build s | Saver save, median s | Saver restore, median s |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for model in args.models:
                r = bench_suspend(model, 1, work)
                print(f"| {r['model']} | {r['size']} | {r['build_s']:.1f} | {r['size_mb']:.0f} "
                      f"| {r['first_save_s']:.2f} | {r['save_s']:.2f} | {r['resume_s']:.2f} "
                      f"| {r['restore_s']:.2f} | {r['saver_build_s']:.2f} "
                      f"| {r['saver_save_s']:.2f} | {r['saver_restore_s']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
