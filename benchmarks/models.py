"""PyTorch models through the "cuopjit" torch.compile backend, against torch eager and torch.compile (inductor,
default mode) in the same run (issue 27's table).

    python benchmarks/models.py [--only NAME ...] [--dtype float32 bfloat16 float16] [--inductor none|goals|all]
                                [--no-first] [--rounds 4] [--repeat 5] [--out benchmarks/results/models.json]

Rows: torchvision ResNet-50 at batch 1 (backend option cuda_graphs) and at batch 32 in channels_last,
MobileNet-V2 at batch 32 in channels_last, ViT-B/16 at batch 8, and nn.TransformerEncoderLayer(768, 12, 3072,
batch_first=True) on 8 x 512 tokens, as it is and with cuda_graphs (eager pays its host time either way: a
host-bound row); each in fp32 (TF32 off in torch and cuopjit) and TF32 (on in both),
random weights (seed 0), eval mode under torch.no_grad(). `--dtype bfloat16` / `float16` (precision "bf16" /
"fp16") adds ResNet-50 batch 32 channels_last and the encoder layer rows with the model and input converted
(`.to(dtype)`), every side in that dtype (goal: cuopjit >= 1.2x eager bf16, issue 24); `float32` (the default)
gives the fp32 / TF32 rows of --precision. Per row: cuopjit, eager and inductor are timed in
alternating rounds (the order rotates each round: the H100's clock drifts within a run), CUDA events around
batches of calls, the median per call; the outputs are compared with eager (relative error). `--inductor goals`
compiles inductor only for the rows with goals against it (it compiles slowly), `none` for none.

"first result": ResNet-50 batch 1 (TF32) in a fresh process (a subprocess per side) with warm caches (the rows
above compiled it in this run: cuopjit's kernel cache, inductor's FX graph and Triton caches), from the call to
the synchronised result, model and input already on the GPU. Goal: cuopjit <= 1 s and <= 1/4 of inductor's.
The row also times `cuopjit.torch.compile(model)` (side "cuopjit.torch.compile": the same backend on a graph
captured by torch.fx.symbolic_trace instead of Dynamo).
JSON + PNG under benchmarks/results/ only when a GPU ran.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mb_common import _inner, _timed  # noqa: E402
from results_io import RESULTS, pyplot, require_gpu, save_json  # noqa: E402

SIDES = ("cuopjit", "eager", "inductor")
FAST = "cuopjit.torch.compile"   # first result only: the symbolic-trace entry (cuopjit/torch/fast_start.py)
# name, model, batch, channels_last, backend options, goals vs eager and vs inductor by precision
ROWS = [
    ("resnet50 b1 graphs", "resnet50", 1, False, {"cuda_graphs": True}, {"tf32": 1.5}, {"tf32": 1.0}),
    ("resnet50 b32 cl", "resnet50", 32, True, {}, {"fp32": 1.15, "tf32": 1.3, "bf16": 1.2},
     {"fp32": 1.0, "tf32": 1.0}),
    ("mobilenet_v2 b32 cl", "mobilenet_v2", 32, True, {}, {}, {}),
    ("vit_b_16 b8", "vit_b_16", 8, False, {}, {}, {}),
    ("encoder 8x512", "encoder", 8, False, {}, {"fp32": 1.1, "tf32": 1.2, "bf16": 1.2}, {"fp32": 1.0, "tf32": 1.0}),
    ("encoder 8x512 graphs", "encoder", 8, False, {"cuda_graphs": True}, {"tf32": 1.2, "bf16": 1.2}, {}),
]
PRECISIONS = ("fp32", "tf32")
HALF_PRECISIONS = {"bfloat16": "bf16", "float16": "fp16"}   # --dtype -> precision (torch dtype of that name)
HALF_ROWS = ("resnet50 b32 cl", "encoder 8x512", "encoder 8x512 graphs")   # the rows run in 16 bits


def build(kind: str, batch: int, channels_last: bool, dtype: str = "float32"):
    """(model on the GPU in eval mode, input) with random weights from seed 0, converted to `dtype`."""
    import torch
    torch.manual_seed(0)
    if kind == "encoder":
        model, x = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True), torch.randn(batch, 512, 768)
    else:
        import torchvision
        model, x = getattr(torchvision.models, kind)(), torch.randn(batch, 3, 224, 224)
        if kind == "vit_b_16":   # its classifier starts at zero (all outputs 0): give it weights
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    model, x = model.cuda().eval().to(getattr(torch, dtype)), x.cuda().to(getattr(torch, dtype))
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    return model, x


def set_tf32(on: bool) -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on


def compiled(model, side: str, options: dict):
    """The callable of one side; compiling happens at its first call."""
    import torch
    if side == "eager":
        return model
    if side == "cuopjit":
        return torch.compile(model, backend="cuopjit", dynamic=False, options=options or None)
    if side == FAST:
        return importlib.import_module("cuopjit.torch").compile(model, options=options)
    return torch.compile(model, dynamic=False)


def first_call(fn, x) -> tuple[object, float]:
    """(output, seconds of the first call, synchronised): a compiled side's compile + first run."""
    import torch
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(x)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def time_sides(fns: dict, x, rounds: int, repeat: int) -> dict:
    """Median ms per call of each side, in alternating rounds (the order rotates each round)."""
    calls = {s: (lambda i, f=f: f(x)) for s, f in fns.items()}
    inner = {s: _inner(c, 3, 0.5) for s, c in calls.items()}
    times: dict = {s: [] for s in calls}
    order = list(calls)
    for r in range(rounds):
        for s in order[r % len(order):] + order[:r % len(order)]:
            times[s] += _timed(calls[s], repeat, inner[s], 0)
    return {s: statistics.median(t) for s, t in times.items()}


