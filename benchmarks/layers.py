"""Real network layers: every distinct conv and Linear layer of ResNet-50 (batch 32 and 1) and the GEMMs and
attention products of a BERT-base encoder layer (8 x 512 tokens), cuopjit vs torch in the same run.

What is timed (benchmarks/layer_cases.py lists the layers and builds the operators):
  conv    Convolution2DFloat vs F.conv2d (cuDNN, cudnn.benchmark on), no bias; channels_last on both sides
          where cuopjit's Convolution2D takes it (else NCHW; the JSON's "layouts" says which and why)
  linear  GemmFloat(trans_b=True), C = A @ Wᵀ with W [N, K] as torch keeps it, vs F.linear (cuBLAS)
  bmm     BatchMatMulFloat vs torch.bmm: scores Q @ Kᵀ with Kᵀ a transposed view on both sides (where cuopjit
          takes the view; else it reads a contiguous copy made once, outside the timing), context P @ V
in three precisions: fp32 (cuopjit's exact SIMT kernels; torch with TF32 off), tf32 (enable_tensor_core;
torch with TF32 on) and 3xtf32 (enable_tensor_core, precision="3xtf32"; against torch fp32, TF32 off).
Every kernel is compiled first, 16 at a time, from the same plans forward makes (layer_cases.planned), so no
timing includes NVRTC. Each ratio (torch ms / cuopjit ms: > 1 is faster) is a median of CUDA-event timed
batches, cuopjit and torch alternating in rounds (mb_common.time_pair); rel_error is ||y - ref|| / ||ref|| on
a slice of the output against torch float64. The summary is the issue's goal table: geometric mean and slowest
layer per set and precision, and the network-weighted ratio (each layer's time times its count).

--check-heuristics (batch 32) times every choice the family offers each layer (cuopjit/tuning.py
time_choices) and lists where the heuristic's first choice is more than 5% slower than the best.
--list ARCH prints each layer's plan and kernels for a named target with no GPU.

    python benchmarks/layers.py [--quick] [--only resnet50,bert] [--precisions fp32,tf32,3xtf32]
    python benchmarks/layers.py --check-heuristics [--only ...]
    python benchmarks/layers.py --list sm_90
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
import layer_cases as lc  # noqa: E402
from cuopjit import prewarm, tuning  # noqa: E402
from cuopjit import target as targets  # noqa: E402
from cuopjit.build import pipeline  # noqa: E402
from mb_common import time_pair  # noqa: E402
from results_io import RESULTS, ratio_panels, require_gpu, save_json  # noqa: E402

# (goal row, which rows, statistic, {precision: goal}) as the goal table lists them
GOALS = [("ResNet-50 conv layers, batch 32, geomean", ("resnet50", "conv", 32), "geomean",
          {"fp32": 1.05, "tf32": 1.05, "3xtf32": 2.0}),
         ("the same, slowest single layer", ("resnet50", "conv", 32), "min", {"fp32": 0.95, "tf32": 0.90, "3xtf32": 1.5}),
         ("ResNet-50 conv layers, batch 1, geomean", ("resnet50", "conv", 1), "geomean", {"fp32": 1.0, "tf32": 1.0}),
         ("BERT-base layer's GEMMs and attention products, each", ("bert", None, 8), "min",
          {"fp32": 1.0, "tf32": 1.0, "3xtf32": 2.0})]
MISS = 1.05          # --check-heuristics: the heuristic's pick slower than the best by more than this is a miss
ERR_ROWS = 256       # rel_error over the first image / rows / 2 batch entries (float64 references are slow)
JOBS = 16


def build(planned: list[prewarm.PlannedProblem], jobs: int = JOBS) -> int:
    """Compile every cubin the plans need, `jobs` at a time (cached ones are found, not rebuilt); how many."""
    todo = prewarm.kernels_to_build(planned)
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda item: pipeline.build(*item), todo))
    return len(todo)


def torch_tensors(layouts: dict):
    """`tensors` for layer_cases.cases on the GPU: torch tensors wrapped zero-copy (each Tensor keeps its torch
    tensor alive: `.torch` of the returned dict holds them for the torch side)."""
    import torch
    made = {}

    def tensors(layer: lc.Layer) -> dict:
        shapes = lc.operands(layer, layouts["conv"]["layout"], layouts["kt"]["layout"])
        t = {}
        for name, (shape, layout) in shapes.items():
            scale = 1 / math.sqrt(math.prod(shape[1:])) if name == "w" else 1.0
            if layout == lc.TRANSPOSED or (layer.trans_b and name == "b"):   # Kᵀ: a view of K [B, N, K]
                t[name] = torch.randn(*shape[:-2], shape[-1], shape[-2], device="cuda").transpose(-1, -2)
            else:
                t[name] = torch.randn(*shape, device="cuda") * scale
            if layout == lc.CHANNELS_LAST:
                t[name] = t[name].contiguous(memory_format=torch.channels_last)
            if name in ("y", "c"):
                t[name].fill_(float("nan"))
        made[layer] = t
        mine = {k: cuopjit.tensor(v if shapes[k][1] != lc.CONTIGUOUS else v.contiguous()) for k, v in t.items()}
        return mine
    tensors.torch = made
    return tensors


def torch_call(layer: lc.Layer, t: dict, conv_layout: str):
    """torch's forward of the layer on the same data (the conv weight channels_last when the input is)."""
    import torch
    import torch.nn.functional as F
    if layer.kind == "conv":
        n, c, h, w, k, kh, kw, s, p, g = layer.dims
        wt = t["w"].contiguous(memory_format=torch.channels_last) if conv_layout == lc.CHANNELS_LAST else t["w"]
        return lambda i: F.conv2d(t["x"], wt, None, s, p, 1, g)
    if layer.kind == "linear":
        return lambda i: F.linear(t["a"], t["w"])
    return lambda i: torch.bmm(t["a"], t["b"])


