"""Philly machine lists and VC sizes."""

from __future__ import annotations

from collections import Counter

import pytest

from philly import TraceFormatError, load_machine_list, vc_sizes


def test_official_machine_list():
    machines = load_machine_list()
    assert len(machines) == 552 and len({m.id for m in machines}) == 552
    assert Counter((m.num_gpus, m.gpu_memory_mb) for m in machines) == {(2, 12 * 1024): 321, (8, 24 * 1024): 231}
    assert sum(m.num_gpus for m in machines) == 2490
    assert machines[0].id == "m0"


def test_revised_machine_list():
    machines = load_machine_list("revised")
    assert Counter(m.num_gpus for m in machines) == {8: 264, 4: 271, 3: 1, 2: 3}  # 13 machines with 0 GPUs dropped
    assert sum(m.num_gpus for m in machines) == 3205
    official = {m.id: m.gpu_memory_mb for m in load_machine_list()}
    assert all(m.gpu_memory_mb == official[m.id] for m in machines)


def test_revised_memory_defaults_to_24gb(tmp_path):
    path = tmp_path / "revised.csv"
    path.write_text(",machineId,number of GPUs\n0,m0,8\n1,m9999,4\n2,m1,0\n")
    machines = load_machine_list("revised", path=path)
    assert [(m.id, m.num_gpus, m.gpu_memory_mb) for m in machines] == [("m0", 8, 12288), ("m9999", 4, 24576)]


@pytest.mark.parametrize("text, message", [
    ("machineId, number of GPUs, single GPU mem\nm0,2, 12 gigs\n", r"line 2: GPU memory '12 gigs'"),
    ("machineId, number of GPUs, single GPU mem\nm0,two, 12GB\n", r"line 2: number of GPUs 'two'"),
    ("machine, gpus\nm0,2\n", r"line 1: missing column\(s\) \['machineid'"),
])
def test_bad_machine_list(tmp_path, text, message):
    path = tmp_path / "machines"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message):
        load_machine_list(path=path)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown machine list kind 'big'"):
        load_machine_list("big")


def test_vc_sizes():
    sizes = vc_sizes()
    assert len(sizes) == 11 and sum(sizes.values()) == 352
    assert sizes["6214e9"] == 64 and sizes["103959"] == 8
