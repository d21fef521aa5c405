"""The user's commands: submit, status, watch, nodes, logs, cancel, suspend, resume, migrate.

Each is ``f(argv) -> exit code``: 0 on success, 1 when the coordinator is
unreachable or refuses, 2 for bad arguments. Every request waits at most
``--timeout`` seconds (1 by default).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tfgshare import schema as s
from tfgshare.client.api import Client, ClientError, Refused, Unreachable, default_address

# slim flags that map onto JobSpec fields: flag -> (field, type)
_SLIM_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--batch_size": ("batch_size", int),
    "--max_number_of_steps": ("max_number_of_steps", int),
    "--dataset_name": ("dataset_name", str),
    "--dataset_dir": ("dataset_dir", str),
    "--optimizer": ("optimizer", str),
    "--learning_rate": ("learning_rate", float),
    "--learning_rate_decay_type": ("learning_rate_decay_type", str),
    "--weight_decay": ("weight_decay", float),
    "--train_image_size": ("image_size", int),
    "--image_size": ("image_size", int),
    "--num_classes": ("num_classes", int),
    "--num_gpus": ("num_gpus", int),
    "--priority": ("priority", int),
    "--name": ("name", str),
}


class UsageError(Exception):
    """Bad command-line input; the text says what is wrong."""


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"tfgshare {prog}", description=description)
    p.add_argument("--coordinator", default=default_address(),
                   help="coordinator address (default $TFGSHARE_COORDINATOR or "
                        "tcp://127.0.0.1:5555)")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for an answer")
    p.add_argument("--key", default=None,
                   help="your CurveZMQ secret key file (default $TFGSHARE_KEY; see tfgshare keys)")
    p.add_argument("--server-key", default=None,
                   help="the coordinator's public key file (default $TFGSHARE_SERVER_KEY, else "
                        "coordinator.key beside --key)")
    return p


def _run(prog: str, args: argparse.Namespace, body: Callable[[Client], int]) -> int:
    try:
        with Client(args.coordinator, timeout_s=args.timeout, key=args.key,
                    server_key=args.server_key) as client:
            return body(client)
    except Unreachable as exc:
        print(f"tfgshare {prog}: {exc}", file=sys.stderr)
    except Refused as exc:
        print(f"tfgshare {prog}: refused: {exc}", file=sys.stderr)
    except ClientError as exc:
        print(f"tfgshare {prog}: {exc}", file=sys.stderr)
    return 1


def _console():
    from rich.console import Console
    # piped output: wide lines rather than truncated columns
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


# ---- submit ---------------------------------------------------------------------


def parse_submit(argv: list[str]) -> list[s.JobSpec]:
    """The job specs of ``submit MODEL [flags]`` or ``submit -f jobs.yaml`` (no options)."""
    if argv and argv[0] in ("-f", "--file"):
        if len(argv) != 2:
            raise UsageError("submit -f takes one file: submit -f jobs.yaml")
        return specs_from_yaml(Path(argv[1]))
    if not argv or argv[0].startswith("-"):
        raise UsageError("submit needs a model name (submit MODEL [slim flags]) or -f FILE")
    fields: dict[str, Any] = {"model_name": argv[0]}
    extra: list[str] = []
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--"):
            raise UsageError(f"unexpected argument {arg!r}; flags look like --batch_size 32")
        takes_value = eq or (rest and not rest[0].startswith("--"))
        if not eq and takes_value:
            value = rest.pop(0)
        if flag == "--memory_fraction":
            if not takes_value:
                raise UsageError("--memory_fraction needs a value: a number in (0, 1] or auto")
            fields["memory_fraction"] = _fraction(value)
        elif flag in _SLIM_FLAGS:
            name, kind = _SLIM_FLAGS[flag]
            if not takes_value:
                raise UsageError(f"{flag} needs a value")
            try:
                fields[name] = kind(value)
            except ValueError:
                raise UsageError(f"{flag} must be {kind.__name__}, got {value!r}") from None
        else:   # another runner flag: JobSpec checks it against schema.RUNNER_FLAGS
            extra += [flag, value] if takes_value else [flag]
    fields["extra"] = extra
    try:
        spec = s.job_spec(fields, "")   # the caller says "tfgshare submit: " itself
    except s.SchemaError as exc:
        raise UsageError(str(exc)) from None
    _check_paths([spec])
    return [spec]


def _check_paths(specs: list[s.JobSpec]) -> None:
    """What the agents' path rule (``paths.confine``) refuses without knowing their roots:
    a relative dataset dir. The coordinator checks the roots at submit."""
    from tfgshare.paths import absolute
    for i, spec in enumerate(specs, 1):
        if spec.dataset_dir is not None:
            try:
                absolute(spec.dataset_dir, "dataset_dir")
            except ValueError as exc:
                raise UsageError(f"job {i}: {exc}" if len(specs) > 1 else str(exc)) from None


def _fraction(value: str) -> float | str:
    if value == "auto":
        return value
    try:
        f = float(value)
    except ValueError:
        raise UsageError(f"--memory_fraction must be a number in (0, 1] or auto, "
                         f"got {value!r}") from None
    if not math.isfinite(f):
        raise UsageError(f"--memory_fraction must be a finite number in (0, 1] or auto, "
                         f"got {value}")
    if not 0.0 < f <= 1.0:
        raise UsageError(f"--memory_fraction must be in (0, 1], got {value}")
    return f


def specs_from_yaml(path: Path) -> list[s.JobSpec]:
    """Job specs from a YAML file: a list of mappings of JobSpec fields (or {jobs: [...]}).

    The file is read with ``yaml.safe_load`` (no tags that build objects); an error
    names the file's line.
    """
    import yaml
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and "jobs" in data:
        data = data["jobs"]
    if not isinstance(data, list) or not data:
        raise UsageError(f"{path} must hold a non-empty list of jobs")
    lines = _job_lines(text)
    specs = []
    for i, item in enumerate(data, 1):
        if isinstance(item, dict) and "model" in item and "model_name" not in item:
            item = {("model_name" if k == "model" else k): v for k, v in item.items()}
        try:
            item = _flag_keys(item, f"job {i}")
            specs.append(s.job_spec(item, f"job {i}"))
        except s.SchemaError as exc:
            line, keys = lines[i - 1] if i <= len(lines) else (None, {})
            # the line of the field the error is about (extra runner flags: their key, if
            # given as one, else "extra")
            flag = re.search(r"runner flag --(?:no)?(\w+)", str(exc))
            key = flag and flag.group(1)
            text = ((key if key in s.RUNNER_FLAGS and key in keys else "extra") if flag
                    else str(exc))
            for key, key_line in keys.items():
                if re.search(rf"\b{re.escape(key)}\b", text):
                    line = key_line
                    break
            where = f"{path.name}, line {line}" if line else path.name
            raise UsageError(f"{where}: {exc}") from None
    _check_paths(specs)
    return specs


def _flag_keys(item: Any, where: str) -> Any:
    """A YAML job with runner flags as keys (``seed: 7``, ``deterministic: true``): those
    keys moved into ``extra`` as the flags ``--seed 7`` / ``--deterministic``, which the
    JobSpec then checks as any extra flag (allowed values, given once)."""
    if not isinstance(item, dict) or not any(k in s.RUNNER_FLAGS for k in item):
        return item
    out, flags = {}, []
    for key, value in item.items():
        kind = s.RUNNER_FLAGS.get(key) if isinstance(key, str) else None
        if kind is None:
            out[key] = value
        elif kind is bool:
            if not isinstance(value, bool):
                raise s.SchemaError(f"{where}: runner flag --{key} is true or false, "
                                    f"got {value!r}")
            flags.append(f"--{key}" if value else f"--no{key}")
        elif isinstance(value, (bool, list, dict)) or value is None:
            raise s.SchemaError(f"{where}: runner flag --{key} needs one value, got {value!r}")
        else:
            flags += [f"--{key}", str(value)]
    extra = out.get("extra", [])
    out["extra"] = (list(extra) + flags) if isinstance(extra, list) else extra
    return out


def _job_lines(text: str) -> list[tuple[int, dict[str, int]]]:
    """Per job of a YAML job file: its first line and the line of each of its keys."""
    import yaml
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if isinstance(root, yaml.MappingNode):
        root = next((v for k, v in root.value if k.value == "jobs"), None)
    if not isinstance(root, yaml.SequenceNode):
        return []
    out = []
    for node in root.value:
        keys = {}
        if isinstance(node, yaml.MappingNode):
            keys = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
            if "model" in keys:
                keys.setdefault("model_name", keys["model"])
        out.append((node.start_mark.line + 1, keys))
    return out


def _check_models(specs: list[s.JobSpec]) -> None:
    from tfgshare.model_table import check_model
    for i, spec in enumerate(specs, 1):
        try:
            check_model(spec.model_name, spec.image_size)
        except ValueError as exc:
            label = f"job {i} ({spec.model_name})" if len(specs) > 1 else spec.model_name
            raise UsageError(f"{label}: {exc}") from None


def submit(argv: list[str]) -> int:
    """Submit one job (MODEL [slim flags]) or many (-f jobs.yaml); print their ids."""
    p = _parser("submit", "Submit TF-Slim training jobs.")
    p.usage = ("tfgshare submit [--coordinator ADDR] MODEL [--batch_size B] "
               "[--max_number_of_steps N] [--num_gpus N] [--memory_fraction F|auto] "
               "[other slim flags]\n       tfgshare submit [--coordinator ADDR] -f jobs.yaml")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _submit_help()
    own, rest = _split_own_flags(argv)
    args = p.parse_args(own)
    try:
        specs = parse_submit(rest)
        _check_models(specs)
    except UsageError as exc:
        print(f"tfgshare submit: {exc}", file=sys.stderr)
        return 2

    def body(client: Client) -> int:
        ids = client.submit(specs)
        for jid, spec in zip(ids, specs):
            print(f"{jid}\t{spec.model_name}")
        return 0
    return _run("submit", args, body)


def _submit_help() -> str:
    """What a job may say, on the command line and in a YAML job file."""
    import textwrap
    fields = " ".join(sorted({f for f, _ in _SLIM_FLAGS.values()} | {"memory_fraction"}))
    flags = " ".join(sorted(s.RUNNER_FLAGS))
    wrap = lambda text: textwrap.fill(text, 88, initial_indent="  ",
                                      subsequent_indent="  ")
    return "\n".join([
        "job fields (--FIELD VALUE on the command line, FIELD: VALUE in a job file):",
        wrap(fields + " (--train_image_size sets image_size)"),
        "",
        "other runner flags a job may set, each range-checked at submit:",
        wrap(flags),
        "  on the command line as --seed 7 (booleans: --deterministic, --nodeterministic);",
        "  in a job file as keys (seed: 7, deterministic: true) or as extra: [--seed, '7']",
        "",
        "a job file (-f jobs.yaml) is a list of jobs, or {jobs: [...]}; for example:",
        "  - model: inception_v3        # or model_name",
        "    batch_size: 16",
        "    max_number_of_steps: 200",
        "    memory_fraction: auto",
        "    seed: 7",
        "    log_every_n_steps: 10",
        "",
        "--dataset_dir must be a folder under the agents' data roots (their --data-root;",
        "by default the shared data folder and the checkpoint root); --train_dir and the",
        "other paths are set by the agent.",
    ])


def _split_own_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split --coordinator/--timeout (ours) from the job's flags."""
    own, rest = [], []
    it = iter(argv)
    for arg in it:
        name = arg.partition("=")[0]
        if name in ("--coordinator", "--timeout", "--key", "--server-key", "-h", "--help"):
            own.append(arg)
            if "=" not in arg and name not in ("-h", "--help"):
                own.append(next(it, ""))
        else:
            rest.append(arg)
    return own, rest


