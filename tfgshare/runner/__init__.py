"""The job runner: one TF-Slim training attempt in one process. The only part that imports TensorFlow.

- ``main``: ``train`` and ``main`` (``tfgshare train``, ``python -m tfgshare.runner``).
- ``config``: TF-Slim's training flags; ``graph``: the training graph; ``checkpoint``:
  ``tf.train.Checkpoint`` save and restore; ``timing``: step timing and the sampling plan;
  ``rng``: keyed randomness for exact resume; ``events``: the JSON-lines event sink;
  ``stop``: the suspend signals, timed on arrival; ``cpu``: the CPU use a sample reports;
  ``replicas``: one job across processes (parameter servers, synchronous replicas).
- ``protocol``: the contract with the agent (exit codes, signals, events). It, ``config``,
  ``timing``, ``events``, ``stop`` and ``cpu`` import no TensorFlow, so the agent and
  coordinator may use them.

May import: ``slim_models``, ``tfgshare.paths``, ``tfgshare.sampling``. Never the coordinator, agent, client or simulator.
"""
