"""Progress reports paced: ``ProgressPacer`` passes a job's ``progress`` events on at
most every ``every_s`` (``AgentConfig.progress_every_s``), the newest held meanwhile.
Off by default (``PROGRESS_EVERY_S`` = 0: every report goes): at 2,000 GPUs pacing at
10 s halved the progress messages but saved no measurable coordinator CPU
(docs/benchmarks.md, "At scale").

A runner reports progress every ``--log_every_n_steps`` steps: on a GPU about every
2 s. At 10,000 GPUs those reports were most of the messages the coordinator
handled, and it had no time left for heartbeats (docs/benchmarks.md, "At scale").
What the coordinator needs from them is each job's step time, refreshed now and then
(the heartbeats carry every job's step), and, while a job samples, its co-tenants'
step times over that short window, from their reports' (time, step) marks. So:

- a runner's first report goes at once (it tells the coordinator the job trains);
- a later one waits until ``every_s`` after the last one sent, replaced by any newer
  one, unless the caller says a job samples beside it (then every report goes);
- any other event of the job sends the held report first, so a job's events keep
  their order;
- a report sent late says how long it was held (``JobEvent.held_s``), so the
  coordinator dates its mark when the runner wrote it.

Used by the agent and by the load generator that plays agents (tools/agent_load.py).
May import the standard library only.
"""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

PROGRESS_EVERY_S = 0.0    # default: every report goes (see above)

R = TypeVar("R")


class ProgressPacer(Generic[R]):
    """Which progress reports go now and which are held (see the module's docstring);
    ``key`` names a job's runner, ``report`` is whatever the caller sends."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S) -> None:
        self.every_s = every_s
        self._sent: dict[Hashable, float] = {}            # key -> when its last report went
        self._held: dict[Hashable, tuple[float, R]] = {}  # key -> (held since, newest report)

    def offer(self, key: Hashable, report: R, now: float, beside_sampling: bool = False) -> bool:
        """True: send ``report`` now; False: it is held in place of any held before."""
        last = self._sent.get(key)
        if beside_sampling or last is None or now - last >= self.every_s:
            self._sent[key] = now
            self._held.pop(key, None)
            return True
        self._held[key] = (now, report)
        return False

    def flush(self, key: Hashable, now: float) -> tuple[R, float] | None:
        """The report held for ``key`` and the seconds it was held (None if none): to
        go before another event of that job."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        self._sent[key] = now
        return held[1], now - held[0]

    def due(self, now: float) -> list[tuple[R, float]]:
        """The held reports whose time has come, each with the seconds it was held."""
        keys = [k for k in self._held if now - self._sent[k] >= self.every_s]
        return [out for k in keys if (out := self.flush(k, now)) is not None]

    def forget(self, key: Hashable) -> None:
        """The attempt ended: drop its times (flush its held report first)."""
        self._sent.pop(key, None)
        self._held.pop(key, None)
