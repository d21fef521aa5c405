"""The user's commands: submit, status, watch, nodes, logs, cancel, suspend, resume, migrate.

Each is ``f(argv) -> exit code``: 0 on success, 1 when the coordinator is
unreachable or refuses, 2 for bad arguments. Every request waits at most
``--timeout`` seconds (1 by default).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tfgshare import schema as s
from tfgshare.client import tables
from tfgshare.client.jobfile import UsageError, check_paths, specs_from_yaml
from tfgshare.client.api import Client, ClientError, Refused, Unreachable, default_address
from tfgshare.textfit import terminal_width

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
    check_paths([spec])
    return [spec]


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


def status(argv: list[str]) -> int:
    """Show every job as a table, one job in detail, or the metrics report."""
    p = _parser("status", "Show jobs.")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = tables.help_text(tables.STATUS_LEGEND) + (
        "\ntimes as 42s, 3m12s, 1h05m. The table fits the terminal (100 columns when not"
        "\none): MOVES, WAITED, OWNER and WHERE go first, in that order; --wide shows every"
        "\ncolumn. --report explains its columns under its table.")
    p.add_argument("job", nargs="?", help="one job's id")
    p.add_argument("--wide", action="store_true",
                   help="every column, however wide the table")
    p.add_argument("--report", action="store_true", help="the run's metrics report (JCT, waits, utilisation, moves; a legend "
                        "under it says what each column means)")
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
            width = None if args.wide else terminal_width()
            table, legend = tables.jobs_table(jobs, width)
            _print_fitted(table, legend, width)
        counts = ", ".join(f"{n} {state}" for state, n in sorted(answer["counts"].items()))
        print(f"all jobs on the coordinator: {counts}" if counts else "no jobs")
        err = answer.get("prediction_error")
        if err and err.get("jobs"):
            print(f"prediction error (|predicted - actual| / actual run time after sampling): "
                  f"mean {100 * err['mean']:.0f} %, p90 {100 * err['p90']:.0f} % "
                  f"over {err['jobs']} job{'s' if err['jobs'] != 1 else ''}")
        refused = answer.get("refused") or {}
        if refused:
            print("policy actions refused: " +
                  ", ".join(f"{n} {r}" for r, n in sorted(refused.items())))
        return 0
    return _run("status", args, body)


def _print_job(job: dict[str, Any]) -> None:
    for line in tables.job_detail(job):
        print(line)


def _print_fitted(table, legend: list[str], width: int | None) -> None:
    """A rich table and its legend lines, on a console as wide as the table may be."""
    from rich.console import Console
    out = Console(highlight=False, width=width or max(terminal_width(), 1000))
    out.print(table)
    for line in legend:
        out.print(line, style="dim", soft_wrap=True)


# ---- watch -------------------------------------------------------------------------


def watch(argv: list[str]) -> int:
    """Live progress bars per job, until every job is done (or Ctrl-C)."""
    p = _parser("watch", "Live progress per job.")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = tables.help_text(tables.WATCH_LEGEND) + (
        "\ntimes as 42s, 3m12s, 1h05m. The table fits the terminal (100 columns when not"
        "\none): the bar narrows, then WHERE goes; --wide shows every column.")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--once", action="store_true", help="draw once and exit")
    p.add_argument("--all", action="store_true", help="show done jobs too")
    p.add_argument("--wide", action="store_true", help="every column, however wide the table")
    args = p.parse_args(argv)
    if args.interval <= 0:
        p.error("--interval must be > 0")

    def fetch(client: Client) -> tuple[list[dict[str, Any]], bool]:
        """The jobs to show, and whether every job is done."""
        answer = client.status(active=not args.all)
        done = not any(state not in tables.DONE_STATES for state in answer["counts"])
        if not answer["jobs"] and answer["counts"] and not args.all:
            answer = client.status()          # all done: show how they ended
        return answer["jobs"], done and bool(answer["counts"])

    def body(client: Client) -> int:
        jobs, done = fetch(client)
        width = None if args.wide else terminal_width()
        plain = not tables.stdout_is_terminal()   # a pipe or a file: the share done as text
        if args.once or plain:
            # once, or to a pipe or a file: a table per refresh, no live view
            try:
                for n in itertools.count():
                    if not args.once:
                        print(f"{time.strftime('%H:%M:%S')}  {len(jobs)} job(s)")
                    if jobs:
                        table, legend = tables.progress_view(jobs, plain, width)
                        _print_fitted(table, legend if n == 0 else [], width)
                    else:
                        print("no jobs")
                    sys.stdout.flush()
                    if done or args.once:
                        return 0
                    time.sleep(args.interval)
                    jobs, done = fetch(client)
            except (KeyboardInterrupt, BrokenPipeError):
                return 0
        from rich.console import Group
        from rich.live import Live
        from rich.text import Text
        console = tables.console(width or 1000)

        def view(jobs: list[dict[str, Any]]):
            if not jobs:
                return Text("no jobs")
            table, legend = tables.progress_view(jobs, False, width and console.width)
            return Group(table, *(Text(line, style="dim") for line in legend))
        try:
            with Live(view(jobs), console=console, refresh_per_second=4) as live:
                while not done:
                    time.sleep(args.interval)
                    jobs, done = fetch(client)
                    live.update(view(jobs))
        except KeyboardInterrupt:
            pass
        return 0
    return _run("watch", args, body)


# ---- nodes --------------------------------------------------------------------------


def nodes(argv: list[str]) -> int:
    """Show nodes, their GPUs and the fragments on them, drawn as bars."""
    p = _parser("nodes", "Show nodes, GPUs and fragments.")
    p.add_argument("--json", action="store_true", help="print the raw answer as JSON")
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        answer = client.request(s.Nodes())
        if args.json:
            print(json.dumps(answer, indent=1))
        else:
            tables.print_nodes(answer)
        return 0
    return _run("nodes", args, body)


# ---- logs and job commands --------------------------------------------------------


def logs(argv: list[str]) -> int:
    """Print a job's log."""
    p = _parser("logs", "Show a job's log: the coordinator's decisions and its runners' "
                        "events, a running job's progress about once a minute (every report "
                        "is in the runner's own log on its node: attempt-N.log).")
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
        _print_answer(args.job, call(client, args), verb)
        return 0
    return _run(name, args, body)


