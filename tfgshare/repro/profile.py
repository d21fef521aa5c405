"""``tfgshare profile``: measure models on the devices present and write a simulator profile.

Every measurement is a real runner process (``measure``: its JSON events read back;
this process never imports TensorFlow). Jobs are started as the node agent starts them: handed to a warm runner (``--warm``,
TensorFlow already imported) once it is ready, so the start-up measured is the one a
live cluster with a spare runner pays (the next one imports meanwhile on the cores the
measured runner does not use, as the agent's spare does); a bare ``import tensorflow`` is timed once and
``cold_startup_s`` = that plus the warm start-up (a start with no spare ready).

Per model and batch size, one fresh run gives:

- ``startup_s``: hand-over to the warm runner until its ``started`` event (graph
  build, session initialisation), plus what its first step took beyond a steady step
  (``first_step_extra_s``: TensorFlow's first-run set-up, paid by every start before the
  job trains at its step time; the simulator's start-up stands for both, and
  ``tfgshare replay`` measures a live start the same way); ``graph_build_s`` is the
  runner's own ``graph_s``;
- ``step_time_s``, ``images_per_s`` and ``memory_mb``: the runner's ``sample`` event
  (mean step time after the warm-up; peak GPU allocator memory on a GPU, peak RSS on
  the CPU); the step time is the mean over the steady steps after the sample (the
  sample's own mean, what the scheduler sees, is kept as ``sampled_step_time_s``);
- ``gpu_util``: single-tenant utilisation over the steady steps after the sample:
  NVML's device utilisation on a GPU; on virtual GPUs the runner's CPU seconds per
  wall second (one busy core = a fully used virtual GPU, as the agent reports it);
- ``save_s`` and ``checkpoint_mb``: the suspend that ends the run (its save ops already
  built by the post-sample checkpoint, as a real suspend pays);

- ``cpu_share`` (on the CPU): the share of its core the runner got while it wanted one,
  from the hand-over to the last steady step (``cpushare``); the times above are at that
  share, and ``tfgshare replay`` compares it with the share its live runners got;

and a second run on the same train dir gives ``resume_startup_s`` (its start-up: the
exported graph imported, the checkpoint read, and its first step's excess) and ``restore_s`` (its runner's own
restore phase). Few steps are run (``WARMUP``, ``SAMPLED``,
``STEADY``: a slow model such as vgg_16 on a CPU takes seconds per step, and its
1.5 GB checkpoint is written twice and read once), enough for a mean step time within
a few per cent on these deterministic loops. With ``--colocate`` each pair of
models runs at once on one device (``colocate``: half the memory each on a GPU, one
core on the CPU) and ``sim.colocation.Colocation`` is fitted to their slowdowns (on the
CPU taken at a whole core from the measured shares, so the fit survives a load that
changes between the runs); the fit error is printed and written.
"""


from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from .colocate import at_full_core, choose_pairs, colocate_pair, fit_colocation
from .measure import (STEADY_MIN_S, Device, NvmlUtil, busy_between, end_spare, find_device,
                      first_step_extra, import_seconds, share_until, spawn, steady_after,
                      stop_runs, tensorflow_version, wait_runs)

# steps of a profiling run: warm-up, sampled, then steady steps measured for utilisation
# (and spanning at least STEADY_MIN_S)
WARMUP, SAMPLED, STEADY = 1, 3, 3


