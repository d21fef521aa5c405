"""The live jobs a policy decides on, and how a memo follows their changes.

:class:`JobSet` is the caller's collection of job views (the simulator and the
coordinator each own one): a sequence of ``JobView`` in insertion order that
also records which job ids changed, so that a policy's memo can bring its
ordered queues up to date from the changes alone instead of walking every job.
A plain list of views works too: the memo then starts over from it.

:class:`Tracker` is the part of a memo that reads those changes, and
:class:`Holdings` the per-GPU tenants a memo keeps, summed in the jobs' order
so that the result equals ``placement.usage`` of all the views, to the last bit.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from .base import JobView
from .placement import GpuUse
from .queueing import HOLDING


class JobSet(Sequence[JobView]):
    """Job views by id, in the order jobs were first put, with a log of changed ids."""

    def __init__(self, views: Iterable[JobView] = ()) -> None:
        self._views: dict[str, JobView] = {}
        self._seq: dict[str, int] = {}
        self._next = 0
        self._log: list[str] = []
        self._base = 0            # log entries dropped by trim()
        self.token = object()     # who this set is, for memos that follow it
        for v in views:
            self.put(v)

    # ---- the caller's side -------------------------------------------------

    def put(self, view: JobView) -> None:
        """Add a job's view or replace it (it keeps its place)."""
        jid = view.id
        if jid not in self._views:
            self._seq[jid] = self._next
            self._next += 1
        self._views[jid] = view
        self._log.append(jid)

    def drop(self, job_id: str) -> None:
        """Remove a job (finished, or no longer decided on); no-op if absent."""
        if self._views.pop(job_id, None) is not None:
            del self._seq[job_id]
            self._log.append(job_id)

    def trim(self) -> None:
        """Forget the change log so far (after a decide: memos past it stay valid)."""
        self._base += len(self._log)
        self._log.clear()

    def frozen(self, reuse: "JobSet | None" = None) -> "JobSet":
        """A copy that later ``put``/``drop`` calls on this set do not change.

        ``reuse``: the copy this set gave last, which nobody reads any more; when
        the set was trimmed right after giving it, it is brought up to date from
        the change log (O(changes)) instead of copying every view, and returned.
        """
        if reuse is not None and reuse.token is self.token and reuse.position == self._base:
            c = reuse
            views, seqs, cv, cs = self._views, self._seq, c._views, c._seq
            moved = []   # new, or dropped and put again: they go after the others
            for jid in dict.fromkeys(self._log):
                v = views.get(jid)
                if v is not None and cs.get(jid) == seqs[jid]:
                    cv[jid] = v              # replaced in place: keeps its order
                    continue
                if cv.pop(jid, None) is not None:
                    del cs[jid]
                if v is not None:
                    moved.append(jid)
            # every seq handed out since the copy is above those the copy holds,
            # and iteration follows seq order, as in this set
            for jid in sorted(moved, key=seqs.__getitem__):
                cv[jid] = views[jid]
                cs[jid] = seqs[jid]
        else:
            c = JobSet.__new__(JobSet)
            c._views = dict(self._views)
            c._seq = dict(self._seq)
            c.token = self.token
        c._next = self._next
        c._log = list(self._log)
        c._base = self._base
        return c

    # ---- the policy's side -------------------------------------------------

    @property
    def position(self) -> int:
        """How many changes were ever logged."""
        return self._base + len(self._log)

    def changed_since(self, position: int) -> list[str] | None:
        """Ids changed since ``position`` (repeats possible), or None if no longer known."""
        if position < self._base:
            return None
        return self._log[position - self._base:]

    def get(self, job_id: str) -> JobView | None:
        """The view of this job, or None."""
        return self._views.get(job_id)

    def seq(self, job_id: str) -> int:
        """The job's place in the iteration order (larger = later)."""
        return self._seq[job_id]

    def __iter__(self) -> Iterator[JobView]:
        return iter(self._views.values())

    def __len__(self) -> int:
        return len(self._views)

    def __getitem__(self, i):
        return list(self._views.values())[i]

    def __contains__(self, view: object) -> bool:
        return isinstance(view, JobView) and self._views.get(view.id) is view


