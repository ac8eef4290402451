"""The backend's FX pass as data: which nodes run on cuopjit, and how fusion rules group them into kernels.

`plan(gm, example_inputs, device)` prepares the graph (fake values on every node, fused torch ops
written out: decompose.py, eval-mode dropout dropped), describes and checks every call node
(nodes.py, support.py) and makes one `Group` per node that can run: its `head` (conv2d, linear,
matmul, bmm, baddbmm, softmax, layer_norm, a pool) or, for elementwise ops (add, sub, mul, div,
neg, relu, gelu, silu, sigmoid, tanh, eval batch_norm as a per-channel scale and shift), a `tail`
of elementwise calls run as one program after the head (or alone). Then groups merge along the
graph's edges: when a group's output has exactly one user, owned by another group, the first rule
of RULES whose `matches(producer, user_group)` holds merges the user's group into the producer's.
Adding a fusion is one more Rule (a GEMM/Conv2D epilogue: a head absorbing an elementwise run as
its epilogue instead of a tail program, placed before "elementwise run").

Merging moves a computation later in the graph (a group runs where its last node was), which is
safe in a graph without side effects; a merge that would move reads past a node that writes into
a tensor and stays torch is refused. In-place ops fuse only where nobody else sees their input.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from . import decompose
from .nodes import ELEMENTWISE, Call, describe, mutates
from .support import Context, check

CALLS = ("call_function", "call_method", "call_module")
MAX_TAIL = 24   # elementwise calls in one program (the expression language takes 2,000 characters)


@dataclass(eq=False)
class Group:
    """Nodes that run as one cuopjit head kernel and / or one elementwise program."""
    head: Call | None
    tail: list[Call]
    nodes: list[fx.Node]
    batch_norm: Call | None = None   # an eval BatchNorm folded into the head conv's weight and bias
    relu: bool = False               # the head conv's own ReLU
    fusions: list[str] = field(default_factory=list)
    head_out: fx.Node | None = None  # the node whose value the head kernel gives (after folds): the tail's y

    def __post_init__(self) -> None:
        if self.head is not None and self.head_out is None:
            self.head_out = self.head.node

    @property
    def output(self) -> fx.Node:
        return self.nodes[-1]

    @property
    def kind(self) -> str:
        return self.head.op if self.head is not None else "elementwise"


@dataclass(frozen=True)
class Rule:
    """A fusion: `matches(group, user_group, ctx)` says whether `merge` may fold the user's group into group."""
    name: str
    matches: Callable[[Group, Group, Context], bool]
    merge: Callable[[Group, Group, Context], None]


def _single(h: Group, op: str) -> bool:
    return h.head is None and len(h.tail) == 1 and h.tail[0].op == op


def _bare_conv(g: Group) -> bool:
    return g.kind == "conv2d" and not g.tail and not g.relu


def _fold(g: Group, h: Group, ctx: Context) -> None:
    g.batch_norm, g.head_out = h.tail[0], h.output


def _relu(g: Group, h: Group, ctx: Context) -> None:
    g.relu, g.head_out = True, h.output


def _run(g: Group, h: Group, ctx: Context) -> None:
    g.tail = sorted(g.tail + h.tail, key=lambda c: ctx.order[c.node])


RULES: tuple[Rule, ...] = (
    Rule("conv2d + batch_norm (folded into the convolution's weight and bias)",
         lambda g, h, ctx: _bare_conv(g) and g.batch_norm is None and _single(h, "batch_norm"), _fold),
    Rule("conv2d + relu (the convolution's fused ReLU)", lambda g, h, ctx: _bare_conv(g) and _single(h, "relu"),
         _relu),
    Rule("elementwise run (one ElementwiseFloat/Double program after the head, if any)",
         lambda g, h, ctx: h.head is None and len(g.tail) + len(h.tail) <= MAX_TAIL, _run),
)


@dataclass
class Plan:
    """What the backend does with a graph: the groups (graph order), why the other nodes stay torch, notes."""
    ctx: Context
    groups: list[Group]
    torch: dict[fx.Node, str]
    notes: list[str]


