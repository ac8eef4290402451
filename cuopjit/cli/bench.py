"""`cuopjit bench [OP...]`: each operator family's benchmark against PyTorch, as a table, JSON and a PNG chart.

Workloads are discovered, not listed here: every script in the benchmarks folder (the source
tree's `benchmarks/`, or --dir) that defines `WORKLOADS` (the dict format of
benchmarks/mb_common.py) or `workloads(quick)` contributes its workloads, each to the family its
"family" key or its name names. A family with no workload (or any family, without PyTorch) is
timed alone on its explain shape (recipes.SHAPES) and set against the device's roofline.
--quick keeps the smallest workload per family and dtype. --dtype names the dtypes (comma lists, repeatable:
`--dtype float16,bfloat16`; default float32 and float64); a family is measured in those it has kernels of. The
chart needs matplotlib (`[bench]`).
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

from ..device import driver
from ..errors import NoDeviceError
from ..config import split_list
from ..ops import FAMILIES
from ..prewarm import ALL_DTYPES, DTYPES, check_dtypes, check_ops, family_dtypes
from ..profile import benchmark, device_ceilings
from ..recipes import SHAPES, build, gpu_maker

_DEFINES = re.compile(r"^(WORKLOADS\s*[:=]|def workloads\()", re.M)
_SOURCE_TREE = Path(__file__).resolve().parent.parent / "benchmarks"


def family_of(workload: dict) -> str | None:
    """The family a workload measures: its "family" key, else the longest family name its name starts with."""
    if workload.get("family"):
        return workload["family"]
    name = workload["name"]
    hits = [f for f in FAMILIES if name == f or name.startswith(f + "_")]
    return max(hits, key=len) if hits else None


def discover(directory: Path) -> list[tuple[str, ModuleType]]:
    """The benchmark modules in `directory` that define workloads, imported with the folder on sys.path."""
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    found = []
    for path in sorted(directory.glob("*.py")):
        if not path.name.startswith("_") and _DEFINES.search(path.read_text()):
            found.append((path.name, importlib.import_module(path.stem)))
    return found


def workloads(directory: Path, ops: list[str], dtypes: list[str], quick: bool) -> list[dict]:
    """The discovered workloads of the requested families and dtypes (--quick: the smallest of each pair)."""
    out = []
    for script, module in discover(directory):
        listed = module.workloads(quick) if hasattr(module, "workloads") else module.WORKLOADS
        for w in listed:
            family = family_of(w)
            if family in ops and w["dtype"] in dtypes:
                out.append({**w, "family": family, "script": script})
    if quick:
        smallest: dict[tuple, dict] = {}
        for w in out:
            key = (w["family"], w["dtype"])
            if key not in smallest or w["bytes"] < smallest[key]["bytes"]:
                smallest[key] = w
        out = list(smallest.values())
    return out


def _progress(done: int, total: int, label: str) -> None:
    width = 24
    filled = width * done // max(total, 1)
    end = "\n" if done == total or not sys.stderr.isatty() else ""
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}", end=end, file=sys.stderr,
          flush=True)


def run_workload(w: dict, timer, repeat: int) -> dict:
    """Time one discovered workload with cuopjit and PyTorch (the script's own setup and check)."""
    import torch
    fns = w["setup"]() if "setup" in w else w
    row = {k: w[k] for k in ("family", "name", "dtype", "shape", "bytes", "script", "units") if k in w}
    row["flops"] = float(w.get("flops", 0.0))
    if fns.get("check") is not None:
        row["rel_error"] = fns["check"]()
    row["cuopjit_ms"] = timer(fns["run_cuopjit"], repeat=repeat)["median_ms"]
    row["torch_ms"] = timer(fns["run_torch"], repeat=repeat)["median_ms"]
    del fns
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return row


def run_alone(op: str, dtype: str, repeat: int) -> dict:
    """Time a family on its explain shape without PyTorch: cuopjit's time against the roofline only."""
    operator, args, kwargs = build(op, dtype, None, gpu_maker(dtype))
    ms = benchmark(operator, *args, num_runs=repeat, warmup_runs=3, **kwargs)["median_time_ms"]
    flops, nbytes = operator.work(*args, **kwargs)
    plan = operator.plan(*args, **kwargs)
    return {"family": op, "name": op, "dtype": dtype, "shape": list(SHAPES[op][1]), "bytes": nbytes, "flops": flops,
            "script": "explain shape", "cuopjit_ms": ms, "torch_ms": None,
            "kernel": " + ".join(spec.name for spec in plan.specs), "units": plan.units}


def _rates(row: dict) -> dict:
    ms = row["cuopjit_ms"]
    row["cuopjit_gbps"] = row["bytes"] / ms / 1e6
    row["cuopjit_gflops"] = row["flops"] / ms / 1e6
    if row.get("torch_ms"):
        row["torch_gbps"] = row["bytes"] / row["torch_ms"] / 1e6
        row["speedup_vs_torch"] = row["torch_ms"] / ms
    units = row.get("units") or ("FP64 cores" if row["dtype"] == "float64" else "FP32 cores")
    least, row["bound"] = device_ceilings(driver.current_ordinal()).roofline(row["flops"], row["bytes"], units)
    row["roofline_fraction"] = least / ms
    return row


def table(rows: list[dict]) -> str:
    """The rows as a fixed-width table."""
    head = (f"{'family':<16}{'workload':<34}{'dtype':<9}{'ms':>10}{'GB/s':>9}{'GFLOP/s':>10}{'roofline':>9}"
            f"{'torch ms':>10}{'x torch':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['family']:<16}{r['name']:<34}{r['dtype']:<9}  ERROR {r['error']}")
            continue
        torch_ms = f"{r['torch_ms']:.4f}" if r.get("torch_ms") else "-"
        speed = f"{r['speedup_vs_torch']:.2f}" if r.get("speedup_vs_torch") else "-"
        lines.append(f"{r['family']:<16}{r['name'][:33]:<34}{r['dtype']:<9}{r['cuopjit_ms']:>10.4f}"
                     f"{r['cuopjit_gbps']:>9.0f}{r['cuopjit_gflops']:>10.0f}{r['roofline_fraction']:>8.0%}"
                     f"{torch_ms:>10}{speed:>9}")
    return "\n".join(lines)


def chart(rows: list[dict], path: Path) -> str:
    """A PNG of each row's roofline fraction, cuopjit beside PyTorch; returns what happened, in words."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is missing (pip install cuopjit[bench])"
    ok = [r for r in rows if "error" not in r]
    xs = range(len(ok))
    fig, ax = plt.subplots(figsize=(max(8, 0.5 * len(ok)), 5))
    ax.bar([x - 0.2 for x in xs], [r["roofline_fraction"] for r in ok], 0.4, label="cuopjit")
    torch_fraction = [r["roofline_fraction"] / r["speedup_vs_torch"] if r.get("speedup_vs_torch") else 0.0
                      for r in ok]   # the same work in PyTorch's time
    ax.bar([x + 0.2 for x in xs], torch_fraction, 0.4, label="PyTorch")
    ax.set_xticks(list(xs), [f"{r['name'][:24]} {r['dtype'][5:]}" for r in ok], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("fraction of the roofline")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"chart written to {path}"


def cmd_bench(ns: argparse.Namespace) -> int:
    """Run the benchmarks of the requested families; print the table (or --json), write JSON and a chart."""
    ops, dtypes = selection(ns)
    if driver.device_count() == 0:
        raise NoDeviceError("benchmarks time kernels on an NVIDIA GPU and none was found", "CUDA_ERROR_NO_DEVICE")
    repeat = 20 if ns.quick else ns.repeat
    try:
        importlib.import_module("torch")   # the discovered workloads build their inputs with PyTorch
        directory = Path(ns.dir) if ns.dir else _SOURCE_TREE
        todo = workloads(directory, ops, dtypes, ns.quick) if directory.is_dir() else []
        timer = importlib.import_module("mb_common").time_ms if todo else None
    except ImportError:
        todo, timer = [], None
    alone, missing = uncovered(ops, dtypes, {(w["family"], w["dtype"]) for w in todo})
    if missing:
        print(f"note: no benchmark workload or explain shape for {', '.join(missing)}: not measured", file=sys.stderr)
    total, rows = len(todo) + len(alone), []
    for i, item in enumerate([*todo, *alone]):
        name = item["name"] if isinstance(item, dict) else item[0]
        dtype = item["dtype"] if isinstance(item, dict) else item[1]
        _progress(i, total, f"{name} {dtype}")
        try:
            row = run_workload(item, timer, repeat) if isinstance(item, dict) else run_alone(*item, repeat)
            rows.append(_rates(row))
        except Exception as exc:  # one failing workload must not lose the others' figures
            traceback.print_exc(limit=3, file=sys.stderr)
            family = item["family"] if isinstance(item, dict) else item[0]
            rows.append({"family": family, "name": name, "dtype": dtype, "error": f"{type(exc).__name__}: {exc}"})
    _progress(total, total, "done")
    result = {"device": driver.get_device().name, "ceilings": vars(device_ceilings(driver.current_ordinal())),
              "quick": ns.quick, "rows": rows}
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    note = "no chart (--no-chart)" if ns.no_chart else chart(rows, out.with_suffix(".png"))
    if ns.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(table(rows))
        print(f"results written to {out.with_suffix('.json')}; {note}")
    return 1 if any("error" in r for r in rows) else 0


def _shapes() -> dict:
    return SHAPES


def uncovered(ops: list[str], dtypes: list[str], covered: set[tuple[str, str]]) -> tuple[list[tuple[str, str]],
                                                                                      list[str]]:
    """(the (family, dtype) pairs no workload covers, timed alone on their explain shape, in the dtypes each family
    has kernels of; the families with neither a workload nor an explain shape)."""
    alone = [(op, dt) for op in ops for dt in dtypes
             if (op, dt) not in covered and op in _shapes() and dt in family_dtypes(op)]
    missing = sorted({op for op in ops for dt in dtypes if (op, dt) not in covered and op not in _shapes()})
    return alone, missing


def selection(ns: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The families and the --dtype values (comma lists, repeatable; default float32 and float64): an unknown
    dtype, or one a family named on the command line has no kernels of, raises naming what there is."""
    ops = check_ops(ns.op or None)
    dtypes = list(dict.fromkeys(split_list(ns.dtype))) or list(DTYPES)
    check_dtypes(ops if ns.op else [], dtypes)
    return ops, dtypes


def add_bench(sub) -> None:
    """Register `cuopjit bench`."""
    p = sub.add_parser("bench", help="benchmark operator families against PyTorch (needs a GPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("op", nargs="*", help=f"families (default: all): {', '.join(FAMILIES)}")
    p.add_argument("--dtype", action="append",
                   help=f"{', '.join(ALL_DTYPES)}, comma-separated or repeated (default: {' and '.join(DTYPES)})")
    p.add_argument("--quick", action="store_true", help="the smallest workload per family and dtype, 20 runs")
    p.add_argument("--repeat", type=int, default=30, help="timed calls per workload (median reported)")
    p.add_argument("--dir", help="the benchmarks folder (default: the source tree's benchmarks/)")
    p.add_argument("--out", default="cuopjit-bench", help="where the JSON and PNG go (suffixes added)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p.add_argument("--no-chart", action="store_true", help="write no PNG")
    p.set_defaults(func=cmd_bench)
