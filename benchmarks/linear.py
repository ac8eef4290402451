"""Linear layers and attention: cuopjit vs torch (cuBLAS) in the same run, fp32 / TF32 / 3xTF32 (JSON + PNG).

Workloads (issue 25, item 3), all through the public operators:
  bert    a BERT-base encoder layer at 8 x 512 tokens: the QKV, output-projection and two FFN products
          `x @ W^T` (GemmFloat(trans_b=True) on W as nn.Linear stores it, N x K), the attention scores
          Q @ K^T over 96 heads (BatchMatMulFloat(trans_b=True) on K as stored; "scores_view": K.transpose(1, 2)
          passed as it is, a transposed view) and the context P @ V, and the batched 100 x 256³ (torch.bmm);
  skinny  `A @ W^T` with M from 1 to 16384 rows at the BERT / GPT widths.
Modes: "fp32" (cuopjit's default exact kernel; torch with TF32 off), "tf32" (enable_tensor_core=True;
torch with TF32 on) and "3xtf32" (precision="3xtf32"; against torch fp32, TF32 off). Each timing is the
median of 40 calls between CUDA events after warm-up, cuopjit and torch alternating in four rounds
(benchmarks/mb_common.py `time_pair`); errors are ||out - ref|| / ||ref|| against a float64 product. Every
kernel is compiled first, 16 at a time, from the plans forward makes.

    python benchmarks/linear.py [--groups bert,skinny] [--modes fp32,tf32,3xtf32]
                                [--out benchmarks/results/linear.json]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import time_pair, to_cuopjit  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

TOKENS, HIDDEN, FFN, HEADS, SEQ, HEAD_DIM = 8 * 512, 768, 3072, 8 * 12, 512, 64
# name, kind, batch, m, n, k: "linear" is x[m, k] @ W[n, k]^T; "scores" Q[b, m, k] @ K[b, n, k]^T; "bmm" A @ B
BERT = [("qkv", "linear", 1, TOKENS, 3 * HIDDEN, HIDDEN), ("proj", "linear", 1, TOKENS, HIDDEN, HIDDEN),
        ("ffn1", "linear", 1, TOKENS, FFN, HIDDEN), ("ffn2", "linear", 1, TOKENS, HIDDEN, FFN),
        ("scores", "scores", HEADS, SEQ, SEQ, HEAD_DIM), ("scores_view", "view", HEADS, SEQ, SEQ, HEAD_DIM),
        ("context", "bmm", HEADS, SEQ, HEAD_DIM, SEQ),
        ("bmm256", "bmm", 100, 256, 256, 256)]
SKINNY = [(f"m{m}_{n}x{k}", "linear", 1, m, n, k) for m in (1, 7, 33, 256, 1000, 16384)
          for n, k in ((768, 768), (2304, 768), (768, 3072), (4096, 1024), (1024, 4096))]
GROUPS = {"bert": BERT, "skinny": SKINNY}
CONFIGS = {"fp32": {}, "tf32": {"enable_tensor_core": True}, "3xtf32": {"precision": "3xtf32"}}


def operands(kind: str, batch: int, m: int, n: int, k: int):
    """(A, B as cuopjit reads it, B as torch multiplies it, the operator, its JIT wrapper class)."""
    import torch
    if kind == "linear":
        a, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda") / math.sqrt(k)
        op = cuopjit.GemmFloat(trans_b=True)
        op.set_weight(to_cuopjit(w))
        return a, w, w.t(), op, cuopjit.JITGemmFloat
    a = torch.randn(batch, m, k, device="cuda")
    if kind in ("scores", "view"):
        key = torch.randn(batch, n, k, device="cuda")
        if kind == "view":          # K^T as torch has it: a transposed view, read where it lies
            return a, key.transpose(1, 2), key.transpose(1, 2), cuopjit.BatchMatMulFloat(), cuopjit.JITBatchMatMulFloat
        return a, key, key.transpose(1, 2), cuopjit.BatchMatMulFloat(trans_b=True), cuopjit.JITBatchMatMulFloat
    b = torch.randn(batch, k, n, device="cuda")
    return a, b, b, cuopjit.BatchMatMulFloat(), cuopjit.JITBatchMatMulFloat


def config(mode: str):
    cfg = cuopjit.JITConfig()
    for field, value in CONFIGS[mode].items():
        setattr(cfg, field, value)
    return cfg


def specs(name: str, kind: str, batch: int, m: int, n: int, k: int, mode: str) -> set:
    """The kernels a case's forward runs: its problem (op.problem on the case's tensors) planned as forward does."""
    import torch
    a, b, _, op, _ = operands(kind, batch, m, n, k)
    c = torch.empty((m, n) if kind == "linear" else (batch, m, n), device="cuda")
    args = (to_cuopjit(a), to_cuopjit(c)) if kind == "linear" else (to_cuopjit(a), to_cuopjit(b), to_cuopjit(c))
    plan = op.family.default_plan(op.problem(*args), config(mode).snapshot(), cuopjit.target.of_device(0))
    return set(plan.specs)


def prebuild(cases: list[tuple]) -> None:
    """Compile every case's kernels first, 16 at a time, so no timing or first call waits for NVRTC."""
    from cuopjit.build import pipeline
    wanted = set().union(*(specs(*c) for c in cases))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, cuopjit.target.of_device(0).arch), wanted))
    print(f"{len(wanted)} kernels built", flush=True)


