#!/usr/bin/env bash
# One call on a lent GPU machine (see /work/.library/device): the CUDA tests on the real
# device, the whole suite's CUDA-backend cases, and benchmarks/gpu.py; logs under $OUT.
#   run(command="bash benchmarks/gpu_session.sh [steps]", carry=[".whl"])
# steps: any of "tests suite bench attention compile" (default: tests bench suite); "suite" is the whole
# suite, where every test over helpers.BACKENDS runs on "cuda" too.  The image lacks
# optree, which travels as a wheel in .whl (pip download optree, cp312 manylinux).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false HYPOTHESIS_PROFILE=quick
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
steps=${1:-"tests bench suite"}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
python3 -c "import cupy, llvmlite, numpy, sympy, hypothesis, relaxjax.backends.cuda as c; \
print('cupy', cupy.__version__, 'llvmlite', llvmlite.__version__, 'numpy', numpy.__version__, \
'sympy', sympy.__version__, 'hypothesis', hypothesis.__version__, 'gpu', c.gpu_available(), c.cupy_device().arch)"
for step in $steps; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) timeout ${TESTS_S:-150} python3 -m pytest -q -n 8 -p no:cacheprovider --tb=short -rf -k "not emulated" \
             tests/test_cuda.py tests/test_cuda_attention.py 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    # every backend loop of the suite on cuda alone (CI covers the others); SIGINT at the
    # limit, so pytest still prints the failures it has
    suite) RELAXJAX_TEST_BACKENDS=cuda timeout -s INT -k 15 ${SUITE_S:-170} python3 -m pytest -q -n 16 \
             -p no:cacheprovider --tb=short -rf tests 2>&1 | tee "$OUT/suite.log" | grep "^FAILED\|passed\|failed" | tail -60 ;;
    bench) timeout ${BENCH_S:-110} python3 benchmarks/gpu.py --reps ${REPS:-15} --peers cupy,torch,jax \
             --out "$OUT/gpu.json" 2>&1 | tee "$OUT/gpu.log" | tail -25 ;;
    attention) timeout ${ATT_S:-90} python3 benchmarks/gpu_attention.py --reps ${REPS:-15} 2>&1 \
             | tee "$OUT/attention.log" | tail -20 ;;
    compile) timeout 150 python3 benchmarks/gpu.py --reps ${REPS:-15} --peers torch.compile \
             --out "$OUT/gpu_compile.json" 2>&1 | tee "$OUT/gpu_compile.log" | tail -15 ;;
    *) bash -c "$step" 2>&1 | tee -a "$OUT/extra.log" | tail -30 ;;
  esac
done
echo "=== done $(date +%T)"
