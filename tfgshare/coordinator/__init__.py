"""The coordinator: admits jobs, keeps their state, runs the policy, drives the agents.

- ``server``: the ``Coordinator`` (ZeroMQ ROUTER loop, framing, the policy worker
  thread) and ``main`` (``tfgshare coordinator``).
- ``agents``: the agent-facing protocol; ``clients``: the client-facing API.
- ``transitions``: the job state machine's moves; ``cluster``: live jobs, nodes and
  fragment accounting; ``rounds``: scheduling rounds; ``gangs``: jobs across nodes,
  one runner per node, started, moved and lost as one.
- ``store``: the SQLite state; ``exporter``: Prometheus metrics and the run report.
- ``config``, ``errors``, ``logs``: settings and flags, request errors, logging.

May import: ``tfgshare.schema``, ``keys``, ``metrics``, ``paths``, ``policies``,
``runner_wire`` (the runner's exit codes and events) and ``model_table`` (the model
names a job may use). Never TensorFlow, the runner, ``slim_models``, the agent, the
client or the simulator.
"""
