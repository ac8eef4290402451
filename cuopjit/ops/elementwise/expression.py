"""The user-written elementwise family (templates/elementwise/expression.cu.jinja): a program of
cuopjit.expr over inputs that broadcast NumPy-style onto the outputs.

A problem is the program's canonical text (so 'out=relu(x)' and 'out = relu( x )' plan, key and
cache one kernel), the dtype, the output's element count and one broadcast.Layout per input. The
kernel's code depends on the program, each input's kind and the access shape; sizes, runs and
strides travel as a by-value geometry blob, so one cubin serves every shape of the same pattern.
Python numbers are 64-bit words passed per call through the plan's pointer slots (their bits), so a
new value neither re-plans nor recompiles.

How each JITConfig field changes the code (as for the other streaming maps, kernels.py):
kernel_type "simple" = one scalar element per thread per step, else 16-byte vectors (where every
full-size operand and output is 16-byte aligned) with ITEMS in flight; block_size; tile_size =
elements per thread per step; enable_loop_unroll; enable_memory_coalescing; optimization_level and
max_registers reach NVRTC. Full-size operands over 64 MiB per call move with evict-first hints.

float16 and bfloat16 programs read their tensors exactly into float32, evaluate in float32 (numbers are float32
parameters, literals float32 constants) and round each output once on store; 16-byte vectors hold 8 elements.

Per input, in the vector kernel: "full" loads vectors; a run loads one value per vector when
`inner` is a multiple of the vector width ("bcast": NCHW per-channel), a vector when inner is 1 and
the extent a multiple of it ("vec": NHWC per-channel), else one value per element ("elem").
"""
from __future__ import annotations

import functools
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ... import layout as layouts
from ...expr import Program, generate_program, parse_program
from ...layout import CONTIGUOUS
from ...run.plan import Family, KernelLaunch, Plan, blob, i32, i64, ptr
from ...target import Target
from ..base import cdiv, compute_dtype, dtype_tag, scalar_t
from . import broadcast
from .broadcast import FULL, RUN, SCALAR, STRIDED, Layout
from .kernels import DTYPES, STREAM_BYTES, MapChoice, half_params, map_choice

TEMPLATE = "elementwise/expression.cu.jinja"
NAME = "elementwise"
# What `cuopjit prewarm/show/explain elementwise` plan when no program is given: a ResNet block's tail.
DEFAULT_PROGRAM = "out = relu(x * scale + shift + r)"
DEFAULT_SHAPES = ({"x": (32, 256, 56, 56), "scale": (256, 1, 1), "shift": (256, 1, 1), "r": (32, 256, 56, 56)},
                  {"x": (32, 56, 56, 256), "scale": (256,), "shift": (256,), "r": (32, 56, 56, 256)})
_CODES = {"full": "f", "uniform": "u", "scalar": "s", "bcast": "c", "vec": "v", "elem": "e", "strided": "g"}


@dataclass(frozen=True)
class ExprProblem:
    """One forward of a program: `inputs` in program order, `outputs` how many, `dims` the collapsed output
    axes (strided inputs only), `aligned` every full-size input and every output 16-byte aligned, `layout` the
    outputs' memory layout (cuopjit/layout.py; the inputs' Layouts are read in its order)."""
    program: str
    dtype: str
    n: int
    inputs: tuple[Layout, ...]
    outputs: int
    dims: tuple[int, ...] = ()
    aligned: bool = True
    layout: str = CONTIGUOUS


def as_program(program: Union[str, Program]) -> Program:
    """A parsed Program (ExpressionError for text outside the language)."""
    if isinstance(program, Program):
        return program
    if not isinstance(program, str):
        raise TypeError(f"an elementwise program is a string such as {DEFAULT_PROGRAM!r}, got "
                        f"{type(program).__name__}")
    return parse_program(program)


def make_problem(program: Union[str, Program], dtype: str, inputs: Sequence[Optional[tuple[int, ...]]],
                 out_shape: tuple[int, ...], outputs: int, aligned: Sequence[bool] = (),
                 outputs_aligned: bool = True, strides: Sequence[Optional[tuple[int, ...]]] = (),
                 layout: str = CONTIGUOUS) -> ExprProblem:
    """The problem of inputs of these shapes (None: a Python number) and outputs of `out_shape` in memory layout
    `layout`, already checked by broadcast.output_shape; `aligned[k]`: input k is 16-byte aligned (default: all);
    `strides[k]`: input k's element strides (default: row-major)."""
    prog = as_program(program)
    steps = layouts.strides(out_shape, layout)
    order = sorted(range(len(out_shape)), key=lambda d: -steps[d])   # stable: size-1 axes keep their place
    found, dims = broadcast.layouts(inputs, out_shape, aligned, strides, order)
    ok = outputs_aligned and all(lay.aligned for lay in found if lay.kind == FULL)
    return ExprProblem(prog.canonical, np.dtype(dtype).name, math.prod(out_shape), found, outputs, dims, ok,
                       layout)


