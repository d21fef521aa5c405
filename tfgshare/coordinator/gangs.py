"""Gangs: a job whose GPUs span nodes, run as one runner per node and moved as one.

A job placed on the GPUs of several nodes trains as TF-Slim trains across
machines (between-graph replication, ``tfgshare.runner.replicas``): each node
runs one worker on its fragments, and worker 0, the chief, runs on the node of
the job's first fragment, serves the parameter server in its own process and
owns the checkpoint. The coordinator gives every member a ``host:port`` (the
node's advertised ``address`` and a port from the range it registered, one
book per address so two agents on one host never share a port) and sends each
node its ``StartJob`` with its ``GangMember`` part in the same round.

The chief stands for the gang everywhere else: ``job.node`` is its node, its
events and exit drive the job's state exactly as a one-node job's runner does,
and a suspend, cancel or migration goes to every member. When the chief's
runner ends (or the job is released for any reason) the other members are
killed and the ports given back. A member lost while the gang trains (its
runner crashed or was killed, its agent re-registered without it, its node was
lost) brings the whole gang back to the chief's last checkpoint: the others are
killed and the job is re-queued, counted as a failure as a crash is.

A gang's members and ports are in the state database while it runs, so a
restarted coordinator re-adopts it: the chief as any job's runner, each other
member when its agent re-registers and reports it. A member not reported by
then (its agent came back without it, or not within the node timeout of the
restart) brings the gang back to its last checkpoint, as a lost member does.

``Gangs`` owns the book of gangs in flight and their ports; the lifecycle owns
it and decides what a member's loss means (``Lifecycle.member_lost``). May import:
``tfgshare.schema``, ``policies.base`` and the coordinator's ``cluster``, ``store``
and ``outbox``; nothing that handles requests or decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tfgshare import schema as s
from tfgshare.coordinator.cluster import Cluster, LiveJob, split_gpu_id
from tfgshare.coordinator.outbox import Outbox
from tfgshare.coordinator.store import StateStore
from tfgshare.policies.base import Fragment


@dataclass
class Member:
    """One node's part of a gang."""

    node: str
    task: int                         # worker index; 0 is the chief
    fragments: tuple[Fragment, ...]


@dataclass
class Gang:
    """The members of one attempt of a job that spans nodes, and the ports they hold."""

    attempt: int
    members: list[Member]
    ports: list[tuple[str, int]] = field(default_factory=list)   # (address, port)
    # after a restart: the nodes whose member (not the chief) is not re-adopted yet
    awaited: set[str] = field(default_factory=set)

    def to_record(self) -> dict:
        """What the state database keeps of it."""
        return {"attempt": self.attempt, "ports": [list(p) for p in self.ports],
                "members": [{"node": m.node, "task": m.task,
                             "fragments": [[f.gpu, f.fraction] for f in m.fragments]}
                            for m in self.members]}

    @classmethod
    def from_record(cls, rec: dict) -> "Gang":
        """Rebuild a gang from ``to_record`` output, every member but the chief awaited."""
        members = [Member(m["node"], m["task"],
                          tuple(Fragment(g, f) for g, f in m["fragments"]))
                   for m in rec["members"]]
        return cls(rec["attempt"], members, [(a, p) for a, p in rec["ports"]],
                   {m.node for m in members[1:]})


def members_of(fragments: tuple[Fragment, ...]) -> list[Member]:
    """One member per node, in the order the nodes first appear (the first is the chief)."""
    by_node: dict[str, list[Fragment]] = {}
    for f in fragments:
        by_node.setdefault(split_gpu_id(f.gpu)[0], []).append(f)
    return [Member(node, task, tuple(frags)) for task, (node, frags) in enumerate(by_node.items())]


def spans_nodes(fragments: tuple[Fragment, ...]) -> bool:
    """Whether these fragments are on more than one node."""
    return len({split_gpu_id(f.gpu)[0] for f in fragments}) > 1


class PortBook:
    """The gang ports in use, per address; hands out the next free one of a range."""

    def __init__(self) -> None:
        self.used: dict[str, set[int]] = {}
        self.next: dict[str, int] = {}

    def take(self, address: str, first: int, last: int) -> int | None:
        """A free port of ``first..last`` on ``address`` (None: all are in use)."""
        used = self.used.setdefault(address, set())
        size = last - first + 1
        start = self.next.get(address, first)
        for i in range(size):
            port = first + (start - first + i) % size
            if port not in used:
                used.add(port)
                # the next gang takes the next port: a port just freed may still be closing
                self.next[address] = port + 1 if port < last else first
                return port
        return None

    def give_back(self, address: str, port: int) -> None:
        """``port`` on ``address`` is free again."""
        self.used.get(address, set()).discard(port)


