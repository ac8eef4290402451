"""Attention as one fused cuopjit kernel in the torch backend and as `torch.ops.cuopjit.attention`.

The expansions of decompose.py write F.scaled_dot_product_attention (no mask, no dropout; causal or not) and
the attention of an eval nn.TransformerEncoderLayer as one `attention(query, key, value, scale, causal,
heads_last)` node (`node`): its fake value and its torch fallback are torch's own SDPA, and the backend runs it
on AttentionFloat / AttentionDouble (flash-attention style: the [L, L] scores are never written). `Runner`
reads q, k and v where they lie ([batch, heads, L, D] or [batch, L, D] views with D contiguous: the slices of
a fused QKV projection need no copy) and, with `heads_last`, writes the output as [batch, L, heads, D], so the
encoder's head merge is a view. float32 runs on TF32 tensor cores when torch's matmul TF32 flag is on.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.fx.proxy import Proxy

from .. import target as targets
from ..config import JITConfig, RunSettings
from ..device import driver
from ..ops.attention.operator import problem_of
from ..run import executor
from .common import HALF, TorchOp, forward, instance, make_operator, view

MEMO_LIMIT = 64


def attention(query: Any, key: Any, value: Any, scale: float | None = None, causal: bool = False,
              heads_last: bool = False) -> Any:
    """softmax(q kᵀ · scale) v (torch's SDPA: the node's fake value, and what runs where the node stays torch);
    heads_last: the [batch, heads, L, D] result as a contiguous [batch, L, heads, D] tensor."""
    out = F.scaled_dot_product_attention(query, key, value, is_causal=causal, scale=scale)
    return out.transpose(1, 2).contiguous() if heads_last else out


def node(query: Any, key: Any, value: Any, scale: float | None, causal: bool = False, heads_last: bool = False
         ) -> Any:
    """`attention(...)` as one graph node when the operands are FX proxies (decompose.py traces with them)."""
    if isinstance(query, Proxy):
        return query.tracer.create_proxy("call_function", attention, (query, key, value),
                                         {"scale": scale, "causal": causal, "heads_last": heads_last})
    return attention(query, key, value, scale, causal, heads_last)


def check(call: Any, ctx: Any) -> str | None:
    """None when the attention node runs on cuopjit, else why it stays torch (support.CHECKS)."""
    q, k, v = (ctx.val(call.args[n]) for n in ("query", "key", "value"))
    if any(t is None for t in (q, k, v)) or not q.dim() == k.dim() == v.dim() or q.dim() not in (3, 4):
        return "attention on operands that are not three 3-D or 4-D tensors"
    if k.shape[:-2] != q.shape[:-2] or v.shape[:-1] != k.shape[:-1] or {k.shape[-1], v.shape[-1]} != {q.shape[-1]}:
        return "attention with broadcast batches or a value head dim unlike the query's"
    if q.shape[-1] > 128 or k.shape[-2] == 0:
        return f"attention with head dim {q.shape[-1]} (cuopjit takes up to 128) or no keys"
    if call.args["heads_last"] and q.dim() != 4:
        return "attention with heads_last on 3-D operands"
    return None


def _dims(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    """[batch, heads, L, D] shape and (batch, head, row) element strides of a 3-D or 4-D tensor."""
    if t.dim() == 3:
        return (t.shape[0], 1, t.shape[1], t.shape[2]), (t.stride(0), 0, t.stride(1))
    return tuple(t.shape), (t.stride(0), t.stride(1), t.stride(2))


class Runner:
    """`forward(q, k, v, out, stream, scale, causal)` on torch CUDA tensors as they lie (D contiguous, else
    copied); out [batch, heads, Lq, D] contiguous, or [batch, Lq, heads, D] with `heads_last`. `bound` tells
    warm.Warm the launch a forward made, so a compiled graph's attention launches from its pointer recipe."""

    def __init__(self, dtype: torch.dtype, tensor_cores: bool, heads_last: bool):
        self.op = make_operator("attention", dtype)
        self.config = JITConfig()
        self.config.enable_tensor_core = tensor_cores
        self.settings = RunSettings.of(self.config.snapshot())
        self.heads_last = heads_last
        self.memo: dict[tuple, Any] = {}

    def get_jit_config(self) -> JITConfig:
        """The settings the kernels are planned under (prebuild reads them)."""
        return self.config

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, stream: int = 0,
                scale: float | None = None, causal: bool = False) -> torch.Tensor:
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        run, pointers = self._runner(q, k, v, out, scale, causal)
        run(pointers, stream)
        return out

    def _runner(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, scale: float | None,
                causal: bool) -> tuple[Any, tuple]:
        o = out.transpose(1, 2) if self.heads_last else out
        ops = (q, k, v, o)
        pointers = tuple(t.data_ptr() for t in ops)
        key = (*(t.shape for t in ops), *(t.stride() for t in ops), tuple(p & 15 for p in pointers), scale, causal)
        run = self.memo.get(key)
        if run is None:
            run = self._load(ops, pointers, scale, causal)
            if len(self.memo) >= MEMO_LIMIT:
                self.memo.clear()
            self.memo[key] = run
        return run, pointers

    def bound(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, scale: float | None = None,
              causal: bool = False) -> tuple[Any, tuple] | None:
        """(the launch `forward` just made for these operands, the pointers it packed): warm.Warm's recipe. None
        where forward copied an operand (its pointer is no operand's) or loaded nothing."""
        if any(t.stride(-1) != 1 for t in (q, k, v)):
            return None
        run, pointers = self._runner(q, k, v, out, scale, causal)
        return None if run is executor.NOTHING else (run, pointers)

    def _load(self, ops: tuple, pointers: tuple, scale: float | None, causal: bool) -> Any:
        dims = [_dims(t) for t in ops]
        name = type(self.op).__name__
        problem = problem_of(self.op.dtype, tuple(d[0] for d in dims), tuple(d[1] for d in dims), pointers, scale,
                             bool(causal), name)
        if problem is None:
            return executor.NOTHING
        ordinal = ops[0].get_device()
        if driver.current_ordinal() != ordinal:
            driver.set_device(ordinal)
        plan = self.op.family.default_plan(problem, self.settings.config, targets.of_device(ordinal))
        return executor.load(plan, ordinal, self.settings, name)


def setup(head: Any, a: dict, tf32: dict[str, bool]) -> str:
    """The backend's Head for an attention node (heads.Head._attention): its runner, operator and words."""
    head.tensor_cores = head.dtype == torch.float32 and tf32["matmul"]
    head.run = Runner(head.dtype, head.tensor_cores, bool(a["heads_last"]))
    head.op = head.run.op
    head.kwargs = {"scale": a["scale"], "causal": bool(a["causal"])}
    how = "TF32" if head.tensor_cores else "16-bit tensor cores" if head.dtype in HALF else "exact"
    return f"{type(head.op).__name__}({'causal, ' if a['causal'] else ''}{how})"


def _run(out: torch.Tensor, s: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
         causal: bool = False) -> None:
    forward(instance("attention", q.dtype), view(q), view(k), view(v), view(out), stream=s, scale=scale,
            causal=causal)


# cuopjit::attention(q, k, v, scale=None, causal=False): F.scaled_dot_product_attention without mask or dropout
LIBRARY_OP = TorchOp("(Tensor q, Tensor k, Tensor v, float? scale=None, bool causal=False) -> Tensor",
                     lambda q, k, v, scale=None, causal=False: q.shape, _run)
