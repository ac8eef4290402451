"""The text of the kernels a forward runs: the CUDA C, PTX or SASS of each launch of its plan, under a header.

`cuopjit.show(op, *args)`, `JITWrapper.get_kernel_source(*args)` and `cuopjit show` all go
through here: `plan_of` finds the plan a forward with these arguments would run, `rows` gathers
each launch's geometry and text, `text` prints them as the CLI does (a `// name: units; grid,
block, shared memory` header per launch; a module already printed is not printed again).

Planning needs no GPU. Without one, or with `arch`, the plan is made for a named target (default
sm_90) from the arguments' shapes, and the arguments may be NumPy arrays or shape tuples:
placeholders (tensors of no memory at aligned fake addresses) stand in for them, since planning
reads only shapes, dtypes, devices and alignment.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .build import disasm, pipeline
from .config import DEFAULT, RunSettings
from .device import driver
from .errors import CuopjitError
from .ops.base import Operator
from .prewarm import module_key
from .recipes import placeholder
from .run.plan import EMPTY, KernelLaunch, Plan
from .target import Target, named, of_device
from .operands import operands

WHAT = ("cuda", "ptx", "sass")
_KEYS = {"cuda": "source", "ptx": "ptx", "sass": "sass"}


def target_for(arch: str | None) -> tuple[Target, bool]:
    """(the target, whether it is the live device): `arch` names one; else the GPU's, else sm_90's datasheet."""
    live = arch is None and driver.device_count() > 0
    return (of_device(driver.current_ordinal()) if live else named(arch or "sm_90")), live


def placeholders(args: tuple, kwargs: dict, dtype: np.dtype) -> tuple[tuple, dict, bool]:
    """`args` and `kwargs` with each NumPy array replaced by a placeholder of its shape and dtype (the same
    array twice by the same placeholder: in place), and each positional shape tuple/list by a placeholder of
    `dtype`; and whether every operand was a real tensor already."""
    arrays, device = {}, driver.current_ordinal()

    def stand_in(a: Any, shapes: bool) -> Any:
        if isinstance(a, np.ndarray):
            if id(a) not in arrays:
                arrays[id(a)] = placeholder(a.shape, a.dtype, device)
            return arrays[id(a)]
        if shapes and isinstance(a, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in a):
            return placeholder(a, dtype, device)
        return a

    new_args = tuple(stand_in(a, True) for a in args)
    new_kwargs = {k: stand_in(v, False) for k, v in kwargs.items()}
    real = all(x is y for x, y in zip((*new_args, *new_kwargs.values()), (*args, *kwargs.values())))
    return new_args, new_kwargs, real


def plan_of(operator: Operator, settings: RunSettings, args: tuple, kwargs: dict, arch: str | None = None
            ) -> tuple[Plan, Target]:
    """The plan `operator.forward(*args, **kwargs)` under `settings` would run, and the target it is for.

    On the live GPU with real tensors this is forward's own choice (a tuning record, or auto-tuning, included);
    otherwise the family's first choice for the target. Arguments are checked as forward checks them."""
    target, live = target_for(arch)
    swapped = operands(args, kwargs)       # torch / CuPy / JAX arrays, read as Tensor views
    if swapped is not None:
        args, kwargs = swapped[0], swapped[1]
    args, kwargs, real = placeholders(args, kwargs, operator.dtype)
    problem = operator.problem(*args, **kwargs)
    if problem is None:
        return EMPTY, target
    if live and real:
        return operator._choose(problem, settings, target, args, kwargs), target
    return operator.family.default_plan(problem, settings.config, target), target


def require(what: Iterable[str]) -> list[str]:
    """The requested kinds of text, checked: each one of WHAT, and SASS only with a disassembler."""
    what = [what] if isinstance(what, str) else list(what)
    for w in what:
        if w not in WHAT:
            raise ValueError(f"what={w!r} is not one of {', '.join(map(repr, WHAT))}")
    if "sass" in what and disasm.sass_tool() is None:
        raise CuopjitError(disasm.NO_SASS)
    return what


