"""benchmarks/fusion.py's ResNet-50 bottleneck block and host-time rows (imported there; not a script).

Block: torchvision's bottleneck of stage conv2_x at batch 32 in channels_last (x: 32 x 256 x 56 x 56), three
convolutions (1x1 256 -> 64, 3x3 64 -> 64, 1x1 64 -> 256), each followed by an inference BatchNorm, ReLU after
the first two and after the residual add of x. cuopjit: three Convolution2DFloat, each BatchNorm folded
(fold_batchnorm) into its epilogue, relu(acc * scale + shift) and relu(acc * scale + shift + residual) with
residual = x; torch eager: nn.Conv2d, nn.BatchNorm2d (eval), ReLU and add, cudnn.benchmark. fp32: TF32 off in
both (cuopjit's exact kernels); tf32: on in both (enable_tensor_core=True). Timed in alternating rounds
(mb_common.time_pair); the block's output against eager's (relative error). Goal: speedup (eager / cuopjit)
TF32 >= 1.3, fp32 >= 1.15.

Host: a GEMM and a Conv2D on tiny problems (the host, not the GPU, sets the pace). The first forward of an
epilogue no kernel of this process or cache has seen (a fresh number literal in it): the kernels it compiled
(the cache's compile counter; goal 1). Then the warm forward's host time fused / plain (goal <= 1.05), each
the median of batches of 500 calls, interleaved batch by batch, with an untimed synchronize between batches.
"""
from __future__ import annotations

import time

import numpy as np

import cuopjit
from cuopjit.cache import get_cache
from launch import BATCH, per_call_us
from mb_common import time_pair

BLOCK = (32, 256, 64, 56)            # batch, block channels, bottleneck width, image side
BLOCK_GOAL = {"fp32": 1.15, "tf32": 1.3}
HOST_GOAL = 1.05


