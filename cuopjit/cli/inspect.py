"""The inspection commands: `cuopjit show` (CUDA C, --ptx, --sass, --json) and `cuopjit explain`.

`show` prints through cuopjit.listing, as `cuopjit.show()` does from Python: the kernels of the plan
forward would run for --shape (default: the family's explain shape) on --arch (default sm_90), or
with --all every kernel of the family's representative problems (what prewarm builds). Both take
--epilogue / --elementwise (cuopjit/cli/fusion.py); explain then prints the generated epilogue line.
"""
from __future__ import annotations

import argparse
import json
from typing import Callable

from .. import listing, prewarm
from . import fusion
from .args import archs_from, config_from, fusion_args
from ..config import JITConfig, RunSettings
from ..prewarm import ALL_DTYPES
from ..recipes import SHAPES, build, check_shape, fake_maker, gpu_maker, parse_shape, shape_help
from ..explain import explain, explain_family
from ..jit import JITWrapper
from ..listing import target_for
from ..run.plan import KernelLaunch


def _what(ns: argparse.Namespace) -> list[str]:
    """The texts --ptx/--sass/--json ask for: the CUDA C unless only PTX or SASS is wanted (JSON has it always)."""
    what = [w for w, flag in (("ptx", ns.ptx), ("sass", ns.sass)) if flag]
    return ["cuda", *what] if ns.json or not what else what


def _launches(ns: argparse.Namespace, arch: str) -> list[KernelLaunch]:
    """The launches to print: the plan of --shape (or the default shape), or with --all one launch per kernel
    of every representative problem."""
    config = config_from(ns).snapshot()
    fused = fusion.wanted(ns)
    if ns.all:
        if ns.shape:
            raise ValueError("--all lists every kernel of the family's representative problems: leave out --shape "
                             "(or --all)")
        shown: dict = {}
        found = (fusion.planned(_all(ns), [ns.op], [ns.dtype], [arch], config) if fused
                 else prewarm.representative_plans([ns.op], [ns.dtype], [arch], config))
        for p in found:
            for kl in p.plan.launches:
                shown.setdefault(kl.spec, kl)
        return list(shown.values())
    prewarm.check_ops([ns.op])
    if fused:
        shape = parse_shape(ns.shape) if ns.shape else None
        operator, args, kwargs = fusion.recipe(ns, ns.op, ns.dtype, shape and check_fused(ns, shape), fake_maker(ns.dtype))
        return list(listing.plan_of(operator, RunSettings.of(config), args, kwargs, arch)[0].launches)
    shape = check_shape(ns.op, parse_shape(ns.shape)) if ns.shape else None
    if ns.op not in SHAPES:   # a family without a recipe: its first representative problem
        return list(prewarm.representative_plans([ns.op], [ns.dtype], [arch], config)[0].plan.launches)
    operator, args, kwargs = build(ns.op, ns.dtype, shape, fake_maker(ns.dtype))
    plan, _ = listing.plan_of(operator, RunSettings.of(config), args, kwargs, arch)
    return list(plan.launches)


def _all(ns: argparse.Namespace) -> argparse.Namespace:
    """`show --all`'s view of the fusion flags: the representative problems (no --shape)."""
    return argparse.Namespace(**{**vars(ns), "op": [ns.op], "shape": None})


def check_fused(ns: argparse.Namespace, shape: tuple[int, ...]) -> tuple[int, ...]:
    """--shape of a fused forward: the family's recipe grammar (--elementwise: the outputs' shape, any rank)."""
    return shape if ns.elementwise else check_shape(ns.op, shape)


def cmd_show(ns: argparse.Namespace) -> int:
    """Print the kernels (CUDA C, PTX, SASS or JSON) of one family's plan on --arch."""
    arch = archs_from(ns.arch or ["sm_90"])[0]
    what = listing.require(_what(ns))     # no disassembler for --sass: refused before anything is compiled
    rows = listing.rows(_launches(ns, arch), arch, what)
    if ns.json:
        print(json.dumps({"arch": arch, "kernels": rows}, indent=1, default=str))
    else:
        print(listing.text(rows), end="")
    return 0


