#!/usr/bin/env bash
# compute-sanitizer over the GPU tests (on a GPU machine): memcheck on every GPU test file, racecheck on
# the kernels that use shared memory. Runs the groups in parallel; each log ends with its rc.
# Usage: bash tests/sanitize.sh OUTDIR [SECONDS]
set -u
out=${1:?output directory}; limit=${2:-240}
mkdir -p "$out"
run() {  # tool name files...
    local tool=$1 name=$2; shift 2
    timeout "$limit" compute-sanitizer --tool "$tool" --target-processes all --print-limit 10 --error-exitcode 9 \
        python3 -m pytest -q -x -p no:cacheprovider -m gpu "$@" > "$out/$tool-$name.log" 2>&1
    echo "rc=$?" >> "$out/$tool-$name.log"
}
skip="not second_process and not out_of_memory and not every_config_on_gpu and not 4097 and not seed and not every_shape and not times_the_kernel"
run memcheck gemm_blas -k "$skip" tests/test_gemm.py tests/test_blas1.py tests/test_activation.py tests/test_shape.py &
run memcheck softmax -k "$skip" tests/test_softmax.py &
run memcheck norm_pool -k "$skip" tests/test_layernorm.py tests/test_batchnorm.py tests/test_pool.py tests/test_tensor.py &
run memcheck runtime -k "$skip" tests/test_jit.py tests/test_execution.py &
run racecheck gemm_dot -k "$skip" tests/test_gemm.py tests/test_blas1.py &
run racecheck gemm_kgroups -k "every_shape_on_gpu and mma" tests/test_gemm.py &
run racecheck softmax -k "$skip" tests/test_softmax.py &
run racecheck norm_pool -k "$skip" tests/test_layernorm.py tests/test_batchnorm.py tests/test_pool.py &
wait
for f in "$out"/*.log; do
    echo "== $(basename "$f"): $(grep -E 'passed|failed' "$f" | tail -1) $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$f" | tail -1) $(tail -1 "$f")"
done
