"""`cuopjit tune gemm --dtype float32 --shape 4096x4096x4096 --shape 1000,1000,1000` and
`cuopjit tune conv2d --shape 32,256,56,56,64,1,1 --stride 2 --layout channels_last`: time every choice of
each shape on this GPU and store one tuning record per choice in the cache, so that `cuopjit cache
export` carries tuning with the cubins and a later process (here, or on a machine with the same GPU)
plans without timing. --shape reads the grammar of every command (recipes.parse_shape); a conv2d layer
is padded R//2, S//2 (every ResNet layer is) with --stride on both axes; --trans is gemm's, --stride and
--layout conv2d's. --dtype takes float32 (the default), float64, float16 and bfloat16 where the family has
kernels of it (`--dtype float16,bfloat16`: each shape in each dtype, the dtype named in each line)."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

import numpy as np
from ..device import driver
from .. import target, tuning
from ..cache import get_cache
from ..layout import CHANNELS_LAST, CONTIGUOUS
from ..ops import operator_class
from ..config import RunSettings, split_list
from ..prewarm import ALL_DTYPES
from ..recipes import check_shape, parse_shapes, shape_help
from ..tensor import Tensor, empty

TUNABLE = ("gemm", "conv2d")
_OWN = {"trans": "gemm", "stride": "conv2d", "layout": "conv2d"}   # option -> the family it applies to


def _bar(shape_index: int, shapes: int, label: str) -> Callable[[int, int, str], None]:
    """A one-line progress bar on stderr for the choices of one shape."""
    def show(done: int, total: int, choice: str) -> None:
        width = 30
        filled = width * done // max(total, 1)
        text = f"\r[{'#' * filled}{'.' * (width - filled)}] shape {shape_index}/{shapes} {label} " \
               f"choice {done}/{total} {choice}"
        print(f"{text:<110}", end="" if done < total else "\n", file=sys.stderr, flush=True)
    return show


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, layout: str = CONTIGUOUS) -> Tensor:
    """Normal random values of `shape` in `layout` on the current GPU."""
    t = empty(shape, dtype, layout)
    t.copy_from(rng.standard_normal(shape).astype(dtype))
    return t


def gemm_call(ns: argparse.Namespace, shape: tuple[int, ...], make: Callable, dtype: str
              ) -> tuple[Any, tuple, dict, str]:
    """(operator, args, kwargs, label) of one GEMM shape M,N,K under --trans, in `dtype`."""
    m, n, k = shape
    trans = ns.trans or "nn"
    trans_a, trans_b = trans[0] == "t", trans[1] == "t"
    op = operator_class("gemm", dtype)(trans_a, trans_b)
    op.set_weight(make((n, k) if trans_b else (k, n)))
    return op, (make((k, m) if trans_a else (m, k)), make((m, n))), {}, f"{m}x{n}x{k} {trans}"


def conv2d_call(ns: argparse.Namespace, shape: tuple[int, ...], make: Callable, dtype: str
                ) -> tuple[Any, tuple, dict, str]:
    """(operator, args, kwargs, label) of one convolution N,C,H,W,K,R,S in `dtype`: padding R//2, S//2, --stride,
    --layout."""
    n, c, h, w, k, r, s = shape
    stride, layout = ns.stride or 1, ns.layout or CONTIGUOUS
    op = operator_class("conv2d", dtype)(c, k, r, s, stride, stride, pad_h=r // 2, pad_w=s // 2)
    op.set_weight(make(op.weight_shape))
    x = make((n, c, h, w), layout)
    y = make(op.output_shape(x.shape), layout)
    return op, (x, y), {}, f"{'x'.join(map(str, shape))} stride {stride} {layout}"


CALLS = {"gemm": gemm_call, "conv2d": conv2d_call}


def dtypes_of(ns: argparse.Namespace) -> list[str]:
    """The --dtype values (comma lists, repeatable; default float32), each one the family has kernels of."""
    dtypes = split_list(ns.dtype) or ["float32"]
    for dt in dtypes:
        if dt not in ALL_DTYPES:
            raise ValueError(f"--dtype {dt!r}: choose from {', '.join(ALL_DTYPES)}")
        try:
            operator_class(ns.op, dt)
        except ValueError as exc:
            raise ValueError(f"--dtype {dt}: {exc}") from None
    return list(dict.fromkeys(dtypes))


def check_options(ns: argparse.Namespace) -> list[str]:
    """Refuse a family the command cannot tune, a dtype it has no kernels of, or an option that belongs to
    another family; the dtypes to tune."""
    if ns.op not in TUNABLE:
        raise ValueError(f"{ns.op!r} cannot be tuned from the command line: choose {', '.join(TUNABLE)}")
    dtypes = dtypes_of(ns)
    for option, family in _OWN.items():
        if getattr(ns, option) is not None and ns.op != family:
            raise ValueError(f"--{option} applies to {family}, not {ns.op}: leave it out")
    if ns.stride is not None and ns.stride < 1:
        raise ValueError(f"--stride {ns.stride} is not allowed: give an integer >= 1")
    return dtypes


def cmd_tune(ns: argparse.Namespace, config) -> int:
    """Tune each shape (GPU needed); prints the winner of each and where the records went."""
    dtypes = check_options(ns)
    shapes = [check_shape(ns.op, s) for s in parse_shapes(ns.shape)]
    settings = RunSettings.of(config.snapshot(), ns.cache_dir, True, tuning=True)
    tgt = target.of_device(driver.current_ordinal())
    rng = np.random.default_rng(0)
    work = [(shape, dt) for dt in dtypes for shape in shapes]
    for i, (shape, dtype) in enumerate(work, 1):
        def make(shape: tuple[int, ...], layout: str = CONTIGUOUS, dtype: str = dtype) -> Tensor:
            return random_tensor(rng, tuple(shape), dtype, layout)

        op, args, kwargs, label = CALLS[ns.op](ns, shape, make, dtype)
        if ns.dtype:      # named on the command line: each line says which
            label = f"{label} {dtype}"
        problem = op.problem(*args, **kwargs)
        choices = op.family.choices(problem, settings.config, tgt)
        plan = tuning.fastest(op, problem, choices, settings, tgt, args, kwargs, progress=_bar(i, len(work), label))
        key = tuning.record_key(op.family.name, problem, tgt, settings.config.precision)
        times = tuning.timings(settings, key, [x.label for x in choices])
        shown = ", ".join(f"{x} {ms:.3f} ms" for x, ms in sorted(times.items(), key=lambda kv: kv[1]))
        print(f"{label}: {plan.choice} ({len(times)} choices: {shown})")
    print(f"records stored in {get_cache(ns.cache_dir).directory} (kind 'tuning'); "
          "`cuopjit cache export` carries them")
    return 0


def add_tune(sub, config_args: Callable, config_of: Callable) -> None:
    """The `tune` subcommand; config_args/config_of are cli.py's JITConfig flags and their reader."""
    p = sub.add_parser("tune", help="time every kernel choice of some shapes on this GPU and store the records",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shape_help(TUNABLE))
    p.add_argument("op", help=f"operator family: {', '.join(TUNABLE)}")
    p.add_argument("--dtype", action="append",
                   help=f"{', '.join(ALL_DTYPES)}, comma-separated or repeated (default float32)")
    p.add_argument("--shape", "--shapes", action="append", required=True, dest="shape",
                   help="gemm M,N,K / conv2d N,C,H,W,K,R,S (or x-written), repeatable; several x-written shapes "
                        "may share one option with commas: 4096x4096x4096,1000x1000x1000")
    p.add_argument("--trans", choices=("nn", "nt", "tn", "tt"), help="gemm: transposes of A and B (default nn)")
    p.add_argument("--stride", type=int, help="conv2d: the stride of both axes (default 1)")
    p.add_argument("--layout", choices=(CONTIGUOUS, CHANNELS_LAST),
                   help="conv2d: the layout of x and y (default contiguous, i.e. NCHW)")
    p.add_argument("--cache-dir", help="cache directory (default: CUOPJIT_CACHE_DIR or the user cache dir)")
    config_args(p)
    p.set_defaults(func=lambda ns: cmd_tune(ns, config_of(ns)))
