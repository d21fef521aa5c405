"""Agent overheads: event forwarding rate, and per-round cost with many runners.

Runs in one process against a scripted coordinator socket, with stand-in
runners (no TensorFlow), so it measures the agent, not training:

- forwarding: one runner writes N progress events as fast as it can; events
  per second from the first to the last one the coordinator receives;
- rounds: with K idle runners, the time of one supervisor poll (tail K event
  files, check K processes) and of one telemetry read (K psutil process reads).

Goals: forwarding at least 5,000 events/s (a runner logs at most once a step);
a poll plus a telemetry read under 2 ms for 16 runners.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare import schema  # noqa: E402
from tfgshare.agent.node import Agent, AgentConfig  # noqa: E402
from tfgshare.agent.gpus import VirtualGpus, parse_virtual_gpus  # noqa: E402
from tfgshare.agent.supervisor import Supervisor  # noqa: E402

BURST = r'''
import json, sys, time
ev = sys.argv[sys.argv.index("--events_file") + 1]
n = int(sys.argv[sys.argv.index("--max_number_of_steps") + 1])
with open(ev, "a") as f:
    for i in range(1, n + 1):
        f.write(json.dumps({"event": "progress", "time": time.time(), "step": i, "loss": 1.0,
                            "step_time_s": 0.0, "images_per_sec": 0.0,
                            "predicted_remaining_s": 0.0}) + "\n")
        if i % 500 == 0:
            f.flush()
    f.write(json.dumps({"event": "finished", "time": time.time(), "step": n, "loss": 1.0}) + "\n")
'''
IDLE = "import time; time.sleep(600)\n"


def forwarding(tmp: Path, n: int) -> float:
    """Events per second from a bursting runner to the coordinator socket."""
    ctx = zmq.Context()
    coord = ctx.socket(zmq.ROUTER)
    port = coord.bind_to_random_port("tcp://127.0.0.1")
    (tmp / "burst.py").write_text(BURST)
    sup = Supervisor(tmp / "work", runner_cmd=[sys.executable, str(tmp / "burst.py")])
    agent = Agent(AgentConfig(coordinator=f"tcp://127.0.0.1:{port}", node="bench",
                              work_dir=tmp / "work", heartbeat_s=1.0),
                  VirtualGpus(parse_virtual_gpus("1x16GiB")), sup, ctx)
    got, first, last = 0, None, None
    try:
        while not agent.registered:
            agent.step(10)
            while coord.poll(0):
                peer, frame = coord.recv_multipart()
                msg = schema.decode(frame)   # train dirs must lie under the checkpoint root
                reply = schema.reply_ok(msg, checkpoint_root=str(tmp / "ckpt"))
                coord.send_multipart([peer, schema.encode(reply)])
        start = schema.StartJob(job="b1", attempt=1, spec=schema.JobSpec(
            model_name="lenet", max_number_of_steps=n), fragments=[
            schema.FragmentSpec(gpu_index=0, fraction=0.5)], train_dir=str(tmp / "ckpt" / "b1"))
        coord.send_multipart([peer, schema.encode(start)])
        end = time.monotonic() + 120
        while time.monotonic() < end:
            agent.step(5)
            while coord.poll(0):
                peer, frame = coord.recv_multipart()
                msg = schema.decode(frame)
                if msg.TYPE == "job_event" and msg.event["event"] == "progress":
                    got += 1
                    first = first or time.perf_counter()
                    last = time.perf_counter()
                if msg.TYPE == "job_exit":
                    return got / (last - first) if got > 1 else 0.0
        raise TimeoutError("the burst runner did not finish")
    finally:
        agent.shutdown(timeout_s=1)
        coord.close(0)
        ctx.term()


def rounds(tmp: Path, k: int, repeats: int = 200) -> tuple[float, float]:
    """Median milliseconds of one supervisor poll and one telemetry read with k runners."""
    (tmp / "idle.py").write_text(IDLE)
    sup = Supervisor(tmp / "idle", runner_cmd=[sys.executable, str(tmp / "idle.py")])
    gpus = VirtualGpus(parse_virtual_gpus("4x16GiB"))
    for i in range(k):
        sup.start(f"i{i}", 1, [], tmp / "c" / str(i), [(i % 4, 0.2)], virtual=True)
    try:
        polls, reads = [], []
        pids = {p.pid: p.gpu_indices for p in sup.runners.values()}
        for _ in range(repeats):
            t0 = time.perf_counter()
            sup.poll()
            t1 = time.perf_counter()
            gpus.read(pids)
            t2 = time.perf_counter()
            polls.append(t1 - t0)
            reads.append(t2 - t1)
        return statistics.median(polls) * 1e3, statistics.median(reads) * 1e3
    finally:
        for job in list(sup.runners):
            sup.kill(job)
        while sup.runners:
            sup.poll()


def main(argv: list[str] | None = None) -> int:
    """Print the agent's overheads."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--runners", type=int, default=16)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        rate = forwarding(Path(d), args.events)
        poll_ms, read_ms = rounds(Path(d), args.runners)
    print(f"event forwarding: {rate:,.0f} events/s ({args.events} events)   goal >= 5,000")
    print(f"round with {args.runners} runners: poll {poll_ms:.3f} ms, telemetry {read_ms:.3f} ms"
          f"   goal < 2 ms together")
    return 0 if rate >= 5000 and poll_ms + read_ms < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