def rows(launches: Iterable[KernelLaunch], arch: str, what: Iterable[str] = ("cuda",)) -> list[dict]:
    """Per launch: the kernel, its parameters, geometry and the requested text (source, ptx, sass).

    A module's PTX or SASS is made once however many of its entry points are launched."""
    what, made = require(what), {}
    out = []
    for kl in launches:
        spec = kl.spec
        row = {"name": spec.name, "kernel": spec.kernel, "template": spec.template, "arch": arch,
               "params": {k: v for k, v in spec.params}, "optimization_level": spec.optimization_level,
               "max_registers": spec.max_registers, "grid": list(kl.grid), "block": list(kl.block),
               "dynamic_shared": kl.shared, "cluster": list(kl.cluster), "units": kl.units}
        for w in WHAT:
            if w in what:
                key = (module_key(spec, arch), w)
                if key not in made:
                    made[key] = _text_of(spec, arch, w)
                row[_KEYS[w]] = made[key]
        out.append(row)
    return out


def _text_of(spec: pipeline.KernelSpec, arch: str, what: str) -> str:
    if what == "cuda":
        return pipeline.source(spec)
    if what == "ptx":
        return disasm.ptx(spec, arch)
    return disasm.sass(spec, arch)


def header(row: dict) -> str:
    """`// name: units; grid (x, y, z), block (x, y, z), N B dynamic shared memory[, cluster (...)]`."""
    cluster = tuple(row["cluster"])
    return (f"// {row['name']}: {row['units']}; grid {tuple(row['grid'])}, block {tuple(row['block'])}, "
            f"{row['dynamic_shared']} B dynamic shared memory" + (f", cluster {cluster}" if cluster != (1, 1, 1)
                                                                  else ""))


def text(rows_: list[dict]) -> str:
    """The rows as the CLI prints them: each launch's header, then its source, PTX and SASS (those present);
    a text already printed for an earlier launch (another entry point of the same module) is named, not repeated."""
    lines, printed = [], set()
    for row in rows_:
        lines.append(header(row))
        for key in ("source", "ptx", "sass"):
            body = row.get(key)
            if not body:
                continue
            if body in printed:
                lines.append(f"// ({key} as above: entry point {row['kernel']} of the same module)")
            else:
                printed.add(body)
                lines.append(body.rstrip("\n"))
    return "\n".join(lines) + "\n" if lines else ""


def kernel_text(operator: Operator, settings: RunSettings, args: tuple, kwargs: dict, arch: str | None = None,
                what: str = "cuda") -> str:
    """The text (`what`: "cuda", "ptx" or "sass") of every launch of the plan this forward would run."""
    what = require(what)
    plan, target = plan_of(operator, settings, args, kwargs, arch)
    if not plan.launches:
        return "// nothing to launch: the output is empty\n"
    return text(rows(plan.launches, target.arch, what))


def show(op: Any, *args: Any, arch: str | None = None, what: str = "cuda", **kwargs: Any) -> str:
    """The CUDA C (`what="ptx"`: PTX, `"sass"`: SASS) of every launch `op.forward(*args, **kwargs)` would run,
    each under the header `cuopjit show` prints.

    `op` is an operator or a JIT wrapper (its config applies). With a GPU and no `arch`: the plan forward
    runs there; otherwise the plan for `arch` (default sm_90). `args` may be Tensors, NumPy arrays or shape
    tuples (keyword operands: Tensors or arrays); weights must be set (without a GPU:
    `set_weight(cuopjit.listing.placeholder(shape, dtype))`)."""
    if isinstance(op, Operator):
        return kernel_text(op, DEFAULT, args, kwargs, arch, what)
    get_source = getattr(op, "get_kernel_source", None)
    if get_source is None:
        raise TypeError(f"show takes a cuopjit operator or JIT wrapper, got {type(op).__name__}")
    return get_source(*args, arch=arch, what=what, **kwargs)
