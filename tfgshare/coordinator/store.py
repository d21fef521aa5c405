"""The coordinator's durable state: jobs, nodes and job logs in SQLite (WAL).

Every job is here; the coordinator keeps in memory only the active ones and the
latest done ones, and reads the others from here (status pages, logs, the
report, a restart), so its memory does not grow with the jobs it has run.

Writes go into one open transaction that the coordinator commits once per
turn of its event loop, before it sends any reply or command of that turn: a
submit, a transition or a log line is on disk before anyone hears of it, and a
burst of messages costs one commit. A job's record is written once per turn,
as it is last (``save_job``): a job that reports ten times in a turn costs one
row, all of them written by one statement at the commit or before any read of
the jobs.

The database runs in WAL mode with ``synchronous=NORMAL``. In WAL mode NORMAL
never corrupts the file and loses nothing when the *process* dies (SIGKILL,
crash): a committed transaction is in the WAL file in the OS page cache. Only a
power cut or kernel crash may roll back the last commits, and that costs an
fsync per commit to avoid, which would cap submits at the disk's fsync rate.
The coordinator's failure model is a killed process, so NORMAL is the fair
choice.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import msgspec

_TABLES = """
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (job TEXT NOT NULL, time REAL NOT NULL, line TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS log_job ON log (job);
CREATE TABLE IF NOT EXISTS done (seq INTEGER PRIMARY KEY, submit REAL, finish REAL, jct REAL,
                                 waited REAL, num_gpus INTEGER, suspends INTEGER,
                                 resumes INTEGER, migrations INTEGER, move_cost REAL,
                                 pred_err REAL);
CREATE INDEX IF NOT EXISTS done_jct ON done (jct);
CREATE INDEX IF NOT EXISTS done_pred_err ON done (pred_err);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs (seq);
CREATE TABLE IF NOT EXISTS gangs (job TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS timeline (time REAL, allocated REAL, effective REAL, queued REAL,
                                     device REAL, busy REAL);
"""
# columns added since the first format: an older database gets them (NULL in old rows)
_ADDED_COLUMNS = {"timeline": ("device REAL", "busy REAL"),
                  # a job's state, and once it is done its report record (JobRecord fields)
                  "jobs": ("state TEXT", "report TEXT")}
_DONE = ("finished", "failed", "cancelled")
_encoder = msgspec.json.Encoder()


def _record(record: dict[str, Any]) -> str:
    """A job record as stored: JSON, written by msgspec (six times json.dumps' speed; a
    job is saved at each change, and its progress every minute). Its numbers are finite
    (msgspec would write a NaN as null); ``json.loads`` reads it back."""
    return _encoder.encode(record).decode()


class StateStore:
    """Jobs, nodes, job logs and the utilisation timeline in one SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), isolation_level=None,
                                      check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_TABLES)
            for table, columns in _ADDED_COLUMNS.items():
                have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
                for col in columns:
                    if col.split()[0] not in have:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {col}")
            # rows from before the state column: read it from the record
            self.db.execute("UPDATE jobs SET state = json_extract(data, '$.state') "
                            "WHERE state IS NULL")
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"cannot use {self.path} as the state database: {exc}") from None
        self._in_tx = False
        # every write since the last durable commit, replayed after the database
        # refused one (a full disk): the coordinator goes on from memory meanwhile
        self._journal: list[tuple[str, Any, bool]] = []
        # job id -> its (record, report) as it is when written (``save_job``)
        self._jobs_due: dict[str, Callable[[], tuple[dict[str, Any], Any]]] = {}
        self._rows, self._write_s = 0, 0.0   # the journal's rows, and its statements' seconds
        self._broken = False
        self.error: str | None = None     # why the last write or commit failed
        # of the last commit: the rows it made durable, and the seconds their statements took
        self.committed_rows, self.committed_write_s = 0, 0.0

    def _write(self, sql: str, params: Any, many: bool = False) -> None:
        """Run one write in the open transaction; kept for a replay if the database refuses."""
        self._journal.append((sql, params, many))
        self._rows += len(params) if many else 1
        if self._broken:
            return                       # replayed by the next commit
        t0 = time.perf_counter()
        try:
            if not self._in_tx:
                self.db.execute("BEGIN")
                self._in_tx = True
            (self.db.executemany if many else self.db.execute)(sql, params)
        except sqlite3.OperationalError as exc:
            self._fail(exc)
        self._write_s += time.perf_counter() - t0

    def _fail(self, exc: sqlite3.Error) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass                         # SQLite rolled it back itself
        self._in_tx = False
        self._broken = True
        self.error = str(exc)

    @property
    def pending(self) -> int:
        """Writes not yet durable (more than a step's worth only while the database refuses)."""
        return len(self._journal) + len(self._jobs_due)

    def commit(self) -> bool:
        """Make every write since the last durable commit durable.

        False when the database refused (e.g. a full disk): the writes are kept
        in memory and replayed by the next commit, and ``error`` says why.
        """
        self._write_jobs_due()
        try:
            if self._broken:
                self.db.execute("BEGIN")
                self._in_tx = True
                for sql, params, many in self._journal:
                    (self.db.executemany if many else self.db.execute)(sql, params)
            if self._in_tx:
                self.db.execute("COMMIT")
                self._in_tx = False
        except sqlite3.OperationalError as exc:
            self._fail(exc)
            return False
        self._journal.clear()
        self.committed_rows, self._rows = self._rows, 0
        self.committed_write_s, self._write_s = self._write_s, 0.0
        self._broken = False
        self.error = None
        return True

    def close(self) -> bool:
        """Commit and close; False if the last writes could not be made durable."""
        ok = self.commit()
        self.db.close()
        return ok

    # ---- jobs --------------------------------------------------------------

    def insert_jobs(self, jobs: Iterable[tuple[str, int, dict[str, Any]]]) -> None:
        """Add new jobs given as (id, seq, record)."""
        self._write("INSERT INTO jobs (id, seq, data, state) VALUES (?, ?, ?, ?)",
                    [(i, s, _record(r), r["state"]) for i, s, r in jobs], many=True)

    def save_job(self, job_id: str,
                 row: Callable[[], tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        """Overwrite one job's record (and, once it is done, its report record) at the
        turn's commit, or before a read of the jobs: ``row()`` gives (record, report)
        then, and a later save of the job in the turn replaces this one."""
        self._jobs_due[job_id] = row

    def _write_jobs_due(self) -> None:
        """Write the jobs saved since the last write of them, in one statement."""
        if not self._jobs_due:
            return
        due, self._jobs_due = self._jobs_due, {}
        rows = []
        for job_id, row in due.items():
            record, report = row()
            rows.append((_record(record), record["state"],
                         None if report is None else json.dumps(report), job_id))
        self._write("UPDATE jobs SET data = ?, state = ?, report = ? WHERE id = ?", rows,
                    many=True)

    def save_done(self, seq: int, r: dict[str, Any], pred_err: float | None) -> None:
        """A done job's report figures (a ``JobRecord``'s fields), for ``done_summary``."""
        finish = r["finish_time"]
        self._write(
            "INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, r["submit_time"], finish, None if finish is None else finish - r["submit_time"],
             r["waited_s"], r["num_gpus"], r["suspends"], r["resumes"], r["migrations"],
             r["move_cost_s"], pred_err))

    def latest_prediction_errors(self, n: int) -> list[float]:
        """The prediction errors of the ``n`` latest finished jobs, oldest first."""
        rows = self.db.execute("SELECT pred_err FROM done WHERE pred_err IS NOT NULL "
                               "ORDER BY seq DESC LIMIT ?", (n,)).fetchall()
        return [e for (e,) in reversed(rows)]

    def last_submit(self) -> float:
        """The latest submit time of a done job (0 if none)."""
        return self.db.execute("SELECT COALESCE(MAX(submit), 0) FROM done").fetchone()[0]

    def count_done(self) -> int:
        """How many done jobs have their figures in the ``done`` table."""
        return self.db.execute("SELECT COUNT(*) FROM done").fetchone()[0]

    def done_summary(self) -> dict[str, Any]:
        """What the report needs of every done job, computed by the database: counts, sums,
        first submit and last finish, and the JCT and prediction-error statistics."""
        row = self.db.execute(
            "SELECT COUNT(*), COUNT(finish), MIN(submit), MAX(finish), AVG(jct), "
            "AVG(CASE WHEN finish IS NOT NULL THEN waited END), TOTAL(suspends), "
            "TOTAL(resumes), TOTAL(migrations), TOTAL(move_cost), COUNT(pred_err), "
            "AVG(pred_err) FROM done").fetchone()
        keys = ("jobs", "finished", "first_submit", "last_finish", "jct_mean", "wait_mean",
                "suspends", "resumes", "migrations", "move_cost_s", "pred_jobs", "pred_mean")
        out = dict(zip(keys, row))
        out["jct_by_gpus"] = {g: (n, m) for g, n, m in self.db.execute(
            "SELECT num_gpus, COUNT(*), AVG(jct) FROM done WHERE jct IS NOT NULL "
            "GROUP BY num_gpus")}
        out["jct_median"] = self._percentile("jct", out["finished"], 50)
        out["jct_p95"] = self._percentile("jct", out["finished"], 95)
        out["pred_median"] = self._percentile("pred_err", out["pred_jobs"], 50)
        out["pred_p90"] = self._percentile("pred_err", out["pred_jobs"], 90)
        return out

    def _percentile(self, column: str, n: int, q: float) -> float | None:
        """The ``q``-th percentile of a ``done`` column over its n non-NULL values, by linear
        interpolation between the closest ranks (as numpy's default)."""
        if not n:
            return None
        pos = (n - 1) * q / 100
        lo = int(pos)
        values = [v for (v,) in self.db.execute(
            f"SELECT {column} FROM done WHERE {column} IS NOT NULL ORDER BY {column} "
            "LIMIT 2 OFFSET ?", (lo,))]
        if len(values) == 1:
            return values[0]
        return values[0] + (values[1] - values[0]) * (pos - lo)

    def load_jobs(self, active_only: bool = False) -> list[dict[str, Any]]:
        """Every job's record (or only those not done), in submit order."""
        self._write_jobs_due()
        where = f" WHERE state NOT IN {_DONE}" if active_only else ""
        return [json.loads(d) for (d,) in
                self.db.execute(f"SELECT data FROM jobs{where} ORDER BY seq")]

    def load_job(self, job_id: str) -> dict[str, Any] | None:
        """One job's record, None if there is no such job."""
        self._write_jobs_due()
        row = self.db.execute("SELECT data FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def jobs_page(self, cursor: int, limit: int, newest: bool = False
                  ) -> list[tuple[int, str, str]]:
        """(seq, id, record JSON) of up to ``limit`` jobs after sequence ``cursor`` in
        submit order, or of the ``limit`` newest jobs (newest first)."""
        self._write_jobs_due()
        if newest:
            return self.db.execute("SELECT seq, id, data FROM jobs ORDER BY seq DESC LIMIT ?",
                                   (limit,)).fetchall()
        return self.db.execute("SELECT seq, id, data FROM jobs WHERE seq > ? ORDER BY seq "
                               "LIMIT ?", (cursor, limit)).fetchall()

    def count_jobs(self) -> dict[str, int]:
        """How many jobs there are in each stored state."""
        self._write_jobs_due()
        return dict(self.db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    def done_reports(self) -> Iterator[tuple[int, str, str, str | None]]:
        """(seq, state, record JSON, report JSON or None if stored by an older version) of
        every done job, in submit order (read whole: the caller may write meanwhile)."""
        self._write_jobs_due()
        return iter(self.db.execute(f"SELECT seq, state, data, report FROM jobs WHERE state "
                                    f"IN {_DONE} ORDER BY seq").fetchall())

    def max_seq(self) -> int:
        """The largest job sequence number so far (0 if none)."""
        return self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()[0]

    # ---- gangs -------------------------------------------------------------

    def save_gang(self, job_id: str, record: dict[str, Any]) -> None:
        """Remember the members of a job's gang (its current attempt)."""
        self._write("INSERT OR REPLACE INTO gangs (job, data) VALUES (?, ?)",
                    (job_id, json.dumps(record)))

    def drop_gang(self, job_id: str) -> None:
        """Forget a job's gang (its runners are gone)."""
        self._write("DELETE FROM gangs WHERE job = ?", (job_id,))

    def load_gangs(self) -> dict[str, dict[str, Any]]:
        """Every remembered gang: job id -> record."""
        return {j: json.loads(d) for j, d in self.db.execute("SELECT job, data FROM gangs")}

    # ---- nodes -------------------------------------------------------------

    def save_node(self, name: str, record: dict[str, Any]) -> None:
        """Remember a node and its GPUs."""
        self._write("INSERT OR REPLACE INTO nodes (name, data) VALUES (?, ?)",
                    (name, json.dumps(record)))

    def load_nodes(self) -> dict[str, dict[str, Any]]:
        """Every node ever registered: name -> record."""
        return {n: json.loads(d) for n, d in self.db.execute("SELECT name, data FROM nodes")}

    # ---- logs and timeline -------------------------------------------------

    def append_logs(self, lines: Iterable[tuple[str, float, str]]) -> None:
        """Add (job, time, line) log lines."""
        self._write("INSERT INTO log (job, time, line) VALUES (?, ?, ?)", list(lines), many=True)

    def logs(self, job_id: str, tail: int | None = None) -> list[str]:
        """A job's log lines, oldest first (the last ``tail`` when given)."""
        lines, _ = self.logs_page(job_id, tail, 0, None)
        return lines

    def logs_page(self, job_id: str, tail: int | None, cursor: int, limit: int | None
                  ) -> tuple[list[str], int | None]:
        """Up to ``limit`` log lines after ``cursor`` (0: from the start, or the last
        ``tail``), and the cursor of the next page (None: no more)."""
        if cursor == 0 and tail is not None:
            if tail == 0:
                return [], None
            row = self.db.execute("SELECT rowid FROM log WHERE job = ? ORDER BY rowid DESC "
                                  "LIMIT 1 OFFSET ?", (job_id, tail - 1)).fetchone()
            cursor = row[0] - 1 if row else 0
        query = "SELECT rowid, line FROM log WHERE job = ? AND rowid > ? ORDER BY rowid"
        if limit is None:
            return [line for _, line in self.db.execute(query, (job_id, cursor))], None
        rows = self.db.execute(query + " LIMIT ?", (job_id, cursor, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [line for _, line in rows], (rows[-1][0] if more else None)

    def add_timeline(self, time: float, allocated: float, effective: float,
                     queued: float, device: float = 0.0, busy: float = 0.0) -> None:
        """Record the cluster usage from ``time`` on (see ``tfgshare.metrics.Timeline``)."""
        self._write(
            "INSERT INTO timeline (time, allocated, effective, queued, device, busy) "
            "VALUES (?, ?, ?, ?, ?, ?)", (time, allocated, effective, queued, device, busy))

    def load_timeline(self) -> list[tuple[float, ...]]:
        """Every timeline point (time, allocated, effective, queued, device, busy), in time order.

        Points written before device and busy were recorded have None there.
        """
        return list(self.db.execute("SELECT time, allocated, effective, queued, device, busy "
                                    "FROM timeline ORDER BY time, rowid"))