# ---- status -----------------------------------------------------------------------


def _dur(seconds: float | None) -> str:
    from tfgshare.metrics import format_duration
    return format_duration(seconds)


def _where(job: dict[str, Any]) -> str:
    return ", ".join(f"{g} ({f:.2f})" for g, f in job["fragments"]) or "-"


def jobs_table(jobs: list[dict[str, Any]]):
    """The status table (a rich Table)."""
    from rich.table import Table
    t = Table(show_edge=False, pad_edge=False)
    owners = any(j.get("owner") for j in jobs)    # keys on: show who submitted each job
    cols = ("JOB", "OWNER", "MODEL", "STATE", "WHERE", "STEPS", "LEFT", "WAITED", "MOVES", "NOTE")
    for col in cols:
        if col != "OWNER" or owners:
            t.add_column(col, no_wrap=col in ("JOB", "STATE"))
    for j in jobs:
        steps = f"{j['steps_done']}/{j['total_steps']}"
        moves = f"{j['suspends']}s {j['migrations']}m"
        note = j["over_memory"] and f"[red]OVER FRAGMENT: {j['over_memory']}[/red]"
        if not note and j["state"] in ("failed", "suspended", "unknown"):
            note = j["reason"]
        row = [j["id"], j["model"], j["state"], _where(j), steps,
               _dur(j["predicted_remaining_s"]), _dur(j["waited_s"]), moves, note or ""]
        if owners:
            row.insert(1, j.get("owner") or "-")
        t.add_row(*row)
    return t