def add_show(sub, config_args: Callable, families: list[str]) -> None:
    """Register `cuopjit show`."""
    p = sub.add_parser("show", help="print the generated CUDA C (PTX, SASS) of the kernels an operator runs",
                       description="The kernels of the plan a forward runs for --shape (default: the family's, as "
                                   "explain's) on --arch, without a GPU.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shape_help())
    p.add_argument("op", help=f"operator family: {', '.join(families)}")
    p.add_argument("--dtype", default="float32", choices=ALL_DTYPES)
    p.add_argument("--shape", help="the problem (default: the family's; per family below)")
    p.add_argument("--all", action="store_true", help="every kernel of the family's representative problems "
                                                      "(what prewarm builds) instead of one shape's plan")
    p.add_argument("--arch", action="append", help="the target to plan for (default sm_90)")
    p.add_argument("--ptx", action="store_true", help="print the PTX instead of the CUDA C")
    p.add_argument("--sass", action="store_true", help="print the SASS (needs nvdisasm or cuobjdump)")
    p.add_argument("--json", action="store_true", help="print JSON: launch geometry, source, and PTX/SASS if asked")
    config_args(p)
    fusion_args(p)
    p.set_defaults(func=cmd_show)


def add_explain(sub, config_args: Callable, families: list[str]) -> None:
    """Register `cuopjit explain`."""
    p = sub.add_parser("explain", help="the kernel an operator runs for a shape, why, its resources and speed",
                       description="Which kernel a forward runs and why (heuristic, tuning record, user config), its "
                                   "registers, shared memory, spills and occupancy, and with a GPU its measured "
                                   "time against the roofline.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shape_help())
    p.add_argument("op", help=f"operator family: {', '.join(families)}")
    p.add_argument("--dtype", default="float32", choices=ALL_DTYPES)
    p.add_argument("--shape", help="the problem (default: the family's; per family below)")
    p.add_argument("--arch", help="plan for this named target, statically (default: the GPU, else sm_90)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-measure", action="store_true", help="do not time the forward on the GPU")
    p.add_argument("--runs", type=int, default=50, help="timed forwards (median reported)")
    config_args(p)
    fusion_args(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(ns: argparse.Namespace) -> int:
    """Print the explanation of one family's forward (text or --json)."""
    arch = archs_from([ns.arch])[0] if ns.arch else None
    if ns.runs < 1:
        raise ValueError(f"--runs {ns.runs}: give 1 or more")
    config: JITConfig = config_from(ns)
    if not fusion.wanted(ns):
        e = explain_family(ns.op, ns.dtype, parse_shape(ns.shape) if ns.shape else None, arch, config,
                           not ns.no_measure, ns.runs)
        print(json.dumps(e.as_dict(), indent=1) if ns.json else e)
        return 0
    prewarm.check_ops([ns.op])
    live = target_for(arch)[1]
    shape = check_fused(ns, parse_shape(ns.shape)) if ns.shape else None
    operator, args, kwargs = fusion.recipe(ns, ns.op, ns.dtype, shape,
                                           gpu_maker(ns.dtype) if live else fake_maker(ns.dtype))
    wrapped = JITWrapper(operator)
    wrapped.set_jit_config(config)
    e = explain(wrapped, *args, arch=None if live else target_for(arch)[0].arch, measure=not ns.no_measure,
                runs=ns.runs, **kwargs)
    code = fusion.generated(operator, args, kwargs)
    if ns.json:
        print(json.dumps({**e.as_dict(), "generated": code}, indent=1))
    else:
        print("\n".join([str(e), *(f"  generated: {line}" for line in code)]))
    return 0
