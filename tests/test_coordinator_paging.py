"""Replies that can be large (status, logs) come in pages; the client follows them."""

from __future__ import annotations

import pytest

from coordinator_fakes import CoordinatorThread
from tfgshare import schema as s
from tfgshare.client.api import Client, Refused


@pytest.fixture
def ct(tmp_path):
    ct = CoordinatorThread(tmp_path / "state.db")
    yield ct
    ct.close()


def test_status_comes_in_pages_and_the_client_follows_them(ct):
    with Client(ct.address, timeout_s=5) as client:
        ids = client.submit([s.JobSpec("lenet", name=f"n{i}") for i in range(7)])
        first = client.request(s.Status(limit=3))
        assert [j["id"] for j in first["jobs"]] == ids[:3] and first["next_cursor"] is not None
        assert first["counts"] == {"queued": 7}
        last = client.request(s.Status(limit=3, cursor=first["next_cursor"] + 3))
        assert [j["id"] for j in last["jobs"]] == ids[6:] and last["next_cursor"] is None
        assert [j["id"] for j in client.jobs()] == ids        # one page
        assert [j["id"] for j in client.status(page_size=2)["jobs"]] == ids
        with pytest.raises(Refused, match=f"limit must be <= {s.MAX_PAGE}"):
            client.request(s.Status(limit=s.MAX_PAGE + 1))


def test_logs_come_in_pages_and_tail_still_means_the_last_lines(ct):
    with Client(ct.address, timeout_s=5) as client:
        (jid,) = client.submit([s.JobSpec("lenet")])
        for _ in range(3):
            client.suspend(jid)
            client.resume(jid)
        lines = client.logs(jid)
        assert len(lines) == 7 and "submitted lenet" in lines[0]
        page = client.request(s.Logs(job=jid, limit=4))
        assert page["lines"] == lines[:4] and page["next_cursor"] is not None
        assert client.logs(jid, page_size=2) == lines
        assert client.logs(jid, tail=5, page_size=2) == lines[-5:]
        assert client.logs(jid, tail=0) == [] and client.logs(jid, tail=50) == lines


def test_done_jobs_leave_memory_but_status_logs_and_the_report_still_show_them(tmp_path):
    ct = CoordinatorThread(tmp_path / "state.db")
    ct.coord.cluster.keep_done = 2
    try:
        with Client(ct.address, timeout_s=5) as client:
            ids = client.submit([s.JobSpec("lenet", name=f"n{i}") for i in range(5)])
            for jid in ids:
                client.cancel(jid)
            assert set(ct.coord.cluster.jobs) == set(ids[-2:])     # the rest: database only
            jobs = client.status(page_size=2)["jobs"]
            assert [j["id"] for j in jobs] == ids and {j["state"] for j in jobs} == {"cancelled"}
            assert client.request(s.Status())["counts"] == {"cancelled": 5}
            assert client.job(ids[0])["name"] == "n0"
            assert "cancelled" in client.logs(ids[0])[-1]
            with pytest.raises(Refused, match="already cancelled"):
                client.cancel(ids[0])
            report = client.metrics()
            assert report["summary"]["jobs"] == 5 and len(report["jobs"]) == 5
    finally:
        ct.close()
    ct = CoordinatorThread(tmp_path / "state.db")    # a restart loads the active jobs only
    try:
        assert not ct.coord.cluster.jobs
        with Client(ct.address, timeout_s=5) as client:
            assert client.request(s.Status())["counts"] == {"cancelled": 5}
            assert [j["id"] for j in client.jobs()] == ids
            assert client.metrics()["summary"]["jobs"] == 5
    finally:
        ct.close()
