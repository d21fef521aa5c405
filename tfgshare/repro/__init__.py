"""Reproducing the paper: measured model profiles, Philly replayed live, the four-model batch.

- ``profile``: ``tfgshare profile`` measures each model and batch size on the devices
  present (runner subprocesses) and writes the profile YAML the simulator reads, with
  the co-location model fitted from measured pairs; ``measure`` runs and reads the
  runner processes it measures, ``colocate`` runs the pairs and fits the model (on the
  CPU at a whole core, from the runners' measured shares, ``cpushare``).
- ``replay``: ``tfgshare replay`` submits a time-compressed Philly slice to a running
  coordinator and runs the same slice through the simulator, side by side.
- ``four_models``: ``tfgshare reproduce four-models`` runs the paper's four models on a
  local live cluster once per policy and writes the table, per-job records and figures.

May import: ``tfgshare.sim``, ``tfgshare.policies``, ``tfgshare.client``,
``tfgshare.localcluster``, ``tfgshare.metrics``, ``tfgshare.schema``, ``philly``,
``tfgshare.agent.gpus`` / ``agent.supervisor`` (process readings, die-with-parent) and the light runner modules
(``runner.protocol``, ``runner.config``). Never TensorFlow: every training step runs in a
runner subprocess (``python -m tfgshare.runner``) or on a live cluster.
"""