def block_cases() -> list[dict]:
    """The bottleneck block in fp32 and TF32: cuopjit's three fused convolutions and torch eager's modules."""
    import torch
    n, c, m, side = BLOCK
    torch.manual_seed(0)
    x = torch.randn(n, c, side, side, device="cuda").contiguous(memory_format=torch.channels_last)
    layers = []
    for cin, cout, k in ((c, m, 1), (m, m, 3), (m, c, 1)):
        conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2, bias=False).cuda().eval()
        bn = torch.nn.BatchNorm2d(cout).cuda().eval()
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5), bn.bias.normal_(0, 0.1), bn.running_mean.normal_(0, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
        layers.append((conv.to(memory_format=torch.channels_last), bn, k))

    def eager():
        h = x
        for i, (conv, bn, _) in enumerate(layers):
            h = bn(conv(h))
            h = torch.relu(h + x if i == 2 else h)
        return h

    out = []
    for mode, tc in (("fp32", False), ("tf32", True)):
        X, ops, outs = cuopjit.tensor(x), [], []
        for i, (conv, bn, k) in enumerate(layers):
            op = cuopjit.Convolution2DFloat(conv.in_channels, conv.out_channels, k, k)
            op.set_weight(cuopjit.tensor(conv.weight.detach().contiguous()))
            params = (t.detach().double().cpu().numpy() for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var))
            scale, shift = cuopjit.fold_batchnorm(*params, bn.eps)
            expr = "relu(acc * scale + shift" + (" + residual)" if i == 2 else ")")
            op.set_epilogue(expr, scale=cuopjit.tensor(scale.astype(np.float32)),
                            shift=cuopjit.tensor(shift.astype(np.float32)))
            jit = cuopjit.JITConvolution2DFloat(op)
            cfg = cuopjit.JITConfig()
            cfg.enable_tensor_core = tc
            jit.set_jit_config(cfg)
            ops.append((jit, k // 2))
            outs.append(cuopjit.empty((n, conv.out_channels, side, side), layout="channels_last"))

        def mine(_i, ops=ops, outs=outs, X=X):
            h = X
            for i, ((jit, pad), y) in enumerate(zip(ops, outs)):
                jit.forward(h, y, pad_h=pad, pad_w=pad, **({"residual": X} if i == 2 else {}))
                h = y
            return h
        out.append({"name": f"resnet50 bottleneck b{n} cl {mode}", "mode": mode, "tf32": tc, "mine": mine,
                    "eager": eager, "goal": BLOCK_GOAL[mode], "outs": outs})
    return out


def run_block(case: dict, repeat: int) -> dict:
    """The block timed against eager in alternating rounds, its output checked against eager's."""
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = case["tf32"]
    row = {"name": case["name"], "mode": case["mode"], "goal": case["goal"]}
    try:
        with torch.no_grad():
            got, want = case["mine"](0).to_numpy(), case["eager"]().float().cpu().numpy()
            mine_t, eager_t = time_pair(case["mine"], lambda i: case["eager"](), repeat=repeat)
    except Exception as exc:     # a layout path still being built: the row records why, the others run
        row["error"] = f"{type(exc).__name__}: {exc}"
        print(f"{case['name']:<44} failed: {row['error']}", flush=True)
        return row
    speedup = eager_t["median_ms"] / mine_t["median_ms"]
    row.update(cuopjit=mine_t, eager=eager_t, speedup=speedup, goal_met=speedup >= case["goal"],
               rel_error=float(np.linalg.norm(got - want) / np.linalg.norm(want)))
    print(f"{case['name']:<44} cuopjit {mine_t['median_ms']:.4f} ms  eager {eager_t['median_ms']:.4f} ms  "
          f"x{speedup:.3f} ({'MET' if row['goal_met'] else 'missed'} >= {case['goal']}; rel err "
          f"{row['rel_error']:.1e})", flush=True)
    return row


def host_rows() -> list[dict]:
    """A new epilogue's first forward (kernels compiled) and the warm host time fused / plain, GEMM and Conv2D."""
    fresh = f"{1 + time.time_ns() % 999983 / 1e6:.6f}"     # a number literal no earlier run compiled
    a, w, bias = cuopjit.random((8, 16), seed=1), cuopjit.random((16, 16), seed=2), cuopjit.random((16,), seed=3)
    x, k = cuopjit.random((1, 8, 6, 6), seed=4), cuopjit.random((8, 8, 3, 3), seed=5)
    rows = []
    for name, make, args, kwargs in (
            ("gemm 8x16x16", lambda: cuopjit.GemmFloat(trans_b=True), (a, cuopjit.empty((8, 16))), {}),
            ("conv 8->8 3x3 6^2", lambda: cuopjit.Convolution2DFloat(8, 8, 3, 3), (x, cuopjit.empty((1, 8, 6, 6))),
             {"pad_h": 1, "pad_w": 1})):
        plain, fused = make(), make()
        for op in (plain, fused):
            op.set_weight(w if name.startswith("gemm") else k)
        plain.forward(*args, **kwargs)
        cuopjit.synchronize()
        fused.set_epilogue(f"relu(acc + bias) * {fresh}", bias=bias if name.startswith("gemm") else
                           cuopjit.random((8,), seed=6))
        before = get_cache().stats().compiles
        fused.forward(*args, **kwargs)
        cuopjit.synchronize()
        compiles = get_cache().stats().compiles - before
        us = per_call_us({"plain": lambda: plain.forward(*args, **kwargs),     # warms both, then 40 rounds
                          "fused": lambda: fused.forward(*args, **kwargs)}, 40 * BATCH)
        ratio = us["fused"] / us["plain"]
        rows.append({"name": name, "first_forward_compiles": compiles, "plain_us": us["plain"],
                     "fused_us": us["fused"], "ratio": ratio, "goal": HOST_GOAL,
                     "goal_met": compiles == 1 and ratio <= HOST_GOAL})
        print(f"host {name:<30} first forward compiled {compiles} kernel(s); warm forward {us['fused']:.2f} us fused "
              f"vs {us['plain']:.2f} us plain: x{ratio:.3f} ({'MET' if rows[-1]['goal_met'] else 'missed'})",
              flush=True)
    return rows
