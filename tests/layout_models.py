"""NumPy models of the channels_last and layout-copy kernels, block by block and thread by thread as their templates
index (templates/shape/transpose.cu.jinja, batchnorm/batchnorm_nhwc.cu.jinja and batchnorm.cu.jinja's finalize,
pool/pool_nhwc.cu.jinja), so a plan made on the CPU runs on NumPy buffers: a wrong argument, grid or index
shows up as a wrong or NaN value (outputs start NaN) or an element written twice, before any GPU.

`run(plan, buffers)`: buffers are flat float64 arrays, one per operand of the plan, then the workspace.
`fake(shape, dtype, layout, data)` makes a tensor of no memory whose logical contents live here, and
`emulate(op, *args, **kwargs)` runs the plan op's forward would run (for sm_90) on those contents.
"""
from __future__ import annotations

import itertools

import numpy as np

from cuopjit import layout, target
from cuopjit.config import DEFAULT, RunSettings
from cuopjit.tensor import Tensor

from conftest import guarded

SM90 = target.named("sm_90")
CONTENTS: dict[int, tuple[Tensor, np.ndarray]] = {}   # fake pointer -> (tensor, logical float64 contents)
_addresses = itertools.count(1)


def fake(shape, dtype=np.float32, lay: str = layout.CONTIGUOUS, data=None, at: int = 0) -> Tensor:
    """A tensor of no memory at its own fake address (+ `at` bytes) holding `data` (default NaN), logically."""
    t = Tensor._view((next(_addresses) << 32) + at, tuple(shape), np.dtype(dtype), 0, None, lay)
    CONTENTS[t.ptr] = (t, np.full(t.shape, np.nan) if data is None else np.array(data, np.float64).reshape(t.shape))
    return t


def laid(shape, dtype, lay: str) -> Tensor:
    """A real, NaN-poisoned output of layout `lay` inside guard regions (conftest.check_guards works on it)."""
    g = guarded(shape, dtype)
    return Tensor._view(g.ptr, g.shape, g.dtype, g.device, g._owner, lay)


def value(t: Tensor) -> np.ndarray:
    """The logical contents of a fake tensor."""
    return CONTENTS[t.ptr][1]


