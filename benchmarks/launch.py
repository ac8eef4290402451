"""Host time per cached launch of a tiny op: cuopjit vs CuPy RawKernel vs cuda.core.launch, same cubin.

Each method launches the same kernel with the same arguments. Calls are timed in batches of
500 (below the driver's launch-queue depth, so the GPU never throttles the host), with a
synchronize between batches that is not timed; the figure is the median per-call host time.

    python benchmarks/launch.py [--op relu|gemm] [--calls 100000] [--out benchmarks/results/launch.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from cuopjit import driver, kernels  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

BATCH = 500


def per_call_us(fn, calls: int) -> float:
    """Median host microseconds per call over batches of BATCH calls."""
    for _ in range(BATCH):
        fn()
    cuopjit.synchronize()
    samples = []
    for _ in range(max(1, calls // BATCH)):
        t0 = time.perf_counter_ns()
        for _ in range(BATCH):
            fn()
        samples.append((time.perf_counter_ns() - t0) / BATCH / 1e3)
        cuopjit.synchronize()
    return statistics.median(samples)


def tiny_op(name: str):
    """A warmed operator with a one-element-ish problem, and its forward as a no-argument callable."""
    if name == "relu":
        op = cuopjit.ReluFloat()
        x, y = cuopjit.ones([1]), cuopjit.zeros([1])
        return op, (x, y)
    op = cuopjit.GemmFloat()
    op.set_weight(cuopjit.ones([1, 1]))
    return op, (cuopjit.ones([1, 1]), cuopjit.zeros([1, 1]))


def typed_args(launch):
    """The prepared launch's arguments as numpy scalars (what CuPy and cuda.core accept)."""
    args = [np.uint64(p) for p in launch._pointers[:len(launch._pointers)]]
    conv = {"c_int": np.int32, "c_long": np.int64, "c_float": np.float32, "c_double": np.float64}
    for slot in launch._slots:
        args.append(conv[type(slot).__name__](slot.value))
    return args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="relu" if hasattr(cuopjit, "ReluFloat") else "gemm")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--out", default="benchmarks/results/launch.json")
    ns = ap.parse_args()
    require_gpu("benchmarks/launch.py")

    op, args = tiny_op(ns.op)
    op.forward(*args)
    launch = next(iter(op._launches.values()))
    spec = op.last_kernel.spec
    dev = driver.get_device()
    cubin, _ = kernels.build(spec, dev.arch)
    n_ptr = len(launch._pointers)
    targs = typed_args(launch)[: n_ptr + len(launch._slots)]
    jit = getattr(cuopjit, "JIT" + type(op).__name__, None)

    results = {"cuopjit forward": per_call_us(lambda: op.forward(*args), ns.calls),
               "cuopjit Launch (prepared)": per_call_us(lambda: launch(*[int(a) for a in targs[:n_ptr]]), ns.calls)}
    if jit is not None:
        w = jit(op)
        w.forward(*args)
        results["cuopjit JIT wrapper forward"] = per_call_us(lambda: w.forward(*args), ns.calls)
    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch as core_launch
        d = Device(dev.ordinal)
        d.set_current()
        kernel = ObjectCode.from_cubin(cubin).get_kernel(spec.kernel)
        stream = d.default_stream
        cfg = LaunchConfig(grid=launch.grid, block=launch.block, shmem_size=launch.shared)
        results["cuda.core launch"] = per_call_us(lambda: core_launch(stream, cfg, kernel, *targs), ns.calls)
        driver.get_device().make_current()
    except Exception as exc:  # report, keep the other figures
        results["cuda.core launch"] = f"failed: {exc}"
    try:
        import cupy
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(cubin)
        fn = cupy.RawModule(path=f.name).get_function(spec.kernel)
        grid, block = launch.grid, launch.block
        results["CuPy RawKernel"] = per_call_us(lambda: fn(grid, block, tuple(targs), shared_mem=launch.shared),
                                                ns.calls)
        os.unlink(f.name)
    except Exception as exc:
        results["CuPy RawKernel"] = f"failed: {exc}"

    core = results.get("cuda.core launch")
    print(f"\nhost time per cached launch of {spec.name} ({ns.calls} calls, median of {BATCH}-call batches)")
    print(f"{'method':<30}{'us/call':>10}{'vs cuda.core':>14}")
    for name, us in results.items():
        if isinstance(us, str):
            print(f"{name:<30}{us}")
            continue
        ratio = f"{us / core:.2f}x" if isinstance(core, float) else "-"
        print(f"{name:<30}{us:>10.2f}{ratio:>14}")
    save_json(ns.out, {"kernel": spec.name, "device": dev.name, "calls": ns.calls, "us_per_call": results},
              gpu=True)


if __name__ == "__main__":
    main()
