"""Run a BLAS plan's launches in NumPy, each kernel as its template documents it (CPU tests of the plans).

Buffers are flat float64 arrays, one per operand plus the workspace; a pointer argument is (buffer,
byte offset). This checks what the CPU can check of a plan: which kernels run in which order on which
sub-matrices (offsets, leading dimensions, transposes, batch strides) and that together they compute
the operator's result. The kernels themselves are checked on the GPU.
"""
from __future__ import annotations

import numpy as np


def _view(buf: np.ndarray, offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """A rows x cols row-major sub-matrix with leading dimension ld, starting `offset` elements in."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols))
    return np.lib.stride_tricks.as_strided(buf[offset:], (rows, cols), (ld * 8, 8))


def run(plan, buffers: list[np.ndarray], itemsize: int) -> None:
    """Apply every launch of `plan` to `buffers` (operands, then the workspace)."""
    for kl in plan.launches:
        params = dict(kl.spec.params)
        vals = [((a.value, a.offset // itemsize) if a.kind == "ptr" else a.value) for a in kl.args]
        globals()["_" + kl.spec.kernel](params, kl, vals, buffers)


def _gemm(params, kl, v, bufs) -> None:
    if params.get("split_k"):     # slice z: K columns from z * chunk, its product into C + z * stride_c
        (ia, oa), (ib, ob), (ic, oc), m, n, k, lda, ldb, ldc, alpha, beta, chunk, stride_c = v
        one = {**params, "split_k": False}
        for z in range(kl.grid[2]):
            a_off = oa + z * chunk * (lda if params["trans_a"] else 1)
            b_off = ob + z * chunk * (1 if params["trans_b"] else ldb)
            _gemm(one, kl, [(ia, a_off), (ib, b_off), (ic, oc + z * stride_c), m, n, min(k - z * chunk, chunk),
                            lda, ldb, ldc, alpha, beta], bufs)
        return
    (ia, oa), (ib, ob), (ic, oc), m, n, k, lda, ldb, ldc, alpha, beta = v[:11]
    batch, sa, sb, sc = (v[14], v[11], v[12], v[13]) if params.get("batched") else (1, 0, 0, 0)
    swap = params.get("swap", False)   # the kernel trades A and B (and M, N) and writes its product transposed
    for z in range(batch):
        pa, pb, rows, cols = (ia, oa + z * sa, lda), (ib, ob + z * sb, ldb), m, n
        if swap:
            pa, pb, rows, cols = pb, pa, n, m
        a = _view(bufs[pa[0]], pa[1], *((k, rows) if params["trans_a"] else (rows, k)), pa[2])
        b = _view(bufs[pb[0]], pb[1], *((cols, k) if params["trans_b"] else (k, cols)), pb[2])
        a = a.T if params["trans_a"] else a
        b = b.T if params["trans_b"] else b
        product = a @ b
        c = _view(bufs[ic], oc + z * sc, m, n, ldc)
        out = alpha * (product.T if swap else product) + (beta * c if beta else 0.0)
        c[...] = out


def _trsm_scale(params, kl, v, bufs) -> None:
    (ib, ob), (ix, ox), count, alpha = v
    bufs[ix][ox:ox + count] = alpha * bufs[ib][ob:ob + count]


def _trsm_invert(params, kl, v, bufs) -> None:
    (ia, oa), (iw, ow), d = v
    nb_max = params["NB"]
    for blk in range(kl.grid[0]):
        lo = blk * nb_max
        nb = min(nb_max, d - lo)
        a = _view(bufs[ia], oa + lo * d + lo, nb, nb, d)
        t = a.T if params["TRANS_T"] else a
        t = np.tril(t, -1) if params["FORWARD"] else np.triu(t, 1)
        t = t + (np.eye(nb) if params["UNIT"] else np.diag(np.diag(a)))
        w = np.eye(nb_max)
        w[:nb, :nb] = np.linalg.inv(t)
        bufs[iw][ow + blk * nb_max * nb_max:ow + (blk + 1) * nb_max * nb_max] = w.T.ravel()


def _trsm_apply(params, kl, v, bufs) -> None:
    h = 64
    if params["HALVES"] == 1:
        (iw, ow), (ix, ox), nb, vectors, es, vs = v
    else:
        (iw, ow), (ia, oa), lda, (ix, ox), nb, vectors, es, vs = v
    y = np.lib.stride_tricks.as_strided(bufs[ix][ox:], (nb, vectors), (es * 8, vs * 8))
    inverse = [bufs[iw][ow + b * h * h:ow + (b + 1) * h * h].reshape(h, h).T for b in range(params["HALVES"])]
    if params["HALVES"] == 1:
        y[...] = inverse[0][:nb, :nb] @ y.copy()
        return
    a = _view(bufs[ia], oa, nb, nb, lda)   # only the coupling block of T is read
    t = a.T if params["TRANS_T"] else a
    first, second = (slice(0, h), slice(h, nb)) if params["FORWARD"] else (slice(h, nb), slice(0, h))
    w1, w2 = (inverse[0], inverse[1]) if params["FORWARD"] else (inverse[1], inverse[0])
    n1, n2 = first.stop - first.start, second.stop - second.start
    y[first] = w1[:n1, :n1] @ y[first]
    y[second] = w2[:n2, :n2] @ (y[second] - t[second, first] @ y[first])


def _symm_fill(params, kl, v, bufs) -> None:
    (ia, oa), (iw, ow), n = v
    a = _view(bufs[ia], oa, n, n, n)
    tri = np.triu(a) if params["upper"] else np.tril(a)
    _view(bufs[iw], ow, n, n, n)[...] = tri + tri.T - np.diag(np.diag(a))


def _gemv_n(params, kl, v, bufs) -> None:
    _gemv(False, kl, v, bufs)


def _gemv_t(params, kl, v, bufs) -> None:
    _gemv(True, kl, v, bufs)


def _gemv(trans, kl, v, bufs) -> None:
    (ia, oa), (ix, ox), (iy, oy), (ip, op), m, n, lda, chunk, alpha, beta = v
    a = _view(bufs[ia], oa, m, n, lda)
    a = a.T if trans else a
    out, length = a.shape
    x = bufs[ix][ox:ox + length]
    splits = kl.grid[1]
    if splits == 1:
        y = bufs[iy][oy:oy + out]
        y[...] = alpha * (a @ x) + (beta * y if beta else 0.0)
        return
    for s in range(splits):
        lo, hi = s * chunk, min(length, (s + 1) * chunk)
        bufs[ip][op + s * out:op + (s + 1) * out] = alpha * (a[:, lo:hi] @ x[lo:hi])


def fake(shape, dtype="float32", ptr: int = 1 << 20):
    """A Tensor that only describes memory (no GPU needed): for argument checks and plans on the CPU."""
    from cuopjit.tensor import Tensor
    dt = np.dtype(dtype)
    return Tensor._view(ptr, tuple(shape), dt, 0, None)


def run_operator(op, arrays: list[np.ndarray], target, *, same: tuple[int, int] | None = None) -> list[np.ndarray]:
    """Plan `op` on fake tensors shaped like `arrays` (operands in forward's order after the weight) and run the
    plan in NumPy on float64 copies; `same=(i, j)` makes operand j the same tensor as operand i (in place).
    Returns the buffers in the plan's operand order (weight first where the operator has one)."""
    tensors, step = [], 1 << 24
    for i, a in enumerate(arrays):
        tensors.append(tensors[same[0]] if same and i == same[1] else fake(a.shape, op.dtype, (i + 1) * step))
    plan = op.plan(*tensors, target=target)
    weight = getattr(op, "_weight", None) or getattr(op, "_matrix", None)
    bufs = ([np.asarray(weight_array(op), np.float64).ravel().copy()] if weight is not None else [])
    flat = [np.asarray(a, np.float64).ravel().copy() for a in arrays]
    if same:
        flat[same[1]] = flat[same[0]]
    bufs += flat
    bufs.append(np.full(max(1, plan.workspace // op.dtype.itemsize), np.nan))
    run(plan, bufs, op.dtype.itemsize)
    return bufs


_WEIGHTS: dict[int, np.ndarray] = {}


def set_fake_weight(op, array: np.ndarray, setter: str = "set_weight") -> None:
    """Give `op` a fake weight tensor shaped like `array`, whose values the emulator reads from `array`."""
    getattr(op, setter)(fake(array.shape, op.dtype, 1 << 40))
    _WEIGHTS[id(op)] = array


def weight_array(op) -> np.ndarray:
    return _WEIGHTS[id(op)]


def _tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32's 11 significant bits (to nearest)."""
    mant, exp = np.frexp(x)
    return np.ldexp(np.round(mant * 2048) / 2048, exp)


def _tf32_split(params, kl, v, bufs) -> None:
    (ix, ox), (ih, oh), (il, ol), rows, k, ldx, ldo, stride_x, stride_o = v
    for z in range(kl.grid[2]):
        x = _view(bufs[ix], ox + z * stride_x, *((k, rows) if params["TRANSPOSE"] else (rows, k)), ldx)
        x = x.T if params["TRANSPOSE"] else x
        hi = _tf32(x)
        _view(bufs[ih], oh + z * stride_o, rows, k, ldo)[...] = hi
        _view(bufs[il], ol + z * stride_o, rows, k, ldo)[...] = _tf32(x - hi)


def _gemm_wgmma(params, kl, v, bufs) -> None:
    """D = P Q^T cast back onto C (P_IS_A, P_KMAJOR: the layout the plan chose); 3xTF32 reads hi and lo parts
    lo_p, lo_q elements after P, Q and sums lo*hi + hi*lo + hi*hi."""
    (ia, oa), (ib, ob), (ic, oc), _, m, n, k, lda, ldb, ldc, alpha, beta = v[:12]
    batched = params["BATCHED"]
    batch, sa, sb, sc = (v[15], v[12], v[13], v[14]) if batched else (1, 0, 0, 0)
    trans_a = params["P_IS_A"] and not params["P_KMAJOR"]      # tt (nt: P = A K-major; nn: P = B^T)
    trans_b = params["P_IS_A"]
    for z in range(batch):
        a = _view(bufs[ia], oa + z * sa, *((k, m) if trans_a else (m, k)), lda)
        b = _view(bufs[ib], ob + z * sb, *((n, k) if trans_b else (k, n)), ldb)
        a, b = (a.T if trans_a else a), (b.T if trans_b else b)
        product = a @ b
        if params["SPLIT"] and not params.get("INREG"):      # the copies' lo parts (INREG: split in the kernel)
            lo_p, lo_q = v[-2], v[-1]
            a_lo = _view(bufs[ia], oa + z * sa + lo_p, m, k, lda)
            b_lo = _view(bufs[ib], ob + z * sb + lo_q, n, k, ldb).T
            product = a_lo @ b + a @ b_lo + product
        c = _view(bufs[ic], oc + z * sc, m, n, ldc)
        c[...] = alpha * product + (beta * c if beta else 0.0)


def _splitk_reduce(params, kl, v, bufs) -> None:
    (ip, op), (ic, oc), m, n, ldc, splits, beta = v
    total = bufs[ip][op:op + splits * m * n].reshape(splits, m, n).sum(axis=0)
    c = _view(bufs[ic], oc, m, n, ldc)
    c[...] = total + (beta * c if beta else 0.0)


def _gemv_reduce(params, kl, v, bufs) -> None:
    (ip, op), (iy, oy), n, splits, beta = v
    y = bufs[iy][oy:oy + n]
    y[...] = bufs[ip][op:op + splits * n].reshape(splits, n).sum(axis=0) + (beta * y if beta else 0.0)