def status(argv: list[str]) -> int:
    """Show every job as a table, one job in detail, or the metrics report."""
    p = _parser("status", "Show jobs.")
    p.add_argument("job", nargs="?", help="one job's id")
    p.add_argument("--report", action="store_true", help="the run's metrics report")
    p.add_argument("--active", action="store_true",
                   help="only jobs not finished, failed or cancelled")
    p.add_argument("--json", action="store_true", help="print the raw answer as JSON")
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        if args.report:
            rep = client.metrics()
            print(json.dumps(rep, indent=1) if args.json else rep["report"])
            return 0
        if args.job:
            job = client.job(args.job)
            if args.json:
                print(json.dumps(job, indent=1))
            else:
                _print_job(job)
            return 0
        answer = client.status(active=args.active)
        jobs = answer["jobs"]
        if args.json:
            print(json.dumps(jobs, indent=1))
            return 0
        if jobs:
            _console().print(jobs_table(jobs))
        counts = ", ".join(f"{n} {state}" for state, n in sorted(answer["counts"].items()))
        print(counts or "no jobs")
        err = answer.get("prediction_error")
        if err and err.get("jobs"):
            print(f"prediction error (|predicted - actual| / actual run time after sampling): "
                  f"mean {100 * err['mean']:.0f} %, p90 {100 * err['p90']:.0f} % "
                  f"over {err['jobs']} jobs")
        refused = answer.get("refused") or {}
        if refused:
            print("policy actions refused: " +
                  ", ".join(f"{n} {r}" for r, n in sorted(refused.items())))
        return 0
    return _run("status", args, body)


