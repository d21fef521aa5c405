"""Scheduling rounds: snapshot the cluster, ask the policy, carry out what still holds.

A round runs after any event that can change a decision and at least every
``--tick`` (1 s by default: ``Coordinator.tick`` marks one due), spaced by its
own length under a stream of events. So the policy's ``tick_s`` and ``wake_at``
are not read here: a timed event of the policy (a demotion, a promotion, a
minimum run ending) is met by the next round, at most one tick late, which the
rounds' own spacing already allows; the simulator, which has no such tick,
calls a policy with ``tick_s`` None at its ``wake_at`` instead. The actions are
checked by the policies' one check (``policies.validate.check_actions``) on the
cluster with its moves in flight (``Cluster.check_actions``).

``Rounds`` receives the ``Lifecycle``: it reads the cluster and the policy there
and carries the actions out through the lifecycle's moves; it keeps the policy's
memo, the round timings and the refusals. The server runs ``plan`` and ``apply``
on its loop and ``decide`` on the policy's worker thread. May import the
coordinator's ``lifecycle`` and ``logs`` and ``policies.base``.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence

from tfgshare.coordinator.lifecycle import Lifecycle
from tfgshare.coordinator.logs import log
from tfgshare.policies.base import Migrate, Start, Suspend


class Rounds:
    """The policy side of the coordinator: the policy's memo, the rounds and their figures."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life
        # what the policy carries between rounds; ours to keep, used only by the policy worker
        self.policy_memo = life.policy.new_memo()
        self.round_times = array("d")                # seconds per scheduling round
        self.decide_times = array("d")               # ... of which in policy.decide
        self.decide_cpu_times = array("d")           # CPU seconds of policy.decide
        # the rest of each round: snapshot and views, the wait for the loop to take the
        # policy's answer, carrying it out, the loop's other CPU meanwhile, and the CPU
        # of both threads over the round (seconds)
        self.round_parts = {k: array("d") for k in ("plan", "wait", "apply", "loop_cpu", "cpu")}
        self.refusals: dict[str, int] = {}           # policy actions refused, by reason

    def schedule(self, now: float) -> list:
        """One scheduling round, all in this thread: plan, decide, carry out."""
        plan = self.plan(now)
        return [] if plan is None else self.apply(self.decide(plan))

    def plan(self, now: float) -> "Round | None":
        """Start a round: what the policy sees now (None when it has nothing to decide)."""
        self.life.dirty = False
        t0, c0 = time.perf_counter(), time.thread_time()
        snapshot = self.life.cluster.snapshot()
        views = self.life.cluster.views()
        if not snapshot.gpus or not views:
            return None
        plan = Round(now, snapshot, views, t0, c0)
        plan.plan_s = time.perf_counter() - t0
        return plan

    def decide(self, plan: "Round") -> "Round":
        """Ask the policy (pure: safe on the worker thread); a failure means no actions."""
        t1, c1 = time.perf_counter(), time.thread_time()
        policy = self.life.policy
        try:
            if self.policy_memo is not None:
                plan.actions = policy.decide(plan.now, plan.snapshot, plan.views,
                                             self.policy_memo)
            else:
                plan.actions = policy.decide(plan.now, plan.snapshot, list(plan.views))
        except Exception:   # a policy bug must not take the cluster down
            log.exception("policy %s failed; no actions this round", policy.name)
        plan.decided = time.perf_counter()
        plan.decide_s = plan.decided - t1
        plan.decide_cpu_s = time.thread_time() - c1
        return plan

    def apply(self, plan: "Round") -> list:
        """Carry out the actions that still hold now (the cluster may have moved on).

        A start onto room that a move in flight frees is reserved and starts
        when the room frees; an action the cluster cannot take is refused,
        logged and counted by reason.
        """
        t_apply, c_apply = time.perf_counter(), time.thread_time()
        now = self.life.clock()
        self.life.start_reserved(now)
        checked = self.life.cluster.check_actions(plan.actions)
        name = self.life.policy.name
        for action, reason, text in checked.refused:
            self._refuse(action, reason, text, now)
        actions = checked.ok
        for action in actions:
            job = self.life.cluster.active[action.job]
            if isinstance(action, Start):
                self.life.start(job, action.fragments, action.sample_only, now)
            elif isinstance(action, Suspend):
                self.life.ask_suspend(job, now, f"policy {name}")
            elif isinstance(action, Migrate):
                self.life.ask_suspend(job, now, f"policy {name}", target=tuple(action.fragments))
        for action in checked.deferred:
            self.life.reserve(self.life.cluster.active[action.job], action.fragments,
                          action.sample_only, now)
        actions = actions + checked.deferred
        end = time.perf_counter()
        took = end - plan.started
        if len(self.round_times) < 1_000_000:
            self.round_times.append(took)
            self.decide_times.append(plan.decide_s)
            self.decide_cpu_times.append(plan.decide_cpu_s)
            parts = self.round_parts
            parts["plan"].append(plan.plan_s)
            parts["wait"].append(t_apply - plan.decided if plan.decided else 0.0)
            parts["apply"].append(end - t_apply)
            # the serving loop's own CPU while the round was out (the loop thread's
            # time from the plan's start to the apply's end, less those two)
            loop = time.thread_time() - plan.started_cpu
            parts["loop_cpu"].append(max(0.0, loop - (time.thread_time() - c_apply)
                                         - plan.plan_s))
            # the CPU of both threads over the round: its wall time on a core of its own
            parts["cpu"].append(loop + plan.decide_cpu_s)
        self.life.metrics.rounds.observe(took)
        return actions

    def _refuse(self, action, reason: str, text: str, now: float) -> None:
        """Record an action the cluster could not take: a log line, a job event, a count."""
        name = self.life.policy.name
        log.warning("policy %s: refused: %s", name, text)
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        self.life.metrics.refused.labels(reason).inc()
        job = self.life.cluster.active.get(action.job)
        if job is not None:
            self.life.outbox.log_job(job, now, f"refused {type(action).__name__} ({reason}): {text}")


@dataclass
class Round:
    """One scheduling round: the policy's input, its answer, and timings."""

    now: float
    snapshot: Any
    views: Any       # a frozen JobSet
    started: float
    started_cpu: float = 0.0   # the loop thread's CPU clock at the start
    plan_s: float = 0.0
    actions: list = field(default_factory=list)
    decided: float = 0.0       # perf_counter when the policy answered
    decide_s: float = 0.0
    decide_cpu_s: float = 0.0



def round_stats(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """Count, p50, p99 and max (in ms) of scheduling round times."""
    if not len(seconds):
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(seconds)

    def pct(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"count": len(ordered), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": 1000 * ordered[-1]}
