"""The discrete-event simulator: the same policies as the live cluster, on a trace.

Modules: ``profiles`` (model costs), ``cluster`` (cluster specs), ``colocation``
(ground-truth slowdown of shared GPUs), ``config`` (costs and knobs),
``workload`` (trace jobs with models), ``engine`` (the event loop), ``plots``
and ``cli`` (``tfgshare simulate``). Nothing here imports TensorFlow.
"""