class Gangs:
    """The gangs in flight and their ports: started, told, ended, looked up.

    It keeps the book and sends the members their commands; what a lost or
    failed member means for the job is the lifecycle's to decide.
    """

    def __init__(self, cluster: Cluster, store: StateStore, outbox: Outbox) -> None:
        self.cluster, self.store, self.outbox = cluster, store, outbox
        self.by_job: dict[str, Gang] = {}    # jobs across nodes: their members
        self.ports = PortBook()

    def start(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
              train_dir: str) -> str:
        """Send every member its StartJob; "" when sent, else why it could not be."""
        members = members_of(fragments)
        gang = Gang(job.attempt, members)
        hosts = []
        for m in members:
            node = self.cluster.nodes[m.node]
            wanted = 2 if m.task == 0 else 1        # the chief's parameter server and worker
            for _ in range(wanted):
                port = self.ports.take(node.address, *node.ports) if node.ports else None
                if port is None:
                    self._give_back_ports(gang)
                    return f"node {m.node} has no free gang port"
                gang.ports.append((node.address, port))
                hosts.append(f"{node.address}:{port}")
        ps_hosts, worker_hosts = hosts[:1], hosts[1:]
        self.by_job[job.id] = gang
        self.store.save_gang(job.id, gang.to_record())
        for m in members:
            self.outbox.send(self.cluster.nodes[m.node], s.StartJob(
                job=job.id, attempt=job.attempt, spec=job.spec,
                fragments=[s.FragmentSpec(split_gpu_id(f.gpu)[1], f.fraction)
                           for f in m.fragments],
                train_dir=train_dir, sample_only=sample_only,
                gang=s.GangMember(task=m.task, ps_hosts=ps_hosts, worker_hosts=worker_hosts)),
                job)   # a refused start of any member re-queues the job
        return ""

    def restore(self) -> None:
        """Take back the gangs of the jobs that held GPUs before a restart, and their ports."""
        for job_id, rec in self.store.load_gangs().items():
            job = self.cluster.active.get(job_id)
            gang = Gang.from_record(rec)
            if job is None or not job.state.holds_gpu or gang.attempt != job.attempt:
                self.store.drop_gang(job_id)     # its runners are gone: nothing to adopt
                continue
            self.by_job[job_id] = gang
            for address, port in gang.ports:
                self.ports.used.setdefault(address, set()).add(port)

    def adopt_member(self, node_name: str, rj: s.RunningJob, now: float) -> bool:
        """Re-adopt a reported runner that is a gang member other than the chief (after a
        restart, or its agent's); False if it is not one of the job's current members."""
        job = self.cluster.active.get(rj.job)
        gang = self.by_job.get(rj.job) if job is not None else None
        if gang is None or not job.state.holds_gpu or job.node == node_name \
                or gang.attempt != job.attempt \
                or (rj.attempt is not None and rj.attempt != job.attempt) \
                or node_name not in {m.node for m in gang.members[1:]}:
            return False
        gang.awaited.discard(node_name)
        self.outbox.log_job(job, now, f"gang member re-adopted on {node_name} (pid {rj.pid}, "
                                      f"attempt {job.attempt})")
        self.outbox.send_adopt(self.cluster.nodes[node_name], job)
        return True

    def not_readopted(self) -> list[tuple[LiveJob, Gang]]:
        """The jobs holding GPUs whose gang has a member not re-adopted yet, with it."""
        out = []
        for job_id, gang in list(self.by_job.items()):
            job = self.cluster.active.get(job_id)
            if job is not None and job.state.holds_gpu and gang.awaited:
                out.append((job, gang))
        return out

    def to_members(self, job: LiveJob, make: Callable[[], s.Message]) -> None:
        """Send ``make()`` to every member but the chief (the caller sends the chief's)."""
        gang = self.by_job.get(job.id)
        if gang is None or gang.attempt != job.attempt:
            return
        for m in gang.members[1:]:
            node = self.cluster.nodes.get(m.node)
            if node is not None:
                self.outbox.send(node, make())

    def end(self, job: LiveJob) -> None:
        """The job gave its GPUs back: kill the members still running, free their ports."""
        gang = self.by_job.pop(job.id, None)
        if gang is None:
            return
        self.store.drop_gang(job.id)
        for m in gang.members:
            node = self.cluster.nodes.get(m.node)
            if node is not None:
                self.outbox.send(node, s.KillJob(job=job.id))
        self._give_back_ports(gang)

    def _give_back_ports(self, gang: Gang) -> None:
        for address, port in gang.ports:
            self.ports.give_back(address, port)
        gang.ports = []

    def member(self, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job, when ``msg`` is about a current gang member other than the chief
        (the sender is not checked here)."""
        job = self.cluster.active.get(msg.job)
        gang = self.by_job.get(msg.job) if job is not None else None
        if gang is None or gang.attempt != msg.attempt or msg.node == job.node \
                or msg.node not in {m.node for m in gang.members[1:]}:
            return None
        return job

    def with_member_on(self, node: str) -> list[LiveJob]:
        """The jobs holding GPUs whose gang has a member other than the chief on ``node``."""
        out = []
        for job_id, gang in self.by_job.items():
            job = self.cluster.active.get(job_id)
            if job is not None and job.state.holds_gpu and gang.attempt == job.attempt \
                    and any(m.node == node for m in gang.members[1:]):
                out.append(job)
        return out
