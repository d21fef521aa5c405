"""The coordinator: admits jobs, keeps their state, runs the policy, drives the agents.

- ``server``: the ``Coordinator`` (ZeroMQ ROUTER loop, framing, authentication, the
  dispatch table by message type, the policy worker thread) and ``main``
  (``tfgshare coordinator``). It composes the parts below; none calls it back.
- ``lifecycle``: the ``Lifecycle``, the one owner of the state (cluster, store,
  metrics, agents' peers, outbox, gangs) and of the job state machine's moves.
- ``agents`` / ``clients``: ``AgentHandlers`` / ``ClientHandlers``, the agent-facing
  protocol and the client-facing API, handlers that receive the lifecycle;
  ``measures``: what runners' reports teach (samples, progress, forecasts).
- ``rounds``: ``Rounds``, scheduling rounds through the lifecycle; ``gangs``: jobs
  across nodes, one runner per node (the book of gangs and ports); ``outbox``: agent
  commands, commands awaiting an answer, job log lines; ``cluster``: live jobs,
  nodes and fragment accounting.
- ``store``: the SQLite state; ``exporter``: Prometheus metrics and the run report.
- ``config``, ``errors``, ``logs``: settings and flags, request errors, logging;
  ``heap``: freed heap memory given back to the system once a minute.

May import: ``tfgshare.schema``, ``keys``, ``metrics``, ``paths``, ``policies``,
``runner_wire`` (the runner's exit codes and events) and ``model_table`` (the model
names a job may use). Never TensorFlow, the runner, ``slim_models``, the agent, the
client or the simulator.
"""
