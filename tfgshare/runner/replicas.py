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

Here: a member's servers and session options, its wait for the chief, the
replication set-up it runs, and the stop after the grace period. The gang's graph
pieces are in ``runner.gang_graph``; the attempt itself (the start-up a member shares
with a job of one process, the train loop, a lost gang's result) in ``runner.attempt``.

TensorFlow's servers listen on every interface at their port (gRPC, no
authentication); a port already taken fails the start with a clear error.
"""

from __future__ import annotations

import os
import sys
import threading

import tensorflow as tf

from tfgshare.runner import graph as runner_graph
from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig
from tfgshare.runner.events import EventSink
from tfgshare.runner.gang_graph import cluster_spec

STOP_GRACE_S = 10.0     # a member still in its step this long after a stop request stops anyway
READY_POLL_S = 0.5      # how often a worker checks whether the chief has set up the variables


def session_config(config: TrainConfig):
    """The ConfigProto a gang member's servers and session run with."""
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


class Member:
    """Worker ``config.task`` of a gang: its servers, listening from construction on
    (with ``--serve_ps`` the ps tasks too), and what a member does around its steps."""

    def __init__(self, config: TrainConfig):
        self.config = config
        cluster, self.session_config = cluster_spec(config), session_config(config)
        servers = [tf.compat.v1.train.Server(cluster, job_name="ps", task_index=i,
                                             config=self.session_config)
                   for i in range(config.num_ps_tasks)] if config.serve_ps else []
        self.server = tf.compat.v1.train.Server(cluster, job_name="worker",
                                                task_index=config.task,
                                                config=self.session_config)
        self.servers = servers + [self.server]   # held: a server lives while referenced

    @property
    def target(self) -> str:
        """The session target: this worker's server."""
        return self.server.target

    def wait_until_ready(self, session, built, stop_event: threading.Event) -> bool:
        """Wait until the chief has restored or initialised every variable (False: asked
        to stop first)."""
        not_ready = built.replicas["not_ready"]
        while not stop_event.is_set():
            try:
                if len(session.run(not_ready)) == 0:
                    return True
            except (tf.errors.UnavailableError, tf.errors.FailedPreconditionError):
                pass
            stop_event.wait(READY_POLL_S)
        return False

    def start_replication(self, session, built) -> None:
        """Run the member's set-up: its local variables and, with synchronous replicas,
        its local step (the chief also starts the sync-token queue and its tokens)."""
        ops = built.replicas
        session.run(ops["local_init"])
        if "local_step_init" in ops:
            session.run(ops["local_step_init"])
            if self.config.is_chief:
                ops["queue_runner"].create_threads(session, coord=tf.train.Coordinator(),
                                                   daemon=True, start=True)
                session.run(ops["init_tokens"])

    def stop_after_grace(self, stop_event: threading.Event, built, session,
                         sink: EventSink) -> threading.Event:
        """Once a stop is asked for, give the step in flight ``STOP_GRACE_S``, then stop
        at once (``stop_now``); set the event returned when the steps are over."""
        done = threading.Event()

        def watch() -> None:
            stop_event.wait()
            if not done.wait(STOP_GRACE_S):
                stop_now(self.config, built, session, sink)

        threading.Thread(target=watch, name="gang-stop", daemon=True).start()
        return done


def stop_now(config: TrainConfig, built, session, sink: EventSink) -> None:
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


def exit_now(code: int) -> None:
    """End the process at once: a gang's sessions and servers can block an orderly exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
