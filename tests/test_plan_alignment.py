"""Alignment and vector-width decisions checked against the operands' real addresses (no GPU).

Every operand of every family is moved 4, 8 and 12 bytes (float32) or 8 bytes (float64) off 16-byte alignment
in turn, and leading dimensions are made odd: the plan may use a 16-byte (or 8-byte) access only where each
access it makes is aligned (tests/plan_coverage.py checks every vector access of every launch), and with every
operand aligned it must use them. Plan keys: two calls whose operands share a memo key must get the same plan,
so a key that confused an 8-byte-aligned float64 view with a 16-byte-aligned one would hand the vectorised plan
to a misaligned view.
"""
from __future__ import annotations

import numpy as np
import pytest

from cuopjit.target import named
from cuopjit.tensor import Tensor

from conftest import make_config
from plan_cases import (F32, F64, Alloc, batchnorm, blas, conv, flatten, gemm, gemv, global_pool, layernorm, matmul,
                        pool, relu, softmax, symm, trsm, view)
from plan_coverage import check
from test_plan_geometry import MODELS

# family, dtype, builder(offsets) -> build, operands moved in turn, operands that must be vectorised when aligned
ALIGNED = [
    ("gemm", F32, lambda o: gemm(96, 80, 64, offs=o), ("a", "b", "c"), ("a", "b", "c")),
    ("gemm-tt", F64, lambda o: gemm(96, 80, 64, True, True, offs=o), ("a", "b", "c"), ("a", "b", "c")),
    ("gemm-split", F32, lambda o: gemm(64, 256, 1024, offs=o), ("a", "b", "c"), ("a", "b")),
    ("gemm-tf32", F32, lambda o: gemm(256, 256, 128, tb=True, offs=o), ("a", "b", "c"), ("a", "b", "c")),
    ("gemv-n", F32, lambda o: gemv(40, 4096, False, offs=o), ("a", "x", "y"), ("a", "x")),
    ("gemv-t", F64, lambda o: gemv(4096, 40, True, offs=o), ("a", "x", "y"), ("a",)),
    ("matmul", F32, lambda o: matmul((4, 48, 64), (4, 64, 32), (4, 48, 32), offs=o), ("a", "b", "c"),
     ("a", "b", "c")),
    ("symm", F64, lambda o: symm(64, 96, False, True, offs=o), ("a", "b", "c"), ("b",)),
    ("trsm", F32, lambda o: trsm(192, 64, False, False, False, False, 2.0, False, offs=o), ("a", "b", "x"),
     ("x",)),
    ("conv2d", F32, lambda o: conv(8, 16, 32, 32, 64, 3, 3, p=1, offs=o), ("x", "y"), ("y",)),
    ("conv2d-direct", F32, lambda o: conv(2, 4, 12, 12, 4, 3, 3, p=1, groups=4, offs=o), ("x", "y"), ("y",)),
    ("softmax", F32, lambda o: softmax((64, 256), offs=o), ("x", "y"), ("x", "y")),
    ("softmax-axis0", F32, lambda o: softmax((24, 64, 8), axis=1, offs=o), ("x", "y"), ("x", "y")),
    ("layernorm", F64, lambda o: layernorm((64, 256), (256,), offs=o), ("x", "y", "gamma"), ("x", "y", "gamma")),
    ("batchnorm", F32, lambda o: batchnorm((4, 8, 16, 16), True, offs=o), ("x", "y"), ("x", "y")),
    ("maxpool2d", F32, lambda o: pool((2, 4, 32, 32), offs=o), ("x", "y"), ("x",)),
    ("globalavgpool2d", F64, lambda o: global_pool((4, 8, 8, 8), offs=o), ("x", "y"), ("x",)),
    ("relu", F32, lambda o: relu(5000, offs=o), ("x", "y"), ("x", "y")),
    ("axpy", F64, lambda o: blas("axpy", 5000, offs=o), ("x", "y"), ("x", "y")),
    ("dot", F32, lambda o: blas("dot", 5000, offs=o), ("x", "y"), ("x", "y")),
    ("flatten", F32, lambda o: flatten((4, 8, 10, 10), offs=o), ("x", "y"), ("x", "y")),
    ("view", F32, lambda o: view((16, 32, 8), (2, 4, 0), (8, 16, 8), offs=o), ("x", "y"), ("x", "y")),
]
# float32 operands go 4, 8, 12 bytes off 16-byte alignment; float64 8 (its elements are 8-byte aligned)
OFFSETS = {F32: (4, 8, 12), F64: (8,)}
# odd leading dimensions / lengths: no 16-byte access may cross a row
ODD = [("gemm", F32, gemm(33, 17, 9)), ("gemm", F64, gemm(9, 33, 17, True, False)), ("gemv", F32, gemv(7, 1001, False)),
       ("gemv", F64, gemv(1001, 7, True)), ("matmul", F32, matmul((3, 5, 7), (3, 7, 9), (3, 5, 9))),
       ("softmax", F32, softmax((8, 1001))), ("softmax", F32, softmax((8, 5, 33), axis=1)),
       ("layernorm", F32, layernorm((8, 1001), (1001,))), ("conv2d", F32, conv(2, 16, 9, 9, 16, 3, 3, p=1)),
       ("maxpool2d", F32, pool((2, 4, 33, 35))), ("globalavgpool2d", F32, global_pool((4, 8, 7, 7))),
       ("batchnorm", F32, batchnorm((4, 8, 5, 7), True)), ("view", F32, view((9, 7, 5), (1, 1, 1), (7, 5, 3))),
       ("symm", F32, symm(33, 17, True, False)), ("trsm", F64, trsm(67, 33, True, True, False, False))]
