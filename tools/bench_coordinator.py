"""Coordinator benchmark: submit throughput, scheduling round time and memory at scale.

Starts ``tfgshare coordinator`` as a child process, joins simulated agents
(``agent_load.SimAgents``: one DEALER socket per node, all in this process, sending
what real agents and their runners send, heartbeats at the period the coordinator
hands out) offering 1,000 virtual GPUs, and measures:

- submits/s through the raw socket: first 10,000 jobs at 100 a message (filling
  the queue while the GPUs fill up), then, at that load, one job a message
  (pipelined); through the client library one request at a time; through the
  CLI path (``client_cli.submit``: flag parsing, the model check, a fresh
  connection per command, in this process) and as a ``tfgshare submit`` process;
- p50/p99/max of the coordinator's scheduling rounds while 10,000+ jobs are
  queued, all GPUs are busy and the agents sample, train, heartbeat and finish;
- the coordinator process's resident memory at that load;
- the wire schema before and after its move to msgspec, side by side in one run:
  decode+validate messages/s in this process (the hand-written validator is loaded
  from git, ``--before COMMIT``), and one-job submits/s at load against a
  coordinator built from that commit (``git archive``) and against this tree.

``--soak-s S`` runs the scale setting instead (``coordinator_scale``: a queue of
``--jobs`` filled one job a message at load, a soak of S seconds sampled every
``--sample-s``; rows added to docs/results/coordinator.csv), for ten thousand GPUs:
``--gpus 10000 --jobs 100000 --soak-s 1800``.

Usage: python tools/bench_coordinator.py [--gpus 1000] [--jobs 10000] [--policy fgs]
       [--before COMMIT | --before none] [--soak-s S [--sample-s 30] [--no-write]]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import zmq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))   # agent_load

from agent_load import SimAgents  # noqa: E402
from coordinator_scale import csv_rows, scale_run, write_rows  # noqa: E402
from tfgshare.agent.pacer import PROGRESS_EVERY_S  # noqa: E402
from tfgshare.client import commands as client_cli  # noqa: E402
from tfgshare import schema as s  # noqa: E402
from tfgshare.client.api import Client  # noqa: E402

# the last commit with the hand-written schema validator
BEFORE_MSGSPEC = "0cc27e9"


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB.

    psutil reads the current figure; it offers no peak on Linux, which the
    kernel keeps as VmHWM in /proc/PID/status.
    """
    current = psutil.Process(pid).memory_info().rss / 2**20
    peak = current
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "VmHWM":
            peak = int(value.split()[0]) / 1024
    return current, peak


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_submits(address: str, agents: SimAgents, n: int, per_msg: int = 1,
                window: int = 500) -> float:
    """Jobs per second admitted through a raw DEALER, ``per_msg`` jobs a message, pipelined."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    spec = {"model_name": "inception_v3", "max_number_of_steps": 1000}
    frames = [json.dumps({"v": 1, "type": "submit", "id": s.new_id(),
                          "jobs": [spec] * per_msg}).encode() for _ in range(n // per_msg)]
    sent = got = 0
    t0 = time.perf_counter()
    while got < len(frames):
        while sent < len(frames) and sent - got < window:
            sock.send(frames[sent])
            sent += 1
        if sock.poll(10):
            while True:
                try:
                    reply = json.loads(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                assert reply["type"] == "ok", reply
                got += 1
        agents.pump(0)
    took = time.perf_counter() - t0
    sock.close(0)
    ctx.term()
    return len(frames) * per_msg / took


def settle(agents: SimAgents, quiet_s: float = 1.0, limit_s: float = 60.0) -> None:
    """Play the agents until no command has come for ``quiet_s``."""
    t0 = last = time.monotonic()
    while time.monotonic() - last < quiet_s and time.monotonic() - t0 < limit_s:
        if agents.pump(50):
            last = time.monotonic()


def client_submits(address: str, agents: SimAgents, n: int) -> float:
    """Jobs per second through Client.submit, one request at a time."""
    with Client(address, timeout_s=10) as client:
        t0 = time.perf_counter()
        for _ in range(n):
            client.submit([s.JobSpec("resnet_v1_50", max_number_of_steps=1000)])
            agents.pump(0)
        return n / (time.perf_counter() - t0)


def cli_submits(address: str, agents: SimAgents, n: int) -> float:
    """Jobs per second through the CLI's submit function (parse, model check, connect)."""
    argv = ["--coordinator", address, "--timeout", "10", "vgg_16", "--batch_size", "32",
            "--max_number_of_steps", "1000", "--memory_fraction", "auto"]
    t0 = time.perf_counter()
    for _ in range(n):
        with contextlib.redirect_stdout(io.StringIO()):
            assert client_cli.submit(argv) == 0
        agents.pump(0)
    return n / (time.perf_counter() - t0)


