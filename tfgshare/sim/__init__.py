"""The discrete-event simulator: the same policies as the live cluster, on a trace.

Modules: ``profiles`` (model costs), ``cluster`` (cluster specs), ``colocation``
(ground-truth slowdown of shared GPUs), ``config`` (costs and knobs),
``workload`` (trace jobs with models), ``job`` (a job's state, a run's result,
admission), ``engine`` (the event loop), ``decide`` (the policy's round: the views it
reads, its call, the one action check), ``costs`` (what an attempt costs),
``forecast`` (the one forecast, ``policies.forecast``, fed simulated measurements),
``live_window`` (what those predictions read of the oldest live jobs, kept incrementally),
``invariants`` (the self-check), ``gc_pause`` (no cyclic collection while a workload is
built), ``plots`` and ``cli`` (``tfgshare simulate``),
``synth`` (``tfgshare trace generate``), ``sweep`` and ``sweep_report`` (``tfgshare sweep``).
Nothing here imports TensorFlow.
"""
