"""Coverage models of the GEMM-shaped kernels (templates/gemm/*): which elements each block writes and reads.

Each model mirrors its template's index arithmetic (block -> tile, loop bounds, pointer offsets) from the
launch's grid, block, template parameters and arguments, and records the accesses in a plan_coverage.Sim.
Values written: the number of reduction terms an output element holds (K for a GEMM, the row count for a
GEMV), so a plan's split slices, reductions and k-walks can be checked end to end.
"""
from __future__ import annotations

import numpy as np

from plan_coverage import (CoverageError, block_ids, expect, fills, no_idle, rectangles, stride_visits, threads_of,
                           unpack)

SPLIT_TAG = 1 << 41   # values of the 3xTF32 parts: (operand element index) * 2 + part, tagged


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tile_threads(p: dict) -> int:
    if "WARPS_M" in p:
        return p["WARPS_M"] * p["WARPS_N"] * p.get("WARPS_K", 1) * 32
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def _operand(ref, base: np.ndarray, rows: np.ndarray, klen: np.ndarray, ld: int, trans: bool, vec: int) -> None:
    """Bulk reads of a GEMM operand by every block: block b reads `rows_b` rows from element base_b, k in
    [0, klen_b); `trans`: the operand is stored k-major (element (r, k) at k * ld + r)."""
    live = (rows > 0) & (klen > 0)
    if not live.any():
        return
    base, rows, klen = base[live], rows[live], klen[live]
    if ref.buf is not None and ref.buf.workspace:
        for b, r, kl in zip(base, rows, klen):   # workspace operands (SYMM's W, TRSM's inverses): written before?
            rr, kk = np.arange(r), np.arange(kl)
            ref.read(b + (kk[:, None] * ld + rr[None, :] if trans else rr[:, None] * ld + kk[None, :]))
        return
    hi = base + ((klen - 1) * ld + rows - 1 if trans else (rows - 1) * ld + klen - 1)
    ref.span(np.concatenate([base, hi]), ref.sim.itemsize, 1, "read")
    if vec > 1:
        starts = np.concatenate([base, base + ld])
        ref.sim.check_aligned(ref.buf, ref.offset + starts * ref.sim.itemsize, vec * ref.sim.itemsize, "read")


