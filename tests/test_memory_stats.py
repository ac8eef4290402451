"""memory_stats, reset_peak_memory_stats and set_memory_fraction: figures that add up, a cap that holds, and a
process that keeps working after an out-of-memory error."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cuopjit
from cuopjit.device import memory

KEYS = {"device", "allocated", "reserved", "pool_used", "peak_allocated", "allocations", "frees",
        "active_allocations", "fragmentation", "limit"}


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5, float("nan"), True, "0.5"])
def test_a_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(ValueError, match=r"the fraction must be a number in \(0, 1\]"):
        cuopjit.set_memory_fraction(fraction)


def test_stats_without_a_gpu_are_zero():
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU")
    stats = cuopjit.memory_stats()
    assert set(stats) == KEYS and stats["allocated"] == 0 and stats["reserved"] == 0 and stats["limit"] is None


# --- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_stats_add_up_across_allocations_and_frees():
    cuopjit.synchronize()
    before = cuopjit.memory_stats()
    sizes = [1, 7, 33, 1000, 4097, 1 << 20]
    tensors = [cuopjit.empty([n]) for n in sizes]
    nbytes = 4 * sum(sizes)
    mid = cuopjit.memory_stats()
    assert mid["allocated"] - before["allocated"] == nbytes
    assert mid["allocations"] - before["allocations"] == len(sizes)
    assert mid["peak_allocated"] >= mid["allocated"]
    assert mid["reserved"] >= mid["pool_used"] >= mid["allocated"] - before["allocated"]
    assert 0.0 <= mid["fragmentation"] < 1.0
    del tensors[::2]
    after = cuopjit.memory_stats()
    freed = 4 * sum(sizes[::2])
    assert mid["allocated"] - after["allocated"] == freed and after["frees"] - mid["frees"] == 3
    assert after["peak_allocated"] == mid["peak_allocated"]
    cuopjit.reset_peak_memory_stats()
    assert cuopjit.memory_stats()["peak_allocated"] == after["allocated"]
    del tensors
    cuopjit.empty_cache()
    trimmed = cuopjit.memory_stats()
    assert trimmed["allocated"] == before["allocated"] and trimmed["reserved"] <= mid["reserved"]


@pytest.mark.gpu
def test_workspace_counts_while_it_lives():
    """Dot's partial sums come from the pool on the call's stream and go back after it: nothing stays allocated."""
    x, y = cuopjit.ones([1 << 22]), cuopjit.ones([1 << 22])
    start = cuopjit.memory_stats()
    assert cuopjit.DotFloat().forward(x, y) == float(1 << 22)
    end = cuopjit.memory_stats()
    assert end["allocated"] == start["allocated"]                 # the result and the workspace are back
    assert end["allocations"] - start["allocations"] == 2 and end["frees"] - start["frees"] == 2


@pytest.mark.gpu
def test_the_fraction_cap_holds_and_the_process_recovers():
    script = textwrap.dedent("""
        import cuopjit, numpy as np
        from cuopjit.device import driver
        total = driver.get_device().total_memory
        cuopjit.set_memory_fraction(0.05)
        cap = cuopjit.memory_stats()["limit"]
        assert cap == int(total * 0.05), cap
        keep = cuopjit.empty([cap // 8])                  # half the cap in float32
        try:
            cuopjit.empty([cap // 4])                     # the whole cap again: over it
        except cuopjit.MemoryError as exc:
            print("CAP", exc)
        del keep
        x = cuopjit.tensor(np.arange(1000, dtype=np.float32))
        cuopjit.ReluFloat().forward(x)
        assert np.array_equal(x.to_numpy(), np.arange(1000, dtype=np.float32))
        cuopjit.set_memory_fraction(1.0)
        try:
            cuopjit.empty([int(total * 0.999) // 4])      # under the cap, over what is free: trim, retry, raise
        except cuopjit.MemoryError as exc:
            print("OOM", exc)
        cuopjit.empty_cache()
        y = cuopjit.ones([1 << 20])
        print("AFTER", cuopjit.DotFloat().forward(y, y), cuopjit.memory_stats()["allocated"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert "cuopjit's memory cap on device 0 is reached" in lines["CAP"] and "set_memory_fraction(0.05)" in lines["CAP"]
    assert lines["OOM"].startswith("out of device memory: requested") and "cuopjit holds" in lines["OOM"]
    assert lines["AFTER"] == f"{float(1 << 20)} {(4 << 20) + 4000}"   # y and x live


@pytest.mark.gpu
def test_stats_of_another_device_ordinal():
    stats = cuopjit.memory_stats(0)
    assert set(stats) == KEYS and stats["device"] == 0
    assert np.isfinite(stats["fragmentation"])
    assert memory.stats(0).allocated_bytes == stats["allocated"]
