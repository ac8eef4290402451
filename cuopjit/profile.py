"""Timing with CUDA events: the JIT wrappers' performance profile, `cuopjit.benchmark`, device ceilings.

`Ceilings` are a device's peak DRAM bandwidth and peak FLOP/s per kind of unit: from the live
device's clocks and bus width, or the datasheet of a named target. A time set against them gives
the roofline fraction (`explain`, the performance profile): the time the bytes or the FLOPs need at
the peak, whichever is longer, over the time measured.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field
from typing import Any

from .device import driver
from .device.events import EventPair
from .target import Target, of_device
from .device.streams import handle

# FLOPs per SM per clock (an FMA counts 2) by compute capability: the datasheet peaks over SMs x boost clock.
_PER_SM_CLOCK = {
    80: {"fp32": 128, "fp64": 64, "fp64_tc": 128, "tf32_tc": 1024},
    86: {"fp32": 256, "fp64": 4, "fp64_tc": 4, "tf32_tc": 256},
    89: {"fp32": 256, "fp64": 4, "fp64_tc": 4, "tf32_tc": 256},
    90: {"fp32": 256, "fp64": 128, "fp64_tc": 256, "tf32_tc": 2048},
    100: {"fp32": 256, "fp64": 128, "fp64_tc": 128, "tf32_tc": 4096},
    120: {"fp32": 256, "fp64": 4, "fp64_tc": 4, "tf32_tc": 512},
}
# Datasheet (boost clock GHz, DRAM GB/s) of the named targets' parts (target.NAMED), for planning without a GPU.
_DATASHEET = {80: (1.41, 2039.0), 86: (1.695, 936.0), 89: (2.52, 1008.0), 90: (1.98, 3350.0), 100: (1.965, 8000.0),
              120: (2.41, 1792.0)}


def unit_kind(units: str) -> str:
    """'TF32 tensor cores (mma.sync)' -> 'tf32_tc': which peak a plan's launches are held to."""
    u = units.lower()
    if "tensor" in u:
        return "fp64_tc" if "fp64" in u else "tf32_tc"
    return "fp64" if "fp64" in u else "fp32"


@dataclass(frozen=True)
class Ceilings:
    """Peak DRAM bandwidth (GB/s) and peak GFLOP/s per kind of unit ('fp32', 'fp64', 'fp64_tc', 'tf32_tc')."""
    source: str                                   # 'device' (clocks and bus width) or 'datasheet'
    bandwidth_gbps: float
    gflops: dict = field(default_factory=dict)

    def roofline(self, flops: float, nbytes: float, units: str) -> tuple[float, str]:
        """(the least time in ms the work can take, 'memory' or 'compute': which ceiling sets it)."""
        mem_ms = nbytes / (self.bandwidth_gbps * 1e6) if self.bandwidth_gbps else 0.0
        peak = self.gflops.get(unit_kind(units), 0.0)
        flop_ms = flops / (peak * 1e6) if peak else 0.0
        return (mem_ms, "memory") if mem_ms >= flop_ms else (flop_ms, "compute")

    def fraction(self, ms: float, flops: float, nbytes: float, units: str) -> float:
        """The roofline fraction of a measured time: 1.0 means the work ran at the ceiling that bounds it."""
        return self.roofline(flops, nbytes, units)[0] / ms if ms > 0 else 0.0


def _ceilings(capability: int, sm_count: int, clock_ghz: float, bandwidth_gbps: float, source: str) -> Ceilings:
    per = _PER_SM_CLOCK.get(capability) or _PER_SM_CLOCK[max(c for c in _PER_SM_CLOCK if c <= capability)]
    return Ceilings(source, bandwidth_gbps, {k: v * sm_count * clock_ghz for k, v in per.items()})


def target_ceilings(target: Target) -> Ceilings:
    """The datasheet ceilings of a named target's part (no GPU needed)."""
    cap = target.capability
    clock, bw = _DATASHEET.get(cap) or _DATASHEET[max(c for c in _DATASHEET if c <= cap)]
    return _ceilings(cap, target.sm_count, clock, bw, "datasheet")


@functools.cache
def device_ceilings(ordinal: int) -> Ceilings:
    """A live device's ceilings: DRAM bandwidth from its memory clock and bus width, FLOP/s from its SM clock."""
    dev = driver.get_device(ordinal)
    mem_khz, bus_bits, clock_khz = (dev.attribute("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
                                    dev.attribute("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
                                    dev.attribute("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"))
    target = of_device(ordinal)
    if not (mem_khz and bus_bits and clock_khz):
        return target_ceilings(target)
    return _ceilings(target.capability, dev.sm_count, clock_khz / 1e6, 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9,
                     "device")


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

    @property
    def bandwidth_fraction(self) -> float:
        """GB/s over the current device's peak DRAM bandwidth (0.0 before a timed forward)."""
        if not self.bandwidth_gbps:
            return 0.0
        return self.bandwidth_gbps / device_ceilings(driver.current_ordinal()).bandwidth_gbps

    @property
    def flops_fraction(self) -> float:
        """GFLOP/s over the current device's peak for the units the kernels use (0.0 before a timed forward)."""
        if not self.gflops:
            return 0.0
        peak = device_ceilings(driver.current_ordinal()).gflops.get(unit_kind(self.units), 0.0)
        return self.gflops / peak if peak else 0.0

    def __str__(self) -> str:
        return (f"{self.kernel_name} [{self.units}]: {self.execution_time:.4f} ms, {self.gflops:.1f} GFLOP/s "
                f"({self.flops_fraction:.0%} of peak), {self.bandwidth_gbps:.1f} GB/s "
                f"({self.bandwidth_fraction:.0%} of peak), {'cached' if self.cache_hit else 'compiled'} "
                f"in {self.build_time:.1f} ms, {self.calls} calls")


def benchmark(operator: Any, *args: Any, num_runs: int = 100, warmup_runs: int = 10, **kwargs: Any) -> dict:
    """Time `operator.forward(*args)` with CUDA events (on its `stream=`, if given): mean/std/min/max/median ms."""
    if num_runs < 1:
        raise ValueError(f"num_runs={num_runs} must be >= 1")
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
