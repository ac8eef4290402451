"""`cuopjit prewarm`: build the kernels forward will ask for on the named architectures, with no GPU.

By default every requested family's representative problems are planned for each --arch; with
--shape (and --op) the plans of those shapes instead; with --epilogue / --elementwise the fused kernels
(cuopjit/cli/fusion.py). Each cubin is built once (kernels_to_build).
Progress: on a terminal one line redrawn in place; otherwise a plain line at each tenth; --verbose
prints a line per kernel, --quiet only the summary.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from .. import prewarm
from ..build import compiler, pipeline
from ..cache import KernelCache, get_cache
from ..cache.access import advice
from ..cache.bundle import check_output
from ..config import RunSettings, get_default_global_jit_config
from ..errors import CuopjitError
from ..listing import plan_of
from ..ops import FAMILIES
from ..recipes import build, fake_maker, parse_shapes, shape_help
from . import fusion
from .args import archs_from, config_args, config_from, fusion_args, selection


class Progress:
    """prewarm's progress on `out`: 'bar' (a terminal: one line, redrawn with \\r), 'tenths' (a plain line
    at each tenth), 'lines' (a line per kernel) or 'quiet'."""

    WIDTH = 24

    def __init__(self, total: int, mode: str, out: TextIO):
        self.total, self.mode, self.out = total, mode, out
        self.done = self.compiled = 0
        self._tenth = 0

    def update(self, spec: pipeline.KernelSpec, arch: str, info: pipeline.BuildInfo) -> None:
        """Count one built kernel and show it as the mode says."""
        self.done += 1
        self.compiled += not info.cache_hit
        if self.mode == "lines":
            state = "cached" if info.cache_hit else f"compiled in {info.seconds * 1e3:.0f} ms"
            print(f"[{self.done}/{self.total}] {spec.name} {arch}: {state}", file=self.out, flush=True)
        elif self.mode == "bar":
            line = f"\r{self._bar()} {spec.name} {arch}"
            width = shutil.get_terminal_size().columns - 1
            print(f"{line[:width + 1]:<{width + 1}}", end="", file=self.out, flush=True)
        elif self.mode == "tenths" and self.done * 10 // self.total > self._tenth:
            self._tenth = self.done * 10 // self.total
            print(self._bar(), file=self.out, flush=True)

    def _bar(self) -> str:
        filled = self.WIDTH * self.done // max(self.total, 1)
        return (f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} kernels "
                f"({self.compiled} compiled)")

    def close(self) -> None:
        """End the redrawn line (the summary follows on a line of its own)."""
        if self.mode == "bar" and self.done:
            print(f"\r{self._bar():<{shutil.get_terminal_size().columns - 1}}", file=self.out, flush=True)


def progress_mode(ns: argparse.Namespace, out: TextIO) -> str:
    """--quiet, --verbose, else a bar on a terminal and tenths elsewhere."""
    if ns.quiet:
        return "quiet"
    if ns.verbose:
        return "lines"
    return "bar" if out.isatty() else "tenths"


def _checks(ns: argparse.Namespace) -> KernelCache:
    """Refuse before compiling anything: a bad --jobs, a cache that cannot take entries, an unwritable --bundle."""
    if ns.jobs < 0:
        raise ValueError(f"--jobs {ns.jobs} is not allowed: give the number of parallel compiles, 1 or more "
                         "(0: max_compilation_threads)")
    if ns.quiet and ns.verbose:
        raise ValueError("--quiet and --verbose contradict each other: give one")
    cache = get_cache()
    if problem := cache.problem():
        raise CuopjitError(f"nothing can be prewarmed: {problem}; {advice(problem)}")
    if ns.bundle:
        check_output(ns.bundle)
    return cache


def planned(ns: argparse.Namespace, archs: list[str]) -> list[prewarm.PlannedProblem]:
    """The plans to build: the representative problems, or with --shape those shapes, of each op, dtype, arch."""
    ops, dtypes = selection(ns)
    config = config_from(ns).snapshot()
    if ns.shape and not ns.op:
        raise ValueError("--shape needs --op: what a shape means depends on the family (see --help)")
    if fusion.wanted(ns):
        return fusion.planned(ns, ops, dtypes, archs, config)
    if not ns.shape:
        return prewarm.representative_plans(ops, dtypes, archs, config)
    settings, out = RunSettings.of(config), []
    for op in ops:
        for shape in parse_shapes(ns.shape):
            for dtype in dtypes:
                operator, args, kwargs = build(op, dtype, shape, fake_maker(dtype))
                for arch in archs:
                    plan, target = plan_of(operator, settings, args, kwargs, arch)
                    out.append(prewarm.PlannedProblem(op, operator.problem(*args, **kwargs), target, plan))
    return out


def summary(ns: argparse.Namespace, cache: KernelCache, archs: list[str], infos: list[pipeline.BuildInfo],
            seconds: float) -> int:
    """Print what was compiled, found and stored; fail when a compiled kernel did not reach the cache."""
    compiled = [i for i in infos if not i.cache_hit]
    stored = sum(i.stored for i in compiled)
    print(f"prewarmed {len(infos)} kernels for {', '.join(archs)} in {seconds:.1f} s: {len(compiled)} compiled, "
          f"{len(infos) - len(compiled)} already cached; {stored} stored in {cache.directory}")
    if stored < len(compiled):
        problem = cache.problem()
        raise CuopjitError(f"{len(compiled) - stored} of {len(compiled)} compiled kernels could not be stored: "
                           f"{problem or 'see the warnings above'}; {advice(problem)}")
    if ns.bundle:
        result = cache.export_bundle(ns.bundle, keys={i.key for i in infos})
        print(f"bundle written to {ns.bundle} ({result.entries} entries)")
    return 0


def cmd_prewarm(ns: argparse.Namespace) -> int:
    """Build the kernels of every planned problem for each --arch: what forward runs on such a GPU."""
    archs = archs_from(ns.arch)
    if ns.cache_dir:
        get_default_global_jit_config().cache_dir = ns.cache_dir
    cache = _checks(ns)
    todo = prewarm.kernels_to_build(planned(ns, archs))
    jobs = ns.jobs or get_default_global_jit_config().max_compilation_threads
    progress = Progress(len(todo), progress_mode(ns, sys.stdout), sys.stdout)
    start, infos = time.perf_counter(), []

    def one(item):
        return pipeline.build(*item)[1]

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for (spec, arch), info in zip(todo, pool.map(one, todo)):
                infos.append(info)
                progress.update(spec, arch, info)
    finally:
        progress.close()
    return summary(ns, cache, archs, infos, time.perf_counter() - start)


def add_prewarm(sub) -> None:
    """Register `cuopjit prewarm`."""
    p = sub.add_parser("prewarm", help="compile kernels into the cache (no GPU needed)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shape_help())
    p.add_argument("--arch", action="append", help=f"targets, comma-separated or repeated, e.g. sm_80,sm_90 "
                                                   f"(minimum {compiler.MIN_ARCH}; default: CUOPJIT_ARCH)")
    p.add_argument("--op", action="append", help=f"operator families, comma-separated or repeated: "
                                                 f"{', '.join(FAMILIES)} (default: all)")
    p.add_argument("--dtype", action="append", help="float32, float64, float16, bfloat16, comma-separated or "
                                                    "repeated (default: float32,float64)")
    p.add_argument("--shape", action="append", help="build the kernels forward runs for this shape (repeatable; "
                                                    "needs --op) instead of the representative problems")
    p.add_argument("--jobs", type=int, default=0, help="parallel compiles (default: max_compilation_threads)")
    p.add_argument("--cache-dir", help="cache directory (default: CUOPJIT_CACHE_DIR or the user cache dir)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--verbose", action="store_true", help="print a line per kernel (compiled or cached, how long)")
    p.add_argument("--bundle", metavar="FILE", help="also write the kernels this prewarm built or found into a "
                                                    "portable bundle (for cuopjit cache import)")
    config_args(p)
    fusion_args(p)
    p.set_defaults(func=cmd_prewarm)
