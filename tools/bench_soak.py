"""Soak: submits and finishes sustained against 1,000 virtual GPUs, plain and with CurveZMQ.

    python tools/bench_soak.py --minutes 10        # the issue's soak (default 3)
    python tools/bench_soak.py --modes curve --minutes 10 --json out.json   # one mode

For each of two coordinators in one run, one plain and one with authentication
on (CurveZMQ: a keys folder with a user key and one agent key per simulated
node, made as ``tfgshare keys`` makes them), it joins simulated agents offering
``--gpus`` virtual GPUs (``agent_load.SimAgents``: real agents' messages at their rate,
heartbeats at the period the coordinator hands out), then for ``--minutes`` submits
jobs through the client library, one request each, at ``--rate`` a second while the
agents finish running jobs at the same rate (besides those that reach their last
step). After ``--warmup-s`` of that load (the standing queue's first samples
and placements), every ``--sample-s`` it records the coordinator's resident memory and
the p50/p99 of its scheduling rounds since the last sample; at the end it
reports both as a least-squares slope per minute (flat: near zero), the jobs
submitted and finished, and the per-message cost of CurveZMQ against plain:
the coordinator's CPU seconds per message it received, and the round trip of a
small request (one job's status) from the client, p50 over ``--pings`` requests.
The wire alone is measured too: a typical heartbeat frame echoed through a
DEALER/ROUTER pair in this process, plain and CurveZMQ, microseconds per message
each way (``wire_cost``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_coordinator import REPO, SimAgents, free_port, rss_mb, settle  # noqa: E402
from coordinator_scale import slope_per_10_min  # noqa: E402

from tfgshare import keys  # noqa: E402
from tfgshare import schema as s  # noqa: E402
from tfgshare.client.api import Client  # noqa: E402


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    return slope_per_10_min(points) / 10


def heartbeat_frame() -> bytes:
    """A typical heartbeat: 8 GPUs, 16 jobs."""
    return s.encode(s.Heartbeat(
        node="node0001", gpus=[s.GpuTelemetry(i, 0.5, 4000.0) for i in range(8)],
        jobs=[s.JobTelemetry(f"j{i}", 100 + i, {i % 8: 2000.0}) for i in range(16)]))


def wire_cost(secure: bool, messages: int = 20000) -> float:
    """CPU microseconds (this process, all threads: both ends and ZeroMQ's I/O threads)
    per message sent and echoed back over loopback TCP, pipelined."""
    ctx = zmq.Context()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    if secure:
        server_public, server_secret = zmq.curve_keypair()
        server.curve_server = True
        server.curve_publickey, server.curve_secretkey = server_public, server_secret
        client.curve_publickey, client.curve_secretkey = zmq.curve_keypair()
        client.curve_serverkey = server_public
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    frame = heartbeat_frame()
    client.send(frame)                       # the handshake, outside the timing
    server.send_multipart(server.recv_multipart())
    client.recv()
    sent = got = 0
    t0 = time.process_time()
    while got < messages:
        while sent < messages and sent - got < 200:
            client.send(frame)
            sent += 1
        while server.poll(0):
            server.send_multipart(server.recv_multipart())
        while client.poll(0):
            client.recv()
            got += 1
    took = time.process_time() - t0
    server.close(0)
    client.close(0)
    ctx.term()
    return 1e6 * took / messages


def make_keys(root: Path, nodes: int) -> Path:
    """A keys folder: the coordinator's key, user ``soak`` and an agent key per node."""
    keys_dir = root / "keys"
    keys.init(keys_dir)
    keys.add(keys_dir, "soak", "user")
    for n in range(nodes):
        keys.add(keys_dir, f"node{n:04d}", "agent")
    return keys_dir


def soak(root: Path, args: argparse.Namespace, secure: bool) -> dict:
    """One coordinator under the sustained load; its samples, slopes and per-message cost."""
    nodes = args.gpus // args.gpus_per_node
    label = "curve" if secure else "plain"
    work = root / label
    work.mkdir()
    keys_dir = make_keys(work, nodes) if secure else None
    address = f"tcp://127.0.0.1:{free_port()}"
    log = open(work / "coordinator.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfgshare.cli", "coordinator", "--bind", address,
         "--state", str(work / "state.db"), "--policy", args.policy, "--tick", "1.0"],
        cwd=REPO, stdout=log, stderr=log)
    log.close()
    user_key = str(keys_dir / "issued" / "soak" / "soak.key_secret") if secure else None
    agents = None
    rng = random.Random(1)
    try:
        with Client(address, timeout_s=30, key=user_key) as client:
            client.nodes()
            agents = SimAgents(address, nodes, args.gpus_per_node, keys_dir=keys_dir)
            agents.register()
            # a standing queue first, then the sustained submits and finishes
            client.submit([s.JobSpec("inception_v3", max_number_of_steps=1000)
                           for _ in range(args.queue)])
            settle(agents, limit_s=120)
            coord = psutil.Process(proc.pid)
            submitted = finished = 0
            samples: list[dict] = []
            round_mark = client.metrics()["rounds_total"]
            t0 = time.monotonic()
            next_submit = next_finish = t0
            next_sample = t0 + args.warmup_s
            while True:
                now = time.monotonic()
                if now - t0 >= args.warmup_s + args.minutes * 60:
                    break
                if now >= next_submit:
                    client.submit([s.JobSpec("inception_v3", max_number_of_steps=1000)])
                    submitted += 1
                    next_submit += 1.0 / args.rate
                if now >= next_finish:
                    finished += agents.finish_one(rng)
                    next_finish += 1.0 / args.rate
                if now >= next_sample:
                    answer = client.metrics(since_round=round_mark)
                    rounds, round_mark = answer["rounds"], answer["rounds_total"]
                    if not samples:      # the soak proper starts here
                        cpu0, sent0 = sum(coord.cpu_times()[:2]), agents.sent
                        submitted0, finished0 = submitted, finished
                    samples.append({"t_s": round(now - t0 - args.warmup_s, 1),
                                    "rss_mb": round(rss_mb(proc.pid)[0], 1),
                                    "round_p50_ms": rounds.get("p50_ms"),
                                    "round_p99_ms": rounds.get("p99_ms"),
                                    "rounds": rounds.get("count", 0),
                                    "load1": round(os.getloadavg()[0], 1)})
                    next_sample += args.sample_s
                agents.pump(1)
            cpu = sum(coord.cpu_times()[:2]) - cpu0
            messages = agents.sent - sent0 + submitted - submitted0
            pings = []
            probe = client.submit([s.JobSpec("inception_v3", max_number_of_steps=1000)])[0]
            for _ in range(args.pings):
                t = time.perf_counter()
                client.job(probe)
                pings.append(time.perf_counter() - t)
                agents.pump(0)
            jobs = client.jobs()
    finally:
        if agents is not None:
            agents.close()
        proc.terminate()
        proc.wait(30)
    later = samples[1:]                  # each with the rounds since the one before
    return {
        "mode": label, "minutes": args.minutes, "gpus": nodes * args.gpus_per_node,
        "submitted": submitted - submitted0, "finished_by_agents": finished - finished0,
        "finished_jobs": sum(j["state"] == "finished" for j in jobs), "jobs": len(jobs),
        "warmup_s": args.warmup_s, "rss_first_mb": samples[0]["rss_mb"], "rss_last_mb": samples[-1]["rss_mb"],
        "rss_slope_mb_per_min": round(slope_per_min([(x["t_s"], x["rss_mb"]) for x in later]), 2),
        "round_p50_ms": round(statistics.median(x["round_p50_ms"] for x in later
                                                if x["round_p50_ms"] is not None), 2),
        "round_p50_slope_ms_per_min": round(slope_per_min(
            [(x["t_s"], x["round_p50_ms"]) for x in later if x["round_p50_ms"] is not None]), 3),
        "messages": messages, "coordinator_cpu_s": round(cpu, 1),
        "cpu_us_per_message": round(1e6 * cpu / max(1, messages), 1),
        "status_round_trip_p50_ms": round(1000 * statistics.median(pings), 2),
        "load1_min": min(x["load1"] for x in samples),
        "load1_max": max(x["load1"] for x in samples),
        "samples": samples}


