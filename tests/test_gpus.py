"""GPU discovery: virtual-GPU specs, the NVML path (with a fake NVML), fallback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import pytest

from tfgshare.agent import gpus


def test_parse_virtual_gpus_counts_sizes_and_indices():
    two = gpus.parse_virtual_gpus("2x16GiB")
    assert [(g.index, g.memory_mb, g.virtual) for g in two] == [(0, 16384, True), (1, 16384, True)]
    mixed = gpus.parse_virtual_gpus("1x8GiB, 1x24GiB,2x512MiB")
    assert [g.memory_mb for g in mixed] == [8192, 24576, 512, 512]
    assert [g.index for g in mixed] == [0, 1, 2, 3]
    assert gpus.parse_virtual_gpus("1x1.5GiB")[0].memory_mb == 1536


@pytest.mark.parametrize("spec, words", [
    ("", "empty"),
    ("2x", "expected COUNTxSIZE"),
    ("16GiB", "expected COUNTxSIZE"),
    ("2x16furlongs", "bad unit"),
    ("0x16GiB", "count >= 1"),
    ("2x16GiB,,", "expected COUNTxSIZE"),
])
def test_bad_virtual_spec_is_a_clear_error(spec, words):
    with pytest.raises(gpus.GpuSpecError, match=words):
        gpus.parse_virtual_gpus(spec)


def _no_nvml(monkeypatch):
    def broken():
        raise RuntimeError("NVML Shared Library Not Found")
    monkeypatch.setattr(gpus, "NvmlGpus", broken)


def test_discover_falls_back_to_virtual_gpus_without_nvml(monkeypatch):
    _no_nvml(monkeypatch)
    source, note = gpus.discover("2x16GiB")
    assert isinstance(source, gpus.VirtualGpus)
    assert len(source.gpus) == 2 and "NVML unavailable" in note


def test_discover_without_gpus_or_spec_says_what_to_do(monkeypatch):
    _no_nvml(monkeypatch)
    with pytest.raises(RuntimeError, match="--virtual-gpus"):
        gpus.discover(None)
    with pytest.raises(gpus.GpuSpecError):
        gpus.discover("lots", force_virtual=True)


def _fake_pynvml(monkeypatch, procs):
    """A stand-in NVML with one 16 GiB GPU and the given compute processes."""
    class NVMLError(Exception):
        pass
    mod = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: b"Tesla V100",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=16 * 2**30, used=5 * 2**30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=42),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs,
    )
    monkeypatch.setitem(sys.modules, "pynvml", mod)


def test_nvml_reads_names_memory_util_and_per_process_memory(monkeypatch):
    procs = [types.SimpleNamespace(pid=111, usedGpuMemory=3 * 2**30),
             types.SimpleNamespace(pid=222, usedGpuMemory=None),      # unknown: skipped
             types.SimpleNamespace(pid=333, usedGpuMemory=2**30)]
    _fake_pynvml(monkeypatch, procs)
    source, note = gpus.discover("2x16GiB")     # real GPUs win over the virtual spec
    assert isinstance(source, gpus.NvmlGpus) and note.startswith("NVML")
    assert source.gpus == [gpus.GpuInfo(0, "Tesla V100", 16384, False)]
    tel = source.read({111: (0,)})
    assert tel.gpus == [gpus.GpuReading(0, 0.42, 5120.0)]
    assert tel.process_memory_mb == {111: {0: 3072.0}}
    assert source.read().process_memory_mb == {111: {0: 3072.0}, 333: {0: 1024.0}}


def test_force_virtual_ignores_nvml(monkeypatch):
    _fake_pynvml(monkeypatch, [])
    source, _ = gpus.discover("1x8GiB", force_virtual=True)
    assert isinstance(source, gpus.VirtualGpus)


def test_virtual_telemetry_reports_runner_cpu_and_memory():
    busy = subprocess.Popen([sys.executable, "-c",
                             "x = bytearray(64 * 2**20)\nwhile True: pass"])
    try:
        source = gpus.VirtualGpus(gpus.parse_virtual_gpus("2x16GiB"))
        source.read({busy.pid: (1,)})
        time.sleep(1.0)
        tel = source.read({busy.pid: (1,)})
    finally:
        busy.kill()
        busy.wait()
    by_index = {r.index: r for r in tel.gpus}
    assert by_index[0].util == 0.0 and by_index[0].memory_used_mb == 0.0
    assert 0.0 < by_index[1].util <= 1.0
    assert by_index[1].memory_used_mb >= 64
    assert tel.process_memory_mb[busy.pid][1] >= 64
    # a process that has gone is simply absent
    assert gpus.VirtualGpus(source.gpus).read({busy.pid: (0,)}).process_memory_mb == {}


def test_core_sets_split_the_cores_into_disjoint_equal_sets():
    assert gpus.core_sets(2, [0, 1, 2, 3, 4]) == {0: (0, 1), 1: (2, 3)}
    assert gpus.core_sets(2, [0, 1]) == {0: (0,), 1: (1,)}
    assert gpus.core_sets(3, [0, 1]) == {}          # fewer cores than GPUs: no pinning


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable CPU cores")
def test_runners_of_different_virtual_gpus_are_pinned_to_their_own_cores(tmp_path):
    from tfgshare.agent.supervisor import Supervisor
    source = gpus.VirtualGpus(gpus.parse_virtual_gpus("2x16GiB"))
    assert set(source.cores[0]).isdisjoint(source.cores[1])
    code = ("import os, sys; open(sys.argv[sys.argv.index('--train_dir') + 1] + '/cores', 'w')"
            ".write(' '.join(map(str, sorted(os.sched_getaffinity(0)))))")
    sup = Supervisor(tmp_path / "work", runner_cmd=[sys.executable, "-c", code])
    seen = {}
    for index in (0, 1):
        train = tmp_path / f"job{index}"
        train.mkdir()
        proc = sup.start(f"j{index}", 1, [], train, [(index, 0.5)], virtual=True,
                         cores=source.cores_of([index]))
        proc.popen.wait(30)
        seen[index] = tuple(int(c) for c in (train / "cores").read_text().split())
    assert seen == {0: source.cores[0], 1: source.cores[1]}
