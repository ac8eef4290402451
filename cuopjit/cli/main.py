"""The `cuopjit` command: prewarm the cache (no GPU needed), show generated source, PTX or SASS, explain a
kernel choice, benchmark against PyTorch, inspect the cache."""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from ..build import compiler, pipeline
from .args import archs_from, config_args, config_from, selection
from .. import prewarm
from .._version import __version__
from ..cache import KernelCache, get_cache
from ..cache.access import FIX
from ..cache.bundle import check_output
from ..config import get_default_global_jit_config
from ..errors import CompileError, CuopjitError
from ..ops import FAMILIES
from ..prewarm import DTYPES
from .inspect import add_explain, print_kernels
from .info import print_system_info
from .cache import add_cache_commands
from .bench import add_bench
from .tune import add_tune


def _prewarm_checks(ns: argparse.Namespace) -> KernelCache:
    """Refuse before compiling anything: a bad --jobs, a cache that cannot take entries, an unwritable --bundle."""
    if ns.jobs < 0:
        raise ValueError(f"--jobs {ns.jobs} is not allowed: give the number of parallel compiles, 1 or more "
                         "(0: max_compilation_threads)")
    cache = get_cache()
    if problem := cache.problem():
        raise CuopjitError(f"nothing can be prewarmed: {problem}; {FIX}")
    if ns.bundle:
        check_output(ns.bundle)
    return cache


def _prewarm_summary(ns: argparse.Namespace, cache: KernelCache, archs: list[str], infos: list[pipeline.BuildInfo],
                     seconds: float) -> int:
    """Print what was compiled, found and stored; fail when a compiled kernel did not reach the cache."""
    compiled = [i for i in infos if not i.cache_hit]
    stored = sum(i.stored for i in compiled)
    print(f"prewarmed {len(infos)} kernels for {', '.join(archs)} in {seconds:.1f} s: {len(compiled)} compiled, "
          f"{len(infos) - len(compiled)} already cached; {stored} stored in {cache.directory}")
    if stored < len(compiled):
        raise CuopjitError(f"{len(compiled) - stored} of {len(compiled)} compiled kernels could not be stored: "
                           f"{cache.problem() or 'see the warnings above'}; {FIX}")
    if ns.bundle:
        result = cache.export_bundle(ns.bundle, keys={i.key for i in infos})
        print(f"bundle written to {ns.bundle} ({result.entries} entries)")
    return 0


def cmd_prewarm(ns: argparse.Namespace) -> int:
    """Build the kernels of every representative plan for each --arch: what forward runs on such a GPU."""
    archs = archs_from(ns.arch)
    if ns.cache_dir:
        get_default_global_jit_config().cache_dir = ns.cache_dir
    cache = _prewarm_checks(ns)
    ops, dtypes = selection(ns)
    todo = prewarm.kernels_to_build(prewarm.representative_plans(ops, dtypes, archs, config_from(ns).snapshot()))
    jobs = ns.jobs or get_default_global_jit_config().max_compilation_threads
    start, done, infos = time.perf_counter(), 0, []

    def one(item):
        return item, pipeline.build(*item)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for (spec, arch), (_, info) in pool.map(one, todo):
            done += 1
            infos.append(info)
            state = "cached" if info.cache_hit else f"compiled in {info.seconds * 1e3:.0f} ms"
            if not ns.quiet:
                print(f"[{done}/{len(todo)}] {spec.name} {arch}: {state}", flush=True)
    return _prewarm_summary(ns, cache, archs, infos, time.perf_counter() - start)


def cmd_show(ns: argparse.Namespace) -> int:
    """The CUDA C of the kernels an operator runs for its representative problems on --arch (default sm_90)."""
    archs = archs_from(ns.arch or ["sm_90"])
    planned = prewarm.representative_plans([ns.op], [ns.dtype], archs[:1], config_from(ns).snapshot())
    shown = []
    for p in planned:
        for kl in p.plan.launches:
            if kl.spec not in [s for s, _ in shown]:
                shown.append((kl.spec, kl))
    print_kernels(shown if ns.all else shown[:1], archs[0], ns)
    return 0


def cmd_info(ns: argparse.Namespace) -> int:
    print_system_info()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cuopjit", description=__doc__)
    parser.add_argument("--version", action="version", version=f"cuopjit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prewarm", help="compile kernels into the cache (no GPU needed)")
    p.add_argument("--arch", action="append", help=f"targets, comma-separated or repeated, e.g. sm_80,sm_90 "
                                                   f"(minimum {compiler.MIN_ARCH}; default: CUOPJIT_ARCH)")
    p.add_argument("--op", action="append", help=f"operator families, comma-separated or repeated: "
                                                 f"{', '.join(FAMILIES)} (default: all)")
    p.add_argument("--dtype", action="append", help="float32, float64, comma-separated or repeated (default: both)")
    p.add_argument("--jobs", type=int, default=0, help="parallel compiles (default: max_compilation_threads)")
    p.add_argument("--cache-dir", help="cache directory (default: CUOPJIT_CACHE_DIR or the user cache dir)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--bundle", metavar="FILE", help="also write the kernels this prewarm built or found into a "
                                                    "portable bundle (for cuopjit cache import)")
    config_args(p)
    p.set_defaults(func=cmd_prewarm)

    p = sub.add_parser("show", help="print the generated CUDA C of an operator")
    p.add_argument("op", help=f"operator family: {', '.join(FAMILIES)}")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--all", action="store_true", help="every kernel the operator may use, not just the first")
    p.add_argument("--arch", action="append", help="the target to plan for (default sm_90)")
    p.add_argument("--ptx", action="store_true", help="print the PTX instead of the CUDA C")
    p.add_argument("--sass", action="store_true", help="print the SASS (needs nvdisasm or cuobjdump)")
    p.add_argument("--json", action="store_true", help="print JSON: launch geometry, source, and PTX/SASS if asked")
    config_args(p)
    p.set_defaults(func=cmd_show)

    add_explain(sub, config_args, list(FAMILIES))
    add_bench(sub)
    add_tune(sub, config_args, config_from)

    p = sub.add_parser("info", help="versions, NVRTC targets, cache directory, devices")
    p.set_defaults(func=cmd_info)

    add_cache_commands(sub)
    return parser


def _reason(exc: BaseException) -> str:
    """The one line (a compile error: the whole log) that tells the user what went wrong."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, CompileError) else text.splitlines()[0]  # a compile log is the point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `cuopjit` command; returns the exit status (2: bad input, 1: failure, 130: interrupted)."""
    command = "cuopjit"
    try:
        ns = build_parser().parse_args(argv)
        command = f"cuopjit {ns.command}"
        return ns.func(ns) or 0
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, as other CLIs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError, CuopjitError, OSError) as exc:
        print(f"{command}: error: {_reason(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (ValueError, TypeError)) else 1


if __name__ == "__main__":
    sys.exit(main())
