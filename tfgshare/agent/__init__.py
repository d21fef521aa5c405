"""The node agent: offers a node's GPUs to the coordinator and runs its job attempts.

- ``node``: the ``Agent`` (register, heartbeat, commands) and ``main`` (``tfgshare agent``).
- ``config``: ``AgentConfig``, the agent's settings, and their defaults.
- ``options``: the ``tfgshare agent`` command line (``build_parser``, ``gang_ports``).
- ``pacer``: a job's progress reports passed on at most every S s (off by default).
- ``supervisor``: one runner process per job attempt, its events, exits and telemetry.
- ``gpus``: GPU discovery through NVML, or configured virtual GPUs.

May import: ``tfgshare.schema``, ``keys``, ``paths``, ``runner_wire`` (the runner contract).
Never TensorFlow, the runner or ``slim_models`` (runners are separate processes, started
as ``python -m tfgshare.runner``), the coordinator or the simulator.
"""
