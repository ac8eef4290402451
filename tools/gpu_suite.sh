#!/usr/bin/env bash
# The GPU suite in parallel groups (one pytest process each) plus compute-sanitizer over tools/sanitize_*.py,
# logs and a summary under $OUT (default /tmp/gpu_suite). Usage: tools/gpu_suite.sh [SECONDS per group]
set -u
T=${1:-330}
OUT=${OUT:-/tmp/gpu_suite}; mkdir -p "$OUT"
cd "$(dirname "$0")/.."
run() {  # name, files...
  local name=$1; shift
  timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(tail -1 "$OUT/$name.log")" >> "$OUT/summary.txt"
}
g() { ls tests/$1 2>/dev/null; }
run gemm $(g 'test_gemm*.py') &
run conv $(g 'test_conv2d*.py') &
run epi $(g 'test_epilogue*.py') &
run rows $(g 'test_softmax*.py') tests/test_layernorm.py $(g 'test_batchnorm*.py') $(g 'test_properties_rows*.py') $(g 'test_*half*.py') &
run maps tests/test_pool.py $(g 'test_elementwise*.py') tests/test_blas1.py tests/test_activation.py tests/test_shape.py tests/test_properties_maps.py $(g 'test_layouts_maps*.py') tests/test_relayout.py &
run blas tests/test_gemv.py tests/test_matmul.py tests/test_symm.py tests/test_trsm.py tests/test_properties_products.py &
run torch $(g 'test_torch*.py') &
run attention $(g 'test_attention*.py') &
run runtime tests/test_execution.py tests/test_jit.py tests/test_explain.py tests/test_interop.py tests/test_tensor.py tests/test_layout.py tests/test_memory_stats.py $(g 'test_cli*.py') tests/test_show.py $(g 'test_tuning*.py') tests/test_guards.py tests/test_checks.py tests/test_pipeline.py tests/test_plans.py tests/test_prewarm_dtypes.py tests/test_multi_gpu.py &
for tool in memcheck racecheck; do
  ( for script in tools/sanitize_*.py; do
      timeout "$T" compute-sanitizer --tool $tool --error-exitcode 9 python3 "$script" >> "$OUT/$tool.log" 2>&1
      echo "$tool $script rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)" >> "$OUT/summary.txt"
    done ) &
done
wait
cat "$OUT/summary.txt"
