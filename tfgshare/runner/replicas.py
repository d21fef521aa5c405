"""One job trained by a gang of processes: between-graph replication, as TF-Slim does.

TF-Slim's ``train_image_classifier.py`` trains across machines with parameter
servers: every worker builds the same graph under ``replica_device_setter``
(variables on the ``ps`` tasks, everything else on the worker), feeds its own
share of the input, and with ``--sync_replicas`` a ``SyncReplicasOptimizer``
applies one update per ``--replicas_to_aggregate`` gradients. The flags are
theirs: ``--job_name ps|worker --task N --ps_hosts H:P,.. --worker_hosts H:P,..
--num_ps_tasks --worker_replicas --sync_replicas --replicas_to_aggregate``.

Worker 0, the chief, owns the job's state: it restores the newest checkpoint (or
initialises), starts the sync-token queue runner, and is the only member that
saves, so a gang has one checkpoint and a resume continues at the next global
step. The other workers wait until the variables are ready and hold nothing of
their own. With ``--serve_ps`` the chief also runs the ``ps`` servers in its own
process (what the tfgshare agent does): losing the chief loses the parameters,
which the checkpoint has anyway. ``--job_name ps`` alone serves a parameter
server until killed.

Stopping (SIGUSR1/SIGTERM to every member): each member finishes its step and
stops; the chief then saves. A step can wait forever for a member that is already
gone, so a member still in its step ``STOP_GRACE_S`` after the request stops
anyway: the chief saves the last applied global step, the others just exit
(``EXIT_SUSPENDED``). A worker that loses its chief or parameter server without
being asked to stop exits 1, or 0 when the chief's checkpoint shows the job done
(``EXIT_SUSPENDED`` in a sampling run, which the chief ends).

TensorFlow's servers listen on every interface at their port (gRPC, no
authentication); a port already taken fails the start with a clear error.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import tensorflow as tf

from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig, host_list
from tfgshare.runner.events import EventSink

STOP_GRACE_S = 10.0     # a member still in its step this long after a stop request stops anyway
READY_POLL_S = 0.5      # how often a worker checks whether the chief has set up the variables


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


def _session_config(config: TrainConfig):
    from tfgshare.runner import graph as runner_graph

    proto = runner_graph.session_config(config)
    # a worker talks to the parameter servers, never to the other workers
    proto.device_filters.extend(["/job:ps", f"/job:worker/task:{config.task}"])
    return proto


def serve_ps(config: TrainConfig) -> int:
    """``--job_name ps``: serve parameter server ``--task`` until the process is killed."""
    server = tf.compat.v1.train.Server(cluster_spec(config), job_name="ps",
                                       task_index=config.task)
    print(f"parameter server {config.task} at {server.target}", flush=True)
    server.join()
    return rp.EXIT_OK


def train_member(config: TrainConfig, sink: EventSink, stop_event: threading.Event):
    """Train as worker ``config.task`` of the gang; a ``main.TrainResult``.

    Raises RunnerError when the gang is lost (its chief or a parameter server gone)
    without a stop request.
    """
    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph
    from tfgshare.runner import main as runner_main
    from tfgshare.runner.train_dir import restore_newest_good

    start_s = runner_main._process_age_s()
    cluster, proto = cluster_spec(config), _session_config(config)
    servers = [tf.compat.v1.train.Server(cluster, job_name="ps", task_index=i, config=proto)
               for i in range(config.num_ps_tasks)] if config.serve_ps else []
    server = tf.compat.v1.train.Server(cluster, job_name="worker", task_index=config.task,
                                       config=proto)
    servers.append(server)
    candidates = []
    if config.is_chief:
        ckpt.claim(config.train_dir, config.epoch)
        candidates = ckpt.candidates(config.train_dir)
    tick = time.perf_counter()
    built = runner_graph.build_training_graph(config)
    graph_s = time.perf_counter() - tick
    session = tf.compat.v1.Session(server.target, graph=built.graph, config=proto)
    ops = built.replicas
    tick = time.perf_counter()
    latest = None
    if config.is_chief:
        restored = restore_newest_good(config, built, session, candidates, sink)
        latest = restored.path if restored else None
        if latest is None:
            session.run(built.init_op)
    elif not _wait_until_ready(session, ops["not_ready"], stop_event):
        return _stopped_before_training(config, sink, built)
    restore_s = time.perf_counter() - tick if latest else 0.0
    session.run(ops["local_init"])
    if "local_step_init" in ops:
        session.run(ops["local_step_init"])
        if config.is_chief:
            ops["queue_runner"].create_threads(session, coord=tf.train.Coordinator(),
                                               daemon=True, start=True)
            session.run(ops["init_tokens"])
    runner_graph.start_input(session, built)
    step = int(session.run(built.global_step))
    sink.emit("started", global_step=step, restored=latest is not None,
              device=",".join(built.devices), memory_fraction=config.memory_fraction)
    print(f"worker {config.task} of {config.worker_replicas} "
          f"({'chief' if config.is_chief else 'not chief'}) at step {step}", flush=True)
    phases = {"start_s": start_s, "graph_s": graph_s, "graph_source": "built",
              "restore_s": restore_s, "restored_from": latest}
    done = threading.Event()
    _stop_after_grace(stop_event, done, lambda: _stop_now(config, built, session, sink))
    try:
        return runner_main.train_loop(config, built, session, sink, stop_event, step, latest,
                                      phases)
    except tf.errors.OpError as exc:
        if config.is_chief:
            raise
        return _gang_lost(config, sink, built, exc, stop_event)
    finally:
        done.set()


def _wait_until_ready(session, not_ready, stop_event: threading.Event) -> bool:
    """Wait until the chief has restored or initialised every variable (False: asked to stop)."""
    while not stop_event.is_set():
        try:
            if len(session.run(not_ready)) == 0:
                return True
        except (tf.errors.UnavailableError, tf.errors.FailedPreconditionError):
            pass
        stop_event.wait(READY_POLL_S)
    return False


def _stop_after_grace(stop_event: threading.Event, done: threading.Event, stop_now) -> None:
    """Once a stop is asked for, give the step in flight ``STOP_GRACE_S``, then ``stop_now``."""
    def watch() -> None:
        stop_event.wait()
        if not done.wait(STOP_GRACE_S):
            stop_now()

    threading.Thread(target=watch, name="gang-stop", daemon=True).start()


def _stop_now(config: TrainConfig, built, session, sink: EventSink) -> None:
    """A member stuck in a step (a member is gone): the chief saves, then every member exits."""
    code = rp.EXIT_SUSPENDED
    try:
        if config.is_chief:
            step = int(session.run(built.global_step))
            saved = built.checkpoint.save(session, step)
            sink.emit("checkpoint", step=step, path=saved.path, seconds=saved.seconds,
                      size_mb=saved.size_mb)
            sink.emit("suspended", step=step)
        print(f"stopped in a step that could not finish within {STOP_GRACE_S:.0f} s "
              "(a gang member is gone)", flush=True)
    except Exception as exc:   # noqa: BLE001 - nothing is left to save it: exit as failed
        print(f"tfgshare train: could not save while stopping: {exc}", file=sys.stderr)
        code = 1
    exit_now(code)


def _stopped_before_training(config: TrainConfig, sink: EventSink, built):
    from tfgshare.runner.main import TrainResult

    sink.emit("suspended", step=0)
    return TrainResult("suspended", rp.EXIT_SUSPENDED, 0, None, None, None, None, built.devices)


def _gang_lost(config: TrainConfig, sink: EventSink, built, exc, stop_event):
    """A worker's step failed because its chief or a parameter server went away."""
    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner.main import TrainResult

    last = ckpt.latest_checkpoint(config.train_dir)
    saved_step = int(last.rsplit("-", 1)[1]) if last else 0
    if saved_step >= config.max_number_of_steps:   # the chief finished the job
        sink.emit("finished", step=saved_step, loss=None)
        return TrainResult("finished", rp.EXIT_OK, saved_step, None, None, last, None,
                           built.devices)
    if stop_event.is_set() or config.sample_only:   # the chief stopped first: not a loss
        sink.emit("suspended", step=saved_step)
        return TrainResult("suspended", rp.EXIT_SUSPENDED, saved_step, None, None, last, None,
                           built.devices)
    first = str(getattr(exc, "message", exc)).strip().splitlines()
    raise rp.RunnerError(f"worker {config.task} lost its gang (chief or parameter server "
                         f"gone): {type(exc).__name__}: {first[0] if first else ''}")


def exit_now(code: int) -> None:
    """End the process at once: a gang's sessions and servers can block an orderly exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
