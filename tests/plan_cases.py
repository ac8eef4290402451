"""The shape table of the plan geometry tests: each case builds an operator on fake tensors and says what the
plan must leave behind (tests/plan_coverage.py runs the plan; these functions check its dataflow).

Boundaries the table hits: tile counts equal to the target's SM count, exactly the split-K warp threshold
(SPLIT_BELOW warps per SM with K >= SPLIT_FROM_K) and one step under it, the shortest K that splits, M != N,
batches with long K, broadcast batches, odd leading dimensions, operands at 4 / 8 / 12 bytes from 16-byte
alignment, rows longer than a block / a cluster / L2, non-last softmax axes with huge inner extents.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import cuopjit
from cuopjit.tensor import Tensor

from coverage_models_trsm import solve_order
from plan_coverage import CoverageError, assert_values, assert_written_once

F32, F64 = "float32", "float64"


class Alloc:
    """Fake tensors (no memory), each in its own 4 GiB of address space, at `offset` bytes from 256-alignment."""

    def __init__(self, dtype: str):
        self.dtype = np.dtype(dtype)
        self.tensors: dict[str, Tensor] = {}

    def __call__(self, name: str, shape, offset: int = 0) -> Tensor:
        base = (len(self.tensors) + 1) << 32
        t = Tensor._view(base + offset, tuple(shape), self.dtype, 0, None)
        self.tensors[name] = t
        return t

    def cls(self, f32, f64):
        return f32 if self.dtype == np.float32 else f64


@dataclass(frozen=True)
class Case:
    """One family x shape: `build(alloc)` -> (operator, args, kwargs); `check(sim, problem)` its dataflow."""
    family: str
    label: str
    dtype: str
    build: Callable
    check: Callable
    config: dict = field(default_factory=dict)
    targets: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90")

    @property
    def id(self) -> str:
        cfg = "".join(f"-{k}={v}" for k, v in self.config.items())
        return f"{self.family}-{self.dtype[-2:]}-{self.label}{cfg}"


def once(*names: str, value: Callable | None = None) -> Callable:
    """Check: every element of `names` written exactly once; value(problem) the value the first must hold."""
    def check(sim, problem) -> None:
        assert_written_once(sim, names)
        if value is not None:
            assert_values(sim, names[0], value(problem), "the reduction's term count")
    return check


def copied(name: str, source: str, index: Callable) -> Callable:
    """Check: `name` written once and element i holds source element index(problem)[i]."""
    def check(sim, problem) -> None:
        assert_written_once(sim, [name])
        want = (sim.buffer(source).tag << 40) + np.asarray(index(problem), np.int64).ravel()
        assert_values(sim, name, want, "the source element")
    return check


# --- the GEMM-shaped families ------------------------------------------------------------------------------
def gemm(m, n, k, ta=False, tb=False, offs=(0, 0, 0), beta=0.0):
    def build(a):
        op = a.cls(cuopjit.GemmFloat, cuopjit.GemmDouble)(ta, tb, 1.0, beta)
        op.set_weight(a("b", (n, k) if tb else (k, n), offs[1]))
        return op, (a("a", (k, m) if ta else (m, k), offs[0]), a("c", (m, n), offs[2])), {}
    return build


def matmul(sa, sb, sc, batch_op=False, offs=(0, 0, 0)):
    def build(a):
        cls = a.cls(cuopjit.BatchMatMulFloat, cuopjit.BatchMatMulDouble) if batch_op else \
            a.cls(cuopjit.MatMulFloat, cuopjit.MatMulDouble)
        return cls(), (a("a", sa, offs[0]), a("b", sb, offs[1]), a("c", sc, offs[2])), {}
    return build


def gemv(m, n, trans, offs=(0, 0, 0), beta=0.0):
    def build(a):
        op = a.cls(cuopjit.GemvFloat, cuopjit.GemvDouble)(trans, 1.0, beta)
        op.set_weight(a("a", (m, n), offs[0]))
        return op, (a("x", (m if trans else n,), offs[1]), a("y", (n if trans else m,), offs[2])), {}
    return build


def symm(m, n, right, upper, offs=(0, 0, 0)):
    def build(a):
        op = a.cls(cuopjit.SymmFloat, cuopjit.SymmDouble)(int(right), int(upper), 1.0, 0.5)
        d = n if right else m
        op.set_weight(a("a", (d, d), offs[0]))
        return op, (a("b", (m, n), offs[1]), a("c", (m, n), offs[2])), {}
    return build


def symm_check(sim, problem) -> None:
    assert_written_once(sim, ["c"])
    assert_values(sim, "c", problem.dim, "the reduction's term count")
    d = problem.dim
    i, j = np.meshgrid(np.arange(d), np.arange(d), indexing="ij")
    stored = j >= i if problem.upper else j <= i
    want = np.where(stored, i * d + j, j * d + i).ravel()
    got = sim.values("workspace")[: d * d]
    if not np.array_equal(got, want):
        bad = int(np.argmax(got != want))
        raise CoverageError(f"SYMM's filled matrix element {bad} holds A element {got[bad]}, expected {want[bad]}")


def trsm(m, n, right, upper, trans, unit, alpha=1.0, inplace=True, offs=(0, 0, 0)):
    def build(a):
        op = a.cls(cuopjit.TrsmFloat, cuopjit.TrsmDouble)(int(right), int(upper), int(trans), int(unit), alpha)
        d = n if right else m
        op.set_matrix_a(a("a", (d, d), offs[0]))
        b = a("b", (m, n), offs[1])
        return op, (b, b if inplace else a("x", (m, n), offs[2])), {}
    return build


def trsm_check(sim, problem) -> None:
    name = "b" if problem.inplace else "x"
    if (sim.writes(name) == 0).any():
        raise CoverageError(f"TRSM leaves elements of {name} unwritten")
    solve_order(sim.plan, problem)


# --- convolution -------------------------------------------------------------------------------------------
def conv(n, c, h, w, k, kh, kw, s=1, p=0, d=1, groups=1, bias=False, relu=False, offs=(0, 0)):
    def build(a):
        op = a.cls(cuopjit.Convolution2DFloat, cuopjit.Convolution2DDouble)(c, k, kh, kw, s, s, d, d, groups, relu,
                                                                          p, p)
        op.set_weight(a("weight", op.weight_shape))
        if bias:
            op.set_bias(a("bias", (k,)))
        x = a("x", (n, c, h, w), offs[0])
        return op, (x, a("y", op.output_shape(x.shape), offs[1])), {}
    return build


conv_check = once("y", value=lambda p: p.cg * p.kh * p.kw)


# --- rows ------------------------------------------------------------------------------------------------
def softmax(shape, axis=-1, offs=(0, 0)):
    def build(a):
        return a.cls(cuopjit.SoftmaxFloat, cuopjit.SoftmaxDouble)(), (a("x", shape, offs[0]),
                                                                    a("y", shape, offs[1])), {"axis": axis}
    return build


softmax_check = once("y", value=lambda p: p.length)


def layernorm(shape, gamma_shape=None, beta=True, offs=(0, 0, 0)):
    def build(a):
        op = a.cls(cuopjit.LayerNormFloat, cuopjit.LayerNormDouble)()
        if gamma_shape is not None:
            op.set_gamma(a("gamma", gamma_shape, offs[2]))
            if beta:
                op.set_beta(a("beta", gamma_shape, offs[2]))
        return op, (a("x", shape, offs[0]), a("y", shape, offs[1])), {}
    return build


layernorm_check = once("y", value=lambda p: p.length)


def batchnorm(shape, training, offs=(0, 0)):
    def build(a):
        op = a.cls(cuopjit.BatchNormFloat, cuopjit.BatchNormDouble)()
        for name in ("gamma", "beta", "running_mean", "running_var"):
            getattr(op, "set_" + name)(a(name, (shape[1],)))
        op.training = training
        return op, (a("x", shape, offs[0]), a("y", shape, offs[1])), {}
    return build


def batchnorm_check(sim, problem) -> None:
    if problem.training:
        once("y", "running_mean", "running_var", value=lambda p: p.n * p.hw)(sim, problem)
    else:
        assert_written_once(sim, ["y"])


# --- pools, maps, BLAS-1, shape copies ---------------------------------------------------------------------
def pool(shape, op="max", k=2, s=None, p=0, offs=(0, 0)):
    def build(a):
        cls = {"max": a.cls(cuopjit.MaxPool2DFloat, cuopjit.MaxPool2DDouble),
               "avg": a.cls(cuopjit.AveragePool2DFloat, cuopjit.AveragePool2DDouble)}[op]
        o = cls(k, k, s, s, p, p)
        return o, (a("x", shape, offs[0]), a("y", o.output_shape(shape), offs[1])), {}
    return build


def global_pool(shape, op="avg", offs=(0, 0)):
    def build(a):
        cls = {"max": a.cls(cuopjit.GlobalMaxPool2DFloat, cuopjit.GlobalMaxPool2DDouble),
               "avg": a.cls(cuopjit.GlobalAveragePool2DFloat, cuopjit.GlobalAveragePool2DDouble)}[op]
        return cls(), (a("x", shape, offs[0]), a("y", shape[:2], offs[1])), {}
    return build


def relu(n, inplace=False, offs=(0, 0)):
    def build(a):
        x = a("x", (n,), offs[0])
        return a.cls(cuopjit.ReluFloat, cuopjit.ReluDouble)(), (x, x if inplace else a("y", (n,), offs[1])), {}
    return build


def blas(op, n, offs=(0, 0)):
    def build(a):
        x = a("x", (n,), offs[0])
        if op == "scal":
            return a.cls(cuopjit.ScalFloat, cuopjit.ScalDouble)(0.5), (x,), {}
        if op == "dot":
            return a.cls(cuopjit.DotFloat, cuopjit.DotDouble)(), (x, a("y", (n,), offs[1]), a("result", (1,))), {}
        cls = {"axpy": a.cls(cuopjit.AxpyFloat, cuopjit.AxpyDouble), "copy": a.cls(cuopjit.CopyFloat, cuopjit.CopyDouble)}
        return cls[op](), (x, a("y", (n,), offs[1])), {}
    return build


def flatten(shape, offs=(0, 0)):
    def build(a):
        return a.cls(cuopjit.FlattenFloat, cuopjit.FlattenDouble)(), (a("x", shape, offs[0]),
                                                                    a("y", (shape[0], math.prod(shape[1:])), offs[1])), {}
    return build


def view(shape, offset, sub, offs=(0, 0)):
    def build(a):
        return a.cls(cuopjit.ViewFloat, cuopjit.ViewDouble)(), (a("x", shape, offs[0]), a("y", sub, offs[1])), \
            {"offset": offset}
    return build


def view_index(shape, offset, sub):
    def index(problem):
        return np.arange(math.prod(shape)).reshape(shape)[tuple(slice(o, o + s) for o, s in zip(offset, sub))]
    return index


def identity(problem):
    return np.arange(problem.n)
