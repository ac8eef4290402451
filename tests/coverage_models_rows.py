"""Coverage models of the row kernels (templates/rows/softmax.cu.jinja, layernorm.cu.jinja on common/rowops.cuh).

A row kernel's output element depends on its whole row: the value each model writes is the number of the
row's elements the statistics were taken over (the union of the vectors the row's threads, blocks or chunks
read), which must be the row length L. Vector accesses are VEC scalars at vector index c of a row, at
element row * L + c * VEC.
"""
from __future__ import annotations

import numpy as np

from plan_coverage import CoverageError, disjoint, expect, stride_visits, threads_of, unpack


def _layout_checks(sim, kl, p) -> None:
    expect(sim, threads_of(kl) == p["TPR"] * p["RPB"], f"block of {threads_of(kl)} threads, the layout takes "
           f"TPR {p['TPR']} x RPB {p['RPB']}")
    expect(sim, p["WPR"] == max(1, p["TPR"] // 32), f"WPR={p['WPR']} for {p['TPR']} threads per row")


def _names(kind: str, family: str) -> list[str]:
    ln = family == "layernorm"
    head = ["x", "y"] + (["gamma", "beta"] if ln else [])
    tail = ["rows", "L"] + (["gdiv", "eps"] if ln else [])
    return {"rows": head + tail, "stream": head + tail + ["sv"],
            "partials": ["x", "ws", "rows", "L", "chunks"],
            "apply": head + ["ws", "rows", "L", "chunks"] + (["gdiv", "eps"] if ln else []),
            "resident": head + ["ctr", "part", "stats", "rows", "L", "chunks", "lead", "gdiv", "eps"]}[kind]


def _affine(sim, a, p, cols: np.ndarray) -> None:
    """gamma / beta reads of vectors `cols` of a row (AFFINE 1: gamma, 2: both; per channel: scalar gamma[e // gdiv])."""
    affine = p.get("AFFINE", 0)
    if not affine or cols.size == 0:
        return
    vec = p["VEC"]
    for name in ("gamma", "beta")[:affine]:
        if p.get("PER_CHANNEL"):
            e = (cols[:, None] * vec + np.arange(vec)[None, :]).ravel()
            a[name].read(np.unique(e // a["gdiv"]))
        else:
            a[name].read(cols * vec, vec=vec)


def _row_io(sim, a, rows: np.ndarray, cols: np.ndarray, vec: int, L: int, values) -> None:
    """Read x and write y at vectors `cols` of every row in `rows` (y gets `values`)."""
    if rows.size == 0 or cols.size == 0:
        return
    idx = (rows[:, None] * L + cols[None, :] * vec).ravel()
    a["x"].read(idx, vec=vec)
    a["y"].write(idx, vec=vec, values=values)


def rows_kernel(sim, kl, p, family: str):
    """kind rows: TPR threads per row, RPB rows per block, CL blocks per cluster; grid-stride over row groups."""
    _layout_checks(sim, kl, p)
    a = unpack(sim, kl, _names("rows", family))
    vec, nv, tpr, rpb, cl = p["VEC"], p["NV"], p["TPR"], p["RPB"], p["CL"]
    expect(sim, kl.cluster == (cl, 1, 1), f"cluster {kl.cluster}, the kernel is built for {cl}")
    rows, L = a["rows"], a["L"]
    lv = L // vec
    chv = tpr * nv
    gx = kl.grid[0]
    expect(sim, gx % cl == 0, f"grid {gx} is not a whole number of {cl}-block clusters")
    nblocks = gx // cl
    expect(sim, nblocks == min(-(-rows // rpb), (2 ** 31 - 1) // cl), f"{nblocks} clusters of {cl} for "
           f"{-(-rows // rpb)} row groups: a block (cluster) per {rpb} rows")
    groups = threads_of(kl) // tpr
    rb = stride_visits(np.arange(nblocks), nblocks, -(-rows // rpb))    # row groups, one cluster each
    row = (rb[:, None] * rpb + np.arange(groups)[None, :]).ravel()
    row = row[row < rows]
    per_rank = []
    for rank in range(cl):
        c = (rank * chv + np.arange(tpr)[:, None] + np.arange(nv)[None, :] * tpr).ravel()
        per_rank.append(c[c < lv])
    covered = np.concatenate(per_rank)
    terms = np.unique(covered).size * vec
    for cols in per_rank:
        _row_io(sim, a, row, cols, vec, L, terms)
        _affine(sim, a, p, cols)


def stream_kernel(sim, kl, p, family: str):
    """kind stream: one block per row (grid-stride), the first sv vectors stashed in shared memory."""
    _layout_checks(sim, kl, p)
    a = unpack(sim, kl, _names("stream", family))
    vec, rows, L, sv = p["VEC"], a["rows"], a["L"], a["sv"]
    lv = L // vec
    expect(sim, kl.shared >= sv * vec * sim.itemsize, f"{kl.shared} bytes of shared memory for a stash of {sv} "
           f"vectors of {vec * sim.itemsize} bytes")
    expect(sim, kl.grid[0] <= rows, f"grid of {kl.grid[0]} blocks for {rows} rows: idle blocks")
    row = stride_visits(np.arange(kl.grid[0]), kl.grid[0], rows)
    stash, rest = np.arange(sv), np.arange(sv, lv)
    terms = (np.unique(np.concatenate([stash, rest])).size) * vec
    for cols in (stash, rest):
        _row_io(sim, a, row, cols, vec, L, terms)
        _affine(sim, a, p, cols)


def _chunk_cols(p, chunk: np.ndarray, lv: int) -> list[np.ndarray]:
    chv = p["TPR"] * p["NV"]
    c = np.arange(p["TPR"])[:, None] + np.arange(p["NV"])[None, :] * p["TPR"]
    return [(k * chv + c).ravel()[(k * chv + c).ravel() < lv] for k in chunk]


def partials_kernel(sim, kl, p, family: str):
    """split-row pass 1: block b = (row, chunk) writes its chunk's two statistics to ws[2b], ws[2b + 1]."""
    _layout_checks(sim, kl, p)
    a = unpack(sim, kl, _names("partials", family))
    vec, rows, L, chunks = p["VEC"], a["rows"], a["L"], a["chunks"]
    lv = L // vec
    expect(sim, kl.grid[0] == rows * chunks, f"grid of {kl.grid[0]} blocks for {rows} rows x {chunks} chunks")
    cols = _chunk_cols(p, range(chunks), lv)
    row = np.arange(rows, dtype=np.int64)
    for k, c in enumerate(cols):
        if c.size:
            a["x"].read((row[:, None] * L + c[None, :] * vec).ravel(), vec=vec)
        a["ws"].write(np.concatenate([2 * (row * chunks + k), 2 * (row * chunks + k) + 1]), values=c.size * vec)


def apply_kernel(sim, kl, p, family: str):
    """split-row pass 2: block (row, chunk) combines the row's chunk statistics and writes its chunk of y."""
    _layout_checks(sim, kl, p)
    a = unpack(sim, kl, _names("apply", family))
    vec, rows, L, chunks = p["VEC"], a["rows"], a["L"], a["chunks"]
    lv = L // vec
    expect(sim, kl.grid[0] == rows * chunks, f"grid of {kl.grid[0]} blocks for {rows} rows x {chunks} chunks")
    row = np.arange(rows, dtype=np.int64)
    stats = a["ws"].read((2 * row[:, None] * chunks + 2 * np.arange(chunks)[None, :]).ravel()).reshape(rows, chunks)
    terms = stats.sum(axis=1)
    for c in _chunk_cols(p, range(chunks), lv):
        if c.size:
            idx = (row[:, None] * L + c[None, :] * vec)
            a["x"].read(idx.ravel(), vec=vec)
            a["y"].write(idx.ravel(), vec=vec, values=np.repeat(terms, c.size))
            _affine(sim, a, p, c)


def layernorm_reset(sim, kl, p):
    a = unpack(sim, kl, ["ctr", "n"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel strides by 256")
    a["ctr"].write(np.arange(a["n"]), itemsize=4, values=0)


def layernorm_resident(sim, kl, p):
    """One launch of P (chunk statistics) and A (normalise a chunk) items handed out by ticket; A(k) waits for
    its row's (mean, rstd), which the row's last P publishes: every P an A waits on needs a smaller ticket."""
    _layout_checks(sim, kl, p)
    a = unpack(sim, kl, _names("resident", "layernorm"))
    vec, rows, L, chunks, lead = p["VEC"], a["rows"], a["L"], a["chunks"], a["lead"]
    lv, n_items = L // vec, rows * chunks
    expect(sim, kl.grid[0] == 2 * n_items, f"grid of {kl.grid[0]} blocks for {n_items} P and {n_items} A items")
    expect(sim, chunks <= lead <= n_items, f"lead {lead} outside [{chunks}, {n_items}]: an A could wait on a later P")
    a["ctr"].read(np.arange(1 + 2 * rows), itemsize=4)
    disjoint(sim, [(a["ctr"], 4 * (1 + 2 * rows), "the counters"), (a["part"], 2 * n_items * sim.itemsize,
                   "the chunk statistics"), (a["stats"], 2 * rows * sim.itemsize, "the row statistics")])
    t = np.arange(kl.grid[0], dtype=np.int64)
    u = t - lead
    mid = (t >= lead) & (t < 2 * n_items - lead)
    is_a = np.where(t < lead, False, np.where(mid, u & 1 == 1, True))
    k = np.where(t < lead, t, np.where(mid, np.where(u & 1 == 1, u >> 1, lead + (u >> 1)), t - n_items))
    for kind in (False, True):
        got = np.sort(k[is_a == kind])
        if not np.array_equal(got, np.arange(n_items)):
            raise CoverageError(f"{sim.where}: the tickets hand out {'A' if kind else 'P'} items {got[:6].tolist()}..., "
                                f"not each of the {n_items} once")
    ticket_p = np.empty(n_items, np.int64)
    ticket_p[k[~is_a]] = t[~is_a]
    last_p = ticket_p.reshape(rows, chunks).max(axis=1)
    ticket_a = np.empty(n_items, np.int64)
    ticket_a[k[is_a]] = t[is_a]
    if (ticket_a.reshape(rows, chunks).min(axis=1) < last_p).any():
        raise CoverageError(f"{sim.where}: an A item draws its ticket before its row's last P (deadlock)")
    cols = _chunk_cols(p, range(chunks), lv)
    row = np.arange(rows, dtype=np.int64)
    counts = np.array([c.size * vec for c in cols])
    for ch, c in enumerate(cols):
        if c.size:
            a["x"].read((row[:, None] * L + c[None, :] * vec).ravel(), vec=vec)
        a["part"].write(np.concatenate([2 * (row * chunks + ch), 2 * (row * chunks + ch) + 1]), values=counts[ch])
    a["part"].read((2 * row[:, None] * chunks + 2 * np.arange(chunks)[None, :]).ravel())
    a["stats"].write(np.concatenate([2 * row, 2 * row + 1]), values=counts.sum())
    a["stats"].read(np.concatenate([2 * row, 2 * row + 1]))
    for c in cols:
        if c.size:
            idx = (row[:, None] * L + c[None, :] * vec).ravel()
            a["x"].read(idx, vec=vec)
            a["y"].write(idx, vec=vec, values=counts.sum())
            _affine(sim, a, p, c)


def strided_kernel(sim, kl, p):
    """softmax strided: a block owns TX vectors of columns (one outer index) by the whole axis A (TY threads along
    it, NA vectors each, or streamed twice when NA = 0); the cross-warp reduction's threads take the columns in
    turns (the fix of issue 28's wrong Softmax: a tile may have more columns than the block has threads)."""
    a = unpack(sim, kl, ["x", "y", "tiles", "inner", "A"])
    tx, ty, na, vec = p["TX"], p["TY"], p["NA"], p["VEC"]
    expect(sim, kl.block == (tx, ty, 1), f"block {kl.block}, the kernel is built for {tx} x {ty}")
    wy = 32 // tx if tx < 32 else 1
    nwy, cw = max(1, ty // wy), tx * vec
    pg = (nwy if nwy < 32 // cw else 32 // cw) if cw < 32 else 1
    if nwy > 1 and (tx * ty) % 32:
        raise CoverageError(f"{sim.where}: the cross-warp column reduction takes its {cw * pg} (column, group) pairs "
                            f"in turns of the block's {tx * ty} threads, which must be whole warps (its shuffles)")
    tiles, inner, A = a["tiles"], a["inner"], a["A"]
    iv = inner // vec
    per_outer = -(-iv // tx)
    tile = stride_visits(np.arange(kl.grid[0]), kl.grid[0], tiles)
    o = tile // per_outer
    cv = ((tile - o * per_outer) * tx)[:, None] + np.arange(tx)[None, :]
    ok = cv < iv
    base = (o[:, None] * A * inner + cv * vec)[ok]
    if na > 0:
        along = (np.arange(ty)[:, None] + np.arange(na)[None, :] * ty).ravel()
    else:
        along = stride_visits(np.arange(ty), ty, A)
    along = along[along < A]
    terms = np.unique(along).size
    idx = (base[:, None] + along[None, :] * inner).ravel()
    a["x"].read(idx, vec=vec)
    a["y"].write(idx, vec=vec, values=terms)


def _family(kind_fn, family):
    return lambda sim, kl, p: kind_fn(sim, kl, p, family)


MODELS = {f"{fam}_{kind}": _family(fn, fam) for fam in ("softmax", "layernorm")
          for kind, fn in (("rows", rows_kernel), ("stream", stream_kernel), ("partials", partials_kernel),
                           ("apply", apply_kernel))}
MODELS.update({"layernorm_reset": layernorm_reset, "layernorm_resident": layernorm_resident,
               "softmax_strided": strided_kernel})
