"""Host time per cached launch of a tiny op: cuopjit vs CuPy RawKernel vs cuda.core.launch, same cubin.

Each method launches the same kernel with the same arguments on the same stream. Calls are timed
in batches of 500 (below the driver's launch-queue depth, so the GPU never throttles the host),
the methods interleaved batch by batch (the host's drift hits them alike), with an untimed
synchronize between batches; the figure is each method's median per-call host time.

    python benchmarks/launch.py [--op relu|gemm] [--calls 100000] [--out benchmarks/results/launch_<op>.json]
    python benchmarks/launch.py --interop|--host [--calls 100000]  # -> benchmarks/results/launch_interop.json

Also: the same forward through a JIT wrapper, and a captured graph of 100 forwards replayed. With
--interop, host time of foreign operands instead (interop_methods): a forward on torch tensors beside the
same forward on cuopjit Tensors, `cuopjit.tensor(torch_tensor)`, and each torch.ops.cuopjit op beside the
torch op it replaces (tiny shapes, so the host, not the GPU, sets the pace; operands that do not alias, as
a prepared torch.ops call needs: cuopjit/torch/prepared.py). `--host` is the same table.
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
from cuopjit.device import driver
from cuopjit.run import executor
from cuopjit.build import pipeline  # noqa: E402
from cuopjit.config import DEFAULT  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

BATCH = 500


def per_call_us(methods: dict, calls: int) -> dict:
    """Median host microseconds per call of each method, interleaved: every round times one batch of
    BATCH calls of each method in turn, so the host's drift over the run hits all methods alike."""
    for fn in methods.values():
        for _ in range(BATCH):
            fn()
    cuopjit.synchronize()
    samples: dict = {name: [] for name in methods}
    for _ in range(max(1, calls // BATCH)):
        for name, fn in methods.items():
            t0 = time.perf_counter_ns()
            for _ in range(BATCH):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) / BATCH / 1e3)
            cuopjit.synchronize()
    return {name: statistics.median(v) for name, v in samples.items()}


def tiny_op(name: str):
    """A warmed operator with a one-element-ish problem, and its forward as a no-argument callable."""
    if name == "relu":
        op = cuopjit.ReluFloat()
        x, y = cuopjit.ones([1]), cuopjit.zeros([1])
        return op, (x, y)
    op = cuopjit.GemmFloat()
    op.set_weight(cuopjit.ones([1, 1]))
    return op, (cuopjit.ones([1, 1]), cuopjit.zeros([1, 1]))


