"""The client's tables: ``status``, ``watch``, ``status JOB`` and ``nodes`` as the user sees them.

Each table fits the terminal (``textfit.terminal_width``: 100 columns when the
output is a pipe or a file): the least useful columns are dropped first, as
``kubectl get`` does, and ``--wide`` shows them all. Times are written with
their units (``3m12s``, ``1h05m``) and a legend line under each table says what
its columns mean.
"""

from __future__ import annotations

import sys
from typing import Any

from tfgshare.textfit import fit_columns, legend, terminal_width

# what each column means, for the legend under the table and the commands' --help
STATUS_LEGEND = (
    ("WHERE", "GPU (share of its memory held)"),
    ("LEFT", "predicted time to finish"),
    ("WAITED", "time not running (queued, sampled and waiting, or suspended)"),
    ("MOVES", "suspends (susp) and migrations (mig) so far"),
    ("", "times as 42s, 3m12s, 1h05m"),
)
STATUS_DROP = ("MOVES", "WAITED", "OWNER", "WHERE")   # first to last, until the table fits
WATCH_LEGEND = (
    ("DONE", "share of its steps done"),
    ("LEFT", "predicted time to finish"), ("WHERE", "GPU (share of its memory held)"),
    ("", "times as 42s, 3m12s, 1h05m"),
)
BOX_SEP = "   "     # between the columns of a rich table: padding, divider, padding
BAR = 30            # the widest progress bar; it narrows to 10 to fit


def help_text(entries: tuple[tuple[str, str], ...]) -> str:
    """The columns' meanings for a command's --help, one per line."""
    return "columns:\n" + "\n".join(f"  {name:<7} {text}" for name, text in entries if name)


def console(width: int | None = None):
    """A rich console ``width`` columns wide (default: the terminal's, 100 when not one)."""
    from rich.console import Console
    return Console(highlight=False, width=width or terminal_width())


def dur(seconds: float | None) -> str:
    """A time with its units (``metrics.format_duration``): 42s, 3m12s, 1h05m."""
    from tfgshare.metrics import format_duration
    return format_duration(seconds)


def where(job: dict[str, Any]) -> str:
    """The GPUs a job holds, each with its share of the GPU's memory."""
    return ", ".join(f"{g} ({f:.2f})" for g, f in job["fragments"]) or "-"


def moves(job: dict[str, Any]) -> str:
    """A job's moves in words: ``1 susp, 1 mig``; ``-`` for none."""
    parts = [f"{job[k]} {short}" for k, short in (("suspends", "susp"), ("migrations", "mig"))
             if job[k]]
    return ", ".join(parts) or "-"


DONE_STATES = ("finished", "failed", "cancelled")   # a job in one has ended


def left(job: dict[str, Any]) -> str:
    """Its predicted time to finish, or "-" once it has ended (finished, failed, cancelled)."""
    if job["state"] in DONE_STATES:
        return "-"
    return dur(job["predicted_remaining_s"])


def jobs_table(jobs: list[dict[str, Any]], width: int | None = 100):
    """The status table (a rich Table) at most ``width`` columns wide (None: every
    column), and the legend lines under it."""
    from rich import box
    from rich.table import Table
    owners = any(j.get("owner") for j in jobs)    # keys on: show who submitted each job
    cols = ["JOB", "OWNER", "MODEL", "STATE", "WHERE", "STEPS", "LEFT", "WAITED", "MOVES",
            "NOTE"]
    if not owners:
        cols.remove("OWNER")
    rows = []
    for j in jobs:
        note = j["over_memory"] and f"OVER FRAGMENT: {j['over_memory']}"
        if not note and j["state"] in ("failed", "suspended", "unknown"):
            note = j["reason"]
        cells = {"JOB": j["id"], "OWNER": j.get("owner") or "-", "MODEL": j["model"],
                 "STATE": j["state"], "WHERE": where(j),
                 "STEPS": f"{j['steps_done']}/{j['total_steps']}",
                 "LEFT": left(j), "WAITED": dur(j["waited_s"]),
                 "MOVES": moves(j), "NOTE": note or ""}
        rows.append(cells)
    # NOTE and WHERE wrap: they count at most this wide when fitting
    wraps = {"NOTE": 24, "WHERE": 12}
    widths = [min(max([len(c)] + [len(r[c]) for r in rows]), wraps.get(c, 1 << 30))
              for c in cols]
    kept = fit_columns(cols, widths, width, STATUS_DROP, sep=BOX_SEP)
    t = Table(show_edge=False, pad_edge=False, box=box.SIMPLE_HEAD)
    for col in kept:
        t.add_column(col, no_wrap=col not in wraps, overflow="fold")
    for cells in rows:
        note = cells["NOTE"]
        if note.startswith("OVER FRAGMENT"):
            cells = {**cells, "NOTE": f"[red]{note}[/red]"}
        t.add_row(*(cells[c] for c in kept))
    hidden = [c for c in STATUS_DROP if c in cols and c not in kept]   # in the order dropped
    return t, legend(STATUS_LEGEND, kept, width, hidden)


