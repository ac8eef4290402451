"""Representative plans: what prewarm builds, `show` prints and the prewarm = run test checks.

For each requested operator family, dtype and target, the family plans its representative
problems under a config, exactly as `forward` would plan them on a GPU of that target. A family plans
the dtypes it has classes of (ops.CLASSES: float32 and float64 everywhere, float16 and bfloat16 where
ops.HALF_CLASSES names them); its representative problems cover exactly those.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from .config import ConfigSnapshot, JITConfig
from .build.pipeline import KernelSpec, compile_arch
from .ops import CLASSES, FAMILIES, operator_class
from .run.plan import Plan
from .target import Target, named

DTYPES = ("float32", "float64")                             # what prewarm builds without --dtype
ALL_DTYPES = ("float32", "float64", "float16", "bfloat16")   # what --dtype may name


@dataclass(frozen=True)
class PlannedProblem:
    """One representative problem of a family, planned for one target."""
    op: str
    problem: Any
    target: Target
    plan: Plan


def check_ops(ops: Iterable[str] | None) -> list[str]:
    """The requested family names (all by default); ValueError names the known ones."""
    ops = list(ops or FAMILIES)
    for op in ops:
        if op not in FAMILIES:
            raise ValueError(f"unknown op {op!r}: choose from {', '.join(FAMILIES)}")
    return ops


def family_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes family `op` plans (the dtype names of its classes)."""
    return tuple(CLASSES[op])


def check_dtypes(ops: Iterable[str], dtypes: Iterable[str]) -> None:
    """Raise for a dtype cuopjit does not know, or one a family in `ops` has no kernels of (naming its dtypes)."""
    for dt in dtypes:
        if dt not in ALL_DTYPES:
            raise ValueError(f"unknown dtype {dt!r}: choose from {', '.join(ALL_DTYPES)}")
        for op in ops:
            operator_class(op, dt)


def without(ops: Iterable[str], dtypes: Iterable[str]) -> str:
    """One line saying, per dtype, which families of `ops` have kernels of it when some have none ('' if all have)."""
    ops, notes = list(ops), []
    for dt in dtypes:
        have = [op for op in ops if dt in CLASSES[op]]
        lack = [op for op in ops if dt not in CLASSES[op]]
        if lack and len(lack) < len(have):      # name the shorter list
            notes.append(f"{dt}: {', '.join(lack)} {'has' if len(lack) == 1 else 'have'} no {dt} kernels (skipped)")
        elif lack:
            notes.append(f"{dt} only for {', '.join(have) or 'no family'} (the other {len(lack)} "
                         f"families have no {dt} kernels)")
    return "; ".join(notes)


def representative_plans(ops: Iterable[str] | None = None, dtypes: Sequence[str] | None = None,
                         targets: Iterable[Target | str] = ("sm_90",),
                         config: ConfigSnapshot | None = None) -> list[PlannedProblem]:
    """Plans of every representative problem of the requested families, dtypes and targets. A family has
    problems of the dtypes it plans only: one named in `ops` that has none of `dtypes` raises, saying which it
    has (with ops None or empty, every family, such families are skipped)."""
    config = config or JITConfig().snapshot()
    dtypes, ops = tuple(dtypes or DTYPES), list(ops or ())
    targets = [t if isinstance(t, Target) else named(t) for t in targets]
    out = []
    for op in check_ops(ops):
        if ops and not set(dtypes) & set(CLASSES[op]):
            operator_class(op, dtypes[0])   # raises: none of the dtypes asked for
        family = FAMILIES[op][0].family
        for problem in family.problems():
            if problem.dtype not in dtypes:
                continue
            for target in targets:
                out.append(PlannedProblem(op, problem, target, family.default_plan(problem, config, target)))
    return out


def module_key(spec: KernelSpec, arch: str) -> tuple[KernelSpec, str]:
    """What one compile builds: the module of `spec` (all its entry points: dot's partial and final sums are
    one cubin) for the NVRTC target of `arch` (an sm_90a-only kernel is one cubin for sm_90 and sm_90a)."""
    return replace(spec, kernel=""), compile_arch(spec, arch)


def kernels_to_build(planned: Iterable[PlannedProblem]) -> list[tuple[KernelSpec, str]]:
    """One (kernel, architecture) pair per cubin these plans need, in first-use order: each is built once."""
    first: dict[tuple[KernelSpec, str], tuple[KernelSpec, str]] = {}
    for p in planned:
        for spec in p.plan.specs:
            first.setdefault(module_key(spec, p.target.arch), (spec, p.target.arch))
    return list(first.values())
