"""User epilogues on the product kernels, as data: (expression, operand kinds, scalar type) -> template parameter
and kernel arguments (CUTLASS's epilogue visitor tree, in the small).

A problem carries its epilogue as one string, the key `cuopjit.expr.epilogue_key` makes: the canonical tree
and each operand's kind, e.g. 'gelu((acc+bias))|bias:per_column' ("" = the kernel's own alpha/beta epilogue).
So the meaning, not the spelling, enters the plan, the kernel's name and the cache key. From the key:

    code(key, scalar, staged)  the template parameter `epilogue` (EpilogueCode): the helper prelude, one C
                          expression over the functor's loads (one output), the same over a run of outputs
                          whose operands were loaded first (`vexpr`: element cj_k of the arrays the functor's
                          `apply` fills, 16-byte loads where they line up), each operand's kind, whether it reads
                          `c`; templates/common/epilogue.cuh.jinja turns it into the functor every store site calls.
                          `staged`: the kernel may bring the output-shaped operands into shared memory (the wgmma
                          Conv2D's TMA-staged residual), so those are read with generic loads, not ld.global.nc
    args(key, first)      the kernel arguments it adds: ptr(first), ptr(first + 1), ... one per operand in
                          the expression's order (a tensor's pointer, or a Python number's bits: the plan's
                          per-call slots, so a new number neither re-plans nor recompiles)
    tag(key)              the kernel-name suffix ('_e' and 8 hex digits of the key's sha256)
    operand_names(key)    the operands in argument order

The operator side (set_epilogue, binding operands, inferring kinds) is epilogue_operator.py.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Mapping

from ..expr import FULL, PER_COLUMN, PER_ROW, SCALAR, ExpressionError, epilogue_key, generate, parse_epilogue
from ..expr.parse import Expression
from ..run.plan import Arg, ptr

_LOADS = {SCALAR: "cj_s{k}", PER_COLUMN: "__ldg(cj_p{k} + cj_col)", PER_ROW: "__ldg(cj_p{k} + cj_row)",
          FULL: "__ldg(cj_p{k} + cj_full)"}
_STAGED_FULL = "cj_p{k}[cj_full]"


def full_count(key: str) -> int:
    """How many of the key's operands are output-shaped ("full")."""
    return kinds_of(key).count(FULL)


@dataclass(frozen=True)
class EpilogueCode:
    """The template parameter `epilogue`: what templates/common/epilogue.cuh.jinja renders. Its str() is the key
    (what a kernel's header comment and the cache entry's parameters show)."""
    key: str
    prelude: tuple[str, ...]
    expr: str
    operands: tuple[str, ...]     # each operand's kind, in argument order
    reads_c: bool
    vexpr: str                    # element cj_k of a run: acc v[cj_k], c cj_cv[cj_k], operand k cj_o<k>[cj_k] / cj_s<k>
    staged: bool = False          # output-shaped operands by generic loads (shared memory or global)

    def __str__(self) -> str:
        return self.key

    __repr__ = __str__


def make_key(expr: Expression, kinds: Mapping[str, str]) -> str:
    """The key of `expr` with these operand kinds (ExpressionError for a missing, unused or unknown one)."""
    return epilogue_key(expr, kinds)


@functools.lru_cache(maxsize=256)
def split(key: str) -> tuple[Expression, tuple[tuple[str, str], ...]]:
    """(the expression, ((operand, kind), ...) in argument order) of a key."""
    text, *pairs = key.split("|")
    expr = parse_epilogue(text)
    kinds = tuple(tuple(p.split(":", 1)) for p in pairs)
    if make_key(expr, dict(kinds)) != key:
        raise ExpressionError(f"{key!r} is not an epilogue key; make one with cuopjit.expr.epilogue_key")
    return expr, kinds


def operand_names(key: str) -> tuple[str, ...]:
    """The operands of a key, in argument order (none for "")."""
    return tuple(name for name, _ in split(key)[1]) if key else ()


def kinds_of(key: str) -> tuple[str, ...]:
    """Each operand's kind, in argument order."""
    return tuple(kind for _, kind in split(key)[1]) if key else ()


@functools.lru_cache(maxsize=256)
def code(key: str, scalar: str, staged: bool = False) -> EpilogueCode:
    """The template parameter of `key` in `scalar` ('float' or 'double'); `staged`: output-shaped operands may
    lie in shared memory (read by generic loads)."""
    expr, kinds = split(key)
    loads = {"acc": "cj_acc", "c": "cj_c"}
    loads.update({name: (_STAGED_FULL if staged and kind == FULL else _LOADS[kind]).format(k=k)
                  for k, (name, kind) in enumerate(kinds)})
    gen = generate(expr, loads, scalar)
    run = {"acc": "v[cj_k]", "c": "cj_cv[cj_k]"}
    run.update({name: f"cj_s{k}" if kind == SCALAR else f"cj_o{k}[cj_k]" for k, (name, kind) in enumerate(kinds)})
    return EpilogueCode(key, tuple(line for line in gen.prelude.split("\n") if line), gen.expr,
                        tuple(kind for _, kind in kinds), "c" in expr.names, generate(expr, run, scalar).expr, staged)


def args(key: str, first: int) -> tuple[Arg, ...]:
    """The kernel arguments of the key's operands: the call's pointers first, first + 1, ..."""
    return tuple(ptr(first + k) for k in range(len(operand_names(key))))


def tag(key: str) -> str:
    """'_e1a2b3c4d': a readable kernel name's mark of its epilogue ("" for none)."""
    return f"_e{hashlib.sha256(key.encode()).hexdigest()[:8]}" if key else ""


def add(params: dict, key: str, scalar: str, staged: bool = False) -> dict:
    """`params` with the template parameter `epilogue` for `key` (unchanged for "": the kernel renders as it did);
    `staged` as code's."""
    if key:
        params["epilogue"] = code(key, scalar, staged)
    return params


def line(key: str, scalar: str) -> str:
    """The generated C of one output value, for `explain`: 'out = <expression>;' over the functor's loads."""
    return f"out = {code(key, scalar).expr};" if key else ""
