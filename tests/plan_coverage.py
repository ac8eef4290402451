"""A CPU model of what a plan's launches touch: which elements each block writes and reads, checked.

`check(plan, pointers, tensors, target)` runs every launch of a plan through a model of its kernel
(tests/coverage_models_*.py: the templates' block -> element mappings, written from the plan's own grid,
block, template parameters and arguments) and raises `CoverageError` when a launch

  - writes an element twice (two blocks or threads of one launch racing on it),
  - reads or writes outside the extent of the tensor (or workspace) its pointer lands in, or through a
    pointer that lands in none (an absent operand, a wrong offset),
  - makes a vector access at an address that is not a multiple of its size (16 bytes for float4 / double2),
  - reads workspace no earlier launch (or earlier block, where the kernel orders them) wrote,
  - breaks the hardware's launch limits (grid x <= 2^31 - 1, y, z <= 65535, 1024 threads, the target's
    shared memory per block, clusters only where the target has them) or the kernel's own geometry rules
    (block size = the template's THREADS, cluster dims, a persistent grid with idle blocks).

Memory is tracked per 4-byte word. Each written word also carries an integer value: a model stores what
the element depends on (the number of reduction terms, or the source index of a copy), so tests can check
dataflow: `sim.values("c")` after the plan. Tensors are fake (no memory): planning needs only addresses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

WORKSPACE_ADDR = 1 << 46          # the plan's workspace: a 256-byte aligned fake address apart from every tensor
MAX_GRID_X, MAX_GRID_YZ, MAX_THREADS = 2 ** 31 - 1, 65535, 1024
ITEMSIZE = {"float": 4, "double": 8, "unsigned int": 4}


class CoverageError(AssertionError):
    """A launch touches memory it must not, or misses memory it must write."""


@dataclass
class Buffer:
    """One tensor (or the workspace): its address, extent and what the plan has done to each 4-byte word."""
    name: str
    ptr: int
    nbytes: int
    workspace: bool = False
    tag: int = 0                                 # values a copy stores carry it: tag << 40 | element index
    written: np.ndarray | None = None           # words written by any launch so far (allocated on the first write)
    writes: np.ndarray | None = None            # total writes per word over the plan
    launch: np.ndarray | None = None            # writes per word by the current launch
    value: np.ndarray | None = None             # the value the last write stored

    def ensure(self) -> None:
        if self.written is None:
            words = -(-self.nbytes // 4)
            self.written = np.zeros(words, bool)
            self.writes = np.zeros(words, np.int32)
            self.launch = np.zeros(words, np.int32)
            self.value = np.full(words, -1, np.int64)


class Ref:
    """A kernel's pointer parameter resolved to a buffer: element accesses relative to it."""

    def __init__(self, sim: "Sim", buf: Buffer | None, offset: int, label: str):
        self.sim, self.buf, self.offset, self.label = sim, buf, offset, label

    def span(self, idx: np.ndarray, itemsize: int, vec: int, what: str) -> np.ndarray:
        """The 4-byte words of `vec`-wide accesses of `itemsize` scalars starting at elements idx (relative to the
        pointer), after checking they lie inside the buffer and, for vectors, are aligned."""
        if self.buf is None:
            raise CoverageError(f"{self.sim.where}: {what}s through {self.label}, which points at no operand "
                                f"(an absent tensor or a pointer past every one)")
        idx = np.asarray(idx, np.int64).ravel()
        if idx.size == 0:
            return idx
        start = self.offset + idx * itemsize
        lo, hi = int(start.min()), int(start.max()) + vec * itemsize
        if lo < 0 or hi > self.buf.nbytes:
            bad = idx[(start < 0) | (start + vec * itemsize > self.buf.nbytes)][0]
            raise CoverageError(f"{self.sim.where}: {what}s {self.buf.name} element {self.offset // itemsize + bad} "
                                f"(bytes {lo}..{hi}) outside its {self.buf.nbytes} bytes")
        if vec > 1:
            self.sim.check_aligned(self.buf, start, vec * itemsize, what)
        per = itemsize // 4
        steps = np.arange(vec * per, dtype=np.int64)
        return (start[:, None] // 4 + steps[None, :]).ravel()

    def write(self, idx, itemsize: int | None = None, values=None, vec: int = 1) -> None:
        """Write elements idx (vector starts when vec > 1); `values`: one per access, stored for dataflow checks."""
        itemsize = itemsize or self.sim.itemsize
        idx = np.asarray(idx, np.int64).ravel()
        words = self.span(idx, itemsize, vec, "write")
        if words.size == 0:
            return
        buf = self.buf
        buf.ensure()
        self.sim.touched.add(id(buf))
        buf.launch += np.bincount(words, minlength=buf.launch.size).astype(np.int32)
        buf.written[words] = True
        if values is not None:   # one per access, or one per element
            v, per = np.asarray(values, np.int64), itemsize // 4
            if v.size == idx.size * vec and vec > 1:
                buf.value[words] = np.repeat(v.ravel(), per)
            else:
                buf.value[words] = np.repeat(np.broadcast_to(v, idx.shape), vec * per)

    def read(self, idx, itemsize: int | None = None, vec: int = 1) -> np.ndarray:
        """Read elements idx: bounds, alignment, and (workspace) written before; returns the stored value of every
        element read (vec per access)."""
        itemsize = itemsize or self.sim.itemsize
        words = self.span(idx, itemsize, vec, "read")
        if words.size == 0:
            return np.zeros(0, np.int64)
        buf = self.buf
        if buf.written is None:
            if buf.workspace:
                raise CoverageError(f"{self.sim.where}: reads workspace byte {4 * words[0]} before any launch wrote it")
            return np.full(words.size // (itemsize // 4), -1, np.int64)
        if buf.workspace and not buf.written[words].all():
            first = words[~buf.written[words]][0]
            raise CoverageError(f"{self.sim.where}: reads workspace byte {4 * first} before any launch wrote it")
        return buf.value[words[:: itemsize // 4]]

    def box(self, base: int, dims: Sequence[tuple[int, int]], itemsize: int | None = None, vec: int = 1) -> None:
        """An access pattern base + sum(i_d * stride_d), 0 <= i_d < count_d, checked from its corners and strides
        (bounds, alignment; nothing recorded): for operands read in bulk (GEMM's A and B)."""
        itemsize = itemsize or self.sim.itemsize
        what = "read"
        dims = [(int(c), int(s)) for c, s in dims]
        if any(c <= 0 for c, _ in dims):
            return
        lo = base + sum(min(0, (c - 1) * s) for c, s in dims)
        hi = base + sum(max(0, (c - 1) * s) for c, s in dims)
        self.span(np.array([lo, hi]), itemsize, 1, what)
        if vec > 1:   # vectors run along the stride-1 dimension; every other start must keep their alignment
            starts = np.array([base] + [base + s for c, s in dims if c > 1 and s != 1], np.int64)
            self.sim.check_aligned(self.buf, self.offset + starts * itemsize, vec * itemsize, what)


class Sim:
    """The state of every buffer over one plan's launches (see the module docstring)."""

    def __init__(self, plan, pointers: Sequence[int], tensors: dict, target, itemsize: int):
        self.plan, self.target, self.itemsize = plan, target, itemsize
        self.pointers = tuple(pointers) + ((WORKSPACE_ADDR,) if plan.workspace else ())
        self.buffers: list[Buffer] = []
        for name, t in tensors.items():
            if t is None or not t.ptr:
                continue
            same = next((b for b in self.buffers if b.ptr == t.ptr), None)
            if same is not None:
                same.nbytes = max(same.nbytes, t.nbytes)
                continue
            self.buffers.append(Buffer(name, t.ptr, t.nbytes, tag=len(self.buffers) + 1))
        self.names = {b.name: b for b in self.buffers}
        if plan.workspace:
            self.workspace = Buffer("workspace", WORKSPACE_ADDR, plan.workspace, workspace=True)
            self.buffers.append(self.workspace)
            self.names["workspace"] = self.workspace
        self.where = "plan"
        self.index = -1
        self.touched: set[int] = set()
        self.vectors: dict[str, int] = {}   # buffer name -> the widest vector access (bytes) any launch made

    # --- pointers ---------------------------------------------------------------------------------------
    def ref(self, arg) -> Ref:
        """A `ptr` argument as a Ref into the buffer its address lands in."""
        if arg.kind != "ptr":
            raise CoverageError(f"{self.where}: a pointer parameter holds a {arg.kind} argument")
        if arg.value >= len(self.pointers):
            raise CoverageError(f"{self.where}: pointer index {arg.value} past the call's pointers")
        addr = self.pointers[arg.value] + arg.offset
        label = f"pointer {arg.value}+{arg.offset}"
        if self.pointers[arg.value] == 0:
            return Ref(self, None, 0, label)
        for b in self.buffers:
            if b.ptr <= addr < b.ptr + max(b.nbytes, 1):
                return Ref(self, b, addr - b.ptr, label)
        return Ref(self, None, 0, label)

    def check_aligned(self, buf: Buffer, byte_starts: np.ndarray, size: int, what: str) -> None:
        """Every access of `size` bytes at these byte offsets of `buf` starts at a multiple of `size`."""
        self.vectors[buf.name] = max(self.vectors.get(buf.name, 0), size)
        addr = buf.ptr + np.asarray(byte_starts, np.int64)
        bad = addr % size != 0
        if bad.any():
            raise CoverageError(f"{self.where}: a {size}-byte vector {what} of {buf.name} at byte "
                                f"{int(byte_starts[bad][0])} (address {int(addr[bad][0]) % 256} mod 256) is not "
                                f"{size}-byte aligned")

    # --- launches ---------------------------------------------------------------------------------------
    def run(self, models: dict[str, Callable]) -> "Sim":
        self.plan.check_target(self.target)
        for i, kl in enumerate(self.plan.launches):
            self.index, self.where = i, f"launch {i} ({kl.spec.name})"
            check_limits(kl, self.target, self.where)
            model = models.get(kl.spec.kernel)
            if model is None:
                raise CoverageError(f"{self.where}: no coverage model for kernel {kl.spec.kernel!r}")
            self.touched = set()
            model(self, kl, dict(kl.spec.params))
            for b in self.buffers:
                if id(b) not in self.touched:
                    continue
                if b.launch.max(initial=0) > 1:
                    word = int(np.argmax(b.launch > 1))
                    raise CoverageError(f"{self.where}: writes {b.name} byte {4 * word} {int(b.launch[word])} times "
                                        "(two blocks or threads of one launch race on it)")
                b.writes += b.launch
                b.launch[:] = 0
        self.where = "plan"
        return self

    # --- results ----------------------------------------------------------------------------------------
    def buffer(self, name: str) -> Buffer:
        return self.names[name]

    def values(self, name: str, itemsize: int | None = None) -> np.ndarray:
        """The value each element of tensor `name` last received (-1: never written)."""
        buf = self.names[name]
        buf.ensure()
        return buf.value[:: (itemsize or self.itemsize) // 4]

    def writes(self, name: str, itemsize: int | None = None) -> np.ndarray:
        """How often the plan wrote each element of tensor `name`."""
        buf = self.names[name]
        buf.ensure()
        return buf.writes[:: (itemsize or self.itemsize) // 4]


def check_limits(kl, target, where: str) -> None:
    """The hardware's launch limits and the target's shared memory and clusters."""
    gx, gy, gz = kl.grid
    if not (1 <= gx <= MAX_GRID_X and 1 <= gy <= MAX_GRID_YZ and 1 <= gz <= MAX_GRID_YZ):
        raise CoverageError(f"{where}: grid {kl.grid} is outside the hardware's limits")
    threads = math.prod(kl.block)
    if not 1 <= threads <= MAX_THREADS:
        raise CoverageError(f"{where}: {threads} threads per block")
    if kl.shared > target.smem_per_block:
        raise CoverageError(f"{where}: {kl.shared} bytes of dynamic shared memory, {target.arch} allows "
                            f"{target.smem_per_block}")
    if kl.cluster != (1, 1, 1):
        if not target.clusters:
            raise CoverageError(f"{where}: cluster {kl.cluster} on {target.arch}, which has none")
        if any(g % c for g, c in zip(kl.grid, kl.cluster)):
            raise CoverageError(f"{where}: grid {kl.grid} is not a whole number of clusters {kl.cluster}")


# --- helpers the models share --------------------------------------------------------------------------
def unpack(sim: Sim, kl, names: Sequence[str]) -> dict:
    """The launch's arguments by the kernel's parameter names (pointer ones as Refs); the count must match."""
    if len(kl.args) != len(names):
        raise CoverageError(f"{sim.where}: {len(kl.args)} arguments, the kernel takes {len(names)} "
                            f"({', '.join(names)})")
    out = {}
    for name, a in zip(names, kl.args):
        out[name] = sim.ref(a) if a.kind == "ptr" else a.value
    return out


def tag(ref: Ref, idx) -> np.ndarray:
    """Values naming elements idx of the tensor `ref` points into: tag << 40 | element index in that tensor."""
    return (ref.buf.tag << 40) + ref.offset // ref.sim.itemsize + np.asarray(idx, np.int64)


def expect(sim: Sim, cond: bool, message: str) -> None:
    if not cond:
        raise CoverageError(f"{sim.where}: {message}")


def no_idle(sim: Sim, works: np.ndarray, what: str) -> None:
    """Every block of a tiled grid has work: a block whose tile lies wholly outside the output means a grid
    dimension divided by the wrong tile extent (or a grid the plan over-sized)."""
    works = np.asarray(works, bool)
    if not works.all():
        raise CoverageError(f"{sim.where}: {int((~works).sum())} of {works.size} blocks have no {what} "
                            f"(first: block {int(np.argmax(~works))}): grid {sim.plan.launches[sim.index].grid}")


def fills(sim: Sim, blocks: int, work: int) -> None:
    """A grid-stride loop's grid covers its `work` blocks' worth in one pass or gives every SM a block."""
    if blocks < min(work, sim.target.sm_count):
        raise CoverageError(f"{sim.where}: a grid of {blocks} blocks for {work} blocks of work leaves SMs of "
                            f"{sim.target.arch}'s {sim.target.sm_count} idle")


def disjoint(sim: Sim, regions) -> None:
    """Pointer regions (ref, bytes, name) of one launch that hold different things do not overlap."""
    spans = sorted((r.offset, r.offset + n, name) for r, n, name in regions if r.buf is not None and n)
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise CoverageError(f"{sim.where}: {an} (bytes {a0}..{a1}) and {bn} (from byte {b0}) overlap")


def rectangles(base: np.ndarray, row_stride: int, col_stride: int, rows: np.ndarray, cols: np.ndarray):
    """Flat indices base_b + i * row_stride + j * col_stride of every block b's rows x cols rectangle, with the
    block and column of each (no padding: the sizes are what the blocks really touch)."""
    base, rows, cols = (np.asarray(v, np.int64) for v in (base, rows, cols))
    block = np.repeat(np.arange(base.size), rows)
    i = np.arange(block.size) - np.repeat(np.cumsum(rows) - rows, rows)
    per = cols[block]
    elem = np.repeat(np.arange(block.size), per)
    j = np.arange(elem.size) - np.repeat(np.cumsum(per) - per, per)
    block = block[elem]
    return base[block] + i[elem] * row_stride + j * col_stride, block, j


def threads_of(kl) -> int:
    return math.prod(kl.block)


def block_ids(kl) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, z) of every block of the grid, x fastest."""
    gx, gy, gz = kl.grid
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    return x.ravel(), y.ravel(), z.ravel()


def stride_visits(first: np.ndarray, step: int, end: int) -> np.ndarray:
    """Every first[i] + j * step < end, j >= 0 (the indices of a strided loop from each start)."""
    first = np.asarray(first, np.int64)
    first = first[first < end]
    if first.size == 0:
        return first
    counts = (end - first + step - 1) // step
    reps = np.repeat(first, counts)
    offs = np.arange(counts.sum(), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return reps + offs * step


def check(plan, pointers: Sequence[int], tensors: dict, target, dtype, models: dict[str, Callable]) -> Sim:
    """Run `plan` (pointers as the operator binds them, tensors by name) through `models` (kernel name -> model)
    on `target`; raises CoverageError at the first violation, else returns the Sim for dataflow checks."""
    return Sim(plan, pointers, tensors, target, np.dtype(dtype).itemsize).run(models)


def assert_written_once(sim: Sim, names: Iterable[str]) -> None:
    """Every element of each named tensor written exactly once over the whole plan."""
    for name in names:
        w = sim.writes(name)
        if not (w == 1).all():
            bad = int(np.argmax(w != 1))
            raise CoverageError(f"{name} element {bad} is written {int(w[bad])} times over the plan "
                                f"({int((w == 0).sum())} never, {int((w > 1).sum())} more than once)")


def assert_values(sim: Sim, name: str, want, what: str) -> None:
    """The values the plan's last writes left in tensor `name` equal `want` (a scalar or an array)."""
    got = sim.values(name)
    want = np.broadcast_to(np.asarray(want, np.int64), got.shape)
    if not np.array_equal(got, want):
        bad = int(np.argmax(got != want))
        raise CoverageError(f"{name} element {bad}: {what} is {int(got[bad])}, expected {int(want[bad])} "
                            f"({int((got != want).sum())} of {got.size} elements differ)")
