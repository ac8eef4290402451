"""Strategies, float64 references and error bounds shared by the property-based GPU tests (test_properties_*.py).

Shapes: 1 to 4097 per axis, drawn to favour the sizes where plans change (1..17, powers of two and their
neighbours) as much as any size, under a cap on the total so that one example stays short. Configs: any
JITConfig the operator's JIT wrapper accepts (`set_jit_config` refuses the others up front), or none (the
bare operator's forward). Inputs come from a seed that Hypothesis draws, so a failure replays exactly;
outputs are NaN-poisoned and guarded (conftest.guarded), so an element never written, or one written out of
bounds, is seen; an input or output can start 4 or 8 bytes past a 16-byte boundary (the scalar paths).

Error bounds are derived from the arithmetic, never tuned to pass. u is the unit roundoff (2^-24 float32,
2^-53 float64), eps = 2u. A sum of n terms in any order is within (n - 1) u sum|terms| of the exact sum
(Higham, Accuracy and Stability of Numerical Algorithms, 3.1). Each bound names its terms where it is
defined; the float64 references err by the same forms in u = 2^-53.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
from hypothesis import strategies as st

import cuopjit
from conftest import guarded, make_config

DTYPES = st.sampled_from(["float32", "float64"])
SEEDS = st.integers(0, 2 ** 32 - 1)
# where plans change: tile and vector counts, warp and block multiples, off-by-one edges
EDGES = sorted({v for k in range(13) for v in (2 ** k - 1, 2 ** k, 2 ** k + 1)} - {0})
KERNEL_TYPES = ("auto", "simple", "tiled", "warp_optimized", "tensor_core")
TILE_SIZES = (0, 8, 16, 32, 64, 128)
BLOCK_SIZES = (0, 32, 64, 128, 256, 512, 1024)
SWITCHES = ("enable_loop_unroll", "enable_memory_coalescing", "enable_shared_memory_opt")


def unit(dtype) -> float:
    """The unit roundoff u of `dtype` (half its machine epsilon)."""
    return float(np.finfo(dtype).eps) / 2


def dims(lo: int = 1, hi: int = 4097) -> st.SearchStrategy[int]:
    """One axis length in [lo, hi]: small, a power of two or a neighbour of one, a multiple of 8 (channels,
    hidden sizes), or anything."""
    hi = max(lo, hi)
    parts = [st.integers(lo, min(hi, lo + 16))]
    edges = [e for e in EDGES if lo <= e <= hi]
    if edges:
        parts.append(st.sampled_from(edges))
    if hi // 8 >= max(1, -(-lo // 8)):
        parts.append(st.integers(max(1, -(-lo // 8)), hi // 8).map(lambda v: 8 * v))
    return st.one_of(*parts, st.integers(lo, hi))


@st.composite
def shapes(draw, min_ndim: int = 1, max_ndim: int = 4, max_size: int = 1 << 18, max_dim: int = 4097) -> tuple:
    """A shape of min_ndim..max_ndim axes whose product is at most max_size (axes drawn in a random order, so
    a long axis is as likely last as first)."""
    ndim = draw(st.integers(min_ndim, max_ndim))
    out, budget = [], max_size
    for _ in range(ndim):
        d = draw(dims(1, min(max_dim, budget)))
        out.append(d)
        budget = max(1, budget // d)
    order = draw(st.permutations(range(ndim)))
    return tuple(out[i] for i in order)


@st.composite
def reductions(draw, last: bool, max_size: int = 1 << 18) -> tuple[tuple, int]:
    """(shape, axis) of a reduction along one axis: its length, the inner dims after it (none when `last`, else
    one or two, not all 1) and the outer dims before it drawn apart (the problem a kernel sees: outer x length x
    inner), so short and long axes meet narrow and wide inner extents alike; the axis counted from the front or
    the back."""
    lengths = [st.integers(2, 64), dims(1, 4097)]      # short axes (channels, heads) or any
    if last:                                           # rows past a block: clusters, the stream kernel, split rows
        lengths.append(st.integers(4097, max(4097, min(1 << 17, max_size // 8))))
    length = draw(st.one_of(*lengths))
    room = max(2, max_size // length)
    inner = () if last else draw(shapes(min_ndim=1, max_ndim=2, max_size=room))
    if inner and draw(st.booleans()):       # half the inner extents a multiple of 8: the 16-byte vector paths
        inner = inner[:-1] + (-(-inner[-1] // 8) * 8,)
    elif inner and max(inner) == 1:
        inner = inner[:-1] + (2,)
    outer = draw(shapes(min_ndim=0, max_ndim=2, max_size=max(1, max_size // (length * int(np.prod(inner))))))
    shape = outer + (length,) + inner
    return shape, len(outer) - (len(shape) if draw(st.booleans()) else 0)


MISALIGNED = st.sampled_from([False] * 7 + [True])   # one draw in eight starts 4 or 8 bytes past 16 bytes


@functools.cache
def valid_fields(op_type: type) -> tuple:
    """Every (kernel_type, tile_size, block_size, enable_tensor_core, precision) the JIT wrapper of `op_type`
    accepts, the default first (so failures shrink towards it). Checked on the CPU against sm_90's plans."""
    op = op_type(4, 4, 3, 3) if issubclass(op_type, (cuopjit.Convolution2DFloat, cuopjit.Convolution2DDouble)) \
        else op_type()
    jit = cuopjit.JITWrapper(op)
    out = []
    for kt, tile, block, tc, precision in itertools.product(KERNEL_TYPES, TILE_SIZES, BLOCK_SIZES, (False, True),
                                                             ("tf32", "3xtf32")):
        fields = {"kernel_type": kt, "tile_size": tile, "block_size": block, "enable_tensor_core": tc,
                  "precision": precision}
        try:
            jit.set_jit_config(make_config(**fields))
        except ValueError:
            continue
        out.append(fields)
    return tuple(out)


