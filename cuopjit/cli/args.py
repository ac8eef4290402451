"""Argument parsing shared by the `cuopjit` commands: JITConfig options, --op/--dtype, --arch, fused kernels."""
from __future__ import annotations

import argparse
import re
import sys
from typing import Sequence

from .. import prewarm, target
from ..build import compiler
from ..config import JITConfig, environment, split_list
from ..prewarm import DTYPES


def config_args(p: argparse.ArgumentParser) -> None:
    """The JITConfig fields as options (prewarm, show, explain, tune, bench)."""
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
    g.add_argument("--precision", default="tf32", help="float32 tensor-core products: tf32 or 3xtf32")


def fusion_args(p: argparse.ArgumentParser) -> None:
    """--epilogue, --elementwise and --operand (prewarm, show, explain; cuopjit/cli/fusion.py)."""
    g = p.add_argument_group("fused kernels (no GPU needed)")
    g.add_argument("--epilogue", metavar="EXPR",
                   help="a user epilogue on gemm, matmul, batchmatmul or conv2d, e.g. 'gelu(acc + bias)'")
    g.add_argument("--elementwise", metavar="PROGRAM",
                   help="an elementwise program (family elementwise), e.g. 'out = relu(x * scale + shift)'")
    g.add_argument("--operand", action="append", metavar="NAME=VALUE",
                   help="--epilogue: an operand's kind (scalar, per_column, per_row, full; default per_column); "
                        "--elementwise: an input's shape, or scalar (a Python number); repeatable")


def config_from(ns: argparse.Namespace) -> JITConfig:
    """The JITConfig the config options describe (each field validated as it is assigned)."""
    cfg = JITConfig()
    cfg.kernel_type, cfg.tile_size, cfg.block_size = ns.kernel_type, ns.tile_size, ns.block_size
    cfg.optimization_level, cfg.max_registers = ns.optimization_level, ns.max_registers
    cfg.enable_tensor_core = ns.tensor_core
    cfg.enable_tma = ns.tma
    cfg.enable_loop_unroll = not ns.no_unroll
    cfg.enable_memory_coalescing = not ns.no_coalescing
    cfg.enable_shared_memory_opt = not ns.no_shared_memory_opt
    cfg.precision = ns.precision
    return cfg


def selection(ns: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The --op and --dtype values (comma lists too, repeatable; default every family, float32 and float64).
    Unknown names raise with the known ones, and so does a dtype a family named by --op has no kernels of.
    Without --op, a family is kept for the dtypes it has (one note on stderr names the others)."""
    named, dtypes = split_list(ns.op), split_list(ns.dtype) or list(DTYPES)
    ops = prewarm.check_ops(named)
    prewarm.check_dtypes(ops if named else [], dtypes)
    if not named:
        if note := prewarm.without(ops, dtypes):
            print(f"note: {note}", file=sys.stderr)
        ops = [op for op in ops if set(dtypes) & set(prewarm.family_dtypes(op))]
    return ops, dtypes


def suggestion(value: str, known: Sequence[str]) -> str | None:
    """The supported architecture a misspelt one means ('90', 'SM_90', 'compute_90', 'sm90', '9.0' -> 'sm_90';
    '90a' -> 'sm_90a'), or None."""
    m = re.fullmatch(r"(?:sm|compute|arch)?[_=-]?(\d)\.?(\d{1,2})([af]?)", value.strip().lower())
    guess = f"sm_{m.group(1)}{m.group(2)}{m.group(3)}" if m else None
    return guess if guess in known and guess != value else None


def archs_from(values: Sequence[str] | None) -> list[str]:
    """The --arch values (comma lists, repeatable), else CUOPJIT_ARCH; each must be a target cuopjit supports."""
    archs, source = split_list(values), "--arch"
    if not archs:   # CUOPJIT_ARCH as written (environment() keeps only well-formed names), to suggest the right one
        archs, source = split_list(dict(environment().variables).get("CUOPJIT_ARCH", "")), "CUOPJIT_ARCH"
    if not archs:
        raise ValueError("name the target architectures, e.g. --arch sm_80,sm_90 (or set CUOPJIT_ARCH)")
    known = compiler.supported_archs()
    for a in archs:
        if a in compiler.nvrtc_archs() and a not in known:
            raise ValueError(f"{source} {a} is older than {compiler.MIN_ARCH}, the oldest architecture cuopjit "
                             f"supports: choose from {', '.join(known)}")
        if meant := suggestion(a, known):
            raise ValueError(f"{source} {a} is not an architecture name: did you mean {meant}?")
        if a not in known:
            raise ValueError(f"{source} {a} is not a target this NVRTC ({compiler.nvrtc_version()}) knows: "
                             f"choose from {', '.join(known)}")
        target.named(a)
    return archs
