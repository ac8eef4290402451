"""The `cuopjit` command: prewarm the cache (no GPU needed), show generated source, inspect the cache."""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from . import compiler, kernels, prewarm, target
from .config import JITConfig, get_default_global_jit_config
from .errors import CompileError, CuopjitError
from .ops import FAMILIES
from .prewarm import DTYPES


def _config_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("kernel configuration (JITConfig fields)")
    g.add_argument("--kernel-type", default="auto")
    g.add_argument("--tile-size", type=int, default=0)
    g.add_argument("--block-size", type=int, default=0)
    g.add_argument("--optimization-level", default="O3", choices=("O0", "O1", "O2", "O3"))
    g.add_argument("--max-registers", type=int, default=0)
    g.add_argument("--tensor-core", action="store_true", help="enable_tensor_core=True")
    g.add_argument("--tma", action="store_true", help="enable_tma=True")
    g.add_argument("--no-unroll", action="store_true", help="enable_loop_unroll=False")
    g.add_argument("--no-coalescing", action="store_true", help="enable_memory_coalescing=False")
    g.add_argument("--no-shared-memory-opt", action="store_true", help="enable_shared_memory_opt=False")


def _config(ns: argparse.Namespace) -> JITConfig:
    cfg = JITConfig()
    cfg.kernel_type, cfg.tile_size, cfg.block_size = ns.kernel_type, ns.tile_size, ns.block_size
    cfg.optimization_level, cfg.max_registers = ns.optimization_level, ns.max_registers
    cfg.enable_tensor_core = ns.tensor_core
    cfg.enable_tma = ns.tma
    cfg.enable_loop_unroll = not ns.no_unroll
    cfg.enable_memory_coalescing = not ns.no_coalescing
    cfg.enable_shared_memory_opt = not ns.no_shared_memory_opt
    return cfg


def _archs(text: str | None) -> list[str]:
    if not text:
        from .config import environment
        text = environment().arch
    if not text:
        raise ValueError("name the target architectures, e.g. --arch sm_80,sm_90 (or set CUOPJIT_ARCH)")
    archs = [a.strip() for a in text.split(",") if a.strip()]
    known = compiler.supported_archs()
    for a in archs:
        if a not in known:
            raise ValueError(f"--arch {a} is not a target this NVRTC ({compiler.nvrtc_version()}) knows: "
                             f"choose from {', '.join(known)}")
        target.named(a)
    return archs


def cmd_prewarm(ns: argparse.Namespace) -> int:
    """Build the kernels of every representative plan for each --arch: what forward runs on such a GPU."""
    archs = _archs(ns.arch)
    if ns.cache_dir:
        get_default_global_jit_config().cache_dir = ns.cache_dir
    planned = prewarm.representative_plans(ns.op, ns.dtype, archs, _config(ns).snapshot())
    todo = prewarm.kernels_to_build(planned)
    jobs = ns.jobs or get_default_global_jit_config().max_compilation_threads
    start, done, cached = time.perf_counter(), 0, 0

    def one(item):
        return item, kernels.build(*item)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for (spec, arch), (_, info) in pool.map(one, todo):
            done += 1
            cached += info.cache_hit
            state = "cached" if info.cache_hit else f"compiled in {info.seconds * 1e3:.0f} ms"
            if not ns.quiet:
                print(f"[{done}/{len(todo)}] {spec.name} {arch}: {state}", flush=True)
    print(f"prewarmed {len(todo)} kernels for {', '.join(archs)} in {time.perf_counter() - start:.1f} s: "
          f"{len(todo) - cached} compiled, {cached} already cached "
          f"({get_default_global_jit_config().resolved_cache_dir()})")
    if getattr(ns, "bundle", None):
        from .cache import get_cache
        get_cache().export_bundle(ns.bundle)
        print(f"bundle written to {ns.bundle}")
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    """The CUDA C of the kernels an operator runs for its representative problems on --arch (default sm_90)."""
    archs = _archs(ns.arch or "sm_90")
    planned = prewarm.representative_plans([ns.op], [ns.dtype], archs[:1], _config(ns).snapshot())
    shown = []
    for p in planned:
        for kl in p.plan.launches:
            if kl.spec not in [s for s, _ in shown]:
                shown.append((kl.spec, kl))
    for spec, kl in shown if ns.all else shown[:1]:
        print(f"// {spec.name}: {kl.units}; grid {kl.grid}, block {kl.block}, {kl.shared} B dynamic shared memory"
              + (f", cluster {kl.cluster}" if kl.cluster != (1, 1, 1) else ""))
        print(kernels.source(spec))
    return 0


def cmd_info(ns: argparse.Namespace) -> int:
    from .system import print_system_info
    print_system_info()
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .cli_cache import add_cache_commands
    parser = argparse.ArgumentParser(prog="cuopjit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prewarm", help="compile kernels into the cache (no GPU needed)")
    p.add_argument("--arch", help="comma-separated targets, e.g. sm_80,sm_90 (default: CUOPJIT_ARCH)")
    p.add_argument("--op", action="append", help=f"operator family (repeatable): {', '.join(FAMILIES)}")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable; default: both")
    p.add_argument("--jobs", type=int, default=0, help="parallel compiles (default: max_compilation_threads)")
    p.add_argument("--cache-dir", help="cache directory (default: CUOPJIT_CACHE_DIR or the user cache dir)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--bundle", metavar="FILE", help="also write the cache into a portable bundle (cuopjit cache import)")
    _config_args(p)
    p.set_defaults(func=cmd_prewarm)

    p = sub.add_parser("show", help="print the generated CUDA C of an operator")
    p.add_argument("op", help=f"operator family: {', '.join(FAMILIES)}")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--all", action="store_true", help="every kernel the operator may use, not just the first")
    p.add_argument("--arch", help="the target to plan for (default sm_90)")
    _config_args(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("info", help="versions, NVRTC targets, cache directory, devices")
    p.set_defaults(func=cmd_info)

    add_cache_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns) or 0
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, as other CLIs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError, CuopjitError, OSError) as exc:
        text = str(exc).strip() or type(exc).__name__
        if not isinstance(exc, CompileError):  # a compile error's log and excerpt are the point
            text = text.splitlines()[0]
        print(f"cuopjit {ns.command}: error: {text}", file=sys.stderr)
        return 2 if isinstance(exc, (ValueError, TypeError)) else 1


if __name__ == "__main__":
    sys.exit(main())
