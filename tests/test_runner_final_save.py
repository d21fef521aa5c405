"""A final checkpoint that hits a full disk is tried again until the disk has room."""

import pytest

from tfgshare.runner import protocol as rp
from tfgshare.runner.main import save_patiently


def _disk_full_for(tries: int):
    calls = []

    def save_once():
        calls.append(1)
        if len(calls) <= tries:
            raise OSError(28, "No space left on device")
        return "saved"
    return save_once, calls


def test_a_final_save_waits_out_a_full_disk():
    save_once, calls = _disk_full_for(2)
    warnings = []
    assert save_patiently(save_once, 120, True, (OSError,), warnings.append,
                          patience_s=1.0, pause_s=0.01) == "saved"
    assert len(calls) == 3
    assert len(warnings) == 2 and "No space left on device" in warnings[0]


def test_a_final_save_gives_up_when_the_disk_stays_full():
    save_once, _ = _disk_full_for(10**6)
    with pytest.raises(rp.RunnerError, match="checkpoint at step 120 failed.*No space"):
        save_patiently(save_once, 120, True, (OSError,), lambda _m: None,
                       patience_s=0.05, pause_s=0.01)


def test_a_periodic_save_on_a_full_disk_warns_once_and_trains_on():
    save_once, calls = _disk_full_for(1)
    warnings = []
    assert save_patiently(save_once, 40, False, (OSError,), warnings.append) is None
    assert len(calls) == 1 and "the next save tries again" in warnings[0]
