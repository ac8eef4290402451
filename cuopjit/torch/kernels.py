"""A planned group as a callable on torch CUDA tensors: its head kernel (heads.py; with the tail as its epilogue
where epilogues.fit allows), else the head and then its elementwise program (`Tail`).

`build(group, ctx, launch, tf32)` gives a `Kernel` and the FX nodes it takes at run time; `check_plans` plans its
forwards at compile time, so a 16-bit setting an operator refuses stays torch.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..config import DEFAULT as DEFAULT_SETTINGS
from ..listing import plan_of
from . import layouts
from .common import make_operator
from .fusion import Group
from .heads import INPUTS, Head, Launch, nhwc_shape, stand_in
from .prebuild import Sample
from .program import HEAD, Program, render
from .support import Context
from .warm import Warm


class Tail:
    """The group's elementwise program: `__call__(y, *runtime)` (y: the head's output or None). Over
    channels_last operands it runs on their (N, H, W, C) storage (layouts.nhwc)."""

    def __init__(self, program: Program, group: Group, ctx: Context, launch: Launch):
        out = ctx.val(group.output)
        self.shape, self.dtype, self.device = tuple(out.shape), out.dtype, out.device
        self.op = make_operator("elementwise", out.dtype, program.text)
        self.names = [n for n, _ in program.runtime]
        self.constants = {n: t.contiguous() for n, t in program.constants.items()}
        self.nhwc = None
        if layouts.output_format(out) == layouts.CHANNELS_LAST:
            self.nhwc = {n: layouts.nhwc_constant(t) for n, t in program.constants.items()}
        head = ctx.val(group.head_out) if group.head is not None else None
        self.head_shape = tuple(head.shape) if HEAD in program.operands else None
        self.in_place = self.head_shape == self.shape
        self.launch = launch
        self.warm = Warm(self.op, self.op)
        self.name = f"{type(self.op).__name__}({program.text!r})"

    def sample(self, runtime: list[tuple[int, ...]], laid: bool) -> Sample:
        """The program's forward on the graph's shapes (`laid`: its channels_last form), for prebuild."""
        shapes = dict(zip(self.names, runtime))
        if self.head_shape is not None:
            shapes[HEAD] = self.head_shape
        constants = self.nhwc if laid else self.constants
        out = self.shape
        if laid:
            out, shapes = nhwc_shape(out), {n: nhwc_shape(v) for n, v in shapes.items()}
        kwargs = {n: stand_in(tuple(t.shape), self.dtype) for n, t in constants.items()}
        kwargs.update((n, stand_in(v, self.dtype)) for n, v in shapes.items())
        return Sample(self.op, DEFAULT_SETTINGS, (), {**kwargs, "out": stand_in(out, self.dtype)})

    def __call__(self, y: torch.Tensor | None, *xs: torch.Tensor) -> torch.Tensor:
        runtime = dict(zip(self.names, xs))
        if y is not None:
            runtime[HEAD] = y
        if self.nhwc is not None and all(layouts.is_channels_last(x, self.shape) for x in runtime.values()):
            out = y if self.in_place else torch.empty(self.shape, dtype=self.dtype, device=self.device,
                                                      memory_format=layouts.CHANNELS_LAST)
            operands = {**self.nhwc, **{n: layouts.nhwc(x) for n, x in runtime.items()}}
            self.warm(self.launch.stream, (), {"out": layouts.nhwc(out), **operands})
            return out
        operands = {**self.constants, **{n: layouts.contiguous(x) for n, x in runtime.items()}}
        out = operands[HEAD] if self.in_place else torch.empty(self.shape, dtype=self.dtype, device=self.device)
        self.warm(self.launch.stream, (), {"out": out, **operands})
        return out


class Kernel:
    """A group as one call: the head (if any) on the first `n` arguments, then the program on the rest."""

    def __init__(self, kind: str, head: Head | None, n: int, tail: Tail | None):
        self.__name__ = f"cuopjit_{kind}"   # how the compiled graph's code names it
        self.head, self.n, self.tail = head, n, tail
        self.name = " + ".join(k.name for k in (head, tail) if k is not None)
        self.samples: list[Sample] = []   # the operators' forwards on the graph's shapes (prebuild)
        # why a product's program was not made its epilogue (the report's note), None where it was or none ran
        self.unfused = head.epilogue if head is not None and tail is not None and head.op_fuses else None

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        y = self.head(*args[:self.n]) if self.head is not None else None
        return self.tail(y, *args[self.n:]) if self.tail is not None else y


def build(group: Group, ctx: Context, launch: Launch, tf32: dict[str, bool]) -> tuple[Kernel, list[fx.Node]]:
    """The group's kernel and the values it takes (FX nodes), in its argument order; the kernel's `samples`
    are its operators' forwards for prebuild."""
    head, inputs, samples = None, [], []
    shape = lambda node: tuple(ctx.val(node).shape)   # noqa: E731
    if group.head is not None:
        head = Head(group, ctx, launch, tf32)
        inputs = [group.head.args[k] for k in INPUTS[group.head.op]]
        if not isinstance(head.epilogue, str):
            group.fusions.append(f"epilogue: {head.epilogue.text!r} where the {group.head.op} stores its output")
            runtime = list(head.epilogue.runtime.values())
            kernel = Kernel(group.kind, head, len(inputs) + len(runtime), None)
            kernel.samples = [head.sample([shape(n) for n in inputs], [shape(n) for n in runtime])]
            return kernel, inputs + runtime
        samples.append(head.sample([shape(n) for n in inputs], []))
    program = render(group, ctx)
    tail, n = None, len(inputs)
    if program is not None:
        tail = Tail(program, group, ctx, launch)
        runtime = [node for _, node in program.runtime]
        laid = tail.nhwc is not None and all(layouts.output_format(ctx.val(v)) == layouts.CHANNELS_LAST
                                             for v in runtime + ([group.head_out] if tail.head_shape else []))
        samples.append(tail.sample([shape(v) for v in runtime], laid))
        inputs += runtime
    kernel = Kernel(group.kind, head, n, tail)
    kernel.samples = samples
    return kernel, inputs


def check_plans(kernel: Kernel) -> None:
    """Plan each of the kernel's forwards for the live target (cuopjit.listing.plan_of): raises what an operator
    raises for a setting it refuses (the backend then leaves the group to torch)."""
    for sample in kernel.samples:
        plan_of(sample.operator, sample.settings, sample.args, sample.kwargs)