def profile_one(device: Device, model: str, batch: int, image_size: int | None, work: Path,
                nvml: NvmlUtil | None, timeout_s: float = 900.0) -> dict:
    """Measure one (model, batch size): see the module doc for each figure."""
    train_dir = work / f"{model}-b{batch}"
    extra = ["--warmup_steps", str(WARMUP), "--num_sample_steps", str(SAMPLED),
             "--log_every_n_steps", "1"]
    run = spawn(f"{model}/{batch}", device, model, batch, image_size, 10**6, train_dir, extra,
                 timeout_s)

    def steady_start() -> float | None:
        ckpt = run.first("checkpoint")      # the save right after the sample
        return None if ckpt is None else ckpt["time"]

    def enough() -> bool:
        t0 = steady_start()
        steps = [] if t0 is None else steady_after(run, t0)
        return len(steps) >= STEADY and steps[-1]["time"] - t0 >= STEADY_MIN_S

    try:
        wait_runs([run], nvml, timeout_s, until=enough)
    finally:
        stop_runs([run])
    run.poll(nvml)
    started, sample, t0 = run.first("started"), run.first("sample"), steady_start()
    ckpts = run.all("checkpoint")
    if started is None or sample is None or t0 is None or len(ckpts) < 2:
        raise RuntimeError(f"{model}/{batch}: runner ended before its steady steps:\n"
                           + run.log_tail())
    steady = steady_after(run, t0)
    steady = [e for e in steady if e["time"] <= ckpts[-1]["time"]]
    cpu_share = share_until(run, steady[-1]["time"])
    util = busy_between(run.readings, t0, steady[-1]["time"], device.gpu)
    step_time = sum(e["step_time_s"] for e in steady) / len(steady)
    # restore: start again on the same train dir for one more step
    done = ckpts[-1]["step"]
    again = spawn(f"{model}/{batch} restore", device, model, batch, image_size, done + 1,
                   train_dir, ["--warmup_steps", "0", "--num_sample_steps", "1"], timeout_s)
    wait_runs([again], nvml, timeout_s)
    restarted = again.first("started")
    if restarted is None or not restarted.get("restored"):
        raise RuntimeError(f"{model}/{batch}: the restore run did not restore:\n"
                           + again.log_tail())
    phases = run.first("start_phases") or {}
    again_phases = again.first("start_phases") or {}
    # what the first step took beyond a steady one (TensorFlow's first-run set-up): paid
    # by every start before the job trains at its step time, so part of the start-up
    first_extra = first_step_extra(phases, step_time)
    resume_extra = first_step_extra(again_phases, step_time)
    startup = started["time"] - run.spawned + first_extra
    return {
        "model": model, "batch_size": batch, "image_size": image_size,
        "step_time_s": step_time, "sampled_step_time_s": sample["step_time_mean_s"],
        "images_per_s": batch / step_time, "memory_mb": sample["peak_memory_mb"],
        "memory_source": sample["memory_source"],
        "gpu_util": None if util is None else min(1.0, max(util, 0.01)),
        "startup_s": startup, "graph_build_s": phases.get("graph_s"),
        # the runner's own restore phase (a restart also imports the exported graph
        # instead of building it, so its start-up less the fresh one can be negative)
        "restore_s": float(again_phases.get("restore_s") or 0.0),
        "resume_startup_s": restarted["time"] - again.spawned + resume_extra,
        "first_step_extra_s": first_extra,
        "cpu_share": cpu_share,
        "save_s": ckpts[-1]["seconds"], "first_save_s": ckpts[0]["seconds"],
        "checkpoint_mb": ckpts[-1]["size_mb"],
    }



