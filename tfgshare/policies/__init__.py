"""Scheduling policies: pure functions of a cluster snapshot and the jobs.

- ``base``: the interface (JobView, ClusterSnapshot, Start/Suspend/Migrate, and Policy,
  the base class every policy subclasses: ``new_memo``, ``wake_at``, ``tick_s`` defaults).
- ``jobset``: ``JobSet``, the caller's job views with a change log; ``Tracker`` and
  ``Holdings``, how a memo follows it.
- ``memo``: ``Memo``, what a policy carries between rounds (the caller owns it:
  ``policy.new_memo()``, then ``policy.decide(now, cluster, jobs, memo)``), and
  ``WaitQueue``, waiting jobs ordered by a policy's key.
- ``registry``: ``POLICY_NAMES`` and ``get_policy(name, **params)``.
- ``placement``: fragment accounting (``usage``, ``free_fraction``, ``fraction_for``)
  and the cluster's layout.
- ``freemap``: ``FreeMap``, the free room of every GPU sorted for placement
  (``best_fit``, ``gang_place``); ``gang``, where a gang goes on it; ``layer``, the
  tables a copy of one changes.
- ``validate``: ``check_actions``, the one check of a round's actions that the simulator
  and the coordinator (its moves in flight passed as an ``Occupancy``) both apply, and
  ``validate``, its refusals as messages.
- ``exclusive``: whole-GPU placement for fifo, sjf and tiresias.
- ``interference``: the predicted co-location slowdown model.
- ``prediction``, ``queueing``: remaining time, waiting time, arrival order.
- ``stale``: lazy heaps' out-of-date entries swept out (``drop_stale``).
- Policies: ``fifo``, ``sjf``, ``tiresias`` (and ``tiresias-promote``; its queues, the
  memo, in ``tiresias_memo``, its walk in ``tiresias_walk``), ``gandiva``, ``fgs``.
- ``builders``: short constructors for hand-made clusters and jobs.
"""
