"""Coverage models of the streaming and per-channel kernels: elementwise maps, dot, view copies, pools, batch norm.

Values: copies store the source element (plan_coverage.tag), so a test checks y[i] came from x[i] (or from
the view's element); reductions store the number of elements they summed (dot: n; global pool: H W; batch
norm's statistics: N H W per channel).
"""
from __future__ import annotations

import numpy as np

from plan_coverage import CoverageError, expect, fills, stride_visits, tag, threads_of, unpack


def _stream(sim, kl, p, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(vector starts, scalar tail indices) each block of elementwise.cu.jinja / dot_partial visits, flattened:
    full chunks of THREADS x ITEMS vectors by block (grid-stride), then the rest one scalar per thread."""
    T, vec, items = p["THREADS"], p["VEC"], p["ITEMS"]
    expect(sim, threads_of(kl) == T, f"block of {threads_of(kl)} threads, the kernel strides by {T}")
    chunk = T * items
    full = n // vec // chunk
    gx = kl.grid[0]
    c = stride_visits(np.arange(gx), gx, full)
    base = ((c * chunk)[:, None] + np.arange(T)[None, :]).ravel()
    vecs = ((base[:, None] + np.arange(items)[None, :] * T) * vec).ravel()
    tail = stride_visits(full * chunk * vec + np.arange(gx * T), gx * T, n)
    return vecs, tail


def elementwise(sim, kl, p):
    """y[i] = f(x[i], y[i]): one element per thread (simple) or full vector chunks per block plus a scalar tail."""
    a = unpack(sim, kl, ["x", "y", "n", "alpha"])
    n = a["n"]
    if p["simple"]:
        expect(sim, threads_of(kl) == p["THREADS"], f"block of {threads_of(kl)} threads, the kernel is built for "
               f"{p['THREADS']}")
        i = np.arange(kl.grid[0] * p["THREADS"], dtype=np.int64)
        groups = [(i[i < n], 1)]
    else:
        vecs, tail = _stream(sim, kl, p, n)
        full = n // p["VEC"] // (p["THREADS"] * p["ITEMS"])
        expect(sim, kl.grid[0] >= full, f"grid of {kl.grid[0]} blocks for {full} full chunks: blocks loop "
               "(the plan gives each block one chunk)")
        groups = [(vecs, p["VEC"]), (tail, 1)]
    for idx, vec in groups:
        if idx.size == 0:
            continue
        elems = (idx[:, None] + np.arange(vec)[None, :]).ravel()
        a["x"].read(idx, vec=vec)
        if p["op"] == "axpy":
            a["y"].read(idx, vec=vec)
        a["y"].write(idx, vec=vec, values=tag(a["x"], elems))


def dot_partial(sim, kl, p):
    """Block b sums its grid-stride share of x . y into partial[b] (the number of products is its value)."""
    a = unpack(sim, kl, ["x", "y", "partial", "n"])
    T, vec, items, gx = p["THREADS"], p["VEC"], p["ITEMS"], kl.grid[0]
    fills(sim, gx, -(-a["n"] // (T * vec * items)))
    vecs, tail = _stream(sim, kl, p, a["n"])
    for idx, v in ((vecs, vec), (tail, 1)):
        if idx.size:
            a["x"].read(idx, vec=v)
            a["y"].read(idx, vec=v)
    chunk = T * items
    full = a["n"] // vec // chunk
    per_block = np.bincount(np.arange(full) % gx, minlength=gx) * chunk * vec if full else np.zeros(gx, np.int64)
    tail_owner = ((tail - full * chunk * vec) % (gx * T)) // T
    per_block = per_block + np.bincount(tail_owner, minlength=gx)
    a["partial"].write(np.arange(gx), values=per_block)


def dot_final(sim, kl, p):
    """One block adds partial[0 .. count) into out[0]."""
    a = unpack(sim, kl, ["partial", "out", "count"])
    expect(sim, kl.grid == (1, 1, 1), f"grid {kl.grid}: the final sum is one block")
    got = a["partial"].read(np.arange(a["count"]))
    a["out"].write(np.array([0]), values=got.sum())


def view_copy(sim, kl, p):
    """y[v] = x[src(v)]: output vector v is run row v / run, column v % run, the row decomposed over NOUT dims."""
    nout = p["NOUT"]
    names = ["x", "y", "total", "run", "base"] + [f"{k}{d}" for d in range(nout) for k in ("d", "s")]
    a = unpack(sim, kl, names)
    vec = p["VEC"]
    expect(sim, threads_of(kl) == p["THREADS"], f"block of {threads_of(kl)} threads, the kernel strides by "
           f"{p['THREADS']}")
    fills(sim, kl.grid[0], -(-a["total"] // p["THREADS"]))
    v = np.arange(a["total"], dtype=np.int64)
    rem = v // a["run"]
    src = a["base"] + (v - rem * a["run"]) * vec
    for d in reversed(range(nout)):
        q = rem // a[f"d{d}"]
        src += (rem - q * a[f"d{d}"]) * a[f"s{d}"]
        rem = q
    a["x"].read(src, vec=vec)
    elems = (src[:, None] + np.arange(vec)[None, :]).ravel()
    a["y"].write(v * vec, vec=vec, values=tag(a["x"], elems))


def pool2d(sim, kl, p):
    """Window pools: thread idx (grid-stride) writes OPT adjacent outputs of output row idx / groups."""
    a = unpack(sim, kl, ["x", "y", "total", "H", "W", "OH", "OW", "groups"])
    T, opt, vec = p["THREADS"], p["OPT"], p["VEC"]
    expect(sim, threads_of(kl) == T, f"block of {threads_of(kl)} threads, the kernel strides by {T}")
    H, W, OH, OW, groups = a["H"], a["W"], a["OH"], a["OW"], a["groups"]
    fills(sim, kl.grid[0], -(-a["total"] // T))
    idx = np.arange(a["total"], dtype=np.int64)
    row, g = idx // groups, idx % groups
    oh, plane = row % OH, row // OH
    ow0 = g * opt
    ih0, iw0 = oh * p["SH"] - p["PH"], ow0 * p["SW"] - p["PW"]
    span = (opt - 1) * p["SW"] + p["KW"]
    spanv = -(-span // vec)
    for kh in range(p["KH"]):
        ih = ih0 + kh
        ok = (ih >= 0) & (ih < H) if p["PH"] > 0 else np.ones_like(ih, bool)
        rbase = plane * H * W + ih * W
        wide = ok & (iw0 + spanv * vec <= W) if p["VEC_IN"] else np.zeros_like(ok)
        if wide.any():
            starts = (rbase[wide] + iw0[wide])[:, None] + np.arange(spanv)[None, :] * vec
            a["x"].read(starts.ravel(), vec=vec)
        narrow = ok & ~wide
        iw = iw0[narrow][:, None] + np.arange(span)[None, :]
        inside = (iw >= 0) & (iw < W)
        a["x"].read((rbase[narrow][:, None] + iw)[inside])
    dst = row * OW + ow0
    full = (ow0 + opt <= OW) & bool(p["VEC_OUT"])
    if full.any():
        a["y"].write((dst[full][:, None] + np.arange(0, opt, vec)[None, :]).ravel(), vec=vec,
                     values=p["KH"] * p["KW"])
    for o in range(opt):
        one = ~full & (ow0 + o < OW)
        a["y"].write(dst[one] + o, values=p["KH"] * p["KW"])


def global_pool(sim, kl, p):
    """THREADS / TPR rows per block (grid-stride); a row's TPR lanes read its vectors lane, lane + TPR, ..."""
    a = unpack(sim, kl, ["x", "y", "rows", "hw"])
    T, tpr, vg = p["THREADS"], p["TPR"], p["VEC_G"]
    expect(sim, threads_of(kl) == T and T % tpr == 0 and (tpr <= 32 or tpr % 32 == 0),
           f"block of {threads_of(kl)} threads, {tpr} per row, built for {T}")
    rows, hw = a["rows"], a["hw"]
    per = T // tpr
    expect(sim, kl.grid[0] == min(-(-rows // per), 2 ** 31 - 1), f"grid of {kl.grid[0]} blocks for {rows} planes, "
           f"{per} per block (a block per {per} planes)")
    r0 = stride_visits(np.arange(kl.grid[0]) * per, kl.grid[0] * per, rows)
    row = (r0[:, None] + np.arange(per)[None, :]).ravel()
    row = row[row < rows]
    nv = hw // vg
    cols = stride_visits(np.arange(tpr), tpr, nv)
    if cols.size and row.size:
        a["x"].read((row[:, None] * hw + cols[None, :] * vg).ravel(), vec=vg)
    a["y"].write(row, values=np.unique(cols).size * vg)


# --- batch norm ----------------------------------------------------------------------------------------------
def _tiles(p, hw: int) -> int:
    return -(-(hw // p["VEC"]) // (p["THREADS"] * p["NV"]))


def _plane_apply(sim, kl, p, a, values_of) -> None:
    """Per-plane apply: tile t (reversed when REVERSE) of plane t / tiles, THREADS x NV vectors."""
    T, vec, nv = p["THREADS"], p["VEC"], p["NV"]
    C, hw, total = a["C"], a["hw"], a["total"]
    tiles = _tiles(p, hw)
    n_tiles = total // hw * tiles
    expect(sim, kl.grid[0] == min(n_tiles, 2 ** 31 - 1), f"grid of {kl.grid[0]} blocks for {n_tiles} tiles "
           "(a block per tile)")
    i = stride_visits(np.arange(kl.grid[0]), kl.grid[0], n_tiles)
    t = n_tiles - 1 - i if p["REVERSE"] else i
    plane = t // tiles
    first = (t - plane * tiles) * (T * nv)
    v = (first[:, None] + np.arange(T * nv)[None, :])
    ok = v < hw // vec
    idx = (plane[:, None] * hw + v * vec)[ok]
    c = np.broadcast_to((plane % C)[:, None], ok.shape)[ok]
    a["x"].read(idx, vec=vec)
    a["y"].write(idx, vec=vec, values=values_of(c))
    return plane % C, t


def batchnorm_apply(sim, kl, p):
    fold = p.get("FOLD", 0)
    names = ["x", "y", "gamma", "beta"] + (["ws", "rm", "rv"] if fold else ["mean", "var"]) + \
        ["total", "C", "hw", "eps"] + (["splits", "momentum"] if fold else [])
    a = unpack(sim, kl, names)
    expect(sim, threads_of(kl) == p["THREADS"], f"block of {threads_of(kl)} threads, built for {p['THREADS']}")
    C = a["C"]
    ch = np.arange(C)
    a["gamma"].read(ch)
    a["beta"].read(ch)
    if fold:
        counts = a["ws"].read((3 * (ch[:, None] * a["splits"] + np.arange(a["splits"])[None, :])).ravel())
        count = counts.reshape(C, -1).sum(axis=1)
        _, t = _plane_apply(sim, kl, p, a, lambda c: count[c])
        tiles = _tiles(p, a["hw"])
        first = t[t < C * tiles]
        first = first[first % tiles == 0] // tiles     # tile 0 of plane (0, c) updates channel c's running stats
        for ref in (a["rm"], a["rv"]):
            ref.read(first)
            ref.write(first, values=count[first])
        return
    count = a["mean"].read(ch)
    a["var"].read(ch)
    if p["plane"]:
        _plane_apply(sim, kl, p, a, lambda c: count[c])
    else:
        fills(sim, kl.grid[0], -(-a["total"] // p["THREADS"]))
        i = stride_visits(np.arange(kl.grid[0] * p["THREADS"]), kl.grid[0] * p["THREADS"], a["total"])
        a["x"].read(i)
        a["y"].write(i, values=count[(i // a["hw"]) % C])


def batchnorm_stats(sim, kl, p):
    """Block (c, split) writes (count, mean, M2) of its share of channel c to ws[3 block ..]."""
    a = unpack(sim, kl, ["x", "ws", "N", "C", "hw", "splits"])
    T, splits, N, C, hw = p["THREADS"], a["splits"], a["N"], a["C"], a["hw"]
    expect(sim, threads_of(kl) == T, f"block of {threads_of(kl)} threads, built for {T}")
    expect(sim, kl.grid[0] == C * splits, f"grid of {kl.grid[0]} blocks for {C} channels x {splits} splits")
    counts = np.zeros(C * splits, np.int64)
    for b in range(C * splits):
        c, split = b // splits, b % splits
        if p["plane"]:
            vec, seg = p["VEC"], p["SEG"]
            hwv = hw // vec
            segs = -(-hwv // seg)
            u = stride_visits(np.array([split]), splits, N * segs)
            n, g = u // segs, u % segs
            v = (g[:, None] * seg + np.arange(seg)[None, :])
            ok = v < hwv
            idx = ((n * C + c)[:, None] * hw + v * vec)[ok]
            a["x"].read(idx, vec=vec)
            counts[b] = idx.size * vec
        else:
            i = stride_visits(split * T + np.arange(T), splits * T, N * hw)
            a["x"].read((i // hw * C + c) * hw + i % hw)
            counts[b] = i.size
    if (counts == 0).any():
        raise CoverageError(f"{sim.where}: {int((counts == 0).sum())} of {C * splits} (channel, split) blocks get no "
                            f"elements: {splits} splits for fewer units of work")
    a["ws"].write(np.concatenate([3 * np.arange(C * splits) + k for k in range(3)]), values=np.tile(counts, 3))


def batchnorm_finalize(sim, kl, p):
    """A warp per channel: combine its splits, write the batch mean / variance, update the running statistics."""
    a = unpack(sim, kl, ["ws", "mean", "var", "rm", "rv", "C", "splits", "momentum"])
    expect(sim, threads_of(kl) == p["THREADS"], f"block of {threads_of(kl)} threads, built for {p['THREADS']}")
    C, splits = a["C"], a["splits"]
    c = np.arange(kl.grid[0] * (threads_of(kl) // 32))
    c = c[c < C]
    got = a["ws"].read((3 * (c[:, None] * splits + np.arange(splits)[None, :])).ravel()).reshape(c.size, splits)
    count = got.sum(axis=1)
    for name in ("mean", "var"):
        a[name].write(c, values=count)
    for name in ("rm", "rv"):
        a[name].read(c)
        a[name].write(c, values=count)


MODELS = {"elementwise": elementwise, "dot_partial": dot_partial, "dot_final": dot_final, "view_copy": view_copy,
          "pool2d": pool2d, "global_pool": global_pool, "batchnorm_apply": batchnorm_apply,
          "batchnorm_stats": batchnorm_stats, "batchnorm_finalize": batchnorm_finalize}