def rel_error(layer: lc.Layer, t: dict) -> float:
    """||cuopjit's output - float64 torch|| / ||float64 torch|| on a slice (first image / rows / 2 entries)."""
    import torch.nn.functional as F
    if layer.kind == "conv":
        n, c, h, w, k, kh, kw, s, p, g = layer.dims
        got, ref = t["y"][:1], F.conv2d(t["x"][:1].double(), t["w"].double(), None, s, p, 1, g)
    elif layer.kind == "linear":
        got, ref = t["c"][:ERR_ROWS], F.linear(t["a"][:ERR_ROWS].double(), t["w"].double())
    else:
        got, ref = t["c"][:2], t["a"][:2].double() @ t["b"][:2].double()
    return ((got.double() - ref).norm() / ref.norm()).item()


def set_tf32(on: bool) -> None:
    import torch
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def time_case(case: lc.Case, t: dict, conv_layout: str, rounds: int, repeat: int) -> dict:
    """One layer in one precision: both sides timed in alternating rounds, cuopjit checked against float64."""
    layer, jit = case.layer, case.jit
    jit.forward(*case.args, **case.kwargs)
    err = rel_error(layer, t)
    set_tf32(case.precision == "tf32")
    mine, theirs = time_pair(lambda i: jit.forward(*case.args, **case.kwargs), torch_call(layer, t, conv_layout),
                             rounds=rounds, repeat=repeat)
    set_tf32(False)
    prof = jit.get_performance_profile()
    return {"net": layer.net, "kind": layer.kind, "name": layer.name, "batch": layer.batch, "dims": list(layer.dims),
            "count": layer.count, "precision": case.precision, "choice": prof.plan_choice, "kernel": prof.kernel_name,
            "cuopjit_ms": mine["median_ms"], "torch_ms": theirs["median_ms"],
            "ratio": theirs["median_ms"] / mine["median_ms"], "cuopjit_tflops": layer.flops / mine["median_ms"] / 1e9,
            "torch_tflops": layer.flops / theirs["median_ms"] / 1e9, "rel_error": err,
            "rounds_ms": {"cuopjit": mine["rounds_ms"], "torch": theirs["rounds_ms"]}}


def summary(rows: list[dict]) -> list[dict]:
    """The goal table: per row and precision the statistic (geomean / min), min, max, the network-weighted
    ratio (sum of count x torch ms over sum of count x cuopjit ms) and whether the goal is met."""
    out = []
    for what, (net, kind, batch), stat, goals in GOALS:
        for precision in lc.PRECISIONS:
            got = [r for r in rows if r["net"] == net and r["batch"] == batch and r["precision"] == precision
                   and (kind is None or r["kind"] == kind)]
            if not got:
                continue
            ratios = [r["ratio"] for r in got]
            value = math.exp(sum(map(math.log, ratios)) / len(ratios)) if stat == "geomean" else min(ratios)
            weighted = sum(r["count"] * r["torch_ms"] for r in got) / sum(r["count"] * r["cuopjit_ms"] for r in got)
            goal = goals.get(precision)
            out.append({"goal_row": what, "precision": precision, "stat": stat, "value": value, "min": min(ratios),
                        "max": max(ratios), "weighted": weighted, "layers": len(got), "goal": goal,
                        "met": None if goal is None else value >= goal})
    return out