def _print_job(job: dict[str, Any]) -> None:
    sample = job["sample"]
    rows = [
        ("job", job["id"] + (f" ({job['name']})" if job["name"] else "")),
        ("owner", job.get("owner") or "-"), ("model", job["model"]), ("state", job["state"]),
        ("where", _where(job)), ("gpus", str(job["num_gpus"])),
        ("memory fraction", str(job["memory_fraction"])),
        ("steps", f"{job['steps_done']}/{job['total_steps']}"),
        ("predicted left", _dur(job["predicted_remaining_s"])),
        ("prediction error", "-" if job.get("prediction_error") is None else
         f"{100 * job['prediction_error']:.0f} % (predicted {_dur(job['predicted_total_s'])} "
         "after sampling)"),
        ("waited", _dur(job["waited_s"])), ("ran", _dur(job["run_time_s"])),
        ("moves", f"{job['suspends']} suspends, {job['resumes']} resumes, "
                  f"{job['migrations']} migrations"),
        ("attempt", str(job["attempt"])),
        ("sample", "-" if sample is None else
         f"{sample['step_time_s']:.3f} s/step, peak {sample['peak_memory_mb']:.0f} MiB, "
         f"util {sample['gpu_util']:.2f}, {sample['co_tenants']} co-tenants"),
        ("gpu memory", ", ".join(f"GPU {i}: {mb:.0f} MiB" for i, mb in
                                 job["gpu_memory_mb"].items()) or "-"),
    ]
    if job["over_memory"]:
        rows.append(("OVER FRAGMENT", job["over_memory"]))
    if job["reason"]:
        rows.append(("reason", job["reason"]))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")