def gemm(sim, kl, p):
    """gemm.cu.jinja / gemm_async.cu.jinja / gemm_simt_async.cu.jinja (gemm_tile.cuh: batch, raster, swap, split-K)."""
    names = ["A", "B", "C", "M", "N", "K", "lda", "ldb", "ldc", "alpha", "beta"]
    batched, split = p.get("batched", False), p.get("split_k", False)
    if batched:
        names += ["stride_a", "stride_b", "stride_c", "batch", "tiles_n"]
    if split:
        names += ["k_chunk", "stride_s"]
    a = unpack(sim, kl, names)
    expect(sim, threads_of(kl) == _tile_threads(p), f"block of {threads_of(kl)} threads, the tile's layout takes "
           f"{_tile_threads(p)}")
    BM, BN, vec = p["BM"], p["BN"], p["VEC"]
    A, B, M, N, lda, ldb = a["A"], a["B"], a["M"], a["N"], a["lda"], a["ldb"]
    trans_a, trans_b = p["trans_a"], p["trans_b"]
    gx, gy, gz = kl.grid
    bx, by, bz = block_ids(kl)
    zero = np.zeros_like(bx)
    if batched:   # the batch entry's offsets first (the caller's A, B, C), then swap trades the operands
        tiles_n = a["tiles_n"]
        z = (bx // tiles_n) * gz + bz
        live = z < a["batch"]
        tile_m, tile_n = by, bx % tiles_n
        a_off, b_off, c_off = z * a["stride_a"], z * a["stride_b"], z * a["stride_c"]
    else:
        tiles_n = gx
        live = np.ones_like(bx, bool)
        tile_m, tile_n = by.copy(), bx.copy()
        a_off = b_off = c_off = zero
        if gz > 1 and not split:
            raise CoverageError(f"{sim.where}: grid z = {gz} on an unbatched, unsplit GEMM: its blocks repeat")
    swap = p.get("swap", False)
    if swap:
        A, B, M, N, lda, ldb, a_off, b_off = B, A, N, M, ldb, lda, b_off, a_off
    if p.get("raster") == "grouped":   # bands of 8 tile rows, walked column by column
        ident = tile_m * tiles_n + tile_n
        band = ident // (8 * tiles_n)
        first = band * 8
        rows = np.minimum(gy - first, 8)
        in_band = ident - band * 8 * tiles_n
        tile_m, tile_n = first + in_band % rows, in_band // rows
    K = np.full(bx.shape, a["K"])
    kofs = zero
    if split:
        kofs = bz * a["k_chunk"]
        a_off = a_off + (kofs * lda if trans_a else kofs)
        b_off = b_off + (kofs if trans_b else kofs * ldb)
        c_off = c_off + bz * a["stride_s"]
        K = np.minimum(K - kofs, a["k_chunk"])
    K = np.maximum(K, 0)
    m0, n0 = tile_m * BM, tile_n * BN
    rows_m, cols_n = np.clip(M - m0, 0, BM), np.clip(N - n0, 0, BN)
    # idle blocks only past the batch (more than 65535 entries: grid x holds the rest), never an empty K slice
    no_idle(sim, ~live | ((rows_m > 0) & (cols_n > 0) & ((K > 0) | (a["K"] == 0))), "output tile or K slice")
    rows_m, cols_n = np.where(live, rows_m, 0), np.where(live, cols_n, 0)
    # operands: A rows m0.. (k-major when trans_a), B rows n0.. of B^T (k-major unless trans_b)
    _operand(A, a_off + (m0 if trans_a else m0 * lda), rows_m, K, lda, trans_a, vec)
    _operand(B, b_off + (n0 * ldb if trans_b else n0), cols_n, K, ldb, not trans_b, vec)
    # C: the block's tile, caller's C^T when swapped (rows of the tile along kernel M, columns along kernel N)
    ldc, C = a["ldc"], a["C"]
    base = c_off + (n0 + m0 * ldc if not swap else m0 + n0 * ldc)
    idx, block, j = rectangles(base, 1 if swap else ldc, ldc if swap else 1, rows_m, cols_n)
    if a["beta"] != 0:
        C.read(idx)
    if vec > 1:   # vector stores start at multiples of 2 columns (mma) / VN (SIMT): C and ldc must allow them
        width = 2 if ("WARPS_M" in p or swap) else min(p["TN"], p["R"])
        if swap:   # pairs along the caller's columns = the kernel's rows
            i = (idx - base[block] - j * ldc)
            starts = idx[i % width == 0]
        else:
            starts = idx[j % width == 0]
        if starts.size:
            sim.check_aligned(C.buf, C.offset + starts * sim.itemsize, width * sim.itemsize, "write")
    C.write(idx, values=K[block])


def splitk_reduce(sim, kl, p):
    """splitk_reduce.cu.jinja: C[r][c] = sum_z P[z][r][c] (+ beta C), grid-stride over M x N, 256 threads."""
    ops = p["epilogue"].operands if "epilogue" in p else ()      # a user epilogue's operands (the conv's bias)
    a = unpack(sim, kl, ["P", "C", "M", "N", "ldc", "splits", "beta"] + [f"e{k}" for k in range(len(ops))])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel strides by 256")
    total = a["M"] * a["N"]
    fills(sim, kl.grid[0], -(-total // 256))
    i = np.arange(total, dtype=np.int64)
    terms = np.zeros(total, np.int64)
    for z in range(a["splits"]):
        terms += a["P"].read(z * total + i)
    out = (i // a["N"]) * a["ldc"] + i % a["N"] if a["N"] else i
    for k, kind in enumerate(ops):             # per-row / per-column / output-shaped operands, read per output
        at = {"per_row": i // max(a["N"], 1), "per_column": i % max(a["N"], 1), "full": out}.get(kind)
        if at is not None:
            a[f"e{k}"].read(np.unique(at))
    if a["beta"] != 0:
        a["C"].read(out)
    a["C"].write(out, values=terms)


def gemm_wgmma(sim, kl, p):
    """gemm_wgmma.cu.jinja: a persistent grid of cluster units over (batch, P tile, Q tile); TMA operands."""
    names = ["A", "B", "C", "ws", "M", "N", "K", "lda", "ldb", "ldc", "alpha", "beta"]
    if p["BATCHED"]:
        names += ["stride_a", "stride_b", "stride_c", "batch"]
    copies = p["SPLIT"] and not p.get("INREG")     # 3xTF32 on split copies (INREG: split in the kernel)
    if copies:
        names += ["lo_p", "lo_q"]
    a = unpack(sim, kl, names)
    PM, QN, CL, G = p["PM"], p["QN"], p["CLUSTER"], p["GROUP"]
    expect(sim, PM == 64 * p["CONSUMERS"] and threads_of(kl) == 128 * (p["CONSUMERS"] + 1),
           f"block of {threads_of(kl)} threads for {p['CONSUMERS']} consumer warpgroups")
    expect(sim, kl.cluster == (CL, 1, 1), f"cluster {kl.cluster}, the kernel is built for {CL}")
    batch = a.get("batch", 1)
    if p["P_IS_A"]:
        P, Q, rows_p, rows_q, ldp, ldq = a["A"], a["B"], a["M"], a["N"], a["lda"], a["ldb"]
        sp, sq = a.get("stride_a", 0), a.get("stride_b", 0)
    else:
        P, Q, rows_p, rows_q, ldp, ldq = a["B"], a["A"], a["N"], a["M"], a["ldb"], a["lda"]
        sp, sq = a.get("stride_b", 0), a.get("stride_a", 0)
    tiles_p, tiles_q = _cdiv(rows_p, PM), _cdiv(rows_q, QN)
    units_p = _cdiv(tiles_p, CL)
    units = units_p * tiles_q * batch
    gx = kl.grid[0]
    expect(sim, gx % CL == 0, f"grid {gx} is not a whole number of {CL}-block clusters")
    expect(sim, gx // CL <= units, f"persistent grid of {gx // CL} clusters for {units} work units: idle blocks")
    held = sim.target.sm_count * p["MIN_BLOCKS"]
    expect(sim, gx <= held, f"persistent grid of {gx} blocks, more than {sim.target.sm_count} SMs x "
           f"{p['MIN_BLOCKS']} hold at once")
    expect(sim, gx // CL == min(units, held // CL), f"persistent grid of {gx // CL} clusters: {units} units and room "
           f"for {held // CL} at once ask for {min(units, held // CL)}")
    # the tensor maps: MAPS x 128 bytes per block in the workspace
    maps = 4 if copies else 2
    need = (p["STAGES"] * ((2 if copies else 1) * PM + (2 if p["SPLIT"] else 1) * QN) * 32 * 4
            + (24 if p.get("INREG") else 16) * p["STAGES"] + 128 * maps + 1008)
    expect(sim, kl.shared >= need, f"{kl.shared} bytes of shared memory; {p['STAGES']} stages of the P and Q tiles, "
           f"their barriers, the map scratch and the 1024-byte alignment take {need}")
    a["ws"].write(np.arange(gx * maps * 32), itemsize=4, values=-2)
    # operands through TMA: 16-byte aligned bases, row strides and batch strides
    K = a["K"]
    for ref, rows, ld, stride, lo, kmajor in ((P, rows_p, ldp, sp, a.get("lo_p"), p["P_KMAJOR"]),
                                              (Q, rows_q, ldq, sq, a.get("lo_q"), True)):
        entries = batch if stride else 1
        for part in ((0, lo) if copies else (0,)):
            dims = ([(rows, ld), (K, 1)] if kmajor else [(K, ld), (rows, 1)]) + \
                ([(entries, stride)] if entries > 1 else [])
            if ref.buf is not None and ref.buf.workspace:
                z, r, k = np.meshgrid(np.arange(entries), np.arange(rows), np.arange(K), indexing="ij")
                got = ref.read(part + z * stride + (r * ld + k if kmajor else k * ld + r), itemsize=4)
                if (got < SPLIT_TAG).any() or ((got - SPLIT_TAG) % 2 != (1 if part else 0)).any():
                    raise CoverageError(f"{sim.where}: reads a 3xTF32 {'lo' if part else 'hi'} part that holds "
                                        "something else (the tensor maps, or the other part)")
            else:
                ref.box(part, dims, itemsize=4)
            base = ref.offset + 4 * part
            sim.check_aligned(ref.buf, np.array([base, base + 4 * ld] + ([base + 4 * stride] if entries > 1 else [])),
                              16, "TMA read")
    # the walk: cluster c takes units c, c + step, ...; rank r of a cluster the P tile CL * unit_row + r
    unit = np.arange(units, dtype=np.int64)   # cluster c takes units c, c + gx / CL, ...: each once
    band_units = (G // CL) * tiles_q
    z = unit // (units_p * tiles_q)
    t = unit - z * units_p * tiles_q
    band = t // band_units
    first = band * (G // CL)
    rows_band = np.minimum(units_p - first, G // CL)
    in_band = t - band * band_units
    tp_u, tq = first + in_band % rows_band, in_band // rows_band
    rank = np.arange(CL)
    tp = (tp_u[:, None] * CL + rank[None, :]).ravel()
    tq = np.repeat(tq, CL)
    z = np.repeat(z, CL)
    ap, aq = np.arange(PM), np.arange(QN)
    pp = tp[:, None, None] * PM + ap[None, :, None]
    qq = tq[:, None, None] * QN + aq[None, None, :]
    inside = (pp < rows_p) & (qq < rows_q)
    cz = z[:, None, None] * a.get("stride_c", 0)
    ldc = a["ldc"]
    C = a["C"]
    if p["P_IS_A"]:
        idx = cz + pp * ldc + qq
        if p["C_PAIRS"]:
            pair = inside & (qq % 2 == 0) & (qq + 1 < rows_q)
            single = inside & ~(pair | np.roll(pair, 1, axis=2))
            C.write(idx[pair], values=K, vec=2)
            C.write(idx[single], values=K)
            return
    else:
        idx = cz + qq * ldc + pp
    C.write(idx[inside], values=K)


def tf32_split(sim, kl, p):
    """tf32_split.cu.jinja: 32 x 32 tiles of the rows x K output per block (32 x 8 threads), batch entry = z."""
    a = unpack(sim, kl, ["X", "hi", "lo", "rows", "K", "ldx", "ldo", "stride_x", "stride_o"])
    expect(sim, kl.block == (32, 8, 1), f"block {kl.block}, the kernel takes 32 x 8 threads")
    bx, by, bz = block_ids(kl)
    ar = np.arange(32)
    r = by[:, None, None] * 32 + ar[None, :, None]
    k = bx[:, None, None] * 32 + ar[None, None, :]
    inside = (r < a["rows"]) & (k < a["K"])
    no_idle(sim, (by * 32 < a["rows"]) & (bx * 32 < a["K"]), "tile of the split operand")
    zx, zo = bz[:, None, None] * a["stride_x"], bz[:, None, None] * a["stride_o"]
    src = zx + (k * a["ldx"] + r if p["TRANSPOSE"] else r * a["ldx"] + k)
    src, out = src[inside], (zo + r * a["ldo"] + k)[inside]
    a["X"].read(src)
    origin = a["X"].offset // 4 + src
    a["hi"].write(out, itemsize=4, values=SPLIT_TAG + 2 * origin)
    a["lo"].write(out, itemsize=4, values=SPLIT_TAG + 2 * origin + 1)


def _gemv_cols(c0: int, c1: int, vec: int, lanes: int, stride: int) -> np.ndarray:
    """Run starts [c, c + vec) the lanes of gemv_n visit in columns [c0, c1): lane l from c0 + l * vec, by stride."""
    return stride_visits(c0 + np.arange(lanes, dtype=np.int64) * vec, stride, c1)


def _rows_read(sim, ref, rows: np.ndarray, ld: int, starts: np.ndarray, vec: int) -> None:
    """Reads of runs [s, s + vec) of each of `rows` (row stride ld): bounds from the corners, alignment."""
    if rows.size == 0 or starts.size == 0:
        return
    ref.span(np.array([rows.min() * ld + starts.min(), rows.max() * ld + starts.max() + vec - 1]),
               sim.itemsize, 1, "read")
    if vec > 1:
        sim.check_aligned(ref.buf, ref.offset + np.concatenate([starts, starts + ld]) * sim.itemsize,
                          vec * sim.itemsize, "read")


def gemv_n(sim, kl, p):
    """gemv.cu.jinja gemv_n: GW warps share ROWS rows per row group; split blockIdx.y owns columns [c0, c1)."""
    a = unpack(sim, kl, ["A", "x", "y", "partial", "M", "N", "lda", "chunk", "alpha", "beta"])
    T, vec, rows_per, gw = p["THREADS"], p["VEC"], p["ROWS"], p["GW"]
    expect(sim, threads_of(kl) == T, f"block of {threads_of(kl)} threads, the kernel is built for {T}")
    warps = T // 32
    expect(sim, warps % gw == 0, f"{warps} warps do not split into groups of {gw}")
    rg = warps // gw
    M, N, chunk, gx, gy = a["M"], a["N"], a["chunk"], kl.grid[0], kl.grid[1]
    split = gy > 1
    groups = np.arange(gx * rg, dtype=np.int64)
    r0 = groups * rows_per
    no_idle(sim, r0.reshape(gx, rg)[:, 0] < M, "row")
    rows = (r0[:, None] + np.arange(rows_per)[None, :]).ravel()
    rows = rows[rows < M]
    live = r0[r0 < M]
    for by in range(gy):
        c0, c1 = by * chunk, min(N, by * chunk + chunk)
        starts = _gemv_cols(c0, c1, vec, 32 * gw, 32 * vec * gw)
        terms = starts.size * vec
        clamped = np.minimum(live[:, None] + np.arange(rows_per)[None, :], M - 1).ravel()
        _rows_read(sim, a["A"], clamped, a["lda"], starts, vec)
        if starts.size:
            a["x"].read(starts, vec=vec)
        out = a["partial"] if split else a["y"]
        if split:
            out.write(by * M + rows, values=terms)
        else:
            if a["beta"] != 0:
                a["y"].read(rows)
            out.write(rows, values=terms)


def gemv_t(sim, kl, p):
    """gemv.cu.jinja gemv_t: a block owns TX * VEC columns, TY row groups over its split's rows [row0, row1)."""
    a = unpack(sim, kl, ["A", "x", "y", "partial", "M", "N", "lda", "chunk", "alpha", "beta"])
    T, vec, ty = p["THREADS"], p["VEC"], p["TY"]
    expect(sim, threads_of(kl) == T, f"block of {threads_of(kl)} threads, the kernel is built for {T}")
    tx = T // ty
    expect(sim, tx * ty == T and tx % 32 == 0, f"TY={ty} row groups of whole warps in {T} threads")
    M, N, chunk, gx, gy = a["M"], a["N"], a["chunk"], kl.grid[0], kl.grid[1]
    cols = np.arange(gx * tx, dtype=np.int64) * vec
    no_idle(sim, cols.reshape(gx, tx)[:, 0] < N, "column")
    cols = cols[cols < N]
    split = gy > 1
    for by in range(gy):
        row0, row1 = by * chunk, min(M, by * chunk + chunk)
        rows = stride_visits(row0 + np.arange(ty), ty, row1)
        _rows_read(sim, a["A"], rows, a["lda"], cols, vec)
        if rows.size:
            a["x"].read(rows)
        out = (cols[:, None] + np.arange(vec)[None, :]).ravel()
        out = out[out < N]
        if split:
            a["partial"].write(by * N + out, values=rows.size)
        else:
            if a["beta"] != 0:
                a["y"].read(out)
            a["y"].write(out, values=rows.size)


def symm_fill(sim, kl, p):
    """symm.cu.jinja: block (bx, by) fills the 32 x 32 tile (by, bx) of W from A's stored triangle."""
    a = unpack(sim, kl, ["A", "W", "n"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel takes 32 x 8")
    n, upper = a["n"], p["upper"]
    bx, by, _ = block_ids(kl)
    no_idle(sim, (bx * 32 < n) & (by * 32 < n), "tile of W")
    ar = np.arange(32)
    i = by[:, None, None] * 32 + ar[None, :, None]
    j = bx[:, None, None] * 32 + ar[None, None, :]
    inside = (i < n) & (j < n)
    i, j = np.broadcast_to(i, inside.shape)[inside], np.broadcast_to(j, inside.shape)[inside]
    stored = j >= i if upper else j <= i
    src = np.where(stored, i * n + j, j * n + i)
    a["A"].read(src)
    a["W"].write(i * n + j, values=src)


MODELS = {"gemm": gemm, "splitk_reduce": splitk_reduce, "gemm_wgmma": gemm_wgmma, "tf32_split": tf32_split,
          "gemv_n": gemv_n, "gemv_t": gemv_t, "symm_fill": symm_fill}
