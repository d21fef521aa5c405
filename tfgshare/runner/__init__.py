"""The job runner: one TF-Slim training attempt in one process. The only part that imports TensorFlow.

- ``main``: ``train`` and ``main`` (``tfgshare train``, ``python -m tfgshare.runner``),
  no TensorFlow at load; ``attempt``: one training attempt (start-up for a job and a
  gang member alike, restore, the train loop, saves, samples, its result);
  ``saving``: when to save and how a failed save is retried.
- ``config``: TF-Slim's training flags; ``graph``: the training graph; ``checkpoint``:
  ``tf.train.Checkpoint`` save and restore; ``timing``: step timing and the sampling plan;
  ``rng``: keyed randomness for exact resume; ``events``: the JSON-lines event sink;
  ``stop``: the suspend signals, timed on arrival; ``cpu``: the CPU use a sample reports;
  ``replicas``: one job across processes (a member's servers, its wait and its stop);
  ``gang_graph``: a gang's graph pieces (cluster spec, device setter, member ops);
  ``convert_images``: ``tfgshare convert-images``, slim's converter behind the quiet import.
- The modules import each other without a cycle; a TensorFlow-free one (``main``,
  ``train_dir``, ``warm``) imports a TensorFlow one only inside the function that needs
  it, after TensorFlow's quiet import (``tests/test_import_rules.py`` checks both).
- ``protocol``: the contract with the agent (exit codes, signals, events). It, ``config``,
  ``timing``, ``events``, ``stop`` and ``cpu`` import no TensorFlow, so the agent and
  coordinator may use them.

May import: ``slim_models``, ``tfgshare.paths``, ``tfgshare.sampling``. Never the coordinator, agent, client or simulator.
"""