# ---- watch -------------------------------------------------------------------------


def progress_view(jobs: list[dict[str, Any]], plain: bool = False):
    """Per-job progress bars (a rich Table); ``plain``: the share done as text instead
    of a bar (for a pipe or a file)."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    t = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("JOB", "MODEL", "STATE", "DONE" if plain else "PROGRESS", "STEPS", "LEFT",
                "WHERE"):
        t.add_column(col, no_wrap=True, justify="right" if plain and col == "DONE" else "left")
    for j in jobs:
        total = max(1, j["total_steps"])
        done = min(total, j["steps_done"])
        bar = (f"{100 * done / total:.0f}%" if plain
               else ProgressBar(total=total, completed=done, width=30))
        t.add_row(j["id"], j["model"], j["state"], bar, f"{j['steps_done']}/{j['total_steps']}",
                  _dur(j["predicted_remaining_s"]), _where(j))
    return t


_DONE = ("finished", "failed", "cancelled")


def watch(argv: list[str]) -> int:
    """Live progress bars per job, until every job is done (or Ctrl-C)."""
    p = _parser("watch", "Live progress per job.")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--once", action="store_true", help="draw once and exit")
    p.add_argument("--all", action="store_true", help="show done jobs too")
    args = p.parse_args(argv)
    if args.interval <= 0:
        p.error("--interval must be > 0")

    def fetch(client: Client) -> tuple[list[dict[str, Any]], bool]:
        """The jobs to show, and whether every job is done."""
        answer = client.status(active=not args.all)
        done = not any(state not in _DONE for state in answer["counts"])
        if not answer["jobs"] and answer["counts"] and not args.all:
            answer = client.status()          # all done: show how they ended
        return answer["jobs"], done and bool(answer["counts"])

    def body(client: Client) -> int:
        jobs, done = fetch(client)
        console = _console()
        if args.once:
            console.print(progress_view(jobs) if jobs else "no jobs")
            return 0
        if not sys.stdout.isatty():   # a pipe or a file: a plain table per refresh, no live view
            try:
                while True:
                    console.print(f"{time.strftime('%H:%M:%S')}  {len(jobs)} job(s)")
                    console.print(progress_view(jobs, plain=True) if jobs else "no jobs")
                    console.file.flush()
                    if done:
                        return 0
                    time.sleep(args.interval)
                    jobs, done = fetch(client)
            except (KeyboardInterrupt, BrokenPipeError):
                return 0
        from rich.live import Live
        try:
            with Live(progress_view(jobs), console=console, refresh_per_second=4) as live:
                while not done:
                    time.sleep(args.interval)
                    jobs, done = fetch(client)
                    live.update(progress_view(jobs))
        except KeyboardInterrupt:
            pass
        return 0
    return _run("watch", args, body)


# ---- nodes --------------------------------------------------------------------------


_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan",
            "bright_magenta")


def gpu_bar(gpu: dict[str, Any], reserve_mb: float, width: int = 40):
    """One GPU's fragments as a bar: one coloured block per job, reserve, free."""
    from rich.text import Text
    bar = Text()
    used = 0
    for k, frag in enumerate(gpu["fragments"]):
        n = max(1, round(frag["fraction"] * width))
        label = frag["job"][: n]
        bar.append(label.ljust(n, "█"), style=f"black on {_COLOURS[k % len(_COLOURS)]}")
        used += n
    reserve = round(len(gpu["fragments"]) * reserve_mb / gpu["memory_mb"] * width)
    bar.append("▒" * min(reserve, max(0, width - used)), style="dim")
    bar.append("·" * max(0, width - used - reserve), style="dim")
    return bar