def build_profile(device: Device, rows: list[dict], pairs: list[dict], fit: dict | None,
                  command: str, import_s: float) -> dict:
    """The profile document (the format ``sim.profiles.load_profiles`` reads)."""
    models: dict[str, dict] = {}
    for r in rows:
        m = models.setdefault(r["model"], {
            "image_size": r["image_size"], "optimizer_slots": 2,
            "checkpoint_mb": round(r["checkpoint_mb"], 2), "startup_s": [],
            "graph_build_s": [], "save_s": [], "restore_s": [], "resume_startup_s": [],
            "first_step_extra_s": [], "cpu_share": [], "batches": {}})
        m["startup_s"].append(r["startup_s"])
        m["graph_build_s"].append(r["graph_build_s"] or 0.0)
        m["save_s"].append(r["save_s"])
        m["restore_s"].append(r["restore_s"])
        m["resume_startup_s"].append(r["resume_startup_s"])
        m["first_step_extra_s"].append(r.get("first_step_extra_s", 0.0))
        if r.get("cpu_share") is not None:
            m["cpu_share"].append(r["cpu_share"])
        m["batches"][r["batch_size"]] = {
            "step_time_s": round(r["step_time_s"], 4), "images_per_s": round(r["images_per_s"], 2),
            "memory_mb": round(r["memory_mb"], 1),
            "gpu_util": round(r["gpu_util"] if r["gpu_util"] is not None else 1.0, 3)}
        if r["gpu_util"] is None:   # provenance (sim.profiles): this one was not measured
            m["batches"][r["batch_size"]]["estimate"] = {
                "gpu_util": "not measured (no utilisation reading); 1.0 assumed"}
    for m in models.values():
        for k in ("startup_s", "graph_build_s", "save_s", "restore_s", "resume_startup_s",
                  "first_step_extra_s"):
            m[k] = round(sum(m[k]) / len(m[k]), 2)
        shares = m.pop("cpu_share")
        if shares:   # on the CPU: the share of its core the runner got while measured
            m["cpu_share"] = round(sum(shares) / len(shares), 3)
        # a start with no warm spare ready also pays the import
        m["cold_startup_s"] = round(m["startup_s"] + import_s, 2)
    mb = sum(r["checkpoint_mb"] for r in rows)
    secs = sum(r["save_s"] for r in rows)
    doc = {
        "reference_gpu": device.name,
        "device": device.name,
        "tensorflow": tensorflow_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "measured_by": command,
        # every step_time_s, memory_mb and gpu_util below was measured by that command,
        # except one a row lists under `estimate` (sim.profiles.PROVENANCE_MODES)
        "provenance": "measured",
        "import_tensorflow_s": round(import_s, 2),
        "storage_mb_s": round(mb / secs, 1) if secs > 0 else None,
        "models": models,
    }
    if fit is not None:
        doc["colocation"] = {k: (round(v, 4) if isinstance(v, float) else v)
                             for k, v in fit.items()}
        doc["colocation"]["pairs"] = [
            {"models": p["models"], "slowdown": [round(s, 3) for s in p["slowdown"]],
             **({"pair_share": round(p["pair_share"], 3), "cpu_ran_waited_s": p["cpu"]}
                if p.get("pair_share") else {})}
            for p in pairs]
    return doc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfgshare profile",
        description="Measure TF-Slim models on this machine's device (the first NVML GPU, "
                    "else the CPU as a virtual GPU) and write a simulator profile YAML.")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="model names; MODEL@SIZE sets the image size (e.g. vgg_16@224), "
                        "MODEL:B/B its own batch sizes instead of --batch-sizes (lenet:8)")
    p.add_argument("--batch-sizes", default="16,32,64", help="comma-separated (default 16,32,64)")
    p.add_argument("--colocate", action="store_true",
                   help="also run each pair of models at once on one device and fit the "
                        "co-location model")
    p.add_argument("--pairs", default=None,
                   help="with --colocate: only the first N pairs, or the pairs named as "
                        "A+B,C+D (model names)")
    p.add_argument("--out", default=None, help="profile YAML to write (default: print it)")
    p.add_argument("--cpu", action="store_true", help="profile the CPU even if a GPU is present")
    p.add_argument("--threads", type=int, default=1,
                   help="runner threads on the CPU (default 1, as the agent)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per runner (default 900)")
    return p



def _model_arg(text: str) -> tuple[str, int | None, list[int] | None]:
    """``MODEL[@SIZE][:B/B...]``: name, image size, this model's own batch sizes (or None)."""
    from slim_models import nets_factory
    head, _, sizes = text.partition(":")
    name, _, size = head.partition("@")
    try:
        image = int(size) if size else None
        own = [int(b) for b in sizes.split("/")] if sizes else None
    except ValueError:
        raise ValueError(f"{text!r}: expected MODEL[@SIZE][:BATCH/BATCH...]") from None
    if own is not None and min(own) < 1:
        raise ValueError(f"{text!r}: batch sizes must be positive")
    nets_factory.check_model(name, image)
    return name, image, own