def choices(problem: ExprProblem, cfg: ConfigSnapshot, target: Target) -> list[MapChoice]:
    """The one kernel shape `cfg` names: the streaming map's (scalar 'simple' or vectorised)."""
    return [map_choice(problem.dtype, cfg, problem.aligned)]


def mode(layout: Layout, vec: int) -> str:
    """How the kernel reads an input at vector width `vec` (see the module docstring)."""
    if layout.kind != RUN:
        return layout.kind
    if layout.inner % vec == 0:
        return "bcast"
    if layout.inner == 1 and layout.extent % vec == 0 and layout.aligned:
        return "vec"
    return "elem"


@functools.lru_cache(maxsize=256)
def _code(program: str, scalar: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(input names, prelude lines, body lines, result variables) of a canonical program; inputs load as
    cj_in0, cj_in1, ... so no name of the user's reaches the source."""
    prog = parse_program(program)
    code = generate_program(prog, {name: f"cj_in{k}" for k, name in enumerate(prog.inputs)}, scalar)
    lines = tuple(line for line in code.prelude.split("\n") if line)
    return prog.inputs + prog.outputs, lines, tuple(code.body.split("\n")), code.results


def _geometry(problem: ExprProblem, modes: Sequence[str]) -> tuple[list[int], list[int], int]:
    """(the words of the geometry blob, each input's first word (-1: none), the collapsed axes' first word)."""
    words, first, runs = [], [], {}
    for lay, m in zip(problem.inputs, modes):
        if m not in ("bcast", "vec", "elem"):
            first.append(-1)
            continue
        if (lay.inner, lay.extent) not in runs:   # operands of one run share words, and so their index math
            runs[(lay.inner, lay.extent)] = len(words)
            words += [lay.inner, lay.extent]
        first.append(runs[(lay.inner, lay.extent)])
    axes = len(words) if problem.dims else -1
    if problem.dims:
        rank = len(problem.dims)
        words += [math.prod(problem.dims[d + 1:]) for d in range(rank)] + list(problem.dims)
        for k, lay in enumerate(problem.inputs):
            if lay.kind == STRIDED:
                first[k] = len(words)
                words += list(lay.strides)
    return words, first, axes


def group(items: int, vec: int, modes: Sequence[str], itemsize: int, threads: int) -> int:
    """Accesses per operand in flight together in the unrolled kernel: all ITEMS when the values they load
    fit the registers a thread of a `threads` block may have (less 32 for indices, 2 per pointer), else
    the largest divisor of ITEMS that fits (tile_size keeps its meaning: elements per thread per step)."""
    words = itemsize // 4     # registers per value; per-element reads (elem, strided) are hoisted like vectors
    per_item = words * sum(1 if m == "bcast" else vec for m in modes if m not in ("scalar", "uniform"))
    budget = max(8, min(255, 65536 // threads) - 32 - 2 * len(modes))
    return max(g for g in range(1, items + 1) if items % g == 0 and (g == 1 or g * per_item <= budget))


def plan(problem: ExprProblem, choice: MapChoice, target: Target) -> Plan:
    """One launch. Parameters: tensor inputs, outputs, then the numbers' words (all per call, in that
    order), the element count and the geometry blob."""
    dtype = np.dtype(problem.dtype)
    names, prelude, body, results = _code(problem.program, scalar_t(dtype))
    n_in = len(problem.inputs)
    vec = 1 if choice.simple else choice.vec
    modes = tuple("bcast" if (vec == 1 and lay.kind == RUN) else mode(lay, vec) for lay in problem.inputs)
    words, first, axes = _geometry(problem, modes)
    idx64 = problem.n >= 2 ** 31
    full_bytes = problem.n * dtype.itemsize * (sum(lay.kind == FULL for lay in problem.inputs) + problem.outputs)
    streaming = not choice.simple and full_bytes > STREAM_BYTES
    items = 1 if choice.simple else choice.items
    together = group(items, vec, modes, compute_dtype(dtype).itemsize, choice.threads) if choice.unroll else 1
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "simple": choice.simple,
              "THREADS": choice.threads, "VEC": vec, "ITEMS": items, "GROUP": together,
              "STREAM": streaming, "idx64": idx64, "program": problem.program, "prelude": prelude, "body": body,
              "results": results, "modes": modes, "first": tuple(first), "RANK": len(problem.dims),
              "AXES": axes, "NWORDS": len(words), **half_params(dtype)}
    digest = hashlib.sha256(problem.program.encode()).hexdigest()[:8]
    name = (f"expr_{dtype_tag(dtype)}_{digest}_{''.join(_CODES[m] for m in modes)}_{choice.label}"
            + (f"_g{together}" if choice.unroll and together < items else "") + ("_cs" if streaming else "")
            + ("" if choice.unroll else "_nounroll") + ("_i64" if idx64 else ""))
    spec = pipeline.make_spec(TEMPLATE, "expression", name, params, choice.opts)
    per_block = choice.threads * (1 if choice.simple else vec * choice.items)
    grid = max(1, min(cdiv(problem.n, per_block), 2 ** 31 - 1))
    tensors = [k for k in range(n_in) if problem.inputs[k].kind != SCALAR]
    numbers = [k for k in range(n_in) if problem.inputs[k].kind == SCALAR]
    order = [names[k] for k in tensors] + list(names[n_in:]) + [names[k] for k in numbers]
    args = [ptr(i) for i in range(len(order))] + [i64(problem.n) if idx64 else i32(problem.n)]
    if words:
        args.append(blob(struct.pack(f"<{len(words)}{'Q' if idx64 else 'I'}", *words)))
    units = "FP32 cores" if compute_dtype(dtype) == np.float32 else "FP64 cores"
    return Plan((KernelLaunch(spec, (grid,), (choice.threads,), tuple(args), units=units),), tuple(order),
                choice=choice.label)


def problems_for(program: Union[str, Program], dtype: Optional[str] = None,
                 shapes: Optional[Mapping[str, Optional[tuple[int, ...]]]] = None) -> list[ExprProblem]:
    """Representative problems of `program` (what prewarm builds for it), for `dtype` or every dtype.

    Without `shapes`: every input a full-size tensor, large and aligned (streaming), small and aligned,
    odd and unaligned. With `shapes` (input name -> shape, None for a Python number; an output's name
    may give the output shape, else the inputs' broadcast): that one aligned problem."""
    prog = as_program(program)
    dtypes = DTYPES if dtype is None else (np.dtype(dtype).name,)
    out = []
    for dt in dtypes:
        if shapes is None:
            for n, aligned in ((1 << 28, True), (1 << 20, True), (4097, False)):
                out.append(make_problem(prog, dt, [(n,)] * len(prog.inputs), (n,), len(prog.outputs),
                                        [aligned] * len(prog.inputs), aligned))
            continue
        unknown = [k for k in shapes if k not in prog.inputs + prog.outputs]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an operand of {prog.canonical!r}; its inputs: "
                             f"{', '.join(prog.inputs)}; outputs: {', '.join(prog.outputs)}")
        missing = [k for k in prog.inputs if k not in shapes]
        if missing:
            raise ValueError(f"shapes names no shape for input {missing[0]!r}; give one per input (None for a "
                             "Python number)")
        ins = [None if shapes[k] is None else tuple(shapes[k]) for k in prog.inputs]
        named = [(k, s) for k, s in zip(prog.inputs, ins) if s is not None]
        broadcast.check_inputs("problems_for", named)
        given = [tuple(shapes[k]) for k in prog.outputs if shapes.get(k) is not None]
        shape = given[0] if given else tuple(np.broadcast_shapes(*[s for _, s in named]))
        broadcast.output_shape("problems_for", named, [(k, shape) for k in prog.outputs])
        out.append(make_problem(prog, dt, ins, shape, len(prog.outputs)))
    return out


def family(program: Union[str, Program, None] = None) -> Family:
    """The family planning `program`'s forwards; its problems are problems_for(program). Without a program:
    DEFAULT_PROGRAM, full-size and per-channel over NCHW and NHWC (what the CLI builds for 'elementwise')."""
    if program is None:
        def problems() -> list[ExprProblem]:
            return problems_for(DEFAULT_PROGRAM) + [p for s in DEFAULT_SHAPES
                                                    for p in problems_for(DEFAULT_PROGRAM, shapes=s)]
    else:
        prog = as_program(program)

        def problems() -> list[ExprProblem]:
            return problems_for(prog)
    return Family(NAME, choices, plan, problems)