def case(name: str, kind: str, batch: int, m: int, n: int, k: int, mode: str) -> dict:
    """Time one product in one mode with cuopjit and torch; check cuopjit against float64."""
    import torch
    a, b, bt, op, wrapper = operands(kind, batch, m, n, k)
    c = torch.full((m, n) if kind == "linear" else (batch, m, n), float("nan"), device="cuda")
    jit = wrapper(op)
    jit.set_jit_config(config(mode))
    ca, cb, cc = to_cuopjit(a), to_cuopjit(b), to_cuopjit(c)
    run = (lambda i: jit.forward(ca, cc)) if kind == "linear" else (lambda i: jit.forward(ca, cb, cc))
    run(0)
    torch.cuda.synchronize()
    ref = a.double() @ bt.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    del ref
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    mine, theirs = time_pair(run, lambda i: torch.matmul(a, bt, out=c))
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * batch * m * n * k
    return {"name": name, "kind": kind, "mode": mode, "shape": [batch, m, n, k], "b_layout": cb.layout,
            "cuopjit_kernel": getattr(jit.get_performance_profile(), "kernel_name", ""),
            "cuopjit_ms": mine["median_ms"], "torch_ms": theirs["median_ms"],
            "rounds_ms": {"cuopjit": mine["rounds_ms"], "torch": theirs["rounds_ms"]},
            "cuopjit_tflops": flops / mine["median_ms"] / 1e9, "torch_tflops": flops / theirs["median_ms"] / 1e9,
            "ratio": theirs["median_ms"] / mine["median_ms"], "rel_error": err}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--groups", default="bert,skinny")
    p.add_argument("--modes", default="fp32,tf32,3xtf32")
    p.add_argument("--out", default="benchmarks/results/linear.json")
    args = p.parse_args()
    require_gpu("benchmarks/linear.py")
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    cases = [(group, (*shape, mode)) for group in args.groups.split(",") for shape in GROUPS[group]
             for mode in args.modes.split(",") if not (group == "skinny" and mode == "3xtf32")]
    prebuild([c for _, c in cases])
    for group, spec in cases:
        rows.append({"group": group, **case(*spec)})
        r = rows[-1]
        print(f"{r['mode']:6s} {r['name']:16s} {r['cuopjit_tflops']:7.1f} {r['torch_tflops']:7.1f} TFLOP/s "
              f"x{r['ratio']:5.2f} err {r['rel_error']:.1e}  {r['cuopjit_kernel']}", flush=True)
        torch.cuda.empty_cache()
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, gpu=True)
    bar_chart(os.path.splitext(args.out)[0] + ".png", [f"{r['mode']} {r['name']}" for r in rows],
              [r["cuopjit_tflops"] for r in rows], [r["torch_tflops"] for r in rows], "torch (cuBLAS)", "TFLOP/s")
    print(f"{'mode':6s} {'product':16s} {'cuopjit':>8s} {'torch':>8s} {'ratio':>6s}  (TFLOP/s; 3xtf32 vs torch fp32)")
    for r in rows:
        print(f"{r['mode']:6s} {r['name']:16s} {r['cuopjit_tflops']:8.2f} {r['torch_tflops']:8.2f} {r['ratio']:6.2f}")
    for mode in args.modes.split(","):
        got = [r["ratio"] for r in rows if r["mode"] == mode and r["group"] == "bert"]
        if got:
            print(f"{mode}: BERT products min x{min(got):.2f}, geomean x{math.prod(got) ** (1 / len(got)):.2f}")


if __name__ == "__main__":
    main()
