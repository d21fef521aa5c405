"""Talking to a coordinator: the client library and the CLI commands built on it.

- ``api``: ``Client`` (one request, one reply; clear errors when unreachable or refused).
- ``commands``: ``tfgshare submit | status | watch | nodes | logs | cancel | suspend |
  resume | migrate``; ``tables``: their tables, fit to the terminal, with legends;
  ``jobfile``: YAML job files read into job specs.

May import: ``tfgshare.schema``, ``keys``, ``metrics``, ``textfit`` and ``model_table``
(model names).
Never TensorFlow, the runner, ``slim_models``, the coordinator, the agent or the simulator.
"""