def chart(data: dict, path: str) -> None:
    """A bar per layer (ratio to torch, or the tuned best over the heuristic's pick), a panel per precision."""
    rows, key = (data["rows"], "ratio") if "rows" in data else (data["heuristics"], "best_over_pick")
    rows = [r for r in rows if key in r]
    labels = list(dict.fromkeys(r["name"] for r in rows))
    panels = {p: [next((r[key] for r in rows if r["name"] == n and r["precision"] == p), None) for n in labels]
              for p in lc.PRECISIONS if any(r["precision"] == p for r in rows)}
    ylabel = "torch ms / cuopjit ms" if key == "ratio" else "tuned best ms / heuristic's pick ms"
    ratio_panels(path, labels, panels, ylabel, data.get("device", ""))


def failure(case: lc.Case, exc: Exception) -> dict:
    """A case that raised: its name, precision and the one-line reason (printed too)."""
    print(f"{case.layer.name:34s} {case.precision:6s} FAILED: {type(exc).__name__}: {exc}", flush=True)
    return {"name": case.layer.name, "precision": case.precision, "error": f"{type(exc).__name__}: {exc}"}


def stop(signum, frame) -> None:
    """SIGTERM (a timeout) ends the measuring loop as an interrupt does: what was measured is written."""
    raise KeyboardInterrupt


def measured(work) -> bool:
    """Run `work`; False when it was interrupted (its rows so far are kept by the caller)."""
    try:
        work()
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", flush=True)
        return False
    return True


def check_heuristics(all_cases: list[lc.Case], out: list[dict], runs: int = 20) -> None:
    """Every choice of every case timed (compiled first, in parallel); the heuristic's pick against the best,
    appended to `out` one case at a time."""
    tgt = targets.of_device(cuopjit.get_device())
    work = []
    for c in all_cases:
        op, st = c.jit.operator, lc.settings(c.precision)
        problem = op.problem(*c.args, **c.kwargs)
        work.append((c, op, st, problem, op.family.choices(problem, st.config, tgt)))
    plans = [prewarm.PlannedProblem(c.layer.kind, p, tgt, op.family.plan(p, x, tgt))
             for c, op, st, p, choices in work for x in choices]
    print(f"{build(plans)} kernels built for every choice", flush=True)
    for c, op, st, problem, choices in work:
        try:
            times = tuning.time_choices(op, problem, choices, st, tgt, c.args, c.kwargs, runs=runs)
        except Exception as exc:   # recorded; the other cases still run
            out.append({**failure(c, exc), "miss": False})
            continue
        pick, best = choices[0].label, min(times, key=times.get)
        out.append({"name": c.layer.name, "net": c.layer.net, "kind": c.layer.kind, "dims": list(c.layer.dims),
                    "precision": c.precision, "pick": pick, "pick_ms": times[pick], "best": best,
                    "best_ms": times[best], "best_over_pick": times[best] / times[pick],
                    "miss": times[pick] > MISS * times[best], "choices_ms": times})
        r = out[-1]
        print(f"{r['name']:34s} {c.precision:6s} pick {pick} {times[pick]:.4f} ms, best {best} {times[best]:.4f} ms"
              f"{'  MISS' if r['miss'] else ''}", flush=True)