class Tracker:
    """Which views changed since a memo last looked at a JobSet."""

    def __init__(self) -> None:
        self.token: object | None = None
        self.position = 0
        self.views: dict[str, JobView] = {}

    def sync(self, jobs: Sequence[JobView]) -> tuple[bool, list[tuple]]:
        """(started over, [(id, old view or None, new view or None, order)]) since last call.

        ``order`` is the job's place in ``jobs`` (its ``JobSet.seq``, or its index).

        Starts over (every view new, nothing old) unless ``jobs`` is the JobSet
        followed last time with its log still covering the gap.
        """
        if isinstance(jobs, JobSet) and jobs.token is self.token:
            ids = jobs.changed_since(self.position)
            if ids is not None:
                self.position = jobs.position
                out = []
                seen = self.views
                for jid in dict.fromkeys(ids):
                    new = jobs.get(jid)
                    old = seen.get(jid)
                    if new is old:
                        continue
                    if new is None:
                        del seen[jid]
                    else:
                        seen[jid] = new
                    out.append((jid, old, new, -1 if new is None else jobs.seq(jid)))
                return False, out
        if isinstance(jobs, JobSet):
            self.token, self.position = jobs.token, jobs.position
        else:
            self.token = None
        self.views = {}
        out = []
        for i, v in enumerate(jobs):
            self.views[v.id] = v
            out.append((v.id, None, v, jobs.seq(v.id) if self.token is not None else i))
        return True, out


class Holdings:
    """Per-GPU tenants of the jobs holding GPUs, and their summed use.

    ``use`` equals ``placement.usage(jobs)`` bit for bit: a GPU's sums are
    redone in the jobs' order whenever one of its tenants changes.
    """

    def __init__(self) -> None:
        self.on_gpu: dict[str, dict[str, tuple[float, float, int]]] = {}  # gid -> jid -> (f, util, seq)
        self.use: dict[str, GpuUse] = {}
        self.holders: dict[str, JobView] = {}   # job id -> view, for jobs holding GPUs
        self._lists: dict[str, list[JobView]] = {}   # GPU id -> its holders' views, in order
        self._stale: set[str] = set()                # GPUs whose list is out of date

    def update(self, jid: str, old: JobView | None, new: JobView | None, seq: int,
               dirty: set[str]) -> None:
        """Record a changed view; adds the GPUs whose use changed to ``dirty``."""
        was = old is not None and old.fragments and old.state in HOLDING
        now = new is not None and new.fragments and new.state in HOLDING
        if was and now and old.fragments == new.fragments and _util(old) == _util(new):
            self.holders[jid] = new
            self._stale.update(f.gpu for f in new.fragments)
            return
        if was:
            for f in old.fragments:
                hs = self.on_gpu.get(f.gpu)
                if hs is not None:
                    hs.pop(jid, None)
                    if not hs:
                        del self.on_gpu[f.gpu]
                dirty.add(f.gpu)
                self._stale.add(f.gpu)
            self.holders.pop(jid, None)
        if now:
            u = _util(new)
            for f in new.fragments:
                self.on_gpu.setdefault(f.gpu, {})[jid] = (f.fraction, u, seq)
                dirty.add(f.gpu)
                self._stale.add(f.gpu)
            self.holders[jid] = new

    def by_gpu(self) -> dict[str, list[JobView]]:
        """GPU id -> the views of the jobs holding it, in the jobs' order (do not modify)."""
        if self._stale:
            views, lists = self.holders, self._lists
            for gid in self._stale:
                hs = self.on_gpu.get(gid)
                if not hs:
                    lists.pop(gid, None)
                elif len(hs) == 1:
                    lists[gid] = [views[next(iter(hs))]]
                else:
                    lists[gid] = [views[jid] for jid, _ in sorted(hs.items(),
                                                                   key=lambda kv: kv[1][2])]
            self._stale = set()
        return self._lists

    def resum(self, dirty: Iterable[str]) -> None:
        """Redo the sums of these GPUs (in the jobs' order, as ``usage`` does)."""
        for gid in dirty:
            hs = self.on_gpu.get(gid)
            if not hs:
                self.use.pop(gid, None)
                continue
            items = sorted(hs.values(), key=lambda t: t[2]) if len(hs) > 1 else list(hs.values())
            used, util = items[0][0], items[0][1]
            for f, u, _ in items[1:]:
                used += f
                util += u
            self.use[gid] = GpuUse(used, len(items), util)


def _util(view: JobView) -> float:
    return view.sample.gpu_util if view.sample is not None else 1.0
