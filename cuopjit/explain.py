"""`cuopjit.explain(op, *args)` and `cuopjit explain OP`: which kernel a forward runs, why, and how well.

For each launch of the plan forward would run: the kernel, why it was chosen (the family's
heuristic, a tuning record, or the user's config), registers, shared memory and spills (ptxas's
report from NVRTC; with a GPU also cuFuncGetAttribute), and occupancy (computed from the target's
limits; with a GPU, the driver's occupancy calculator). With a GPU the forward is timed and set
against the device's roofline (profile.Ceilings).
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .build import compiler, pipeline
from .device import driver
from . import target as targets, tuning
from .config import DEFAULT, JITConfig, RunSettings
from .ops.base import Operator
from .run.plan import KernelLaunch, Plan, main_units
from .profile import benchmark, device_ceilings, unit_kind
from .jit import JITWrapper
from .listing import target_for
from .recipes import SHAPES, build, fake_maker, gpu_maker
from .ops import operator_class
from .prewarm import check_ops
from .operands import operands

_MAX_BLOCKS_PER_SM = {80: 32, 86: 16, 89: 24, 90: 32, 100: 32, 120: 32}
_SMEM_RESERVED_PER_BLOCK = 1024   # bytes the driver keeps per resident block (sm_80 and newer)
_NAMED = re.compile(r"(?:Compiling entry function '([^']+)'|Function properties for (\S+))")


@dataclass
class Explanation:
    """What explain found; `str()` is the report, `as_dict()` the JSON form."""
    op: str
    family: str
    dtype: str
    arch: str
    target: str
    problem: dict
    choice: str
    why: str            # 'heuristic', 'user config', 'tuning record' or 'auto-tuning'
    reason: str
    candidates: list
    kernels: list = field(default_factory=list)
    work: dict = field(default_factory=dict)
    measured: dict | None = None

    def as_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    def __str__(self) -> str:
        lines = [f"{self.op} ({self.family}, {self.dtype}) on {self.target} [{self.arch}]",
                 "  problem: " + ", ".join(f"{k}={v}" for k, v in self.problem.items()),
                 f"  choice:  {self.choice or '(nothing to launch)'} of {len(self.candidates)} candidate(s)",
                 f"  why:     {self.why}: {self.reason}"]
        for k in self.kernels:
            occ = k["occupancy"]
            lines.append(f"  kernel {k['name']} [{k['units']}] grid {k['grid']} block {k['block']}")
            lines.append(f"    registers {k['registers']}/thread, shared {k['static_shared']} B static + "
                         f"{k['dynamic_shared']} B dynamic, spills {k['spill_bytes']} B, local {k['local_bytes']} B "
                         f"({k['resources_from']})")
            lines.append(f"    occupancy {occ['blocks_per_sm']} blocks/SM = {occ['fraction']:.0%} of the SM's "
                         f"threads (limited by {occ['limiter']}; {occ['from']})")
        if self.measured:
            m = self.measured
            lines.append(f"  measured: {m['time_ms']:.4f} ms (median of {m['runs']}), {m['gflops']:.1f} GFLOP/s, "
                         f"{m['gbps']:.1f} GB/s; {m['roofline_fraction']:.0%} of the {m['bound']} roofline "
                         f"({m['ceiling']}, {m['ceilings_from']} ceilings)")
        else:
            lines.append("  measured: no (needs a GPU, and the live device rather than --arch)")
        return "\n".join(lines)


def occupancy(t: targets.Target, threads: int, registers: int, shared: int) -> dict:
    """Resident blocks per SM from the target's limits (threads, registers in 256-per-warp units, shared memory)."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    limits = {"threads": t.max_threads_per_sm // (warps * 32),
              "registers": (t.regs_per_sm // per_warp) // warps,
              "blocks": _MAX_BLOCKS_PER_SM.get(t.capability, 32)}
    if shared:
        limits["shared memory"] = t.smem_per_sm // (shared + _SMEM_RESERVED_PER_BLOCK)
    limiter = min(limits, key=limits.get)
    blocks = limits[limiter]
    return {"blocks_per_sm": blocks, "fraction": blocks * warps * 32 / t.max_threads_per_sm, "limiter": limiter,
            "from": "target limits"}


def _static(spec: pipeline.KernelSpec, arch: str) -> compiler.Compiled:
    """ptxas's report for the kernel (compiled here with the options the cache uses; nothing is stored)."""
    return pipeline.compile_fresh(spec, arch)


