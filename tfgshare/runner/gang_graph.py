"""A gang's pieces of the training graph: its cluster, the placement, the member's ops.

Between-graph replication as TF-Slim's ``train_image_classifier.py`` does it (see
``runner.replicas``): every worker builds the same graph under
``replica_device_setter`` (variables on the ``ps`` tasks, everything else on the
worker), and a member runs a few set-up ops of its own (local variables, readiness,
the sync-token queue of ``SyncReplicasOptimizer``). ``graph`` builds these into a
gang member's graph; ``replicas`` runs a member's servers with ``cluster_spec``.
"""

from __future__ import annotations

import tensorflow as tf

from tfgshare.runner.config import TrainConfig, host_list


def cluster_spec(config: TrainConfig) -> tf.train.ClusterSpec:
    """The gang's cluster: its ``ps`` and ``worker`` addresses."""
    return tf.train.ClusterSpec({"ps": host_list(config.ps_hosts, "ps_hosts"),
                                 "worker": host_list(config.worker_hosts, "worker_hosts")})


def device_setter(config: TrainConfig):
    """Places variables round-robin on the ps tasks and other ops on this worker."""
    return tf.compat.v1.train.replica_device_setter(
        ps_tasks=config.num_ps_tasks, worker_device=f"/job:worker/task:{config.task}",
        cluster=cluster_spec(config))


def gang_ops(train_tensor, global_step, optimizer, variables: list):
    """The global step read after a step, and the set-up ops a gang member runs."""
    with tf.control_dependencies([train_tensor]):
        step_after = tf.identity(global_step.read_value(), name="global_step_after")
    ops = {"local_init": tf.compat.v1.local_variables_initializer(),
           "not_ready": tf.compat.v1.report_uninitialized_variables(variables)}
    if isinstance(optimizer, tf.compat.v1.train.SyncReplicasOptimizer):
        ops.update(local_step_init=optimizer.local_step_init_op,
                   queue_runner=optimizer.get_chief_queue_runner(),
                   init_tokens=optimizer.get_init_tokens_op())
    return step_after, ops
