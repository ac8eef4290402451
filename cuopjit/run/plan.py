"""Plans: what one forward launches, as data.

A `KernelLaunch` is one kernel (its `KernelSpec`), its grid, block, dynamic shared memory,
cluster shape and a typed parameter schema; a `Plan` is the ordered launches of one forward plus
the workspace it needs. Families build plans as pure functions of (problem, choice, target), so
prewarm, tuning, `show` and `forward` read the same plans, and what prewarm builds is what runs.

Pointer parameters change per call: `ptr(i)` is the i-th pointer the operator passes to the
executor (its operands in a fixed order), and index `len(operands)` is the plan's workspace,
allocated on the call's stream (`ptr(len(operands), offset)` addresses inside it).
Everything else (scalars, by-value blobs such as a 128-byte CUtensorMap) is fixed in the plan.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..build.pipeline import KernelSpec
from ..target import Target

SCALAR_KINDS = {"i32": "<i", "i64": "<q", "f32": "<f", "f64": "<d"}


@dataclass(frozen=True)
class Arg:
    """One kernel parameter: 'ptr' (per-call pointer `index` + `offset` bytes), a scalar or a by-value blob."""
    kind: str                       # 'ptr', 'i32', 'i64', 'f32', 'f64' or 'blob'
    value: int | float | bytes = 0  # ptr: index into the call's pointers; scalar: its value; blob: its bytes
    offset: int = 0                 # ptr only: bytes added to the pointer

    def __post_init__(self) -> None:
        if self.kind == "ptr":
            if not isinstance(self.value, int) or self.value < 0 or self.offset < 0:
                raise ValueError(f"a pointer parameter needs an index >= 0 and an offset >= 0, got {self}")
        elif self.kind == "blob":
            if not isinstance(self.value, (bytes, bytearray)) or not self.value:
                raise ValueError("a by-value blob parameter needs non-empty bytes")
        elif self.kind in SCALAR_KINDS:
            struct.pack(SCALAR_KINDS[self.kind], self.value)  # raises on a value the type cannot hold
        else:
            raise ValueError(f"unknown parameter kind {self.kind!r}: use ptr, i32, i64, f32, f64 or blob")


def ptr(index: int, offset: int = 0) -> Arg:
    """The call's pointer `index` (an operand, or the workspace at index len(operands)) plus `offset` bytes."""
    return Arg("ptr", index, offset)


def i32(value: int) -> Arg:
    return Arg("i32", int(value))


def i64(value: int) -> Arg:
    return Arg("i64", int(value))


def scalar(dtype: np.dtype, value: float) -> Arg:
    """A float32 or float64 scalar of the operator's dtype."""
    return Arg("f32" if np.dtype(dtype) == np.float32 else "f64", float(value))


def blob(data: bytes) -> Arg:
    """A parameter passed by value, byte for byte (a struct, a CUtensorMap)."""
    return Arg("blob", bytes(data))


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch of a plan. `units` says which execution units it uses (profiles, `show`)."""
    spec: KernelSpec
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Arg, ...]
    shared: int = 0                           # dynamic shared memory, bytes
    cluster: tuple[int, int, int] = (1, 1, 1)  # compiled in with __cluster_dims__; checked against the target
    units: str = "FP32 cores"
    max_carveout: bool = False                # ask for the largest shared-memory carveout (several big blocks per SM)

    def __post_init__(self) -> None:
        grid = tuple(int(g) for g in self.grid) + (1,) * (3 - len(self.grid))
        block = tuple(int(b) for b in self.block) + (1,) * (3 - len(self.block))
        if min(grid) < 1 or min(block) < 1 or grid[0] >= 2 ** 31 or max(grid[1:]) > 65535:
            raise ValueError(f"{self.spec.name}: launch geometry grid={grid} block={block} is out of range")
        if block[0] * block[1] * block[2] > 1024:
            raise ValueError(f"{self.spec.name}: {block[0] * block[1] * block[2]} threads per block is over "
                             "1024: choose block_size <= 1024")
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def pointer_indices(self) -> tuple[int, ...]:
        return tuple(a.value for a in self.args if a.kind == "ptr")


def main_units(units: list[str]) -> str:
    """The units of a plan's main work: the first launch on tensor cores (a prepass such as SYMM's fill or the
    3xTF32 split only feeds it), else the first launch's."""
    return next((u for u in units if "tensor" in u.lower()), units[0] if units else "none")


@dataclass(frozen=True)
class Plan:
    """The ordered launches of one forward, the operands they read (by name) and the workspace bytes."""
    launches: tuple[KernelLaunch, ...]
    operands: tuple[str, ...]
    workspace: int = 0
    choice: str = ""      # the readable label of the choice it was built from

    def __post_init__(self) -> None:
        object.__setattr__(self, "launches", tuple(self.launches))
        top = len(self.operands) + (1 if self.workspace else 0)
        for kl in self.launches:
            bad = [i for i in kl.pointer_indices if i >= top]
            if bad:
                raise ValueError(f"{kl.spec.name}: pointer index {bad[0]} is past the plan's {len(self.operands)} "
                                 f"operands{' and workspace' if self.workspace else ''}")

    @property
    def specs(self) -> list[KernelSpec]:
        """The distinct kernels of the plan, in launch order."""
        return list(dict.fromkeys(kl.spec for kl in self.launches))

    @property
    def units(self) -> str:
        """The units the plan's roofline is held to (main_units of its launches)."""
        return main_units([kl.units for kl in self.launches])

    def check_target(self, target: Target) -> None:
        """Raise when a launch needs what the target lacks (clusters, shared memory)."""
        for kl in self.launches:
            if kl.cluster != (1, 1, 1) and not target.clusters:
                raise ValueError(f"{kl.spec.name} uses thread-block clusters, which {target.arch} lacks")
            if kl.shared > target.smem_per_block:
                raise ValueError(f"{kl.spec.name} needs {kl.shared} bytes of shared memory; {target.arch} allows "
                                 f"{target.smem_per_block} per block: choose a smaller tile_size")


EMPTY = Plan((), ())  # nothing to launch (an empty output)


@dataclass(frozen=True)
class Family:
    """An operator family as pure functions; the classes in ops/ only check inputs and hold weights.

    choices(problem, config, target) -> the candidates `config` allows, the heuristic's pick first
    plan(problem, choice, target)    -> the Plan of that choice
    problems()                       -> representative problems, what prewarm builds
    """
    name: str
    choices: Callable[[Any, Any, Target], Sequence[Any]]
    plan: Callable[[Any, Any, Target], Plan]
    problems: Callable[[], Sequence[Any]] = field(default=lambda: ())

    def default_plan(self, problem: Any, config: Any, target: Target) -> Plan:
        """The plan `forward` runs without auto-tuning: the first choice."""
        return self.plan(problem, self.choices(problem, config, target)[0], target)
