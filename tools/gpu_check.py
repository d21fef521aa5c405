"""Checks that need a real GPU, and profile measurements for the simulator.

Run on a GPU machine (``tools/gpu_check.sh``); prints one YAML document:

- ``discovery``: what NVML sees;
- ``sharing``: two runners on one GPU at fractions 0.3/0.3, their real
  per-process memory from NVML against the fraction (plus a CUDA-context reserve);
- ``continuity``: suspend on the GPU, resume on the CPU, suspend, resume on the
  GPU: steps strictly consecutive across the three attempts;
- ``profile``: ``tfgshare profile`` of the paper's four models at two batch sizes with
  ``--colocate`` for two pairs (the simulator profile YAML it writes, and its
  co-location fit);
- ``reproduce``: ``tfgshare reproduce four-models --scale small`` under fifo and fgs on
  the node's real GPUs (the metrics table with ratios against fifo).

It ends with one block (between ``--- paste`` lines) ready to paste into
docs/reproduction.md. ``--allow-cpu`` runs the same steps on a virtual GPU with small
models and settings, to test this script on a machine without a GPU. Exit status 1 if
a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.agent import gpus as gpus_mod  # noqa: E402
from tfgshare.agent.supervisor import EventOut, ExitOut, Supervisor  # noqa: E402

PAPER_MODELS = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")


@dataclass
class Watch:
    """What a group of runners did: events, exits, NVML memory peaks, GPU utilisation."""

    events: dict[str, list[dict]] = field(default_factory=dict)
    exits: dict[str, ExitOut] = field(default_factory=dict)
    peak_mb: dict[str, float] = field(default_factory=dict)
    together: bool = False         # all watched runners seen in NVML's list at once
    util: list[float] = field(default_factory=list)


def watch(sup: Supervisor, source, jobs: list[str], timeout_s: float, until=None) -> Watch:
    """Poll runners and telemetry until every job exits, ``until(w)``, or the timeout."""
    w = Watch({j: [] for j in jobs})
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for out in sup.poll():
            if isinstance(out, EventOut):
                w.events.setdefault(out.runner.job, []).append(out.event)
            else:
                w.exits[out.runner.job] = out
        live = {p.pid: p.gpu_indices for p in sup.runners.values() if p.job in jobs}
        tel = source.read(live)
        by_pid = {p.pid: p.job for p in sup.runners.values()}
        seen = set()
        for pid, per_gpu in tel.process_memory_mb.items():
            if pid in by_pid:
                seen.add(by_pid[pid])
                job = by_pid[pid]
                w.peak_mb[job] = max(w.peak_mb.get(job, 0.0), max(per_gpu.values()))
        if len(jobs) > 1 and seen >= set(jobs):
            w.together = True
        if live and tel.gpus:
            w.util.append(tel.gpus[0].util)
        if all(j in w.exits for j in jobs) or (until and until(w)):
            return w
        time.sleep(0.1)
    raise TimeoutError(f"runners {jobs} did not finish within {timeout_s:.0f}s")


def flags(model: str, batch: int, steps: int, image_size: int | None = None) -> list[str]:
    """Runner flags for a small synthetic-data job that logs every step."""
    out = ["--model_name", model, "--batch_size", str(batch), "--max_number_of_steps",
           str(steps), "--log_every_n_steps", "1", "--save_interval_secs", "0"]
    return out + (["--image_size", str(image_size)] if image_size else [])


def check_sharing(sup, source, gpu, args, work: Path) -> dict:
    """Two runners at 0.3 each on one GPU: both run at once, each within its fraction."""
    fraction, jobs = 0.3, ["share-a", "share-b"]
    for job in jobs:
        sup.start(job, 1, flags(args.share_model, args.batch_size, args.share_steps),
                  work / job, [(gpu.index, fraction)], virtual=gpu.virtual)
    w = watch(sup, source, jobs, args.phase_timeout)
    limit = fraction * gpu.memory_mb + args.reserve_mb
    result = {"model": args.share_model, "fraction": fraction, "limit_mb": round(limit),
              "together": w.together,
              "peak_mb": {j: round(w.peak_mb.get(j, 0.0)) for j in jobs},
              "exit_codes": {j: w.exits[j].exit_code for j in jobs}}
    result["ok"] = (w.together and all(0 < w.peak_mb.get(j, 0) <= limit for j in jobs)
                    and all(w.exits[j].exit_code == 0 for j in jobs))
    return result


def _attempt(sup, source, job, attempt, args, train_dir, gpu, virtual, stop_after):
    sup.start(job, attempt, flags(args.continuity_model, args.continuity_batch,
                                  args.continuity_steps, args.continuity_image_size),
              train_dir, [(gpu.index, 0.5)], virtual=virtual)
    if stop_after is None:
        return watch(sup, source, [job], args.phase_timeout)
    first = []

    def reached(w):
        steps = [e["step"] for e in w.events[job] if e["event"] == "progress"]
        if not first and steps:
            first.append(steps[0])
        return steps and steps[-1] >= first[0] + stop_after - 1
    w = watch(sup, source, [job], args.phase_timeout, until=reached)
    if job in sup.runners:
        sup.suspend(job)
        rest = watch(sup, source, [job], args.phase_timeout)
        w.events[job] += rest.events[job]
        w.exits.update(rest.exits)
    return w


def check_continuity(sup, source, gpu, args, work: Path) -> dict:
    """Suspend on the GPU, resume on the CPU, then back on the GPU: no step lost or repeated."""
    job, train_dir = "continuity", work / "continuity"
    plan = [(gpu.virtual, 5), (True, 3), (gpu.virtual, None)]   # GPU, CPU, GPU to the end
    events, codes = [], []
    for n, (virtual, stop_after) in enumerate(plan, start=1):
        w = _attempt(sup, source, job, n, args, train_dir, gpu, virtual, stop_after)
        events += w.events[job]
        codes.append(w.exits[job].exit_code)
    steps = [e["step"] for e in events if e["event"] == "progress"]
    starts = [e["global_step"] for e in events if e["event"] == "started"]
    devices = [e.get("device") for e in events if e["event"] == "started"]
    ok = (steps == list(range(1, args.continuity_steps + 1)) and codes == [75, 75, 0])
    return {"model": args.continuity_model, "steps": len(steps), "resumed_at": starts,
            "devices": devices, "exit_codes": codes, "consecutive": ok, "ok": ok}


def tfgshare(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run a ``tfgshare`` command of this checkout; its output captured."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tfgshare.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def run_profile(args, work: Path) -> dict:
    """``tfgshare profile`` of the models at two batch sizes, two co-located pairs."""
    out = work / "profile.yaml"
    cmd = ["profile", *args.models, "--batch-sizes", args.profile_batch_sizes, "--colocate",
           "--pairs", "2", "--out", str(out)] + (["--cpu"] if args.allow_cpu else [])
    t0 = time.monotonic()
    done = tfgshare(cmd, args.phase_timeout * 4)
    result = {"command": "tfgshare " + " ".join(cmd), "wall_s": round(time.monotonic() - t0),
              "ok": done.returncode == 0 and out.exists()}
    if not result["ok"]:
        result["error"] = (done.stdout + done.stderr)[-2000:]
        return result
    doc = yaml.safe_load(out.read_text())
    result["lines"] = [line for line in done.stdout.splitlines() if line.strip()]
    result["yaml"] = out.read_text()
    result["ok"] = "colocation" in doc and all(
        len(m["batches"]) == len(args.profile_batch_sizes.split(","))
        for m in doc["models"].values())
    return result


def run_reproduce(args, work: Path) -> dict:
    """``tfgshare reproduce four-models --scale small`` under fifo and fgs."""
    cmd = ["reproduce", "four-models", "--scale", "small", "--policy", "fifo,fgs",
           "--out", str(work / "four-models")]
    if args.allow_cpu:      # a few lenet jobs stand in for the batch
        config = work / "batch.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(yaml.safe_dump({"scales": {"small": {
            "cluster": {"nodes": 1, "virtual_gpus": "1x16GiB"}, "timeout_s": 300,
            "burst": 2, "interval_s": 2,
            "jobs": [{"model": "lenet", "batch_size": 2, "steps": n}
                     for n in (40, 20, 30)][:args.reproduce_jobs]}}}))
        cmd += ["--config", str(config)]
    else:
        cmd += ["--real-gpus"] + (["--jobs", str(args.reproduce_jobs)]
                                  if args.reproduce_jobs else [])
    t0 = time.monotonic()
    done = tfgshare(cmd, args.phase_timeout * 6)
    result = {"command": "tfgshare " + " ".join(cmd), "wall_s": round(time.monotonic() - t0),
              "ok": done.returncode == 0}
    table = work / "four-models" / "report.txt"
    if table.exists():
        result["table"] = table.read_text()
        jobs = json.loads((work / "four-models" / "jobs.json").read_text())
        result["finished"] = {p: f"{v['report']['finished']}/{v['report']['jobs']}"
                              for p, v in jobs["policies"].items()}
    if not result["ok"]:
        result["error"] = (done.stdout + done.stderr)[-2000:]
    else:
        result["lines"] = [line for line in done.stdout.splitlines() if line.strip()]
    return result


def paste_block(report: dict) -> str:
    """The results as one markdown block for docs/reproduction.md."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    gpus = ", ".join(f"{g['name']} ({g['memory_mb']} MiB)" for g in report["discovery"]["gpus"])
    lines = [f"GPU check of {when} on {gpus} (`tools/gpu_check.sh`):", ""]
    for name in ("discovery", "sharing", "continuity", "profile", "reproduce"):
        r = report.get(name, {})
        lines.append(f"- {name}: {'ok' if r.get('ok') else 'FAILED'}")
    sh = report.get("sharing", {})
    if "peak_mb" in sh:
        lines.append(f"- sharing: two {sh['model']} at fraction {sh['fraction']}: peaks "
                     f"{sh['peak_mb']} MiB (limit {sh['limit_mb']}), together: {sh['together']}")
    co = report.get("continuity", {})
    if "resumed_at" in co:
        lines.append(f"- continuity: resumed at steps {co['resumed_at']} on {co['devices']}, "
                     f"consecutive: {co['consecutive']}")
    prof = report.get("profile", {})
    if prof.get("lines"):
        lines += ["", f"`{prof['command']}` ({prof['wall_s']} s):", "", "```"]
        lines += prof["lines"] + ["```"]
    rep = report.get("reproduce", {})
    if rep.get("table"):
        lines += ["", f"`{rep['command']}` ({rep['wall_s']} s):", "", "```",
                  rep["table"].rstrip(), "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the GPU checks and print their results as YAML."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allow-cpu", action="store_true",
                   help="no GPU: run the same steps on a virtual GPU with small models")
    p.add_argument("--models", nargs="+", help="models to profile (default: the paper's four)")
    p.add_argument("--batch-size", type=int, default=32, help="batch of the sharing check")
    p.add_argument("--profile-batch-sizes", default=None,
                   help="two batch sizes for tfgshare profile (default 16,32; 1,2 on the CPU)")
    p.add_argument("--reproduce-jobs", type=int, default=None,
                   help="only the first N jobs of the four-model batch (default all; 3 on CPU)")
    p.add_argument("--share-model", default="resnet_v1_50")
    p.add_argument("--share-steps", type=int, default=150)
    p.add_argument("--continuity-model", default="resnet_v1_50")
    p.add_argument("--continuity-image-size", type=int, default=64)
    p.add_argument("--continuity-batch", type=int, default=8)
    p.add_argument("--continuity-steps", type=int, default=400)
    p.add_argument("--profile-fraction", type=float, default=0.9)
    p.add_argument("--reserve-mb", type=float, default=1024,
                   help="CUDA context allowance over the fraction (MiB)")
    p.add_argument("--phase-timeout", type=float, default=240)
    p.add_argument("--work-dir", type=Path)
    args = p.parse_args(argv)
    if args.allow_cpu:
        source = gpus_mod.VirtualGpus(gpus_mod.parse_virtual_gpus("1x16GiB"))
        args.models = args.models or ["lenet", "cifarnet"]
        args.profile_batch_sizes = args.profile_batch_sizes or "1,2"
        args.reproduce_jobs = args.reproduce_jobs or 3
        for name in ("share_model", "continuity_model"):
            setattr(args, name, "lenet")
        args.continuity_image_size = None
    else:
        try:
            source = gpus_mod.NvmlGpus()
        except Exception as exc:
            print(f"gpu_check: NVML is not available ({exc}); this check needs a GPU "
                  "(or --allow-cpu to test the script)", file=sys.stderr)
            return 2
        if not source.gpus:
            print("gpu_check: NVML sees no GPU", file=sys.stderr)
            return 2
        args.models = args.models or list(PAPER_MODELS)
        args.profile_batch_sizes = args.profile_batch_sizes or "16,32"
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="tfgshare-gpucheck-"))
    sup = Supervisor(work / "runs", threads=4, suspend_timeout_s=60)
    gpu = source.gpus[0]
    report: dict = {"discovery": {"gpus": [vars(g) for g in source.gpus],
                                  "ok": bool(source.gpus)}}
    steps = [("sharing", check_sharing), ("continuity", check_continuity)]
    try:
        for name, check in steps:
            print(f"# {name} ...", file=sys.stderr, flush=True)
            try:
                report[name] = check(sup, source, gpu, args, work / name)
            except TimeoutError as exc:
                report[name] = {"ok": False, "error": str(exc)}
    finally:
        for job in list(sup.runners):
            sup.kill(job)
        source.close()
    for name, run in (("profile", run_profile), ("reproduce", run_reproduce)):
        print(f"# {name} ...", file=sys.stderr, flush=True)
        try:
            report[name] = run(args, work / name)
        except subprocess.TimeoutExpired as exc:
            report[name] = {"ok": False, "error": f"timed out: {exc}"}
    print(yaml.safe_dump({k: v for k, v in report.items()}, sort_keys=False))
    print("--- paste into docs/reproduction.md")
    print(paste_block(report))
    print("--- end")
    print(f"# work dir: {work}", file=sys.stderr)
    ok = all(report[k].get("ok") for k in ("discovery", "sharing", "continuity", "profile",
                                           "reproduce"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