def rel_error(got, ref) -> float:
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm())


def run_row(row: tuple, precision: str, with_inductor: bool, rounds: int, repeat: int) -> dict:
    import torch
    import cuopjit.torch as ct
    name, kind, batch, cl, options, goal_eager, goal_inductor = row
    set_tf32(precision == "tf32")
    torch._dynamo.reset()
    dtype = next((d for d, p in HALF_PRECISIONS.items() if p == precision), "float32")
    model, x = build(kind, batch, cl, dtype)
    sides = [s for s in SIDES if s != "inductor" or with_inductor]
    fns, firsts, outs = {}, {}, {}
    with torch.no_grad():
        for side in sides:
            fns[side] = compiled(model, side, {**options, "tf32": precision == "tf32"})
            out, firsts[side] = first_call(fns[side], x)
            outs[side] = out.clone()
        report = ct.last_report()
        ms = time_sides(fns, x, rounds, repeat)
    result = {"name": name, "model": kind, "batch": batch, "precision": precision, "channels_last": cl,
              "options": options, "ms": ms, "first_call_s": firsts,
              "vs_eager": ms["eager"] / ms["cuopjit"], "goal_vs_eager": goal_eager.get(precision),
              "vs_inductor": ms["inductor"] / ms["cuopjit"] if "inductor" in ms else None,
              "goal_vs_inductor": goal_inductor.get(precision),
              "rel_error_vs_eager": {s: rel_error(outs[s], outs["eager"]) for s in outs if s != "eager"},
              "report": report.summary() if report is not None else None}
    print(f"{name:22s} {precision}: cuopjit {ms['cuopjit']:.3f} ms, eager {ms['eager']:.3f} ms "
          f"({result['vs_eager']:.2f}x)" + (f", inductor {ms['inductor']:.3f} ms ({result['vs_inductor']:.2f}x)"
                                            if "inductor" in ms else "")
          + f"; first call {', '.join(f'{s} {t:.1f} s' for s, t in firsts.items())}; "
          f"error {result['rel_error_vs_eager']}", flush=True)
    return result


