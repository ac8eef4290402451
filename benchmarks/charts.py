"""Draw a benchmark's PNG chart from its recorded JSON, on any machine with matplotlib.

The GPU machine that runs the benchmarks may lack matplotlib; each script then writes only its
JSON. This draws the same chart the script would have (its own `chart` function) beside the JSON:

    python benchmarks/charts.py benchmarks/results/gemm.json benchmarks/results/conv2d.json ...

The script is picked from the file name: gemm*.json, conv2d*.json, memory_bound*.json, layers*.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def draw(path: str) -> None:
    """Re-draw `path`'s chart as `<path without .json>.png` with the chart function of the script that wrote it."""
    data = json.loads(open(path).read())
    png = os.path.splitext(path)[0] + ".png"
    name = os.path.basename(path)
    if name.startswith("gemm"):
        import gemm
        gemm.chart(data["rows"], png)
    elif name.startswith("conv2d"):
        import conv2d
        conv2d.chart(data["rows"], png)
    elif name.startswith("memory_bound"):
        import memory_bound
        memory_bound.chart(data["workloads"], data["copy"]["gbps"], png)
    elif name.startswith("layers"):
        import layers
        layers.chart(data, png)
    else:
        raise SystemExit(f"{path}: no chart for this file (gemm*.json, conv2d*.json, memory_bound*.json, "
                         "layers*.json)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", metavar="JSON")
    for path in p.parse_args().files:
        draw(path)


if __name__ == "__main__":
    main()