def nodes(argv: list[str]) -> int:
    """Show nodes, their GPUs and the fragments on them, drawn as bars."""
    p = _parser("nodes", "Show nodes, GPUs and fragments.")
    p.add_argument("--json", action="store_true", help="print the raw answer as JSON")
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        answer = client.request(s.Nodes())
        if args.json:
            print(json.dumps(answer, indent=1))
            return 0
        console = _console()
        if not answer["nodes"]:
            console.print("no nodes")
        for node in answer["nodes"]:
            console.print(f"[bold]{node['name']}[/bold]  {node['state']}")
            for g in node["gpus"]:
                held = sum(f["fraction"] for f in g["fragments"])
                util = "-" if g["util"] is None else f"{100 * g['util']:.0f}%"
                head = f"  {g['id']:<10} {g['name'][:18]:<18} {g['memory_mb']:>6} MiB "
                line = _text(head).append_text(gpu_bar(g, answer["reserve_mb"]))
                line.append(f" {100 * held:5.1f}% held, util {util}")
                console.print(line)
                for f in g["fragments"]:
                    console.print(f"      {f['job']:<8} {f['fraction']:.3f}  {f['state']:<10} "
                                  f"{f['model']}")
        return 0
    return _run("nodes", args, body)


def _text(value: str):
    from rich.text import Text
    return Text(value)


# ---- logs and job commands --------------------------------------------------------


def logs(argv: list[str]) -> int:
    """Print a job's log."""
    p = _parser("logs", "Show a job's log.")
    p.add_argument("job")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        for line in client.logs(args.job, args.tail):
            print(line)
        return 0
    return _run("logs", args, body)


def _job_command(name: str, description: str, call: Callable[[Client, argparse.Namespace], dict],
                 argv: list[str], extra: Callable[[argparse.ArgumentParser], None] | None = None,
                 verb: str = "") -> int:
    """Send one job request; print ``JOB: [VERB requested; ]STATE (NOTE)`` from the answer
    (the job's state after the coordinator acted)."""
    p = _parser(name, description)
    p.add_argument("job")
    if extra:
        extra(p)
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        answer = call(client, args)
        note = f" ({answer['note']})" if answer.get("note") else ""
        state = answer.get("state", "ok")
        print(f"{args.job}: {verb} requested; now {state}{note}" if verb
              else f"{args.job}: {state}{note}")
        return 0
    return _run(name, args, body)


def cancel(argv: list[str]) -> int:
    """Cancel a job."""
    return _job_command("cancel", "Cancel a job.", lambda c, a: c.cancel(a.job), argv)


def suspend(argv: list[str]) -> int:
    """Suspend a job to its checkpoint and hold it until resumed."""
    return _job_command("suspend", "Suspend a job and hold it.",
                        lambda c, a: c.suspend(a.job), argv)


def resume(argv: list[str]) -> int:
    """Let a held job be scheduled again."""
    return _job_command("resume", "Resume a held job.", lambda c, a: c.resume(a.job), argv,
                        verb="resume")


def migrate(argv: list[str]) -> int:
    """Move a job to NODE:GPU."""
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--to", required=True, metavar="NODE:GPU[,NODE:GPU...]",
                       help="target GPU; one per GPU of the job, comma-separated")
    return _job_command("migrate", "Move a job to another GPU.",
                        lambda c, a: c.migrate(a.job, a.to), argv, extra)
