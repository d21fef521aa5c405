"""The ``tfgshare`` command: a light dispatcher to each subcommand's module.

Each subcommand lives in its own module and exposes ``main(argv) -> int``; it is
imported only when run, so ``tfgshare status`` never pays for TensorFlow.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("tfgshare.demo:main", "run a local coordinator, an agent and a mixed batch of jobs"),
    "train": ("tfgshare.runner.main:main", "train one TF-Slim job standalone (slim flags)"),
    "convert-images": ("tfgshare.runner.convert_images:main",
                       "write a folder of class sub-folders as slim TFRecords"),
    "simulate": ("tfgshare.sim.cli:main", "replay a trace under several policies and compare them"),
    "trace": ("tfgshare.sim.synth:main",
              "make traces: trace generate --jobs N --cluster NxG --load L --seed S --out FILE"),
    "sweep": ("tfgshare.sim.sweep:main",
              "run a grid of simulations from a YAML file (local processes or Dask)"),
    "profile": ("tfgshare.repro.profile:main",
                "measure models on this machine's device and write a simulator profile"),
    "replay": ("tfgshare.repro.replay:main",
               "replay a compressed trace slice on a live cluster, beside the simulator"),
    "reproduce": ("tfgshare.repro.four_models:main",
                  "reproduce four-models: the paper's four models on a local live cluster"),
    "coordinator": ("tfgshare.coordinator.server:main", "run the ZeroMQ coordinator"),
    "agent": ("tfgshare.agent.node:main", "run a node agent"),
    "keys": ("tfgshare.keys:main", "make and register CurveZMQ keys (init, add-user, add-agent, list, revoke)"),
    "submit": ("tfgshare.client.commands:submit", "submit a job (MODEL [slim flags]) or many (-f jobs.yaml)"),
    "status": ("tfgshare.client.commands:status", "show jobs as a table, or one job"),
    "watch": ("tfgshare.client.commands:watch", "live progress per job"),
    "nodes": ("tfgshare.client.commands:nodes", "show nodes, GPUs and fragments"),
    "logs": ("tfgshare.client.commands:logs", "show a job's log"),
    "cancel": ("tfgshare.client.commands:cancel", "cancel a job"),
    "suspend": ("tfgshare.client.commands:suspend", "suspend a job to its checkpoint"),
    "resume": ("tfgshare.client.commands:resume", "resume a suspended job"),
    "migrate": ("tfgshare.client.commands:migrate", "move a job to NODE:GPU"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: tfgshare COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand named by argv[0] with the rest of argv."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tfgshare: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(func(rest) or 0)
    except KeyboardInterrupt:   # Ctrl-C: the command has cleaned up; no traceback
        print(f"tfgshare {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
