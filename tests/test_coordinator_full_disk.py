"""A state database that refuses writes (a full disk) neither stops the coordinator nor loses
what it was told: the writes wait in memory and are saved once the database takes them again.

SQLite's ``max_page_count`` stands in for the full disk: past it every write fails with
"database or disk is full", as on a full filesystem. Also what is written when: a running
job's progress at most every minute, and in full at a clean stop.
"""

from __future__ import annotations

import json
import sqlite3
import time

from coordinator_fakes import Clock, CoordinatorThread, FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client
from tfgshare.coordinator.lifecycle import PROGRESS_SAVE_S
from tfgshare.coordinator.store import StateStore
from tfgshare.policies.registry import get_policy
from tfgshare.schema import JobSpec


def cap_at_current_size(store: StateStore) -> None:
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")


def uncap(store: StateStore) -> None:
    store.db.execute("PRAGMA max_page_count = 1073741823")


def test_refused_writes_are_kept_and_saved_when_the_database_takes_them_again(tmp_path):
    store = StateStore(tmp_path / "state.db")
    cap_at_current_size(store)
    store.insert_jobs([(f"j{i}", i, {"state": "queued", "pad": "x" * 1500}) for i in range(300)])
    assert store.commit() is False
    assert "full" in store.error
    store.append_logs([("j1", 1.0, "a line written while the disk is full")])
    assert store.commit() is False and store.pending == 2
    uncap(store)
    assert store.commit() is True and store.pending == 0 and store.error is None
    store.close()
    again = StateStore(tmp_path / "state.db")
    assert again.db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 300
    assert again.logs("j1") == ["a line written while the disk is full"]


def test_coordinator_serves_through_a_full_disk_and_keeps_every_submit(tmp_path, caplog):
    state = tmp_path / "state.db"
    ct = CoordinatorThread(state, policy=get_policy("fifo"))
    client = Client(ct.address, timeout_s=5.0)
    try:
        cap_at_current_size(ct.coord.store)
        specs = [JobSpec(model_name="lenet", name=f"full-{i}", max_number_of_steps=10)
                 for i in range(200)]
        ids = client.submit(specs)
        assert len(ids) == 200
        # still answering, from memory (jobs not done are listed from memory; the full
        # listing reads the database, which has not got them yet)
        assert {j["id"] for j in client.status(active=True)["jobs"]} == set(ids)
        assert client.status(ids[7])["job"]["name"] == "full-7"
        assert ct.coord.store.pending > 0 and "full" in ct.coord.store.error
        assert any("refused a commit" in r.getMessage() for r in caplog.records)
        uncap(ct.coord.store)
        ids += client.submit([JobSpec(model_name="lenet", name="after", max_number_of_steps=10)])
        # the next commit writes all that waited (the coordinator's thread may be between
        # a change and its commit when this one looks: it waits for the commit)
        end = time.monotonic() + 5.0
        while ct.coord.store.pending and time.monotonic() < end:
            time.sleep(0.01)
        assert ct.coord.store.pending == 0
    finally:
        client.close()
        ct.close()
    restarted = CoordinatorThread(state, policy=get_policy("fifo"))
    try:
        assert _stored_ids(restarted) == set(ids)
        assert set(restarted.coord.cluster.jobs) == set(ids)   # all queued: loaded back
    finally:
        restarted.close()


def _stored_ids(ct: CoordinatorThread) -> set[str]:
    return {row[0] for row in ct.coord.store.db.execute("SELECT id FROM jobs")}


def test_progress_is_stored_at_most_every_minute_and_in_full_at_a_clean_stop(tmp_path):
    """A running job's progress-only record is written at its first report and then at
    most every PROGRESS_SAVE_S (a restart after a crash sees steps up to that old);
    status answers from memory at once, and a clean stop writes the latest. The job's
    log keeps the reports stored."""
    state, clock = tmp_path / "state.db", Clock()
    ct = CoordinatorThread(state, policy=get_policy("fifo"), clock=clock, node_timeout=600)
    agent = FakeAgent(ct.address, "n1")
    client = Client(ct.address, timeout_s=5.0)
    stored = sqlite3.connect(state)

    def stored_steps(jid: str) -> int:
        (data,) = stored.execute("SELECT data FROM jobs WHERE id = ?", (jid,)).fetchone()
        return json.loads(data)["steps_done"]

    def progress(step: int) -> None:
        agent.event(jid, "progress", step=step, loss=1.0, step_time_s=0.1,
                    images_per_sec=1.0, predicted_remaining_s=0.1 * (10_000 - step))
    try:
        agent.register()
        (jid,) = client.submit([JobSpec("inception_v3", max_number_of_steps=10_000)])
        agent.wait_command(s.StartJob, jid)
        agent.event(jid, "started", global_step=0, restored=False)
        progress(10)
        assert stored_steps(jid) == 10          # its first report: written
        progress(20)
        assert client.job(jid)["steps_done"] == 20 and stored_steps(jid) == 10
        clock.skip(PROGRESS_SAVE_S)
        progress(30)
        assert stored_steps(jid) == 30          # a minute on: written
        progress(40)
        assert stored_steps(jid) == 30
        # the job's log keeps the progress reports stored, not every one
        logged = [ln.split(" step=")[1].split()[0] for ln in client.logs(jid)
                  if " progress step=" in ln]
        assert logged == ["10", "30"]
    finally:
        client.close()
        agent.close()
        ct.close()
    assert stored_steps(jid) == 40              # the clean stop wrote the latest
    stored.close()