def main(argv: list[str] | None = None) -> int:
    """Soak a plain and a CurveZMQ coordinator in turn; print (or write) the comparison."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=3.0, help="soak length per mode (issue: 10)")
    p.add_argument("--gpus", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--rate", type=float, default=20.0, help="submits (and finishes) a second")
    p.add_argument("--queue", type=int, default=2000, help="jobs queued before the soak")
    p.add_argument("--policy", default="fgs")
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=60.0,
                   help="seconds of load before the soak is measured")
    p.add_argument("--pings", type=int, default=500)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--modes", default="plain,curve", choices=["plain,curve", "plain", "curve"],
                   help="which coordinators to soak (default both, plain first)")
    args = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            results.append(soak(Path(tmp), args, mode == "curve"))
            r = results[-1]
            if args.json:      # each mode as soon as it is done
                args.json.write_text(json.dumps({"soak": results}, indent=1))
            print(f"{r['mode']:5s}: {r['minutes']:g} min, {r['gpus']} GPUs: {r['submitted']} "
                  f"submitted, {r['finished_by_agents']} finished by agents ({r['finished_jobs']} finished of "
                  f"{r['jobs']} jobs); RSS {r['rss_first_mb']} -> {r['rss_last_mb']} MiB, slope "
                  f"{r['rss_slope_mb_per_min']} MiB/min; round p50 {r['round_p50_ms']} ms, slope "
                  f"{r['round_p50_slope_ms_per_min']} ms/min; coordinator CPU "
                  f"{r['cpu_us_per_message']} us/message over {r['messages']} messages; status "
                  f"round trip p50 {r['status_round_trip_p50_ms']} ms; load average "
                  f"{r['load1_min']}-{r['load1_max']}", flush=True)
    if len(results) < 2:
        return 0
    plain, curve = results
    wire = {"plain": wire_cost(False), "curve": wire_cost(True)}
    print(f"wire alone (a {len(heartbeat_frame())}-byte heartbeat frame echoed over loopback "
          f"TCP): plain {wire['plain']:.1f} us, CurveZMQ {wire['curve']:.1f} us CPU per "
          "message and reply")
    print(f"CurveZMQ against plain: {curve['cpu_us_per_message'] - plain['cpu_us_per_message']:+.1f}"
          f" us coordinator CPU per message, {curve['status_round_trip_p50_ms'] - plain['status_round_trip_p50_ms']:+.2f}"
          f" ms per request round trip")
    if args.json:
        args.json.write_text(json.dumps({"soak": results, "wire_us": wire}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