@st.composite
def jit_fields(draw, op_type: type) -> dict | None:
    """None (the bare operator's forward) or the fields of a JITConfig that `op_type`'s wrapper accepts,
    each switch off in one draw of four."""
    if not draw(st.booleans()):
        return None
    fields = dict(draw(st.sampled_from(valid_fields(op_type))))
    for name in SWITCHES:
        fields[name] = draw(st.sampled_from([True, True, True, False]))
    return fields


def run(op, fields: dict | None, *args, **kwargs):
    """op.forward(*args, **kwargs), through a JITWrapper with `fields` unless None; returns (result, units):
    the units the kernels ran on ('FP32 cores (SIMT)', 'TF32 tensor cores (wgmma)', ...; None when bare)."""
    if fields is None:
        return op.forward(*args, **kwargs), None
    jit = cuopjit.JITWrapper(op)
    jit.set_jit_config(make_config(**fields))
    out = jit.forward(*args, **kwargs)
    return out, jit.get_performance_profile().units


def randn(seed: int, shape, dtype, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Normal values (times scale, plus offset) of `dtype`, from `seed`."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + offset).astype(dtype)


def device(a: np.ndarray, misaligned: bool = False):
    """`a` on the GPU: a tensor of its own (16-byte aligned) or one element into a larger allocation."""
    return guarded(a.shape, a.dtype, fill=a, pad=1) if misaligned else cuopjit.tensor(a)


def output(shape, dtype, misaligned: bool = False, fill=None):
    """A NaN-poisoned (or `fill`ed) output with canaries either side (conftest.check_guards reads them)."""
    return guarded(shape, dtype, fill=fill, pad=1 if misaligned else None)


def assert_within(out: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> None:
    """Every element of `out` finite (or NaN exactly where `ref` is) and within `bound` of `ref`."""
    out = np.asarray(out, np.float64)
    ref = np.broadcast_to(np.asarray(ref, np.float64), out.shape)
    nan_ref = np.isnan(ref)
    bad_nan = np.isnan(out) != nan_ref
    assert not bad_nan.any(), (f"{what}: {int(bad_nan.sum())} of {out.size} elements NaN where the reference "
                               f"is not (or the reverse), first at {np.argwhere(bad_nan)[0].tolist()}")
    with np.errstate(invalid="ignore"):
        over = ~(np.abs(out - ref) <= bound) & ~nan_ref
    if over.any():
        i = tuple(np.argwhere(over)[0])
        tol = np.broadcast_to(bound, out.shape)[i]
        raise AssertionError(f"{what}: {int(over.sum())} of {out.size} elements outside the bound, first at "
                             f"{[int(j) for j in i]}: got {out[i]!r}, expected {ref[i]!r} +- {tol:.3g}")


def tf32(a: np.ndarray, nearest: bool) -> np.ndarray:
    """float32 values as a TF32 tensor core reads them: rounded to nearest (cvt.rna: ties away) or truncated
    (raw float32 from shared memory, as wgmma and the cp.async kernels take them): 10 mantissa bits."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def product_check(out, terms, k: int, units: str | None, dtype, what: str) -> None:
    """Check a product against float64, componentwise. `terms(model_a, model_b)` returns (ref, absref): the
    exact result and its magnitude (|alpha| |A| |B| + |beta| |C0|) with the float32 operands A and B read
    through those models (None: as they are).

    float32 / float64 cores: within (k + 16) eps absref (k products summed, alpha, beta, split-K partials).
    TF32 tensor cores: each operand rounded to nearest (cvt.rna) or truncated (raw float32 from shared memory)
    to 10 mantissa bits, whichever the kernel does, then as above. 3xTF32 (hi + lo parts, lo * lo dropped):
    each product within 3 * 2^-20 |a| |b| (truncated parts) before 3k float32 sums: (3k + 16) eps + 2^-18."""
    eps = float(np.finfo(dtype).eps)
    if units and "3xTF32" in units:
        ref, absref = terms(None, None)
        assert_within(out, ref, ((3 * k + 16) * eps + 2.0 ** -18) * absref, f"{what} [{units}]")
        return
    if units and "TF32" in units:
        failures, models = [], {"rounded": functools.partial(tf32, nearest=True),
                                "truncated": functools.partial(tf32, nearest=False)}
        for (la, ma), (lb, mb) in itertools.product(models.items(), repeat=2):
            ref, absref = terms(ma, mb)
            try:
                assert_within(out, ref, (k + 16) * eps * absref, f"{what} [{units}, A {la}, B {lb} to TF32]")
                return
            except AssertionError as e:
                failures.append(str(e))
        raise AssertionError("\n".join(failures))
    ref, absref = terms(None, None)
    assert_within(out, ref, (k + 16) * eps * absref, f"{what} [{units or 'the default plan'}]")
