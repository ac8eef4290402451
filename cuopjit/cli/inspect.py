"""The inspection commands: `cuopjit show` output (CUDA C, --ptx, --sass, --json) and `cuopjit explain`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from ..build import disasm, pipeline
from .args import archs_from, config_from
from ..config import JITConfig
from ..run.plan import KernelLaunch
from ..prewarm import DTYPES
from ..recipes import SHAPES, parse_shape
from ..explain import explain_family


def _header(kl: KernelLaunch) -> str:
    return (f"// {kl.spec.name}: {kl.units}; grid {kl.grid}, block {kl.block}, {kl.shared} B dynamic shared memory"
            + (f", cluster {kl.cluster}" if kl.cluster != (1, 1, 1) else ""))


def print_kernels(shown: list[tuple[pipeline.KernelSpec, KernelLaunch]], arch: str, ns: argparse.Namespace) -> None:
    """`cuopjit show`: each kernel's CUDA C (default), PTX (--ptx) or SASS (--sass), or all of it as JSON (--json)."""
    if ns.sass and disasm.sass_tool() is None:
        print(f"note: {disasm.NO_SASS}", file=sys.stderr if ns.json else sys.stdout)
        if not (ns.json or ns.ptx):
            return
    rows = []
    for spec, kl in shown:
        row = {"name": spec.name, "kernel": spec.kernel, "template": spec.template, "arch": arch,
               "params": {k: v for k, v in spec.params}, "optimization_level": spec.optimization_level,
               "max_registers": spec.max_registers, "grid": list(kl.grid), "block": list(kl.block),
               "dynamic_shared": kl.shared, "cluster": list(kl.cluster), "units": kl.units}
        if ns.ptx:
            row["ptx"] = disasm.ptx(spec, arch)
        if ns.sass:
            row["sass"] = disasm.sass(spec, arch)
        if not (ns.ptx or ns.sass) or ns.json:
            row["source"] = pipeline.source(spec)
        rows.append(row)
    if ns.json:
        print(json.dumps({"arch": arch, "kernels": rows}, indent=1, default=str))
        return
    for (spec, kl), row in zip(shown, rows):
        print(_header(kl))
        for key in ("source", "ptx", "sass"):
            if row.get(key):
                print(row[key])


def add_explain(sub, config_args: Callable, families: list[str]) -> None:
    """Register `cuopjit explain`."""
    shapes = "; ".join(f"{op}: {meaning}" for op, (meaning, _, _) in SHAPES.items())
    p = sub.add_parser("explain", help="the kernel an operator runs for a shape, why, its resources and speed",
                       description="Which kernel a forward runs and why (heuristic, tuning record, user config), its "
                                   "registers, shared memory, spills and occupancy, and with a GPU its measured "
                                   "time against the roofline.")
    p.add_argument("op", help=f"operator family: {', '.join(families)}")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--shape", help=f"the problem (default: the family's); {shapes}")
    p.add_argument("--arch", help="plan for this named target, statically (default: the GPU, else sm_90)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-measure", action="store_true", help="do not time the forward on the GPU")
    p.add_argument("--runs", type=int, default=50, help="timed forwards (median reported)")
    config_args(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(ns: argparse.Namespace) -> int:
    """Print the explanation of one family's forward (text or --json)."""
    arch = archs_from([ns.arch])[0] if ns.arch else None
    if ns.runs < 1:
        raise ValueError(f"--runs {ns.runs}: give 1 or more")
    config: JITConfig = config_from(ns)
    e = explain_family(ns.op, ns.dtype, parse_shape(ns.shape) if ns.shape else None, arch, config,
                       not ns.no_measure, ns.runs)
    print(json.dumps(e.as_dict(), indent=1) if ns.json else e)
    return 0
