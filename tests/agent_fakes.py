"""A tiny stand-in job runner for the agent's unit tests (no TensorFlow).

It follows ``tfgshare.runner.protocol``: JSON-lines events, exit codes, and
SIGUSR1/SIGTERM = checkpoint after the current step and exit 75. Its
"checkpoint" is the global step in ``<train_dir>/step``. Extra flags:
``--step_time S`` (seconds per step), ``--ignore_signals`` (never stops) and
``--hold_mb N`` (keeps N MiB resident). Its events carry exactly the fields of
the real runner's (``protocol.EVENTS``); what the agent gave its environment
goes to ``<train_dir>/env.json`` for the tests to read.
"""

FAKE_RUNNER = r'''
import argparse, json, os, signal, sys, time
p = argparse.ArgumentParser()
p.add_argument("--model_name"); p.add_argument("--train_dir"); p.add_argument("--events_file")
p.add_argument("--max_number_of_steps", type=int, default=10)
p.add_argument("--memory_fraction", type=float); p.add_argument("--num_gpus", type=int)
p.add_argument("--job_id"); p.add_argument("--sample_only", action="store_true")
p.add_argument("--step_time", type=float, default=0.02)
p.add_argument("--ignore_signals", action="store_true")
p.add_argument("--hold_mb", type=int, default=0)
a, _ = p.parse_known_args()
held = bytearray(a.hold_mb * 2**20)   # resident: bytearray zero-fills it
def emit(event, **kw):
    with open(a.events_file, "a") as f:
        f.write(json.dumps({"event": event, "time": time.time(), **kw}) + "\n")
if a.model_name == "nosuchnet":
    emit("error", message="unknown model nosuchnet"); sys.exit(2)
stop = []
if a.ignore_signals:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
os.makedirs(a.train_dir, exist_ok=True)
ck = os.path.join(a.train_dir, "step")
step = int(open(ck).read()) if os.path.exists(ck) else 0
with open(os.path.join(a.train_dir, "env.json"), "w") as f:   # for the tests, not an event
    json.dump({"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "threads": os.environ.get("TF_NUM_INTRAOP_THREADS")}, f)
emit("started", global_step=step, restored=step > 0, device="cpu",
     memory_fraction=a.memory_fraction)
def save(step):
    open(ck, "w").write(str(step)); emit("checkpoint", step=step, path=ck, seconds=0.0, size_mb=0.0)
sampled = 0
while step < a.max_number_of_steps:
    time.sleep(a.step_time)
    step += 1; sampled += 1
    emit("progress", step=step, loss=1.0 / step, step_time_s=a.step_time,
         images_per_sec=1.0, predicted_remaining_s=(a.max_number_of_steps - step) * a.step_time)
    if a.sample_only and sampled == 3:
        emit("sample", warmup_steps=1, sampled_steps=2, step=step, step_time_mean_s=a.step_time,
             step_time_std_s=0.0, images_per_sec=1.0, peak_memory_mb=100.0,
             memory_source="process_rss_peak", predicted_remaining_s=1.0, predicted_total_s=2.0,
             window_start=time.time() - 2 * a.step_time, cpu_util=0.5, cpu_wait_s=0.0,
             cpu_run_s=a.step_time, cluster_runnable=0.0)
        save(step); emit("suspended", step=step); sys.exit(75)
    if stop:
        save(step); emit("suspended", step=step); sys.exit(75)
save(step)
emit("finished", step=step, loss=1.0 / max(step, 1))
'''


def write_fake_runner(directory) -> list[str]:
    """Write the fake runner into ``directory``; return the command that runs it."""
    import sys
    from pathlib import Path
    path = Path(directory) / "fake_runner.py"
    path.write_text(FAKE_RUNNER)
    return [sys.executable, str(path)]
