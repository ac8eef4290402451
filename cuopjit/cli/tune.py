"""`cuopjit tune gemm --dtype float32 --shape 4096x4096x4096 --shape 1000,1000,1000`: time every choice of
each shape on this GPU and store one tuning record per choice in the cache, so that `cuopjit cache
export` carries tuning with the cubins and a later process (here, or on a machine with the same GPU)
plans without timing. --shape reads the grammar of every command (recipes.parse_shape)."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import numpy as np
from ..device import driver
from .. import target, tuning
from ..cache import get_cache
from ..ops import FAMILIES
from ..config import RunSettings
from ..recipes import check_shape, parse_shapes, shape_help
from ..tensor import tensor

TUNABLE = ("gemm",)


def _bar(shape_index: int, shapes: int, label: str) -> Callable[[int, int, str], None]:
    """A one-line progress bar on stderr for the choices of one shape."""
    def show(done: int, total: int, choice: str) -> None:
        width = 30
        filled = width * done // max(total, 1)
        text = f"\r[{'#' * filled}{'.' * (width - filled)}] shape {shape_index}/{shapes} {label} " \
               f"choice {done}/{total} {choice}"
        print(f"{text:<110}", end="" if done < total else "\n", file=sys.stderr, flush=True)
    return show


def cmd_tune(ns: argparse.Namespace, config) -> int:
    """Tune each shape (GPU needed); prints the winner of each and where the records went."""

    if ns.op not in TUNABLE:
        raise ValueError(f"{ns.op!r} cannot be tuned from the command line: choose {', '.join(TUNABLE)}")
    if ns.dtype not in ("float32", "float64"):
        raise ValueError(f"--dtype {ns.dtype!r}: choose float32 or float64")
    cls = next(c for c in FAMILIES["gemm"] if c.dtype == np.dtype(ns.dtype))
    trans_a, trans_b = ns.trans[0] == "t", ns.trans[1] == "t"
    shapes = [check_shape(ns.op, s) for s in parse_shapes(ns.shape)]
    settings = RunSettings.of(config.snapshot(), ns.cache_dir, True, tuning=True)
    ordinal = driver.current_ordinal()
    tgt = target.of_device(ordinal)
    rng = np.random.default_rng(0)
    for i, (m, n, k) in enumerate(shapes, 1):
        a = tensor(rng.standard_normal((k, m) if trans_a else (m, k)).astype(ns.dtype))
        b = tensor(rng.standard_normal((n, k) if trans_b else (k, n)).astype(ns.dtype))
        c = tensor(np.zeros((m, n), ns.dtype))
        op = cls(trans_a, trans_b)
        op.set_weight(b)
        problem = op.problem(a, c)
        choices = op.family.choices(problem, settings.config, tgt)
        label = f"{m}x{n}x{k}"
        plan = tuning.fastest(op, problem, choices, settings, tgt, (a, c), {}, progress=_bar(i, len(shapes), label))
        key = tuning.record_key(op.family.name, problem, tgt, settings.config.precision)
        times = tuning.timings(settings, key, [x.label for x in choices])
        shown = ", ".join(f"{x} {ms:.3f} ms" for x, ms in sorted(times.items(), key=lambda kv: kv[1]))
        print(f"{label} {ns.trans}: {plan.choice} ({len(choices)} choices: {shown})")
    print(f"records stored in {get_cache(ns.cache_dir).directory} (kind 'tuning'); "
          "`cuopjit cache export` carries them")
    return 0


def add_tune(sub, config_args: Callable, config_of: Callable) -> None:
    """The `tune` subcommand; config_args/config_of are cli.py's JITConfig flags and their reader."""
    p = sub.add_parser("tune", help="time every kernel choice of some shapes on this GPU and store the records",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shape_help(TUNABLE))
    p.add_argument("op", help=f"operator family: {', '.join(TUNABLE)}")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shape", "--shapes", action="append", required=True, dest="shape",
                   help="M,N,K (or MxNxK), repeatable; several x-written shapes may share one option with commas: "
                        "4096x4096x4096,1000x1000x1000")
    p.add_argument("--trans", default="nn", choices=("nn", "nt", "tn", "tt"), help="transposes of A and B")
    p.add_argument("--cache-dir", help="cache directory (default: CUOPJIT_CACHE_DIR or the user cache dir)")
    config_args(p)
    p.set_defaults(func=lambda ns: cmd_tune(ns, config_of(ns)))