def typed_args(launch, pointers):
    """The launch's arguments as numpy scalars (what CuPy and cuda.core accept), pointers from the call."""
    conv = {"i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}
    return [np.uint64(pointers[a.value] + a.offset) if a.kind == "ptr" else conv[a.kind](a.value)
            for a in launch.kl.args]


def graph_replay_us(op, args, kernels_per_graph: int = 100, replays: int = 200) -> float:
    """Host microseconds per kernel of replaying a captured graph of `kernels_per_graph` forwards."""
    with cuopjit.graph() as g:
        for _ in range(kernels_per_graph):
            op.forward(*args)
    g.replay()
    cuopjit.synchronize()
    samples = []
    for _ in range(replays):
        t0 = time.perf_counter_ns()
        g.replay()
        samples.append((time.perf_counter_ns() - t0) / kernels_per_graph / 1e3)
        cuopjit.synchronize()
    return statistics.median(samples)


def _bare_op(torch):
    """A torch.ops call whose Python kernel only allocates its output: the dispatcher's and the allocation's toll
    (None where this torch refuses it)."""
    def empty(t):
        return torch.empty_like(t)
    try:
        lib = torch.library.Library("cuopjit_bench", "FRAGMENT")
        lib.define("empty(Tensor x) -> Tensor")
        lib.impl("empty", empty, "CUDA")
        op = torch.ops.cuopjit_bench.empty
        op(torch.ones(1, device="cuda"))
    except Exception as exc:  # noqa: BLE001  the row is left out, the others stand
        print(f"(no bare-op row: {type(exc).__name__}: {exc})")
        return None
    _bare_op.lib = lib     # the registration lives as long as the module
    return op


def interop_methods() -> tuple[dict, dict]:
    """(name -> call, ratio name -> (numerator, denominator)) for the interop table."""
    import torch
    import cuopjit.torch  # noqa: F401  (registers torch.ops.cuopjit)
    from cuopjit import interop
    from cuopjit.operands import call_key, operands
    F, ops = torch.nn.functional, torch.ops.cuopjit
    x, y = torch.ones(1, device="cuda"), torch.zeros(1, device="cuda")
    tx, ty = cuopjit.tensor(x), cuopjit.tensor(y)
    relu = cuopjit.ReluFloat()
    jit = cuopjit.JITReluFloat(relu)
    a, c, w = torch.ones(1, 1, device="cuda"), torch.zeros(1, 1, device="cuda"), torch.ones(1, 1, device="cuda")
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(w)
    ta, tc = cuopjit.tensor(a), cuopjit.tensor(c)
    read = interop.reader(type(x))
    lx, lw, lb = torch.randn(8, 64, device="cuda"), torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda")
    b3, b3b = torch.randn(4, 16, 16, device="cuda"), torch.randn(4, 16, 16, device="cuda")
    v = torch.randn(64, device="cuda")
    img, cw, cb = torch.randn(1, 8, 16, 16, device="cuda"), torch.randn(8, 8, 3, 3, device="cuda"), \
        torch.randn(8, device="cuda")
    fused = cuopjit.GemmFloat()
    fused.set_weight(w)
    fused.set_epilogue("relu(acc + bias)", bias=cuopjit.tensor(torch.ones(1, device="cuda")))
    size = (8, 40)
    bare = _bare_op(torch)
    methods = {
        "relu forward, cuopjit Tensors": lambda: relu.forward(tx, ty),
        "relu forward, torch tensors": lambda: relu.forward(x, y),
        "JIT relu forward, cuopjit Tensors": lambda: jit.forward(tx, ty),
        "JIT relu forward, torch tensors": lambda: jit.forward(x, y),
        "gemm forward, cuopjit Tensors": lambda: gemm.forward(ta, tc),
        "gemm forward, torch tensors": lambda: gemm.forward(a, c),
        "gemm forward + epilogue relu(acc + bias), cuopjit Tensors": lambda: fused.forward(ta, tc),
        "cuopjit.tensor(torch tensor)": lambda: cuopjit.tensor(x),
        "  part: call_key(x, y), the warm probe's key": lambda: call_key((x, y), {}),
        "  part: operands(x, y), the first call's swap": lambda: operands((x, y), {}),
        "  part: interop read of x": lambda: read(x),
        **({"  part: torch.ops call of a Python op doing torch.empty_like(x)": lambda: bare(x)} if bare else {}),
        "  part: torch.empty_like(x)": lambda: torch.empty_like(x),
        "  part: x.new_empty((8, 40))": lambda: lx.new_empty(size),
        "  part: torch.empty((8, 40), dtype=, device=)": lambda: torch.empty(size, dtype=lx.dtype, device=lx.device),
        "torch.relu": lambda: torch.relu(x),
        "torch.ops.cuopjit.relu": lambda: ops.relu(x),
        "F.linear (bias)": lambda: F.linear(lx, lw, lb),
        "torch.ops.cuopjit.linear (bias)": lambda: ops.linear(lx, lw, lb),
        "F.linear": lambda: F.linear(lx, lw),
        "torch.ops.cuopjit.linear": lambda: ops.linear(lx, lw),
        "torch.matmul": lambda: torch.matmul(lx, lw),
        "torch.ops.cuopjit.matmul": lambda: ops.matmul(lx, lw),
        "torch.bmm": lambda: torch.bmm(b3, b3b),
        "torch.ops.cuopjit.bmm": lambda: ops.bmm(b3, b3b),
        "torch.mv": lambda: torch.mv(lw, v),
        "torch.ops.cuopjit.gemv": lambda: ops.gemv(lw, v),
        "F.conv2d (bias, padding 1)": lambda: F.conv2d(img, cw, cb, 1, 1),
        "torch.ops.cuopjit.conv2d (bias, padding 1)": lambda: ops.conv2d(img, cw, cb, [1, 1], [1, 1]),
    }
    ratios = {"relu forward: torch / cuopjit Tensors": ("relu forward, torch tensors", "relu forward, cuopjit Tensors"),
              "JIT relu: torch / cuopjit Tensors": ("JIT relu forward, torch tensors",
                                                    "JIT relu forward, cuopjit Tensors"),
              "gemm forward: torch / cuopjit Tensors": ("gemm forward, torch tensors", "gemm forward, cuopjit Tensors"),
              "gemm forward: epilogue / plain": ("gemm forward + epilogue relu(acc + bias), cuopjit Tensors",
                                                 "gemm forward, cuopjit Tensors")}
    for mine, theirs in (("relu", "torch.relu"), ("linear (bias)", "F.linear (bias)"), ("linear", "F.linear"),
                         ("matmul", "torch.matmul"), ("bmm", "torch.bmm"), ("gemv", "torch.mv"),
                         ("conv2d (bias, padding 1)", "F.conv2d (bias, padding 1)")):
        ratios[f"torch.ops.cuopjit.{mine} / {theirs}"] = ("torch.ops.cuopjit." + mine, theirs)
    return methods, ratios


def interop_main(calls: int, out_path: str) -> None:
    """The interop table: host microseconds per call (median of batches) and the goal ratios."""
    methods, ratios = interop_methods()
    for fn in methods.values():      # plans, kernels and torch's own warm-up before anything is timed
        fn()
    results = per_call_us(methods, calls)
    print(f"\nhost time per call ({calls} calls, median of {BATCH}-call batches)")
    for name, us in results.items():
        print(f"{name:<48}{us:>10.2f} us")
    figures = {name: results[num] / results[den] for name, (num, den) in ratios.items()}
    for name, r in figures.items():
        print(f"{name:<80}{r:>8.3f}x")
    save_json(out_path, {"device": driver.get_device().name, "calls": calls, "us_per_call": results,
                         "ratios": figures}, gpu=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="relu", choices=("relu", "gemm"))
    ap.add_argument("--interop", "--host", action="store_true",
                    help="time foreign operands and torch.ops.cuopjit's host toll instead")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--out", default=None, help="default: benchmarks/results/launch_<op or interop>.json")
    ns = ap.parse_args()
    require_gpu("benchmarks/launch.py")
    if ns.interop:
        interop_main(ns.calls, ns.out or "benchmarks/results/launch_interop.json")
        return
    out_path = ns.out or f"benchmarks/results/launch_{ns.op}.json"

    from cuda.core import Device, LaunchConfig, ObjectCode, launch as core_launch
    dev = driver.get_device()
    core_dev = Device(dev.ordinal)
    core_dev.set_current()
    core_stream = core_dev.create_stream()
    driver.get_device().make_current()

    op, args = tiny_op(ns.op)
    op.forward(*args, stream=core_stream)
    _, pointers, _ = op.bind(*args)
    run = next(iter(op.memo(DEFAULT).values()))      # what forward calls: the launch's closure
    first = executor.runner_of(run).launches[0]
    kl, spec = first.kl, first.kl.spec
    cubin, _ = pipeline.build(spec, dev.arch)
    targs = typed_args(first, pointers)
    jit = getattr(cuopjit, "JIT" + type(op).__name__)(op)
    jit.forward(*args, stream=core_stream)
    jit.get_performance_profile()
    jit.forward(*args, stream=core_stream)         # the timed call after a profile read; later calls are untimed

    s = int(core_stream.handle)
    methods = {"cuopjit forward (stream given)": lambda: op.forward(*args, stream=core_stream),
               "cuopjit forward (current stream)": lambda: op.forward(*args),
               "cuopjit JIT wrapper forward (stream given)": lambda: jit.forward(*args, stream=core_stream),
               "cuopjit prepared launch": lambda: run(pointers, s)}
    failed = {}
    kernel = ObjectCode.from_cubin(cubin).get_kernel(spec.kernel)
    cfg = LaunchConfig(grid=kl.grid, block=kl.block, shmem_size=kl.shared)
    methods["cuda.core launch"] = lambda: core_launch(core_stream, cfg, kernel, *targs)
    try:
        import cupy
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(cubin)
        fn = cupy.RawModule(path=f.name).get_function(spec.kernel)
        methods["CuPy RawKernel"] = lambda: fn(kl.grid, kl.block, tuple(targs), shared_mem=kl.shared)
        os.unlink(f.name)
    except Exception as exc:  # report, keep the other figures
        failed["CuPy RawKernel"] = f"failed: {exc}"
    results = {**per_call_us(methods, ns.calls), **failed}
    results["graph replay, per kernel of 100"] = graph_replay_us(op, args)

    core = results.get("cuda.core launch")
    bare = results["cuopjit forward (stream given)"]
    print(f"\nhost time per cached launch of {spec.name} ({ns.calls} calls, median of {BATCH}-call batches)")
    print(f"{'method':<44}{'us/call':>10}{'vs cuda.core':>14}")
    for name, us in results.items():
        if isinstance(us, str):
            print(f"{name:<44}{us}")
            continue
        ratio = f"{us / core:.2f}x" if isinstance(core, float) else "-"
        print(f"{name:<44}{us:>10.2f}{ratio:>14}")
    ratios = {"forward / cuda.core launch": bare / core if isinstance(core, float) else None,
              "JIT wrapper forward / forward": results["cuopjit JIT wrapper forward (stream given)"] / bare}
    for name, r in ratios.items():
        print(f"{name:<44}{r:>10.3f}" if r is not None else f"{name:<44}-")
    save_json(out_path, {"kernel": spec.name, "device": dev.name, "calls": ns.calls, "us_per_call": results,
                         "ratios": ratios}, gpu=True)


if __name__ == "__main__":
    main()
