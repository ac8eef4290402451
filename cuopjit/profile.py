"""Timing with CUDA events: the JIT wrappers' performance profile and `cuopjit.benchmark`."""
from __future__ import annotations

import ctypes
import functools
import statistics
from dataclasses import dataclass
from typing import Any

from . import driver
from .errors import check


class EventPair:
    """Two CUDA events around a region of the stream; `elapsed_ms()` waits for the second."""

    def __init__(self) -> None:
        drv = driver._driver()
        driver.get_device()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT
        self.start = check(drv.cuEventCreate(flags), "cuEventCreate")
        self.end = check(drv.cuEventCreate(flags), "cuEventCreate")
        raw = driver.raw_entry("cuEventRecord")
        if raw is not None:
            self.record_start = functools.partial(_checked, raw, driver.handle_value(self.start))
            self.record_end = functools.partial(_checked, raw, driver.handle_value(self.end))
        else:
            self.record_start = functools.partial(_checked, _bindings_record, self.start)
            self.record_end = functools.partial(_checked, _bindings_record, self.end)

    def __del__(self) -> None:
        try:
            drv = driver._driver()
            drv.cuEventDestroy(self.start)
            drv.cuEventDestroy(self.end)
        except Exception:  # interpreter shutdown
            pass

    def elapsed_ms(self) -> float:
        drv = driver._driver()
        check(drv.cuEventSynchronize(self.end), "cuEventSynchronize")
        return check(drv.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime")


def _bindings_record(event, stream: ctypes.c_void_p) -> int:
    return int(driver._driver().cuEventRecord(event, stream.value or 0)[0])


def _checked(record, event, stream: int = 0) -> None:
    err = record(event, ctypes.c_void_p(stream))
    if err:
        check((driver._driver().CUresult(err),), "cuEventRecord")


@dataclass
class PerformanceProfile:
    """The last forward of a JIT operator: time, rates and how its kernel was obtained."""
    execution_time: float = 0.0      # ms, measured with CUDA events around the launch
    gflops: float = 0.0
    bandwidth_gbps: float = 0.0      # bytes the operator must move / time
    kernel_name: str = ""            # every kernel of the plan, in launch order
    units: str = ""                  # which execution units they use (FP32 cores, TF32 tensor cores, ...)
    plan_choice: str = ""            # the family's label of the chosen kernel shape
    cache_hit: bool = False          # the cubin came from a cache layer (no NVRTC run)
    build_time: float = 0.0          # ms to obtain and load the kernel the first time
    registers: int | None = None     # per thread, when this process compiled it
    calls: int = 0

    def __str__(self) -> str:
        return (f"{self.kernel_name} [{self.units}]: {self.execution_time:.4f} ms, {self.gflops:.1f} GFLOP/s, "
                f"{self.bandwidth_gbps:.1f} GB/s, {'cached' if self.cache_hit else 'compiled'} "
                f"in {self.build_time:.1f} ms, {self.calls} calls")


def benchmark(operator: Any, *args: Any, num_runs: int = 100, warmup_runs: int = 10, **kwargs: Any) -> dict:
    """Time `operator.forward(*args)` with CUDA events (on its `stream=`, if given): mean/std/min/max/median ms."""
    if num_runs < 1:
        raise ValueError(f"num_runs={num_runs} must be >= 1")
    from .streams import handle
    s = handle(kwargs.get("stream"))
    for _ in range(warmup_runs):
        operator.forward(*args, **kwargs)
    pairs = [EventPair() for _ in range(num_runs)]
    for pair in pairs:
        pair.record_start(s)
        operator.forward(*args, **kwargs)
        pair.record_end(s)
    times = [p.elapsed_ms() for p in pairs]
    return {"mean_time_ms": statistics.fmean(times), "std_time_ms": statistics.pstdev(times),
            "min_time_ms": min(times), "max_time_ms": max(times), "median_time_ms": statistics.median(times),
            "num_runs": num_runs}