def _print_answer(job: str, answer: dict, verb: str = "") -> None:
    note = f" ({answer['note']})" if answer.get("note") else ""
    state = answer.get("state", "ok")
    print(f"{job}: {verb} requested; now {state}{note}" if verb else f"{job}: {state}{note}")


def _jobs_command(name: str, description: str, call: Callable[[Client, str], dict],
                  argv: list[str], verb: str = "") -> int:
    """``_job_command`` for one or more jobs: each asked in turn, a refusal printed and the
    rest still asked; exit 1 if any was refused."""
    p = _parser(name, description)
    p.add_argument("job", nargs="+")
    args = p.parse_args(argv)

    def body(client: Client) -> int:
        code = 0
        for job in args.job:
            try:
                _print_answer(job, call(client, job), verb)
            except Refused as exc:
                print(f"tfgshare {name}: {job}: refused: {exc}", file=sys.stderr)
                code = 1
        return code
    return _run(name, args, body)


def cancel(argv: list[str]) -> int:
    """Cancel one or more jobs."""
    return _jobs_command("cancel", "Cancel jobs.", lambda c, j: c.cancel(j), argv)


def suspend(argv: list[str]) -> int:
    """Suspend jobs to their checkpoints and hold them until resumed."""
    return _jobs_command("suspend", "Suspend jobs and hold them.", lambda c, j: c.suspend(j),
                         argv)


def resume(argv: list[str]) -> int:
    """Let held jobs be scheduled again."""
    return _jobs_command("resume", "Resume held jobs.", lambda c, j: c.resume(j), argv,
                         verb="resume")


def migrate(argv: list[str]) -> int:
    """Move a job to NODE:GPU."""
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--to", required=True, metavar="NODE:GPU[,NODE:GPU...]",
                       help="target GPU; one per GPU of the job, comma-separated")
    return _job_command("migrate", "Move a job to another GPU.",
                        lambda c, a: c.migrate(a.job, a.to), argv, extra)