TARGETS = ("sm_80", "sm_90")


def plan_of(build, dtype: str, arch: str, config: dict | None = None):
    alloc = Alloc(dtype)
    op, args, kwargs = build(alloc)
    problem = op.problem(*args, **kwargs)
    plan = op.family.default_plan(problem, make_config(**(config or {})).snapshot(), named(arch))
    return op, args, kwargs, alloc, plan


def run(build, dtype: str, arch: str, config: dict | None = None):
    op, args, kwargs, alloc, plan = plan_of(build, dtype, arch, config)
    return check(plan, op.bind(*args, **kwargs)[1], alloc.tensors, named(arch), dtype, MODELS)


def _variants():
    out = []
    for label, dtype, make, moved, vectorised in ALIGNED:
        for arch in TARGETS:
            out.append(pytest.param(label, dtype, make, moved, vectorised, arch, id=f"{label}-{arch}"))
    return out


@pytest.mark.parametrize("label, dtype, make, moved, vectorised, arch", _variants())
def test_vector_accesses_only_where_every_access_is_aligned(label, dtype, make, moved, vectorised, arch):
    config = {"enable_tensor_core": True} if label == "gemm-tf32" else {}
    names = list(moved)
    aligned = run(make((0,) * len(names)), dtype, arch, config)
    lazy = [n for n in vectorised if aligned.vectors.get(n, 0) < 8]
    assert not lazy, f"{label}: every operand is aligned, but {lazy} get no 8- or 16-byte accesses"
    for i, name in enumerate(names):
        for off in OFFSETS[dtype]:
            offs = tuple(off if j == i else 0 for j in range(len(names)))
            run(make(offs), dtype, arch, config)   # raises CoverageError at a misaligned vector access


@pytest.mark.parametrize("family, dtype, build", [pytest.param(*c, id=f"{c[0]}-{c[1]}-{i}") for i, c in enumerate(ODD)])
def test_odd_leading_dimensions_keep_vectors_inside_rows(family, dtype, build):
    for arch in TARGETS:
        run(build, dtype, arch)


def test_a_tensors_plan_key_is_its_16_byte_alignment():
    """Views 8 bytes apart (float64) or 4 apart (float32) have other keys; 16 or 256 bytes apart the same."""
    def key(ptr, dtype):
        return Tensor._view(ptr, (4, 4), np.dtype(dtype), 0, None).plan_key
    base = 1 << 30
    for dtype, step in ((F64, 8), (F32, 4)):
        keys = {off: key(base + off, dtype) for off in range(0, 48, step)}
        for off, k in keys.items():
            same = {o for o, other in keys.items() if other == k}
            assert same == {o for o in keys if (o - off) % 16 == 0}, f"{dtype} view at +{off} shares keys with {same}"


KEYED = [(label, dtype, make, moved) for label, dtype, make, moved, _ in ALIGNED if label != "gemm-tf32"]


@pytest.mark.parametrize("label, dtype, make, moved", [pytest.param(*k, id=k[0]) for k in KEYED])
def test_calls_sharing_a_memo_key_share_their_plan(label, dtype, make, moved):
    """Offsets 0 .. 32 bytes of each operand in turn: wherever two calls' memo keys (operator.bind) are equal,
    their plans are equal (a warm forward reuses the plan of the first)."""
    step = 4 if dtype == F32 else 8
    seen: dict = {}
    for i in range(len(moved)):
        for off in range(0, 33, step):
            offs = tuple(off if j == i else 0 for j in range(len(moved)))
            op, args, kwargs, _, plan = plan_of(make(offs), dtype, "sm_90")
            key = op.bind(*args, **kwargs)[0]
            if key in seen:
                assert seen[key][1] == plan, (f"{label}: {moved[i]} at +{off} bytes shares the memo key of "
                                              f"offsets {seen[key][0]} but gets another plan")
            else:
                seen[key] = (offs, plan)
