"""Where a benchmark writes its results, so that a run without a GPU never replaces recorded GPU figures,
and the one bar chart (cuopjit beside its reference, per workload) every script draws beside them.

Every script writes through `save_json`. A run on a machine without a GPU (benchmarks/cache.py
still measures compiles and disk hits there) does not replace a file that holds a GPU run's
results: it writes `<name>.no-gpu.json` beside it and says so. Scripts that measure nothing
without a GPU call `require_gpu` first and stop before they time or write anything.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
NO_GPU_SUFFIX = ".no-gpu.json"


def has_gpu() -> bool:
    """Whether the CUDA driver sees at least one GPU (False without a driver)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import cuopjit
    return cuopjit.get_device_count() > 0


def require_gpu(script: str) -> None:
    """Stop with a one-line reason when there is no GPU: `script` measures nothing without one."""
    if not has_gpu():
        raise SystemExit(f"{script} times kernels on an NVIDIA GPU and none was found; nothing was measured or "
                         f"written (recorded results stay in {RESULTS})")


def recorded_on_gpu(path: Path) -> bool:
    """Whether `path` holds results of a run that had a GPU: every result file but one marked "gpu": false."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return not (isinstance(data, dict) and data.get("gpu") is False)


def save_json(path: str | os.PathLike, result: dict, gpu: bool) -> Path:
    """Write `result` plus {"gpu": gpu} as JSON to `path`; a GPU-less run never replaces GPU results there.

    Returns the file written: `path`, or `<name>.no-gpu.json` beside it (the printed line says which).
    """
    path = Path(path)
    target = path
    if not gpu and recorded_on_gpu(path):
        target = path.with_name(path.name.removesuffix(".json") + NO_GPU_SUFFIX)
        print(f"no GPU here: {path} keeps its recorded GPU results; this run goes to {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({**result, "gpu": gpu}, indent=1))
    print(f"results written to {target}")
    return target


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (saying so) where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no chart)")
        return None
    return plt


def bar_chart(path: str, labels: list[str], mine: list[float], theirs: list[float], their_label: str,
              ylabel: str, width: float = 0.55, decorate=None) -> None:
    """cuopjit's and the reference's bars per workload as a PNG at `path` (nothing without matplotlib);
    `decorate(ax, xs)` adds a script's own marks (a roofline, the copy bandwidth)."""
    plt = pyplot()
    if plt is None:
        return
    xs = list(range(len(labels)))
    fig, ax = plt.subplots(figsize=(max(8, width * len(labels)), 6))
    ax.bar([i - 0.2 for i in xs], mine, 0.4, label="cuopjit")
    ax.bar([i + 0.2 for i in xs], theirs, 0.4, label=their_label)
    if decorate is not None:
        decorate(ax, xs)
    ax.set_xticks(xs, labels, fontsize=7, rotation=60, ha="right")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart written to {path}")



def ratio_panels(path: str, labels: list[str], panels: dict[str, list[float | None]], ylabel: str,
                 title: str = "") -> None:
    """A PNG at `path` with one panel per entry of `panels` (a precision): a bar per label (None: no bar) with
    its value printed above it, and a line at 1.0 (parity); nothing without matplotlib."""
    plt = pyplot()
    if plt is None:
        return
    xs = list(range(len(labels)))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 0.42 * len(labels)), 3.2 * len(panels) + 1.6),
                             sharex=True, squeeze=False)
    for ax, (name, values) in zip(axes[:, 0], panels.items()):
        shown = [(x, v) for x, v in zip(xs, values) if v is not None]
        bars = ax.bar([x for x, _ in shown], [v for _, v in shown], 0.7,
                      color=["tab:green" if v >= 1.0 else "tab:red" for _, v in shown])
        ax.bar_label(bars, [f"{v:.2f}" for _, v in shown], fontsize=6)
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_ylabel(f"{name}\n{ylabel}", fontsize=8)
    axes[-1, 0].set_xticks(xs, labels, fontsize=7, rotation=70, ha="right")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"chart written to {path}")
