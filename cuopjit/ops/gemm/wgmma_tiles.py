"""Which build of the wgmma GEMM (consumer warpgroups, tile width, blocks per SM) runs a problem fastest: a cost
model of the persistent kernel, measured on the H100 (benchmarks/gemm_sweep.py; its run that set these
constants: benchmarks/results/gemm_sweep.json).

The persistent grid runs the tiles in rounds of one tile per block slot (SMs x blocks per SM). A round costs
its tiles' k-loop, `ktiles` k-tiles at the build's measured rate, then the epilogue that stores the tile from
registers (nothing overlaps it with one block per SM; with two, the other block's k-loop hides half of it).
A k-tile's time is the larger of its products at the build's rate (RATE per SM for a 128 x 256 tile, REL of
that for the others: narrower tiles feed the tensor cores less well, L2 and shared memory carry more per
product) and its bytes at what one SM fetches alone (FETCH: few tiles, few rows). A last, partial round runs
its k-loop faster where fewer SMs share L2 (its share of a full round, at least PARTIAL of it), never faster
than CAP times the build's full-round rate.

Measured (2026-11-26, H100, the sweep's 23 shapes: a BERT-base layer's products, 4096³ / 8192³, A @ W^T with M
1 .. 1000): TF32, the pick within 5% of the fastest build on 20, at most 13% off (the scores product with K^T
stored as is, 512 x 512 x 64 over 96 heads, memory-bound at every build); 3xTF32 within 5% on 21 of 22, at most
12% off. The old rule (the widest tile whose count fills 90% of the SMs) took 128 x 256 for the QKV product
(288 tiles: 2.2 rounds, 64.6 us) where 128 x 192 runs 384 tiles in 2.9 rounds (51.5 us), and 128 x 128 for the
FFN's second product (192 tiles, 75.8 us) where 128 x 192 fills one round (55.8 us).
"""
from __future__ import annotations


# (consumers, tile width) the heuristic weighs; blocks per SM follow from them (build(): two for one TF32
# consumer up to 128 wide). 224 wide measured 0.74-0.78 of 128 x 256's rate everywhere and is left out.
TF32_BUILDS = ((2, 256), (2, 192), (2, 160), (2, 128), (2, 96), (2, 64), (1, 128), (1, 96), (1, 64), (1, 256),
               (1, 192))
# 16-bit without a user epilogue: also three consumer warpgroups (192-row tiles; 96 float32 sums a thread fit the 128
# registers of a 512-thread block), as cuBLAS's 192 x 192 tiles: 4096 x 2304 x 768 in 264 tiles, two whole rounds of
# 132 SMs (128 x 192: 384 tiles, 2.9 rounds). H100, with the store through shared memory (gemm_wgmma_epilogue):
# 0.91x cuBLAS fp16 / bf16 there, where 128 x 192 with the old store ran 0.88 / 0.81x (benchmarks/gemm_half.py).
HALF_BUILDS = ((3, 192), (3, 128), *TF32_BUILDS)
SPLIT_BUILDS = ((2, 128), (2, 96), (2, 64), (1, 128), (1, 64))
RATE = 3.0e6            # flops per us per SM of the 128 x 256 TF32 k-loop (398 TFLOP/s over 132 SMs)
# k-loop rate of each (consumers, width, blocks per SM) against 128 x 256; 3xTF32: against its 128 x 128, per product
REL = {(3, 192, 1): 1.0, (3, 128, 1): 0.9,       # 16-bit only (HALF_BUILDS)
       (2, 256, 1): 1.0, (2, 192, 1): 0.9, (2, 160, 1): 0.86, (2, 128, 1): 0.85, (2, 96, 1): 0.72,
       (2, 64, 1): 0.52, (1, 128, 2): 0.75, (1, 96, 2): 0.66, (1, 64, 2): 0.5, (1, 256, 1): 0.86,
       (1, 192, 1): 0.8, (1, 128, 1): 0.7, (1, 64, 1): 0.5}
REL_SPLIT = {(2, 128): 1.0, (2, 96): 0.9, (2, 64): 0.7, (1, 128): 0.7, (1, 64): 0.7}
STORE = 20e3            # bytes per us one SM's epilogue stores while every SM stores (2.6 TB/s in all)
HIDDEN = 0.5            # the part of an epilogue that two blocks per SM do not hide
FETCH = 100e3           # bytes per us one SM's TMA loads bring in alone (latency-bound: stages in flight)
PARTIAL, CAP = 0.3, {False: 1.1, True: 1.0}


def rate(consumers: int, qn: int, per_sm: int, split: bool) -> float:
    """The build's k-loop rate relative to its precision's widest tile (unmeasured builds: by the nearest width)."""
    if split:
        table = {k: v for k, v in REL_SPLIT.items() if k[0] == consumers}
        return table.get((consumers, qn)) or table[min(table, key=lambda k: abs(k[1] - qn))]
    table = {k: v for k, v in REL.items() if k[0] == consumers and k[2] == per_sm}
    return table.get((consumers, qn, per_sm)) or table[min(table, key=lambda k: abs(k[1] - qn))]


def estimate(tiles: int, ktiles: int, consumers: int, qn: int, per_sm: int, split: bool, sm_count: int,
             out_bytes: int = 4) -> float:
    """Modelled microseconds of the launch: `tiles` block tiles of 64 * consumers x qn, `ktiles` k-tiles each, C
    elements of `out_bytes`. A 16-bit k-tile (64 k) holds twice TF32's products at twice the rate: the same time."""
    pm, products = 64 * consumers, 3 if split else 1
    rel = rate(consumers, qn, per_sm, split)
    k_tile = max(products * pm * qn * 64 / (RATE * rel) * per_sm, (2 if split else 1) * (pm + qn) * 128 / FETCH)
    store = pm * qn * out_bytes / STORE * (HIDDEN if per_sm == 2 else 1.0)
    slots = sm_count * per_sm
    full, part = divmod(tiles, slots)
    time = full * (ktiles * k_tile + store)
    if part:
        time += ktiles * k_tile * max(part / slots, PARTIAL, rel / CAP[split]) + store
    return time


def ranked(builds: list[tuple[int, int, int]], tiles_of, ktiles: int, split: bool, sm_count: int,
           out_bytes: int = 4) -> list:
    """`builds` (consumers, width, blocks per SM), fastest first by the model; `tiles_of(consumers, width)`."""
    return sorted(builds, key=lambda b: (estimate(tiles_of(b[0], b[1]), ktiles, *b, split, sm_count, out_bytes),
                                         -b[1]))
