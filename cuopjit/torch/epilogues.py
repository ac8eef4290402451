"""Elementwise tails folded into their product's epilogue: one kernel where there were two.

A group whose head is a product (conv2d, linear, matmul, bmm, baddbmm) and whose tail is an elementwise
program (program.render) may run that program where the product stores its output, through the
operator's `set_epilogue` (cuopjit/ops/epilogue_operator.py): the program's text with the head's output
written as `acc` (a conv's folded bias and ReLU too), its constants bound once, the tensors the graph
passes at run time handed to each forward by name. `fit(group, ctx, tensor_cores)` says whether it may,
and how: an `Epilogue`, or why not (the report shows it). It may when

- the program's output has the head's shape (no broadcast past it) and every tensor operand is of a kind
  the epilogue takes against the product's output (cuopjit.expr.infer_kind: per column / channel, per row,
  or the output's shape; a linear's operands are seen against its [rows, n] matrix);
- the cost rule holds. A kernel on tensor cores (TF32, 16-bit) inlines the expression at each of its many
  accumulators (a wgmma thread holds 128): there only the cheap ops fuse (TENSOR_CORE_OPS: arithmetic,
  relu, hardtanh / ReLU6, eval BatchNorm, residuals), since a GELU / SiLU / sigmoid / tanh epilogue cost
  the H100 1.2-3.4x the GEMM alone where a separate elementwise pass costs its bytes at copy speed
  (benchmarks/fusion.py, NOTES "26"), except on a float32 linear with per-column / per-row
  operands only (a bias), whose TF32 kernel applies the expression in registers (1.00-1.04x); and a tensor-core convolution takes no output-shaped operand (a
  residual): its tile reads it across NCHW rows (H100, ResNet-50 batch 32 TF32: 13.9 ms with residual
  epilogues, 4.4-5.0 ms without; MobileNet-V2 15.2 against 4.3 ms; GEMMs gain: the encoder layer 0.51
  against 0.59 ms). The exact kernels (fp32 SIMT, float64) fuse every op (1.00-1.08x the product alone).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ..expr import FULL, PER_COLUMN, PER_ROW, ExpressionError, infer_kind
from .fusion import Group
from .program import Program, render
from .support import Context

HEADS = frozenset({"conv2d", "linear", "matmul", "bmm", "baddbmm"})
TENSOR_CORE_OPS = frozenset({"add", "sub", "mul", "div", "neg", "relu", "hardtanh", "batch_norm"})
ACC = "acc"
CONV_BIAS = "kb"


@dataclass
class Epilogue:
    """The expression over `acc`, the constants bound once (shaped for the operator), the run-time operands
    (name -> FX node) and, per run-time name, the shape the operator reads it as (None: as it is)."""
    text: str
    bound: dict[str, torch.Tensor]
    runtime: dict[str, fx.Node]
    shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)


def _product(group: Group, conv_bias: bool) -> str:
    """How the epilogue writes the head's own output: acc, or a conv's acc + its (folded) bias, ReLU'd."""
    text = f"({ACC} + {CONV_BIAS})" if conv_bias else ACC
    return f"relu({text})" if group.relu else text


def _operator_shape(group: Group, ctx: Context) -> tuple[tuple[int, ...], int]:
    """The output's shape as the operator sees it (a linear's [rows, n]) and its column axis."""
    out = tuple(ctx.val(group.head.node).shape)
    if group.head.op == "linear":
        return (math.prod(out[:-1]), out[-1]), -1
    return out, 1 if group.head.op == "conv2d" else -1


def _seen(kind: str, seen: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a linear's operand of `kind` is read as against its [rows, n] output `seen`."""
    if kind == FULL:
        return seen
    if kind == PER_COLUMN:
        return (seen[-1],)
    return (seen[0], 1)


def _kinds(p: Program, group: Group, ctx: Context) -> dict[str, tuple[str, tuple[int, ...] | None]] | str:
    """Each tensor operand's kind and the shape the operator reads it as, or why one does not fit."""
    logical = tuple(ctx.val(group.head.node).shape)
    seen, axis = _operator_shape(group, ctx)
    matrix = group.head.op == "linear"
    vectors = not (group.head.op == "matmul" and any(
        ctx.val(group.head.args[k]).dim() == 1 for k in ("input", "other")))
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for name, v in p.operands.items():
        t = ctx.val(v)
        if t is None or t.dim() == 0:
            return f"operand {name} is not a tensor of at least one dimension"
        try:
            kind = infer_kind(name, tuple(t.shape), logical, axis if not matrix else -1)
        except ExpressionError as exc:
            return str(exc).split(";")[0]
        if not vectors and kind in (PER_COLUMN, PER_ROW):
            return f"operand {name} is a vector and the product's a or b is 1-D"
        out[name] = (kind, _seen(kind, seen) if matrix else None)
    return out


def fit(group: Group, ctx: Context, tensor_cores: bool, conv_bias: torch.Tensor | None = None) -> Epilogue | str:
    """The group's tail as its head's epilogue, or why it stays a separate elementwise kernel."""
    head = group.head
    if head is None or head.op not in HEADS:
        return "no product to fuse into"
    extra = {CONV_BIAS: conv_bias.reshape(-1, 1, 1)} if conv_bias is not None else {}   # per channel
    p = render(group, ctx, _product(group, conv_bias is not None), extra)
    if p is None:
        return "nothing to fuse"
    if tuple(ctx.val(group.output).shape) != tuple(ctx.val(head.node).shape):
        return "the program's output is larger than the product's"
    kinds = _kinds(p, group, ctx)
    costly = sorted({c.op for c in group.tail} - TENSOR_CORE_OPS) if tensor_cores else []
    if costly and not _in_registers(group, ctx, kinds):
        return (f"{', '.join(costly)} on a tensor-core kernel costs more in its epilogue than as an "
                "elementwise pass")
    if isinstance(kinds, str):
        return kinds
    if tensor_cores and head.op == "conv2d" and any(kind == FULL for kind, _ in kinds.values()):
        return ("an output-shaped operand in a tensor-core convolution's epilogue is read across its tile "
                "(ResNet-50 at batch 32: 2.8x slower than an elementwise pass)")
    bound = {n: _shaped(t, kinds[n][1]) for n, t in p.constants.items()}
    runtime = dict(p.runtime)
    return Epilogue(p.text.split("=", 1)[1].strip(), bound, runtime, {n: kinds[n][1] for n in runtime})


def _in_registers(group: Group, ctx: Context, kinds: dict | str) -> bool:
    """Whether a TF32 GEMM applies this epilogue on its accumulators in registers (a float32 linear
    whose operands are per column or per row: no residual to stage), where GELU / SiLU / sigmoid / tanh cost
    1.00-1.04x the GEMM alone (benchmarks/fusion.py, NOTES "26 — epilogues in registers")."""
    return (group.head.op == "linear" and ctx.val(group.output).dtype == torch.float32
            and not isinstance(kinds, str) and all(kind in (PER_COLUMN, PER_ROW) for kind, _ in kinds.values()))


def _shaped(t: torch.Tensor, shape: tuple[int, ...] | None) -> torch.Tensor:
    t = t.detach().contiguous()
    return t if shape is None else t.reshape(shape)


def operand(x: Any, shape: tuple[int, ...] | None) -> Any:
    """A run-time operand as the operator reads it (a linear's reshaped to its [rows, n] view)."""
    x = x if x.is_contiguous() else x.contiguous()
    return x if shape is None else x.reshape(shape)
