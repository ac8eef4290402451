#!/bin/bash
# One device call for issue 5B: GPU tests of softmax/layernorm/batchnorm, then the mb_norms benchmark.
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout ${TEST_S:-100} python3 -m pytest -q -p no:cacheprovider --tb=short -m gpu --maxfail=30 \
    tests/test_softmax.py tests/test_norm.py ${TEST_ARGS} > $OUT/tests.log 2>&1
echo "pytest rc=$?"
grep -E "passed|failed|error" $OUT/tests.log | tail -3
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -40
timeout ${BENCH_S:-120} python3 benchmarks/mb_norms.py --json $OUT/bench.json ${BENCH_ARGS} > $OUT/bench.log 2>&1
echo "bench rc=$?"
grep -v "^  " $OUT/bench.log | tail -45