def main(argv: list[str] | None = None) -> int:
    """Run the profile command; 0 on success, 2 on bad input, 1 if a measurement fails."""
    args = _parser().parse_args(argv)
    try:
        models = [_model_arg(m) for m in args.models]
        # the pairs, chosen once: a bad --pairs fails before measuring
        pair_plan = choose_pairs(models, args.pairs) if args.colocate else []
        batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
        if not batches or min(batches) < 1:
            raise ValueError(f"--batch-sizes needs positive integers, got {args.batch_sizes!r}")
        if args.threads < 1:
            raise ValueError("--threads must be >= 1")
    except ValueError as err:
        print(f"tfgshare profile: error: {err}", file=sys.stderr)
        return 2
    device = find_device(args.cpu, args.threads)
    print(f"device: {device.name}; TensorFlow {tensorflow_version()}", flush=True)
    nvml = NvmlUtil() if device.gpu else None
    command = "tfgshare profile " + " ".join(argv if argv is not None else sys.argv[1:])
    t_all = time.monotonic()
    load_before = _load_average()
    failed: list[str] = []
    rows, pairs, fit = [], [], None
    try:
        with tempfile.TemporaryDirectory(prefix="tfgshare-profile-") as tmp:
            work = Path(tmp)
            import_s = import_seconds(device)
            print(f"import tensorflow: {import_s:.1f} s (load average {load_before})", flush=True)
            runs = [(m, b) for m in models for b in (m[2] or batches)]
            n_pairs = len(pair_plan) if len(models) > 1 else 0
            print(f"{len(runs)} run{'s' if len(runs) > 1 else ''} of a (model, batch size) one at "
                  f"a time" + (f", then {n_pairs} pair{'s' if n_pairs > 1 else ''} at once" if
                               n_pairs else "")
                  + f":\n  each about {WARMUP + SAMPLED + STEADY + 1} of its steps, two start-ups "
                  "and three saves (on a CPU, minutes for a big model)",
                  flush=True)
            for i, ((model, size, own), batch) in enumerate(runs, 1):
                try:
                    row = profile_one(device, model, batch, size, work, nvml, args.timeout)
                except (RuntimeError, TimeoutError) as err:   # the other models still count
                    print(f"{model:>14} b{batch:<4} failed: {err}", file=sys.stderr, flush=True)
                    failed.append(f"{model}/{batch}: {str(err).splitlines()[0]}")
                    continue
                rows.append(row)
                print(f"[{i}/{len(runs)}, {time.monotonic() - t_all:.0f} s] {model} b{batch}: "
                      f"{row['step_time_s']:.3f} s/step, {row['images_per_s']:.1f} img/s, "
                      f"{row['memory_mb']:.0f} MB, util {row['gpu_util'] or 0:.2f}"
                      + ("" if row["cpu_share"] is None else
                         f", CPU share {row['cpu_share']:.2f}")
                      + f"\n    start {row['startup_s']:.1f} s (graph "
                      f"{row['graph_build_s'] or 0:.1f}), save {row['save_s']:.2f} s, restore "
                      f"{row['restore_s']:.1f} s (resume start {row['resume_startup_s']:.1f} s), "
                      f"checkpoint {row['checkpoint_mb']:.0f} MB", flush=True)
            if args.colocate and len(models) > 1:
                alone = {(r["model"], r["batch_size"]): r["step_time_s"] for r in rows}
                utils = {f"{r['model']}/{r['batch_size']}": r["gpu_util"] or 1.0 for r in rows}
                shares = {f"{r['model']}/{r['batch_size']}": r["cpu_share"] for r in rows
                          if r.get("cpu_share")}
                for (ma, sa, oa), (mb, sb, ob) in pair_plan:
                    a, b = (ma, min(oa or batches), sa), (mb, min(ob or batches), sb)
                    if (ma, a[1]) not in alone or (mb, b[1]) not in alone:
                        continue          # one of them failed alone: no baseline
                    try:   # each at its smallest batch
                        pair = colocate_pair(device, a, b, alone, work, nvml, args.timeout)
                    except (RuntimeError, TimeoutError) as err:
                        print(f"pair {ma} + {mb} failed: {err}", file=sys.stderr, flush=True)
                        failed.append(f"pair {ma}+{mb}: {str(err).splitlines()[0]}")
                        continue
                    pairs.append(pair)
                    full = at_full_core(pair, shares)
                    print(f"pair {' + '.join(pair['models'])}: slowdown "
                          + ", ".join(f"{s:.2f}" for s in pair["slowdown"])
                          + ("" if full is None else
                             f"\n    at a whole core {', '.join(f'{s:.2f}' for s in full)} "
                             f"(the pair got {pair['pair_share']:.2f} of its core)"),
                          flush=True)
                if pairs:
                    fit = fit_colocation(pairs, utils, shares or None)
                    print(f"co-location fit ({fit['basis']}): overhead {fit['overhead']:.2f}, exponent "
                          f"{fit['exponent']:.2f}\n    fit error mean "
                          f"{100 * fit['fit_error_mean']:.1f} %, max "
                          f"{100 * fit['fit_error_max']:.1f} % over {fit['points']} jobs",
                          flush=True)
    except (RuntimeError, TimeoutError) as err:
        print(f"tfgshare profile: measurement failed: {err}", file=sys.stderr)
        return 1
    finally:
        end_spare(device)
        if nvml is not None:
            nvml.close()
    if not rows:
        print("tfgshare profile: no model could be measured", file=sys.stderr)
        return 1
    doc = build_profile(device, rows, pairs, fit, command, import_s)
    doc["profiling_wall_s"] = round(time.monotonic() - t_all, 1)
    doc["load_average"] = {"before": load_before, "after": _load_average()}
    if failed:
        doc["failed"] = failed
    text = yaml.safe_dump(doc, sort_keys=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(f"# Written by `{command}`; see tfgshare/repro/profile.py "
                                  "for what each figure is.\n" + text)
        print(f"wrote {args.out} ({doc['profiling_wall_s']:.0f} s)")
    else:
        print(text)
    return 1 if failed else 0


def _load_average() -> str:
    """The machine's 1/5/15-minute load averages, as ``uptime`` shows them."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"