def progress_view(jobs: list[dict[str, Any]], plain: bool = False, width: int | None = 100):
    """Per-job progress bars (a rich Table) at most ``width`` columns wide (None: all
    columns, the widest bar); ``plain``: the share done as text instead of a bar (for a
    pipe or a file). Returns the table and the legend lines under it."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    bar_col = "DONE" if plain else "PROGRESS"
    cols = ["JOB", "MODEL", "STATE", bar_col, "STEPS", "LEFT", "WHERE"]
    rows = [[j["id"], j["model"], j["state"], "100%" if plain else "-" * BAR,
             f"{j['steps_done']}/{j['total_steps']}", left(j), where(j)]
            for j in jobs]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    if not plain:
        widths[3] = 10                            # the bar narrows before WHERE goes
    kept = fit_columns(cols, widths, width, ("WHERE",), sep="  ")
    bar = BAR
    if not plain and width is not None:
        others = sum(w for c, w in zip(cols, widths) if c in kept and c != bar_col)
        bar = max(10, min(BAR, width - others - 2 * (len(kept) - 1)))
    t = Table(show_edge=False, pad_edge=False, box=None)
    for col in kept:
        t.add_column(col, no_wrap=True, justify="right" if plain and col == "DONE" else "left")
    for j, row in zip(jobs, rows):
        total = max(1, j["total_steps"])
        done = min(total, j["steps_done"])
        row[3] = (f"{100 * done / total:.0f}%" if plain
                  else ProgressBar(total=total, completed=done, width=bar))
        t.add_row(*(row[cols.index(c)] for c in kept))
    hidden = [c for c in cols if c not in kept]
    return t, legend(WATCH_LEGEND, kept, width, hidden)


def job_detail(job: dict[str, Any]) -> list[str]:
    """``status JOB``: one line per field, its name aligned."""
    sample = job["sample"]
    rows = [
        ("job", job["id"] + (f" ({job['name']})" if job["name"] else "")),
        ("owner", job.get("owner") or "-"), ("model", job["model"]), ("state", job["state"]),
        ("where", where(job)), ("gpus", str(job["num_gpus"])),
        ("memory fraction", str(job["memory_fraction"])),
        ("steps", f"{job['steps_done']}/{job['total_steps']}"),
        ("predicted left", dur(job["predicted_remaining_s"])),
        ("prediction error", "-" if job.get("prediction_error") is None else
         f"{100 * job['prediction_error']:.0f} % (predicted {dur(job['predicted_total_s'])} "
         "after sampling)"),
        ("waited", dur(job["waited_s"])), ("ran", dur(job["run_time_s"])),
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
    return [f"{k.ljust(width)}  {v}" for k, v in rows]


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


def print_nodes(answer: dict[str, Any]) -> None:
    """``nodes``: each node, its GPUs as bars of their fragments, and the jobs on them."""
    from rich.text import Text
    out = console()
    bar_width = max(10, min(40, out.width - 67))   # the rest of a GPU's line is 67 wide
    if not answer["nodes"]:
        out.print("no nodes")
    for node in answer["nodes"]:
        out.print(f"[bold]{node['name']}[/bold]  {node['state']}")
        for g in node["gpus"]:
            held = sum(f["fraction"] for f in g["fragments"])
            util = "-" if g["util"] is None else f"{100 * g['util']:.0f}%"
            head = f"  {g['id']:<10} {g['name'][:18]:<18} {g['memory_mb']:>6} MiB "
            line = Text(head).append_text(gpu_bar(g, answer["reserve_mb"], bar_width))
            line.append(f" {100 * held:5.1f}% held, util {util}")
            out.print(line)
            for f in g["fragments"]:
                out.print(f"      {f['job']:<8} {f['fraction']:.3f}  {f['state']:<10} "
                          f"{f['model']}")
    out.print("bar: one block per job's share of the GPU's memory, then ▒ the CUDA context "
              "reserve and · free; held: memory held; util: the device's utilisation")


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (a live view), not a pipe or a file."""
    return sys.stdout.isatty()
