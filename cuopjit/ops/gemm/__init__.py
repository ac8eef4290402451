"""GEMM-shaped families: GEMM, GEMV, MatMul/BatchMatMul, SYMM, TRSM, split-K and the 3xTF32 split.

`plans` is the GEMM family (choices and plans); `problem` its problem and choice types, `heuristics`
the automatic choices, `shapes` the kernel shapes, `wgmma` the Hopper kernel and `wgmma_tiles` its tile pick (a
cost model of rounds, k-loop rates and epilogues, measured on the H100), `vector` the one-row / one-column
product run as GEMV. Transposed operands (trans flags, or layout "transposed" views) are the problem's
trans_a / trans_b. How each JITConfig field changes the code:

    kernel_type     "auto": float64 -> DMMA mma.sync; float32 -> SIMT, or TF32 mma.sync with
                    enable_tensor_core=True; float16 / bfloat16 -> tensor cores (exact products, float32
                    sums): wgmma f16 / bf16 on sm_90 (TMA: 16-byte aligned operands and strides), mma.sync
                    m16n8k16 on sm_80+ (aligned; mma16.py), else the one-stage kernel reading halves (TF32
                    mma.sync, exact on 16-bit values); "simple" and enable_tensor_core=False with "tiled" SIMT. "tiled": SIMT, or mma.sync (TF32 / DMMA) with
                    enable_tensor_core=True. "warp_optimized": the warp-tiled mma.sync kernel wherever
                    it loses no precision (float64: DMMA) or enable_tensor_core=True grants TF32;
                    float32 otherwise SIMT. "tensor_core": mma.sync (float32 as TF32 even without
                    enable_tensor_core: the kernel type asks for it). "simple": SIMT, never tensor
                    cores, by default on 16 x 16 tiles (one output per thread at 256 threads)
    tile_size       BM = BN: 16, 32, 64 or 128. 0: "simple" -> 16 (32 for 512 or 1024 threads);
                    otherwise the largest of 128, 64, 32 that still gives every SM (target.sm_count)
                    a block, else 32
    block_size      threads per block (0: the tile's default). It fixes the SIMT thread tile
                    TM x TN = tile^2 / threads, or the mma warp layout (k-groups when there are more
                    warps than m16n8 warp tiles). Tile 16: 32..256; 32: 32..1024; 64: 64..1024
                    (float64: 128..1024); 128: 256..1024 (float64: 256, 512). Others raise, listing
                    the valid ones. Both 0 on the float32 SIMT kernel: auto_simt picks BM x BN
                    (non-square tiles too) and the block size together
    enable_tensor_core        permission for mma.sync under "auto", "tiled", "warp_optimized"
    enable_tma                on sm_90 (TMA), float32 runs the wgmma kernel (as enable_tensor_core)
    precision                 "3xtf32": the wgmma kernel's split-operand mode; float32 elsewhere runs
                              the exact SIMT kernel; float64 raises
    enable_loop_unroll        `#pragma unroll` vs `unroll 1` on the k-loop inside a shared-memory tile
                              (the cp.async kernels: their k-steps)
    enable_memory_coalescing  16-byte global loads/stores (where `aligned` allows) vs scalar accesses
                              (the cp.async kernels: 16-byte vs 4-/8-byte copies)
    enable_shared_memory_opt  shared-memory row padding (bank-conflict-free transposed stores) on/off;
                              in the mma cp.async kernel the swizzled / padded tiles vs plain rows
optimization_level and max_registers reach NVRTC. With tile_size and block_size both 0 (and not
"simple"), the other hand-tuned shapes of the same kernel are auto-tuning candidates.
"""