def emulate(op, *args, config=None, **kwargs) -> dict[int, np.ndarray]:
    """Run op's plan for these fake operands (sm_90, `config` a JITConfig snapshot or None) on their contents;
    returns how many times each operand's elements were stored, by pointer (storage order)."""
    settings = DEFAULT if config is None else RunSettings.of(config)
    plan = op.plan(*args, settings=settings, target=SM90, **kwargs)
    pointers = op.bind(*args, **kwargs)[1][:len(plan.operands)]
    tensors = [CONTENTS[p][0] for p in pointers]
    bufs = [layout.to_storage(value(t), t.layout).ravel().copy() for t in tensors]
    bufs.append(np.full(plan.workspace // tensors[0].dtype.itemsize + 1, np.nan))
    writes = [np.zeros(b.size, np.int64) for b in bufs]
    run(plan, bufs, tensors[0].dtype.itemsize, writes)
    for t, b in zip(tensors, bufs):
        CONTENTS[t.ptr] = (t, layout.to_logical(b.reshape(layout.storage_shape(t.shape, t.layout)), t.layout))
    return {p: w for p, w in zip(pointers, writes)}


def _pointer(arg, buffers, itemsize):
    buf = buffers[arg.value]
    return buf[arg.offset // itemsize:]


def run(plan, buffers: list[np.ndarray], itemsize: int, writes: list[np.ndarray] | None = None) -> None:
    """Run every launch of `plan` on `buffers`; `writes[k]` (optional) counts the stores into buffer k."""
    for kl in plan.launches:
        args = [_pointer(a, buffers, itemsize) if a.kind == "ptr" else a.value for a in kl.args]
        counts = None
        if writes is not None:
            out = next(a for a in kl.args[1:] if a.kind == "ptr")
            counts = writes[out.value][out.offset // itemsize:]
        MODELS[kl.spec.kernel](dict(kl.spec.params), kl.grid[0], kl.block[0], counts, *args)


def _store(dst, idx, values, counts) -> None:
    dst[idx] = values
    if counts is not None:
        np.add.at(counts, idx, 1)


def transpose(p, grid, threads, counts, x, y, rows, cols, tiles_c, per_matrix, tiles):
    tr, tc = p["TR"], p["TC"]
    assert threads == p["THREADS"] and tr * tc % threads == 0
    srow = tc + 1 if tr >= 32 else tc + 32 // tr
    e = np.arange(tr * tc)
    for blk in range(grid):
        for t in range(blk, tiles, grid):
            b = t // per_matrix
            rest = t - b * per_matrix
            r0, c0 = rest // tiles_c * tr, rest % tiles_c * tc
            base = b * rows * cols
            tile = np.full(tr * srow, np.nan)
            r, c = e // tc, e % tc
            m = (r < rows - r0) & (c < cols - c0)
            tile[(r * srow + c)[m]] = x[base + r0 * cols + c0 + (r * cols + c)[m]]
            c, r = e // tr, e % tr
            m = (r < rows - r0) & (c < cols - c0)
            _store(y, base + c0 * rows + r0 + (c * rows + r)[m], tile[(r * srow + c)[m]], counts)


def _lanes(threads, cb):
    tid = np.arange(threads)
    return tid % cb, tid // cb


def batchnorm_nhwc_apply(p, grid, threads, counts, x, y, gamma, beta, mean, var, rows, cols, cb, rl, chunks, eps):
    vec, nv, rev = p["VEC"], p["NV"], p["REVERSE"]
    lane_c, lane_r = _lanes(threads, cb)
    step = rl * nv
    groups = -(-rows // step)
    for blk in range(grid):
        col = (blk % chunks) * cb + lane_c
        act = (lane_r < rl) & (col < cols)
        for g in range(blk // chunks, groups, grid // chunks):
            r0 = (groups - 1 - g if rev else g) * step + lane_r
            for i in range(nv):
                m = act & (r0 + i * rl < rows)
                for j in range(vec):
                    ch = (col * vec + j)[m]
                    scale = gamma[ch] / np.sqrt(var[ch] + eps)
                    idx = ((r0 + i * rl) * cols * vec + col * vec + j)[m]
                    _store(y, idx, x[idx] * scale + beta[ch] - mean[ch] * scale, counts)


def _stat(v):
    return (len(v), float(np.mean(v)), float(np.sum((v - np.mean(v)) ** 2))) if len(v) else (0, 0.0, 0.0)


def _combine(a, b):
    n = a[0] + b[0]
    if n == 0:
        return a
    d, fb = b[1] - a[1], b[0] / n
    return n, a[1] + d * fb, a[2] + b[2] + d * d * a[0] * fb


def batchnorm_nhwc_stats(p, grid, threads, counts, x, ws, rows, cols, cb, rl, chunks, splits):
    vec, nv = p["VEC"], p["NV"]
    step = rl * nv
    for blk in range(grid):
        split = blk // chunks
        for c in range(cb):
            col = (blk % chunks) * cb + c
            if col >= cols:
                continue
            for j in range(vec):
                lane = []
                for r in range(rl):
                    picked = [r0 + i * rl for r0 in range(split * step + r, rows, splits * step) for i in range(nv)
                              if r0 + i * rl < rows]
                    lane.append(_stat(x[np.array(picked, dtype=np.int64) * cols * vec + col * vec + j]))
                off = 1
                while off < rl:      # the kernel's tree
                    for r in range(0, rl, 2 * off):
                        if r + off < rl:
                            lane[r] = _combine(lane[r], lane[r + off])
                    off *= 2
                at = 3 * ((col * vec + j) * splits + split)
                _store(ws, np.arange(at, at + 3), np.array(lane[0], dtype=np.float64), counts)


def batchnorm_finalize(p, grid, threads, counts, ws, batch_mean, batch_var, running_mean, running_var, c_total,
                       splits, momentum):
    per_block = threads // 32
    for c in range(min(grid * per_block, c_total)):
        st = (0, 0.0, 0.0)
        for s in range(splits):
            st = _combine(st, tuple(ws[3 * (c * splits + s): 3 * (c * splits + s) + 3]))
        batch_mean[c], batch_var[c] = st[1], st[2] / st[0]
        running_mean[c] = (1 - momentum) * running_mean[c] + momentum * st[1]
        running_var[c] = (1 - momentum) * running_var[c] + momentum * st[2] / (st[0] - 1)


def batchnorm_nhwc_finalize(p, grid, threads, counts, ws, batch_mean, batch_var, running_mean, running_var, splits,
                            momentum):
    """A block per channel (grid = C)."""
    batchnorm_finalize(p, grid, 32, counts, ws, batch_mean, batch_var, running_mean, running_var, grid, splits,
                       momentum)


def _reduce(op, values, axis):
    return np.max(values, axis=axis) if op == "max" else np.sum(values, axis=axis)


def pool2d_nhwc(p, grid, threads, counts, x, y, total, h, w, oh_n, ow_n, cv):
    vec, op = p["VEC"], p["op"]
    idx = np.arange(total)   # grid-stride: every output vector, whatever the grid
    pix, cvi = idx // cv, idx % cv
    ow, row = pix % ow_n, pix // ow_n
    oh, n = row % oh_n, row // oh_n
    for j in range(vec):
        vals = []
        for kh in range(p["KH"]):
            for kw in range(p["KW"]):
                ih, iw = oh * p["SH"] - p["PH"] + kh, ow * p["SW"] - p["PW"] + kw
                inside = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
                at = ((n * h * w + np.clip(ih, 0, h - 1) * w + np.clip(iw, 0, w - 1)) * cv + cvi) * vec + j
                vals.append(np.where(inside, x[at], -np.inf if op == "max" else 0.0))
        out = _reduce(op, np.array(vals), 0)
        _store(y, idx * vec + j, out / (p["KH"] * p["KW"]) if op == "avg" else out, counts)


def global_nhwc(p, grid, threads, counts, x, out, hw, cols, cb, rl, chunks, splits):
    vec, op, items = p["VEC"], p["op"], p["ITEMS"]
    step = rl * items
    for blk in range(grid):
        rest = blk // chunks
        split, n = rest % splits, rest // splits
        for c in range(cb):
            col = (blk % chunks) * cb + c
            if col >= cols:
                continue
            for j in range(vec):
                pix = [q + k * rl for r in range(rl) for q in range(split * step + r, hw, splits * step)
                       for k in range(items) if q + k * rl < hw]
                vals = x[(n * hw + np.array(pix, dtype=np.int64)) * cols * vec + col * vec + j]
                acc = (-np.inf if op == "max" else 0.0) if not len(vals) else _reduce(op, vals, None)
                ch = cols * vec
                at = (n * ch if splits == 1 else (n * splits + split) * ch) + col * vec + j
                _store(out, np.array([at]), np.array([acc / hw if op == "avg" and splits == 1 else acc]), counts)


def global_nhwc_final(p, grid, threads, counts, ws, y, total, c, splits, hw):
    i = np.arange(total)   # grid-stride: every element, whatever the grid
    n, ch = i // c, i % c
    parts = np.stack([ws[(n * splits + s) * c + ch] for s in range(splits)])
    acc = _reduce(p["op"], parts, 0)
    _store(y, i, acc / hw if p["op"] == "avg" else acc, counts)


MODELS = {f.__name__: f for f in (transpose, batchnorm_nhwc_apply, batchnorm_nhwc_stats, batchnorm_nhwc_finalize,
                                  pool2d_nhwc, global_nhwc, global_nhwc_final)}