class PlanError(ValueError):
    """The graph cannot be planned at all (its fake values cannot be computed): it runs on torch."""


def propagate(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """A fake value (node.meta["val"]) on every node, from the example inputs' shapes, dtypes and devices."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    try:
        FakeTensorProp(gm, mode).propagate(*fakes)
    except Exception as exc:  # torch could not run some node on fake tensors: nothing can be planned
        raise PlanError(f"torch's fake tensors could not run the graph ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def _drop_noops(gm: fx.GraphModule, modules: dict) -> list[str]:
    """Eval-mode dropout is the identity: its users read its input."""
    notes = []
    for node in list(gm.graph.nodes):
        call = describe(node, modules) if node.op in CALLS else None
        if isinstance(call, Call) and call.op == "dropout" and not call.args["training"]:
            node.replace_all_uses_with(call.args["input"])
            gm.graph.erase_node(node)
            notes.append(f"{node.name}: dropout in eval mode is the identity: dropped")
    return notes


def traced(gm: fx.GraphModule) -> bool:
    """Whether every node but the output already has a fake value (Dynamo's example_value): no pass needed."""
    return all("val" in n.meta or "example_value" in n.meta for n in gm.graph.nodes if n.op != "output")


def prepare(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[list[str], dict[str, str]]:
    """Fake values on every node (Dynamo's where it gave them), expansions and dropped no-ops (the graph is
    changed in place)."""
    if not traced(gm):
        propagate(gm, example_inputs)
    modules = dict(gm.named_modules())
    notes, kept = decompose.expand(gm, modules)
    notes += _drop_noops(gm, modules)
    if notes:
        gm.recompile()
        propagate(gm, example_inputs)
    return notes, kept


def _seed(call: Call) -> Group:
    if call.op in ELEMENTWISE:
        return Group(None, [call], [call.node])
    return Group(call, [], [call.node])


def _crosses(g: Group, h: Group, barriers: list[int], ctx: Context) -> bool:
    lo, hi = ctx.order[g.nodes[0]], ctx.order[h.output]
    return any(lo < b < hi for b in barriers)


def group(ctx: Context, torch_why: dict[fx.Node, str]) -> list[Group]:
    """Seed a group per runnable node, then merge along single-user edges by RULES (graph order)."""
    nodes = [n for n in ctx.gm.graph.nodes if n.op in CALLS]
    for node in nodes:
        ctx.calls[node] = describe(node, ctx.modules)
    owner: dict[fx.Node, Group] = {}
    for node in nodes:
        call = ctx.calls[node]
        why = call if isinstance(call, str) else check(call, ctx)
        if why:
            torch_why[node] = why
        else:
            owner[node] = _seed(call)
    barriers = [ctx.order[n] for n in nodes if n not in owner and mutates(n, ctx.modules)]
    groups = list(dict.fromkeys(owner[n] for n in nodes if n in owner))
    alive = set(groups)
    for g in groups:
        while g in alive:
            users = list(g.output.users)
            h = owner.get(users[0]) if len(users) == 1 else None
            if h is None or h is g or _crosses(g, h, barriers, ctx):
                break
            rule = next((r for r in RULES if r.matches(g, h, ctx)), None)
            if rule is None:
                break
            rule.merge(g, h, ctx)
            g.fusions.append(f"{rule.name}: {', '.join(n.name for n in h.nodes)}")
            g.nodes = sorted(g.nodes + h.nodes, key=ctx.order.__getitem__)
            for n in h.nodes:
                owner[n] = g
            alive.discard(h)
    return [g for g in groups if g in alive]


def plan(gm: fx.GraphModule, example_inputs: Sequence[Any], device: str = "cuda") -> Plan:
    """Prepare `gm` (in place) and decide, for every node, where it runs and with what."""
    notes, kept = prepare(gm, example_inputs)
    ctx = Context.of(gm, example_inputs, device)
    torch_why: dict[fx.Node, str] = {}
    groups = group(ctx, torch_why)
    for node in torch_why:
        if node.name in kept:
            torch_why[node] = kept[node.name]
    return Plan(ctx, groups, torch_why, notes)