def listing(arch: str, layers: list[lc.Layer], precisions: list[str]) -> int:
    """Each case's plan and kernels for a named target, and the number of cubins prewarm would build."""
    lay = lc.layouts()
    all_cases = lc.cases(layers, precisions, lc.fake_tensors(lay))
    planned = lc.planned(all_cases, arch)
    for c, p in zip(all_cases, planned):
        print(f"{c.layer.name:34s} {c.precision:6s} {p.plan.choice:40s} {' + '.join(s.name for s in p.plan.specs)}")
    print(f"{len(prewarm.kernels_to_build(planned))} cubins for {arch}; layouts: "
          + ", ".join(f"{k} {v['layout']}" for k, v in lay.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="batch 32 only, two rounds of five timings")
    p.add_argument("--only", default="resnet50,bert", help="comma list of resnet50, bert")
    p.add_argument("--precisions", default=",".join(lc.PRECISIONS), help="comma list of fp32, tf32, 3xtf32")
    p.add_argument("--check-heuristics", action="store_true",
                   help="time every kernel choice of each batch-32 layer against the heuristic's pick")
    p.add_argument("--list", metavar="ARCH", help="print the plans for a target (e.g. sm_90) and stop; no GPU")
    p.add_argument("--out", help="JSON path (default benchmarks/results/layers[_quick|_heuristics].json)")
    args = p.parse_args(argv)
    precisions = [x for x in args.precisions.split(",") if x]
    for x in precisions:
        if x not in lc.PRECISIONS:
            raise SystemExit(f"--precisions {x!r}: choose from {', '.join(lc.PRECISIONS)}")
    nets = args.only.split(",")
    batches = (32,) if args.quick or args.check_heuristics else lc.RESNET_BATCHES
    layers, source = lc.all_layers(batches if "resnet50" in nets else ())
    layers = [x for x in layers if x.net in nets]
    if args.list:
        return listing(args.list, layers, precisions)
    require_gpu("benchmarks/layers.py")
    return run(args, layers, precisions, source)


def run(args: argparse.Namespace, layers: list[lc.Layer], precisions: list[str], source: str) -> int:
    """The GPU run: build, then time (or check the heuristics), then write the JSON and the chart."""
    import torch
    torch.backends.cudnn.benchmark = True
    set_tf32(False)
    lay = lc.layouts()
    resnet = [x for x in layers if x.net == "resnet50"]
    tensors = torch_tensors(lay)
    all_cases = lc.cases(layers, precisions, tensors)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": True, "layouts": lay, "resnet50_source": source,
            "resnet50_matches_formula": resnet == [x for b in dict.fromkeys(x.batch for x in resnet)
                                                   for x in lc.resnet50_formula(b)]}
    name = "layers_heuristics" if args.check_heuristics else "layers_quick" if args.quick else "layers"
    out = args.out or str(RESULTS / f"{name}.json")
    signal.signal(signal.SIGTERM, stop)   # a run cut short (timeout) still writes what it measured
    if args.check_heuristics:
        found = []
        complete = measured(lambda: check_heuristics(all_cases, found))
        save_json(out, {**info, "complete": complete, "miss_above": MISS, "heuristics": found}, gpu=True)
        chart({**info, "heuristics": found}, os.path.splitext(out)[0] + ".png")
        misses = [r for r in found if r["miss"]]
        print(f"{len(misses)} of {len(found)} picks more than {MISS - 1:.0%} slower than the best:")
        for r in misses:
            print(f"  {r['name']:34s} {r['precision']:6s} {r['pick']} -> {r['best']} ({1 / r['best_over_pick']:.2f}x)")
        return 0
    print(f"{build(lc.planned(all_cases))} kernels built", flush=True)
    rounds, repeat = (2, 5) if args.quick else (4, 10)
    rows, errors = [], []

    def time_all() -> None:
        for c in all_cases:
            try:
                rows.append(time_case(c, tensors.torch[c.layer], lay["conv"]["layout"], rounds, repeat))
            except Exception as exc:   # one layer's failure is recorded; the others still run
                errors.append(failure(c, exc))
                continue
            r = rows[-1]
            print(f"{r['name']:34s} {r['precision']:6s} {r['cuopjit_ms']:8.4f} {r['torch_ms']:8.4f} ms "
                  f"{r['ratio']:5.2f}x err {r['rel_error']:.1e} {r['choice']}", flush=True)
    complete = measured(time_all)
    goals = summary(rows)
    save_json(out, {**info, "complete": complete, "rows": rows, "goals": goals, "errors": errors}, gpu=True)
    chart({**info, "rows": rows}, os.path.splitext(out)[0] + ".png")
    for g in goals:
        goal = "" if g["goal"] is None else f" (goal >= {g['goal']:.2f}: {'met' if g['met'] else 'NOT met'})"
        print(f"{g['goal_row']:52s} {g['precision']:6s} {g['stat']:7s} {g['value']:.2f}x  min {g['min']:.2f} max "
              f"{g['max']:.2f} weighted {g['weighted']:.2f}{goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