def entry_report(log: str, kernel: str) -> compiler.Compiled:
    """The lines of a ptxas log about entry point `kernel` (a module may hold several), as a Compiled to read:
    each figure belongs to the function the last 'Compiling entry function' / 'Function properties for' named.
    A log that names no function at all (some NVRTC versions) is taken whole."""
    current, mine, named_any = None, [], False
    for line in log.splitlines():
        named = _NAMED.search(line)
        if named:
            current, named_any = named.group(1) or named.group(2), True
        elif current == kernel:
            mine.append(line)
    return compiler.Compiled(b"", "\n".join(mine) if named_any else log, 0.0)


def _live(kl: KernelLaunch, settings: RunSettings, ordinal: int) -> dict:
    """cuFuncGetAttribute figures and the driver's resident blocks per SM for the loaded kernel."""
    fn = pipeline.get_function(kl.spec, ordinal, settings.cache_dir, settings.persistent).function
    fn.reserve_shared(kl.shared)
    return fn.attributes(kl.block[0] * kl.block[1] * kl.block[2], kl.shared)


def _kernel(kl: KernelLaunch, t: targets.Target, settings: RunSettings, live: bool) -> dict:
    report = entry_report(_static(kl.spec, t.arch).log, kl.spec.kernel)
    threads = kl.block[0] * kl.block[1] * kl.block[2]
    out = {"name": kl.spec.name, "template": kl.spec.template, "grid": list(kl.grid), "block": list(kl.block),
           "cluster": list(kl.cluster), "units": kl.units, "dynamic_shared": kl.shared,
           "registers": report.registers or 0, "ptxas_registers": report.registers or 0,
           "static_shared": report.shared_bytes or 0,
           "spill_bytes": report.spill_bytes, "local_bytes": 0, "resources_from": "ptxas (NVRTC)"}
    out["occupancy"] = occupancy(t, threads, out["registers"], out["static_shared"] + kl.shared)
    if live:
        got = _live(kl, settings, driver.current_ordinal())
        out.update(registers=got["registers"], static_shared=got["static_shared"], local_bytes=got["local_bytes"],
                   resources_from="cuFuncGetAttribute; spills from ptxas")
        if got["blocks"] is not None:
            warps = -(-threads // 32)
            out["occupancy"] = {**occupancy(t, threads, got["registers"], got["static_shared"] + kl.shared),
                                "blocks_per_sm": got["blocks"],
                                "fraction": got["blocks"] * warps * 32 / t.max_threads_per_sm,
                                "from": "cuOccupancyMaxActiveBlocksPerMultiprocessor"}
    return out


def _why(family: Any, problem: Any, choices: list, settings: RunSettings, t: targets.Target) -> tuple[str, str]:
    """('heuristic' | 'user config' | 'tuning record' | 'auto-tuning', the reason in words)."""
    if settings.tuning and len(choices) > 1:
        timings = tuning.timings(settings, tuning.record_key(family.name, problem, t, settings.config.precision),
                                 [c.label for c in choices])
        if all(c.label in timings for c in choices):
            shown = ", ".join(f"{c.label} {timings[c.label]:.4f} ms" for c in choices)
            return "tuning record", f"fastest of {len(choices)} timed choices on this GPU model ({shown})"
        return "auto-tuning", f"{len(choices)} choices are timed at the first forward of this shape"
    default = JITConfig().snapshot()
    changed = {f.name: getattr(settings.config, f.name) for f in dataclasses.fields(default)
               if getattr(settings.config, f.name) != getattr(default, f.name)}
    if changed:
        shown = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return "user config", f"the kernel the family builds for {shown} (its heuristic fills in the rest)"
    return "heuristic", (f"the family's first choice for this problem on {t.name} ({t.sm_count} SMs), "
                         f"of {len(choices)} candidate(s) the default config allows")


def _unwrap(op: Any) -> tuple[Operator, RunSettings]:
    if isinstance(op, JITWrapper):
        return op.operator, op._current_settings()
    if not isinstance(op, Operator):
        raise TypeError(f"explain takes a cuopjit operator or JIT wrapper, got {type(op).__name__}")
    return op, DEFAULT


def _report(name: str, family: Any, problem: Any, settings: RunSettings, t: targets.Target, live: bool,
            plan: Plan | None = None) -> Explanation:
    """The explanation of `problem` under `settings` on `t` (plan: the one forward chose, else the first choice)."""
    choices = list(family.choices(problem, settings.config, t))
    plan = plan or family.plan(problem, choices[0], t)
    why, reason = _why(family, problem, choices, settings, t)
    fields = dataclasses.asdict(problem) if dataclasses.is_dataclass(problem) else {"problem": str(problem)}
    return Explanation(name, family.name, getattr(problem, "dtype", ""), t.arch, t.name, fields, plan.choice, why, reason,
                       [c.label for c in choices], [_kernel(kl, t, settings, live) for kl in plan.launches])


def explain(op: Any, *args: Any, arch: str | None = None, measure: bool = True, runs: int = 50,
            **kwargs: Any) -> Explanation:
    """Explain `op.forward(*args, **kwargs)`: the kernel chosen and why, its resources, occupancy and,
    on the live GPU (no `arch`), its measured time against the roofline. Arguments are checked as forward does."""
    operator, settings = _unwrap(op)
    swapped = operands(args, kwargs)       # torch / CuPy / JAX arrays, read as Tensor views
    if swapped is not None:
        args, kwargs = swapped[0], swapped[1]
    problem = operator.problem(*args, **kwargs)
    t, live = target_for(arch)
    name = type(operator).__name__
    if problem is None:
        return Explanation(name, operator.family.name, operator.dtype.name, t.arch, t.name, {}, "", "heuristic",
                           "nothing to compute: the forward launches no kernel", [])
    plan = operator._choose(problem, settings, t, args, kwargs) if live else None
    out = _report(name, operator.family, problem, settings, t, live, plan)
    flops, nbytes = operator.work(*args, **kwargs)
    out.work = {"flops": flops, "bytes": nbytes}
    if live and measure and out.kernels:
        units = main_units([k["units"] for k in out.kernels])
        out.measured = _measure(op, args, kwargs, flops, nbytes, units, runs)
    return out


def explain_family(op: str, dtype: str = "float32", shape: tuple[int, ...] | None = None, arch: str | None = None,
                   config: JITConfig | None = None, measure: bool = True, runs: int = 50) -> Explanation:
    """`cuopjit explain OP`: a forward of family `op` on `shape` (recipes.SHAPES), else (a family with
    no shape recipe) its first representative problem of `dtype`, planned but not timed."""
    check_ops([op])
    t, live = target_for(arch)
    if op in SHAPES:
        operator, args, kwargs = build(op, dtype, shape, gpu_maker(dtype) if live else fake_maker(dtype))
        wrapped = JITWrapper(operator)
        if config is not None:
            wrapped.set_jit_config(config)
        return explain(wrapped, *args, arch=None if live else t.arch, measure=measure, runs=runs, **kwargs)
    if shape is not None:
        raise ValueError(f"{op} has no --shape recipe yet: leave --shape out to explain its first representative "
                         "problem")
    cls = operator_class(op, dtype)
    problem = next(p for p in cls.family.problems() if p.dtype == dtype)
    settings = RunSettings.of((config or JITConfig()).snapshot())
    return _report(cls.__name__, cls.family, problem, settings, t, live)


def _measure(op: Any, args: tuple, kwargs: dict, flops: float, nbytes: float, units: str, runs: int) -> dict:
    """Median time of `runs` forwards (CUDA events) and where it stands against the device's roofline."""
    result = benchmark(op, *args, num_runs=runs, warmup_runs=3, **kwargs)
    ms = result["median_time_ms"]
    ceilings = device_ceilings(driver.current_ordinal())
    least, bound = ceilings.roofline(flops, nbytes, units)
    kind = unit_kind(units)
    ceiling = (f"{ceilings.bandwidth_gbps:.0f} GB/s DRAM" if bound == "memory"
               else f"{ceilings.gflops.get(kind, 0.0):.0f} GFLOP/s {kind}")
    return {"time_ms": ms, "min_ms": result["min_time_ms"], "max_ms": result["max_time_ms"], "runs": runs,
            "gflops": flops / ms / 1e6, "gbps": nbytes / ms / 1e6, "bound": bound, "least_ms": least,
            "roofline_fraction": least / ms if ms else 0.0, "ceiling": ceiling, "ceilings_from": ceilings.source}