def first_child(side: str) -> None:
    """One side's first ResNet-50 batch-1 TF32 result in this fresh process: prints {"side", "seconds"}."""
    import torch
    importlib.import_module("cuopjit.torch")   # registers the backend
    set_tf32(True)
    model, x = build("resnet50", 1, False)
    with torch.no_grad():
        _, seconds = first_call(compiled(model, side, {"tf32": True}), x)
    print(json.dumps({"side": side, "seconds": seconds}))


def first_results(sides: list[str]) -> dict:
    """Each side's first result in a fresh process (warm caches: the rows compiled the same graphs)."""
    out = {}
    for side in sides:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--first-child", side],
                              capture_output=True, text=True, timeout=600)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        out[side] = json.loads(lines[-1])["seconds"] if proc.returncode == 0 and lines else None
        print(f"first result in a fresh process, {side}: {out[side]} s"
              + ("" if out[side] is not None else f" ({proc.stderr.strip().splitlines()[-1:]})"), flush=True)
    for side in ("cuopjit", FAST):
        if out.get(side) and out.get("inductor"):
            out[f"{side}_over_inductor"] = out[side] / out["inductor"]
    return out


def chart(rows: list[dict], png: str) -> None:
    """Speed-ups of cuopjit over eager and over inductor per row, a line at parity (nothing without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return
    labels = [f"{r['name']} {r['precision']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rows)), 5))
    for shift, key, label in ((-0.2, "vs_eager", "torch eager / cuopjit"), (0.2, "vs_inductor", "inductor / cuopjit")):
        shown = [(i, r[key]) for i, r in enumerate(rows) if r[key] is not None]
        bars = ax.bar([i + shift for i, _ in shown], [v for _, v in shown], 0.4, label=label)
        ax.bar_label(bars, [f"{v:.2f}" for _, v in shown], fontsize=6)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("speed-up of cuopjit (time ratio)")
    ax.set_title("torch.compile backend 'cuopjit' on PyTorch models")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"chart written to {png}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="row names containing any of these")
    ap.add_argument("--precision", nargs="*", default=list(PRECISIONS), choices=PRECISIONS,
                    help="the float32 rows' precisions")
    ap.add_argument("--dtype", nargs="*", default=["float32"], choices=("float32", *HALF_PRECISIONS),
                    help="float32: the --precision rows; bfloat16 / float16: ResNet-50 b32 and the encoder in 16 bits")
    ap.add_argument("--inductor", default="all", choices=("none", "goals", "all"))
    ap.add_argument("--no-first", action="store_true", help="skip the first-result subprocesses")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "models.json"))
    ap.add_argument("--first-child", choices=SIDES + (FAST,), help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.first_child:
        first_child(ns.first_child)
        return 0
    require_gpu("benchmarks/models.py")
    import torch
    importlib.import_module("cuopjit.torch")   # registers the backend
    for name in ("cache_size_limit", "recompile_limit"):     # every row recompiles the same forward
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    rows = [r for r in ROWS if ns.only is None or any(o in r[0] for o in ns.only)]
    results = []
    for row in rows:
        precisions = (ns.precision if "float32" in ns.dtype else []) + \
            [HALF_PRECISIONS[d] for d in ns.dtype if d in HALF_PRECISIONS and row[0] in HALF_ROWS]
        for precision in precisions:
            with_inductor = ns.inductor == "all" or (ns.inductor == "goals" and precision in row[6])
            results.append(run_row(row, precision, with_inductor, ns.rounds, ns.repeat))
    first = None
    if not ns.no_first and any(r[1] == "resnet50" and r[2] == 1 for r in rows):
        first = first_results(["eager", "cuopjit", FAST] + (["inductor"] if ns.inductor != "none" else []))
    device = torch.cuda.get_device_name()
    save_json(ns.out, {"device": device, "torch": torch.__version__, "rows": results, "first_result_s": first,
                       "command": " ".join(sys.argv)}, gpu=True)
    chart(results, os.path.splitext(ns.out)[0] + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
