"""--epilogue, --elementwise and --operand of `cuopjit prewarm`, `show` and `explain`: fused kernels, no GPU needed.

--epilogue EXPR (families gemm, matmul, batchmatmul, conv2d) plans the product with that epilogue. Each operand's
kind is given by `--operand NAME=KIND` (scalar, per_column, per_row, full; repeatable); an operand not named is
per_column, the common case (a bias, a folded BatchNorm's scale or shift), so `--epilogue "gelu(acc + bias)"`
needs no --operand. With --shape, the forward of that shape is planned with operands of those kinds (a Python
number for scalar; [N] / [K] per column, [M, 1] / [N, 1, OH, OW] per row, the output's shape for full): exactly
what that forward plans. Without --shape: the family's representative problems, each with the epilogue (a
convolution's own bias and ReLU replaced by it).

--elementwise PROGRAM (family elementwise) plans the program's kernels. `--operand NAME=SHAPE` (or NAME=scalar:
a Python number) gives an input's shape and --shape the outputs' (default: the inputs' broadcast); without
either, cuopjit.ops.elementwise.expression.problems_for's representative problems (every input full-size:
large, small and odd).
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .. import prewarm
from ..config import ConfigSnapshot, RunSettings
from ..expr import KINDS, PER_COLUMN, SCALAR, check_kinds, generate_program, parse_epilogue
from ..listing import plan_of
from ..ops import FAMILIES, epilogue
from ..ops.elementwise import expression
from ..recipes import EPILOGUE_FAMILIES, Make, build, elementwise, fake_maker, fuse, parse_shape, parse_shapes
from ..target import named

ELEMENTWISE = "elementwise"


def wanted(ns: argparse.Namespace) -> bool:
    """Whether the command asks for fused kernels (after checking the flags fit together)."""
    epi, program, operands = getattr(ns, "epilogue", None), getattr(ns, "elementwise", None), getattr(ns, "operand", None)
    if epi and program:
        raise ValueError("--epilogue (a product's epilogue) and --elementwise (a program) exclude each other: give one")
    if operands and not (epi or program):
        raise ValueError("--operand describes the operands of --epilogue or --elementwise: give one of them")
    return bool(epi or program)


def check_ops(ns: argparse.Namespace, ops: list[str]) -> None:
    """--epilogue only on the product families, --elementwise only on elementwise."""
    allowed = EPILOGUE_FAMILIES if ns.epilogue else (ELEMENTWISE,)
    for op in ops:
        if op not in allowed:
            flag = "--epilogue" if ns.epilogue else "--elementwise"
            raise ValueError(f"{op} takes no {flag}: {flag} is for {', '.join(allowed)}"
                             + (" (--elementwise for elementwise programs)" if ns.epilogue else ""))


def _pairs(ns: argparse.Namespace) -> dict[str, str]:
    out = {}
    for item in ns.operand or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"--operand {item!r}: write NAME=VALUE, e.g. --operand bias=per_column")
        if name.strip() in out:
            raise ValueError(f"--operand {name.strip()!r} is given twice")
        out[name.strip()] = value.strip()
    return out


def kinds(ns: argparse.Namespace) -> dict[str, str]:
    """Each operand of --epilogue and its kind (--operand, else per_column)."""
    expr = parse_epilogue(ns.epilogue)
    given = _pairs(ns)
    for name, kind in given.items():
        if kind not in KINDS:
            raise ValueError(f"--operand {name}={kind}: the kind is one of {', '.join(KINDS)}")
    found = {name: given.get(name, PER_COLUMN) for name in expr.operands}
    check_kinds(expr, {**found, **given})    # a --operand the expression does not read is refused
    return found


def shapes(ns: argparse.Namespace) -> dict[str, tuple[int, ...] | None]:
    """Each --operand of --elementwise: its shape, or None for a Python number ('scalar')."""
    program = expression.as_program(ns.elementwise)
    out = {}
    for name, value in _pairs(ns).items():
        if name not in program.inputs:
            raise ValueError(f"--operand {name}: {name!r} is not an input of {program.canonical!r}; its inputs: "
                             f"{', '.join(program.inputs)}")
        out[name] = None if value == SCALAR else parse_shape(value)
    return out


def recipe(ns: argparse.Namespace, op: str, dtype: str, shape: tuple[int, ...] | None, make: Make
           ) -> tuple[Any, tuple, dict]:
    """(operator, args, kwargs) of the fused forward the flags describe, for family `op` on `shape`."""
    check_ops(ns, [op])
    if ns.elementwise:
        return elementwise(ns.elementwise, dtype, shapes(ns), shape, make)
    operator, args, kwargs = build(op, dtype, shape, make)
    fuse(op, operator, args, ns.epilogue, kinds(ns), make)
    return operator, args, kwargs


def _with_epilogue(problem: Any, key: str) -> Any:
    """A representative problem of a product family with the epilogue `key` (a convolution's bias and ReLU off)."""
    if hasattr(problem, "gemm"):
        return dataclasses.replace(problem, gemm=dataclasses.replace(problem.gemm, epilogue=key))
    if hasattr(problem, "relu"):
        return dataclasses.replace(problem, bias=False, relu=False, epilogue=key)
    return dataclasses.replace(problem, epilogue=key)


def planned(ns: argparse.Namespace, ops: list[str], dtypes: list[str], archs: list[str], config: ConfigSnapshot
            ) -> list[prewarm.PlannedProblem]:
    """What prewarm builds with --epilogue / --elementwise: with --shape the plans of those forwards, else the
    representative problems with the epilogue (or problems_for's of the program)."""
    ops = ops if ns.op else ([ELEMENTWISE] if ns.elementwise else list(EPILOGUE_FAMILIES))
    check_ops(ns, ops)
    out = []
    if ns.shape or (ns.elementwise and ns.operand):
        settings = RunSettings.of(config)
        for op in ops:
            for shape in (parse_shapes(ns.shape) if ns.shape else [None]):
                for dtype in dtypes:
                    operator, args, kwargs = recipe(ns, op, dtype, shape, fake_maker(dtype))
                    for arch in archs:
                        plan, target = plan_of(operator, settings, args, kwargs, arch)
                        out.append(prewarm.PlannedProblem(op, operator.problem(*args, **kwargs), target, plan))
        return out
    targets = [named(a) for a in archs]
    for op in ops:
        if ns.elementwise:
            family = expression.family(ns.elementwise)
            problems = [p for dt in dtypes for p in expression.problems_for(ns.elementwise, dt)]
        else:
            family, key = FAMILIES[op][0].family, epilogue.make_key(parse_epilogue(ns.epilogue), kinds(ns))
            problems = [_with_epilogue(p, key) for p in family.problems() if p.dtype in dtypes]
        out += [prewarm.PlannedProblem(op, p, t, family.default_plan(p, config, t)) for p in problems for t in targets]
    return out


def generated(operator: Any, args: tuple, kwargs: dict) -> list[str]:
    """The generated C of a fused forward: its epilogue's line, or an elementwise program's statements (explain)."""
    scalar = "float" if operator.dtype.itemsize == 4 else "double"
    program = getattr(operator, "program", None)
    if program is not None:
        loads = {name: f"cj_in{k}" for k, name in enumerate(program.inputs)}
        return generate_program(program, loads, scalar).body.split("\n")
    problem = operator.problem(*args, **kwargs)
    key = getattr(getattr(problem, "gemm", problem), "epilogue", "")
    return [epilogue.line(key, scalar)] if key else []
