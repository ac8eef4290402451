"""Coverage models of the Conv2D kernels (templates/conv2d/*): packs, NHWC copies, implicit GEMM, direct, wgmma.

Values: the packs store the source weight index of each packed element (ZERO for padding), so the implicit
GEMM's model can walk its k-tiles (templates/conv2d/conv2d.cu.jinja ORDER "chunk" / "flat") and check that the
packed weight at each k index is the tap and channel its input iterator loads; outputs get the number of
matched (channel, tap) terms, which must be Cg * KH * KW.
"""
from __future__ import annotations

import numpy as np

from plan_coverage import CoverageError, block_ids, expect, fills, no_idle, tag, threads_of, unpack

ZERO = -3    # a packed element that is padding (zero)
MASK = (1 << 40) - 1


def conv2d_pack(sim, kl, p):
    """Wp[g][kk][m] = W[g Kg + m][c][r][s] in ORDER's k order, zero outside; grid-stride over `total`."""
    a = unpack(sim, kl, ["w", "wp", "Cg", "Kg", "cpad", "kpad", "mpad", "total"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel strides by 256")
    khw = p["KH"] * p["KW"]
    fills(sim, kl.grid[0], -(-a["total"] // 256))
    i = np.arange(a["total"], dtype=np.int64)
    m, row = i % a["mpad"], i // a["mpad"]
    kk, g = row % a["kpad"], row // a["kpad"]
    if p["ORDER"] == "chunk":
        rs, c = kk // a["cpad"], kk % a["cpad"]
    else:
        c, rs = kk // khw, kk % khw
    inside = (m < a["Kg"]) & (c < a["Cg"]) & (rs < khw)
    src = ((g * a["Kg"] + m) * a["Cg"] + c) * khw + rs
    a["w"].read(src[inside])
    a["wp"].write(i, values=np.where(inside, tag(a["w"], src), ZERO))


def _out_index(grp, kg, K, ohw, m, n, nhwc=False):
    if nhwc:                       # channels_last y: pixel n's channels contiguous
        return n * K + grp * kg + m
    img = n // ohw
    return grp * kg * ohw + img * K * ohw + m * ohw + (n - img * ohw)


def conv2d(sim, kl, p):
    """Implicit GEMM: block (x, y, z) = pixel tile x BN, channel tile y BM of group z (SPLIT_K: of k-slice z, raw
    sums into slice z of the workspace); k-tiles of the packed weight and the input iterator (ORDER chunk: BK
    channels of one tap per k-tile; flat: k = c KHW + r KW + s); x and y NCHW or channels_last (X_NHWC, Y_NHWC)."""
    split = p.get("SPLIT_K", False)
    names = ["x", "wp"] + (["bias"] if p["bias"] else []) + ["y", "C", "H", "W", "K", "OH", "OW", "Cg", "Kg",
                                                               "npix", "ct", "ktiles_all" if split else "ktiles",
                                                               "mpad"] + (["kt_chunk"] if split else [])
    a = unpack(sim, kl, names)
    BM, BN, BK = p["BM"], p["BN"], p["BK"]
    mma = p["mma"]
    threads = p["WARPS_M"] * p["WARPS_N"] * p["WARPS_K"] * 32 if mma else (BM // p["TM"]) * (BN // p["TN"])
    expect(sim, threads_of(kl) == threads, f"block of {threads_of(kl)} threads, the tile's layout takes {threads}")
    khw = p["KH"] * p["KW"]
    kg, cg, npix, ohw, K = a["Kg"], a["Cg"], a["npix"], a["OH"] * a["OW"], a["K"]
    ktiles, mpad, ct = a["ktiles_all" if split else "ktiles"], a["mpad"], a["ct"]
    kpad = ktiles * BK
    groups = 1 if split else kl.grid[2]
    # the k walk against the packed weight, per group: matched (channel, tap) terms of every output channel
    kk = np.arange(kpad)
    if p["ORDER"] == "chunk":
        kt, j = kk // BK, kk % BK
        c_b, rs_b = (kt % ct) * BK + j, kt // ct
        valid = (c_b < cg) & (rs_b < khw)
    else:
        c_b, rs_b = kk // khw, kk % khw
        valid = kk < cg * khw
    terms, matched = None, None
    for g in range(groups):
        wv = a["wp"].read((g * kpad * mpad + kk[:, None] * mpad + np.arange(kg)[None, :]).ravel()).reshape(kpad, kg)
        want = ((g * kg + np.arange(kg))[None, :] * cg + c_b[:, None]) * khw + rs_b[:, None]
        if ((wv != ZERO) & (wv >> 40 != sim.buffer("weight").tag)).any():
            raise CoverageError(f"{sim.where}: the packed weight of group {g} holds something other than the weight")
        wv = np.where(wv == ZERO, ZERO, wv & MASK)   # the weight's element index
        match = valid[:, None] & (wv == want)
        wrong = (valid[:, None] & ~match) | (~valid[:, None] & (wv != ZERO))
        if wrong.any():
            k0, m0 = np.argwhere(wrong)[0]
            raise CoverageError(f"{sim.where}: k index {k0} of group {g} loads channel {c_b[k0]} tap {rs_b[k0]} "
                                f"but the packed weight there holds {'zero' if wv[k0, m0] == ZERO else wv[k0, m0]}")
        got = match.sum(axis=0)
        terms, matched = (got, match) if terms is None else (np.minimum(terms, got), matched)
    if kl.grid[1] * BM < kg or kl.grid[0] * BN < npix:
        raise CoverageError(f"{sim.where}: grid {kl.grid} of {BM} x {BN} tiles does not cover {kg} channels x "
                            f"{npix} pixels")
    # input: the group's channels of every image (the iterator masks the window to the image)
    hw = a["H"] * a["W"]
    images = -(-npix // ohw)
    for g in range(groups):
        if p.get("X_NHWC"):
            a["x"].box(g * cg, [(images * hw, a["C"]), (cg, 1)])
        else:
            a["x"].box(g * cg * hw, [(images, a["C"] * hw), (cg, hw), (hw, 1)])
    # outputs: channel tile rows m0.., pixel tile columns n0..; vector stores of VN (SIMT) / 2 (mma) columns (NCHW)
    # or VM channels (SIMT, channels_last: VEC_M)
    bx, by, bz = block_ids(kl)
    no_idle(sim, (bx * BN < npix) & (by * BM < kg), "output tile")
    nhwc = p.get("Y_NHWC", False)
    width = 1 if nhwc else 2 if mma else min(p["TN"], p["R"])
    vec_ok = p["VEC_OUT"] >= width and width > 1
    mwidth = min(p["TM"], p["R"]) if nhwc and not mma and p.get("VEC_M") else 1
    mm = by[:, None, None] * BM + np.arange(0, BM, mwidth)[None, :, None]
    n_start = bx[:, None, None] * BN + np.arange(0, BN, width)[None, None, :]
    live_m = mm < kg
    if p["bias"]:
        a["bias"].read((bz[:, None, None] * kg + mm)[np.broadcast_to(live_m, mm.shape)])
    grp = 0 if split else bz[:, None, None]
    ms, starts = np.broadcast_arrays(mm, n_start)
    grps = np.broadcast_to(grp, ms.shape)
    live = (ms < kg) & (starts < npix)
    if split:       # slice z's share of the terms, at its part of the workspace
        z = np.broadcast_to(bz[:, None, None], ms.shape)
        lo = np.minimum(z * a["kt_chunk"], ktiles) * BK
        hi = np.minimum((z + 1) * a["kt_chunk"], ktiles) * BK
        cum = np.vstack([np.zeros((1, kg), np.int64), np.cumsum(matched, axis=0)])
        mc = np.minimum(ms, kg - 1)
        vals = cum[hi, mc] - cum[lo, mc]
        base = z * npix * K
    else:
        vals, base = terms[np.minimum(ms, kg - 1)], 0
    base = np.broadcast_to(base, ms.shape)
    full = live & (starts + width <= npix) if vec_ok else np.zeros_like(live)
    if full.any():
        a["y"].write(base[full] + _out_index(grps[full], kg, K, ohw, ms[full], starts[full]), vec=width,
                     values=vals[full])
    for q in range(width):
        one = live & ~full & (starts + q < npix)
        for r in range(mwidth):
            sub = one & (ms + r < kg) if mwidth > 1 else one
            if mwidth > 1:
                whole = one & (ms + mwidth <= kg)
                if r == 0 and whole.any():
                    a["y"].write(base[whole] + _out_index(grps[whole], kg, K, ohw, ms[whole], starts[whole] + q,
                                                          nhwc), vec=mwidth, values=vals[whole])
                sub = one & ~whole & (ms + r < kg)
            a["y"].write(base[sub] + _out_index(grps[sub], kg, K, ohw, ms[sub] + r, starts[sub] + q, nhwc),
                         values=vals[sub])


def conv2d_direct(sim, kl, p):
    """One thread per OPT adjacent outputs of a row (grid-stride over N K OH ceil(OW / OPT)); exact over Cg KH KW."""
    names = ["x", "w"] + (["bias"] if p["bias"] else []) + ["y", "C", "H", "W", "K", "OH", "OW", "Cg", "Kg", "owg",
                                                            "total"]
    a = unpack(sim, kl, names)
    expect(sim, threads_of(kl) == p["THREADS"], f"block of {threads_of(kl)} threads, the kernel strides by "
           f"{p['THREADS']}")
    opt, vec = p["OPT"], p["VEC_OUT"]
    OH, OW, K, owg = a["OH"], a["OW"], a["K"], a["owg"]
    fills(sim, kl.grid[0], -(-a["total"] // p["THREADS"]))
    i = np.arange(a["total"], dtype=np.int64)
    gi, rest = i % owg, i // owg
    oh, rest = rest % OH, rest // OH
    k, img = rest % K, rest // K
    ow0 = gi * opt
    base = ((img * K + k) * OH + oh) * OW + ow0
    khw = p["KH"] * p["KW"]
    a["w"].read(np.unique(k)[:, None] * a["Cg"] * khw + np.arange(a["Cg"] * khw)[None, :])
    hw = a["H"] * a["W"]
    a["x"].box(0, [(int(img.max()) + 1 if img.size else 0, a["C"] * hw), (a["C"], hw), (hw, 1)])
    if p["bias"]:
        a["bias"].read(np.unique(k))
    terms = a["Cg"] * khw
    full = (ow0 + opt <= OW) & (vec == opt)
    if full.any():
        a["y"].write(base[full], vec=opt, values=terms)
    for o in range(opt):
        one = ~full & (ow0 + o < OW)
        a["y"].write(base[one] + o, values=terms)


def conv2d_wpack(sim, kl, p):
    """Wp[o][r][s][c] = W[o][c][r][s] (zero for c >= C), hi and (SPLIT) lo; grid-stride over `total`."""
    a = unpack(sim, kl, ["w", "wh", "wl", "C", "cpad", "total"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel strides by 256")
    khw = p["KH"] * p["KW"]
    fills(sim, kl.grid[0], -(-a["total"] // 256))
    i = np.arange(a["total"], dtype=np.int64)
    c, rest = i % a["cpad"], i // a["cpad"]
    rs, o = rest % khw, rest // khw
    inside = c < a["C"]
    src = (o * a["C"] + c) * khw + rs
    a["w"].read(src[inside])
    vals = np.where(inside, tag(a["w"], src), ZERO)
    a["wh"].write(i, values=vals)
    if p["SPLIT"]:
        a["wl"].write(i, values=vals)


def conv2d_nhwc(sim, kl, p):
    """grid (N H, ceil(W / 32), CPAD / 32): a 32-channel x 32-column tile of one image row into the NHWC copy."""
    lo_copy = p.get("LO_COPY", False) and p["SPLIT"]
    a = unpack(sim, kl, ["x", "xh"] + (["xl"] if lo_copy else []) + ["C", "cpad", "H", "W"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel takes 32 x 8")
    C, cpad, H, W = a["C"], a["cpad"], a["H"], a["W"]
    bx, by, bz = block_ids(kl)
    ar = np.arange(32)
    w = by[:, None, None] * 32 + ar[None, :, None]
    c = bz[:, None, None] * 32 + ar[None, None, :]
    no_idle(sim, (by * 32 < W) & (bz * 32 < cpad), "tile of the NHWC copy")
    nh = np.broadcast_to(bx[:, None, None], (bx.size, 32, 32))
    w, c = np.broadcast_to(w, nh.shape), np.broadcast_to(c, nh.shape)
    live = w < W
    n, h = nh // H, nh % H
    src = ((n * C + c) * H + h) * W + w
    a["x"].read(src[live & (c < C)])
    out = (nh * W + w) * cpad + c
    vals = np.where(c < C, tag(a["x"], src), ZERO)
    a["xh"].write(out[live], values=vals[live])
    if lo_copy:
        a["xl"].write(out[live], values=vals[live])


def conv2d_wgmma(sim, kl, p):
    """Persistent tiles (channel tile, image, row block, column block) of 64 CONSUMERS x QN pixels (BW x QN / BW)."""
    lo_copy = p["SPLIT"] and p["LO_COPY"]
    names = ["xh"] + (["xl"] if lo_copy else []) + ["wh", "wl"] + (["bias"] if p["bias"] else []) + \
        ["y", "maps", "N", "cpad", "XC", "H", "W", "O", "OH", "OW"]
    a = unpack(sim, kl, names)
    qn, bw, pm = p["QN"], p["BW"], 64 * p["CONSUMERS"]
    bh = qn // bw
    expect(sim, threads_of(kl) == 128 * (p["CONSUMERS"] + 1), f"block of {threads_of(kl)} threads for "
           f"{p['CONSUMERS']} consumer warpgroups")
    N, cpad, H, W, O, OH, OW = (a[k] for k in ("N", "cpad", "H", "W", "O", "OH", "OW"))
    khw = p["KH"] * p["KW"]
    tiles_p, tiles_w, tiles_h = -(-O // pm), -(-OW // bw), -(-OH // bh)
    tiles = tiles_p * tiles_w * tiles_h * N
    gx = kl.grid[0]
    expect(sim, gx == min(tiles, sim.target.sm_count), f"persistent grid of {gx} blocks for {tiles} tiles on "
           f"{sim.target.sm_count} SMs (one block per SM, at most one per tile)")
    maps = 4 if lo_copy else 3 if p["SPLIT"] else 2
    need = p["STAGES"] * (2 if p["SPLIT"] else 1) * (pm + qn) * 32 * 4 + 16 * p["STAGES"] + 128 * maps + 1008
    expect(sim, kl.shared >= need, f"{kl.shared} bytes of shared memory; {p['STAGES']} stages of the weight and pixel "
           f"tiles, their barriers, the map scratch and the 1024-byte alignment take {need}")
    a["maps"].write(np.arange(gx * 128), itemsize=4, values=-2)
    # the TMA operands: packed weight O x (KHW cpad), the NHWC copy N H W x cpad; every element written before
    for name in ("wh", "wl") + (("xl",) if lo_copy else ()) + ("xh",):
        rows, cols = (O, khw * cpad) if name[0] == "w" else (N * H * W, cpad)
        got = a[name].read(np.arange(rows * cols), itemsize=4)
        src = "weight" if name[0] == "w" else "x"
        if ((got != ZERO) & (got >> 40 != sim.buffer(src).tag)).any():
            raise CoverageError(f"{sim.where}: {name} holds something other than the packed {src} (an overlap "
                                "with the tensor maps or another part of the workspace)")
        sim.check_aligned(a[name].buf, np.array([a[name].offset, a[name].offset + 4 * cols]), 16, "TMA read")
    terms = min(cpad, int((a["wh"].read(np.arange(cpad), itemsize=4) != ZERO).sum())) * khw
    tile = np.arange(tiles, dtype=np.int64)
    tp, q = tile % tiles_p, tile // tiles_p
    tw, q = q % tiles_w, q // tiles_w
    th, n = q % tiles_h, q // tiles_h
    o = tp[:, None, None] * pm + np.arange(pm)[None, :, None]
    pix = np.arange(0, qn, 2)[None, None, :]
    oh, ow = th[:, None, None] * bh + pix // bw, tw[:, None, None] * bw + pix % bw
    o, oh, ow = np.broadcast_arrays(o, oh, ow)
    nn = np.broadcast_to(n[:, None, None], o.shape)
    live = (o < O) & (oh < OH) & (ow < OW)
    if p["bias"]:
        a["bias"].read(np.unique(o[live]))
    idx = ((nn * O + o) * OH + oh) * OW + ow
    pair = live & (ow + 1 < OW) & (p["VEC_OUT"] == 2)
    a["y"].write(idx[pair], vec=2, values=terms)
    for e in range(2):
        one = live & ~pair & (ow + e < OW)
        a["y"].write(idx[one] + e, values=terms)


MODELS = {"conv2d_pack": conv2d_pack, "conv2d": conv2d, "conv2d_direct": conv2d_direct,
          "conv2d_wpack": conv2d_wpack, "conv2d_nhwc": conv2d_nhwc, "conv2d_wgmma": conv2d_wgmma}