def cli_process_s(address: str, agents: SimAgents, n: int = 3) -> float:
    """Mean wall seconds of one ``tfgshare submit`` command run as its own process."""
    cmd = [sys.executable, "-m", "tfgshare.cli", "submit", "--coordinator", address,
           "--timeout", "10", "alexnet_v2", "--max_number_of_steps", "1000"]
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                                stdout=subprocess.DEVNULL)
        while proc.poll() is None:
            agents.pump(5)
        assert proc.returncode == 0
        took.append(time.perf_counter() - t0)
    return sum(took) / len(took)


def steady(address: str, agents: SimAgents, seconds: float) -> dict:
    """Run the loaded cluster for a while (the agents heartbeat, report and finish their
    jobs on their own clock); return the coordinator's round times."""
    with Client(address, timeout_s=60) as client:
        start_round = client.metrics()["rounds_total"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            agents.pump(1)
        report = client.metrics(since_round=start_round)
        jobs = client.jobs()
    queued = sum(j["state"] in ("queued", "sampled", "suspended") for j in jobs)
    running = sum(j["state"] in ("running", "sampling") for j in jobs)
    return {"rounds": report["rounds"], "decide": report["decide"],
            "decide_cpu": report["decide_cpu"], "round_parts": report.get("round_parts"),
            "queued": queued,
            "running": running,
            "jobs": len(jobs), "finished": sum(j["state"] == "finished" for j in jobs)}


def old_schema(commit: str):
    """The wire schema module as it was at ``commit`` (from git), imported under its own name."""
    text = subprocess.run(["git", "show", f"{commit}:tfgshare/schema.py"], cwd=REPO,
                          check=True, capture_output=True, text=True).stdout
    tmp = Path(tempfile.mkdtemp()) / "schema_before.py"
    tmp.write_text(text)
    spec = importlib.util.spec_from_file_location("schema_before", tmp)
    module = importlib.util.module_from_spec(spec)
    sys.modules["schema_before"] = module
    spec.loader.exec_module(module)
    return module


def sample_frames() -> list[bytes]:
    """A mix of what a loaded coordinator reads: heartbeats, runner events, exits, submits."""
    hb = s.Heartbeat(node="node0001", gpus=[s.GpuTelemetry(i, 0.5, 4000.0) for i in range(8)],
                     jobs=[s.JobTelemetry(f"j{i}", 100 + i, {i % 8: 2000.0}) for i in range(16)])
    ev = s.JobEvent(node="node0001", job="j17", attempt=2, event={
        "event": "progress", "time": 1.7e9, "step": 120, "loss": 2.3,
        "step_time_s": 0.21, "predicted_remaining_s": 180.0})
    ex = s.JobExit(node="node0001", job="j17", attempt=2, exit_code=0)
    spec = {"model_name": "inception_v3", "batch_size": 32, "max_number_of_steps": 1000,
            "memory_fraction": "auto"}
    sub = json.dumps({"v": 1, "type": "submit", "id": "abc", "jobs": [spec]}).encode()
    return [s.encode(hb), s.encode(ev), s.encode(ex), sub]


def decode_rate(decode, frames: list[bytes], seconds: float = 1.0) -> float:
    """Frames decoded and validated per second (cycling through ``frames``)."""
    n = 0
    t0 = time.perf_counter()
    while True:
        for f in frames:
            decode(f)
        n += len(frames)
        took = time.perf_counter() - t0
        if took >= seconds:
            return n / took


def start_coordinator(repo: Path, tmp: Path, args, label: str,
                      metrics_port: int | None = None) -> tuple[subprocess.Popen, str]:
    """``tfgshare coordinator`` from the code in ``repo``, on a free loopback port."""
    address = f"tcp://127.0.0.1:{free_port()}"
    log = open(tmp / f"coordinator-{label}.log", "w")
    profile = ["-m", "cProfile", "-o", args.profile] if args.profile and label == "now" else []
    metrics = [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
    proc = subprocess.Popen(
        [sys.executable, *profile, "-m", "tfgshare.cli", "coordinator", "--bind", address,
         "--state", str(tmp / f"state-{label}.db"), "--policy", args.policy,
         "--tick", str(args.tick), "--node-timeout", str(args.node_timeout), *metrics],
        cwd=repo, env=dict(os.environ, PYTHONPATH=str(repo)), stdout=log, stderr=log)
    log.close()
    with Client(address, timeout_s=30) as c:
        c.nodes()          # a request an older coordinator also reads
    return proc, address


def submits_before(commit: str, tmp: Path, args, nodes: int) -> dict:
    """Queue filling and one-job submits at load against the coordinator of ``commit``."""
    old = tmp / "before"
    old.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    proc, address = start_coordinator(old, tmp, args, "before")
    agents = None
    try:
        agents = SimAgents(address, nodes, args.gpus_per_node, step_s=args.step_s)
        try:
            agents.register()
        except RuntimeError as exc:
            raise SystemExit(f"--before {commit}: {exc}: its coordinator does not accept today's "
                             "agents (Register gained gang address and ports); use --before none")
        batch = raw_submits(address, agents, args.jobs, per_msg=100, window=20)
        settle(agents)
        single = raw_submits(address, agents, args.single_submits)
    finally:
        if agents is not None:
            agents.close()
        proc.terminate()
        proc.wait(30)
    return {"raw_batch100_submits_per_s": round(batch), "raw_submits_per_s": round(single)}


def scale_main(args, argv: list[str]) -> int:
    """The scale setting (``--soak-s``): run it, print it, add its rows to the CSV."""
    t0 = time.gmtime()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        proc, address = start_coordinator(REPO, tmp, args, "now", metrics_port=port)
        try:
            res = scale_run(address, proc.pid, port, tmp / "state-now.db", args)
        finally:
            proc.terminate()
            proc.wait(120)
    t1 = time.gmtime()
    date = (time.strftime("%Y-%m-%d %H:%M", t0) + time.strftime("-%H:%M UTC", t1)
            if t0[:3] == t1[:3] else time.strftime("%Y-%m-%d %H:%M", t0)
            + time.strftime(" - %Y-%m-%d %H:%M UTC", t1))
    command = " ".join([".venv/bin/python tools/bench_coordinator.py", *argv])
    rows = csv_rows(res, date, args.machine, command)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"coordinator at scale: {res['gpus']:,} GPUs on {res['nodes']:,} simulated agents "
              f"(heartbeat every {res['heartbeat_s']:g} s), policy {res['policy']}, "
              f"load {rows[0]['load']}")
        for row in rows:
            print(f"  {row['figure']}: {row['value']}" + (f"  [{row['goal']}]" if row["goal"]
                                                           else ""))
        print(f"  jobs at the end: {res['jobs_end']}; lost nodes {res['node_losses']}; "
              f"agents' error replies {res['agent_errors'] or 'none'}; WAL at most "
              f"{res['wal_max_mb']} MiB")
        print(f"  messages the agents sent: {res['messages_sent']}; job events by name "
              f"(progress paced every {res['progress_every_s']:g} s): {res['job_events_sent']}")
        print(f"  cores over the soak: the coordinator {res['coordinator_cores']}, the agents "
              f"and submits {res['bench_cores']}")
    if not args.no_write:
        write_rows(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--jobs", type=int, default=10000,
                   help="jobs queued first (raw socket, 100 a message)")
    p.add_argument("--single-submits", type=int, default=3000,
                   help="then jobs submitted one a message (raw socket, pipelined)")
    p.add_argument("--policy", default="fgs")
    p.add_argument("--client-submits", type=int, default=500)
    p.add_argument("--cli-submits", type=int, default=200)
    p.add_argument("--steady-s", type=float, default=15.0)
    p.add_argument("--tick", type=float, default=1.0)
    p.add_argument("--node-timeout", type=float, default=10.0,
                   help="the coordinator's (default: its own default); agents heartbeat at "
                        "the period it hands out, a quarter of this")
    p.add_argument("--step-s", type=float, default=0.2,
                   help="the simulated runners' step time (the sample they report)")
    p.add_argument("--settle-s", type=float, default=1.0,
                   help="the GPUs count as filled once no command came for this long (a "
                        "loaded machine needs more: its rounds take seconds)")
    p.add_argument("--soak-s", type=float, default=None, metavar="S",
                   help="the scale setting instead (tools/coordinator_scale.py): fill --jobs "
                        "one job a message at load, then soak S seconds replacing each finished "
                        "job; e.g. --gpus 10000 --jobs 100000 --soak-s 1800")
    p.add_argument("--steps", type=int, default=1000,
                   help="with --soak-s: each job's max_number_of_steps")
    p.add_argument("--sample-s", type=float, default=30.0,
                   help="with --soak-s: seconds between samples")
    p.add_argument("--machine", default=f"{os.cpu_count()}-core machine",
                   help="with --soak-s: the machine as its CSV rows name it")
    p.add_argument("--progress-every-s", type=float, default=PROGRESS_EVERY_S, metavar="S",
                   help="with --soak-s: the simulated agents' progress pacing (default: the "
                        "agent's; 0: every report, as before pacing)")
    p.add_argument("--no-write", action="store_true",
                   help="with --soak-s: print only, add no rows to docs/results/coordinator.csv")
    p.add_argument("--before", default="none", metavar="COMMIT",
                   help=f"compare the wire schema with this commit's (e.g. {BEFORE_MSGSPEC}, the "
                        "last hand-written validator); its coordinator must accept today's "
                        "agents' Register; default none: skip")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--profile", metavar="PATH", help="run the coordinator under cProfile")
    args = p.parse_args(argv)
    if args.soak_s:
        return scale_main(args, sys.argv[1:] if argv is None else argv)
    nodes = args.gpus // args.gpus_per_node
    res: dict = {"gpus": nodes * args.gpus_per_node, "nodes": nodes, "policy": args.policy}
    frames = sample_frames()
    res["decode_per_s"] = round(decode_rate(s.decode, frames))
    if args.before != "none":
        before = old_schema(args.before)
        res["before_decode_per_s"] = round(decode_rate(before.decode, frames))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.before != "none":
            res["before"] = submits_before(args.before, tmp, args, nodes)
        proc, address = start_coordinator(REPO, tmp, args, "now")
        agents = None
        try:
            base_rss = rss_mb(proc.pid)[0]
            agents = SimAgents(address, nodes, args.gpus_per_node, step_s=args.step_s)
            agents.register()
            res["coordinator_rss_idle_mb"] = round(base_rss, 1)
            # fill the queue, let the GPUs fill up, then measure submits at that load
            res["raw_batch100_submits_per_s"] = round(raw_submits(address, agents, args.jobs,
                                                                  per_msg=100, window=20))
            settle(agents, args.settle_s)
            res["raw_submits_per_s"] = round(raw_submits(address, agents, args.single_submits))
            res["client_submits_per_s"] = round(client_submits(address, agents,
                                                               args.client_submits))
            if args.cli_submits:   # --cli-submits 0: skip the CLI measures (a loaded machine)
                res["cli_submits_per_s"] = round(cli_submits(address, agents, args.cli_submits))
                res["cli_process_s"] = round(cli_process_s(address, agents), 2)
            st = steady(address, agents, args.steady_s)
            res.update({f"steady_{k}": v for k, v in st.items()})
            rss, peak = rss_mb(proc.pid)
            res["coordinator_rss_mb"], res["coordinator_peak_rss_mb"] = round(rss), round(peak)
        finally:
            if agents is not None:
                agents.close()
            proc.terminate()
            proc.wait(30)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        r, d, c = res["steady_rounds"], res["steady_decide"], res["steady_decide_cpu"]
        print(f"coordinator bench: {res['gpus']} virtual GPUs on {res['nodes']} simulated agents, "
              f"policy {res['policy']}")
        print(f"  submits/s: raw socket {res['raw_batch100_submits_per_s']} (100 jobs/msg, "
              f"filling the queue), then at load {res['raw_submits_per_s']} (1 job/msg, "
              f"pipelined); client library "
              f"{res['client_submits_per_s']} (1 request at a time); CLI path "
              f"{res.get('cli_submits_per_s', '-')} (in process); `tfgshare submit` as a "
              f"process {res.get('cli_process_s', '-')} s")
        print(f"  scheduling round with {res['steady_queued']} waiting and "
              f"{res['steady_running']} running jobs ({res['steady_jobs']} in all): "
              f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.2f} ms "
              f"over {r['count']} rounds (wall time; the policy runs beside the serving loop)"
              f"\n    of which policy.decide p50 {d['p50_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms; "
              f"its CPU time p50 {c['p50_ms']:.2f} ms, p99 {c['p99_ms']:.2f} ms")
        parts = res.get("steady_round_parts")
        if parts:
            print("    the rest, p50 / p99 ms: " + "; ".join(
                f"{label} {parts[k]['p50_ms']:.2f} / {parts[k]['p99_ms']:.2f}"
                for k, label in (("plan", "snapshot and views"),
                                 ("wait", "answer waiting for the loop"),
                                 ("apply", "carrying it out"),
                                 ("loop_cpu", "the loop's other CPU meanwhile"))))
            print(f"    the round's CPU time (both threads) p50 {parts['cpu']['p50_ms']:.2f} ms, "
                  f"p99 {parts['cpu']['p99_ms']:.2f} ms")
        if "before" in res:
            b = res["before"]
            print(f"  wire schema, hand-written ({args.before}) -> msgspec: decode+validate "
                  f"{res['before_decode_per_s']} -> {res['decode_per_s']} messages/s; "
                  f"submits/s filling the queue {b['raw_batch100_submits_per_s']} -> "
                  f"{res['raw_batch100_submits_per_s']}, at load (1 job/msg) "
                  f"{b['raw_submits_per_s']} -> {res['raw_submits_per_s']}")
        else:
            print(f"  wire schema: decode+validate {res['decode_per_s']} messages/s")
        print(f"  coordinator memory: {res['coordinator_rss_mb']} MiB resident "
              f"(peak {res['coordinator_peak_rss_mb']}, idle {res['coordinator_rss_idle_mb']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
