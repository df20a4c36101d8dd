#!/usr/bin/env bash
# Everything to run on the GPU machine in one call: wheels carried in wheels/ (nvmath-python, ...), the
# environment, the CUDA tests, the GPU benchmarks, and a one-line summary.
# Usage: bash benchmarks/gpu_check.sh [pytest args...]
# Env: MOBILESAM_BENCH_ARGS (benchmarks/mobilesam_gpu.py's arguments), LLAMA_BENCH_ARGS (benchmarks/llama_gpu.py's), GGPY_SKIP_MOBILESAM=1 (CUDA tests only),
# GGPY_LOG_DIR (a folder that receives the whole test and benchmark logs, not only their tails)
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
export GGPY_CUDA_CACHE=${GGPY_CUDA_CACHE:-/tmp/ggpy-cuda-cache}
if compgen -G "wheels/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --target /tmp/ggpy-wheels wheels/*.whl 2>&1 | grep -v "^WARNING" | tail -n 3
    export PYTHONPATH=/tmp/ggpy-wheels${PYTHONPATH:+:$PYTHONPATH}
fi
# packages too big for a wheel under the carry limit travel as pruned trees (wheels/*.tar.xz, e.g. Ray Serve as
# benchmarks/ray_tree.sh packs it), unpacked beside the wheels
for tree in wheels/*.tar.xz; do [ -e "$tree" ] && tar -xJf "$tree" -C /tmp/ggpy-wheels; done
$PY -c "from nvmath.bindings import cublasLt; import nvmath; print('nvmath', nvmath.__version__, 'cublasLt', cublasLt.get_version())" 2>&1 | tail -n 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import cuda.bindings, numpy, numba; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)"
$PY -c "import time; t = time.perf_counter(); import ggpy; from ggpy.backends.cuda.sources import files; b = ggpy.backends.make_backend('cuda'); b.modules.load(files().values()); print(b, f'all {len(files())} kernel files ready in {time.perf_counter() - t:.2f} s')"
# every test-backend-ops case on the GPU (the cuda half of tests/backends/test_backend_ops.py), then the CUDA tests
$PY -m pytest -q -p no:cacheprovider -rfE tests/backends/test_backend_ops.py -k "cuda-" 2>&1 | tee /tmp/ggpy-op-tests.log | tail -n 15
op_status=${PIPESTATUS[0]}
echo "SUMMARY op cases on cuda: $(tail -n 1 /tmp/ggpy-op-tests.log | tr -d '=') (exit $op_status)"
$PY -m pytest -q -p no:cacheprovider -rfE tests/backends/test_cuda_backend.py tests/backends/test_cuda_conv.py tests/core/test_scheduler.py tests/core/test_op_table.py "$@" 2>&1 | tee /tmp/ggpy-tests.log | tail -n 40
status=${PIPESTATUS[0]}
[ "$op_status" -ne 0 ] && status=$op_status
echo "cuda tests exit status: $status"
bench=$(PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} $PY benchmarks/cuda_mul_mat.py 4096 2>&1 | tail -n 1)
echo "$bench"
echo "SUMMARY: tests: $(tail -n 1 /tmp/ggpy-tests.log | tr -d '=') (exit $status) | $bench"
# text generation (SmolLM2-shaped random Q4_1 model): prompt and generation tokens/s on the GPU
PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} $PY benchmarks/llama_gpu.py ${LLAMA_BENCH_ARGS:---models smollm2-q4_1 --depths 0 --rounds 2} 2>&1 | tee /tmp/ggpy-llama-bench.log | tail -n 4
echo "SUMMARY llama: $(grep '^| smollm2-q4_1.gguf | 0 |' /tmp/ggpy-llama-bench.log | head -n 1)"
# MobileSAM on the GPU (needs torch; mobile_sam and gguf come as wheels in wheels/): correctness vs PyTorch,
# CUDA graphs, then the side-by-side benchmark (ggpy CUDA vs PyTorch eager and torch.compile)
if [ -z "${GGPY_SKIP_MOBILESAM:-}" ]; then
    $PY -m pytest -q -p no:cacheprovider -rfE -s tests/models/test_mobilesam_cuda.py 2>&1 | tee /tmp/ggpy-mobilesam-tests.log | grep -E "relative error|passed|failed|skipped|Error|error" | tail -n 30
    echo "mobilesam cuda tests exit status: ${PIPESTATUS[0]}"
    PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} $PY benchmarks/mobilesam_gpu.py ${MOBILESAM_BENCH_ARGS:-} 2>&1 | tee /tmp/ggpy-mobilesam-bench.log | tail -n 45
    echo "SUMMARY mobilesam: tests $(tail -n 1 /tmp/ggpy-mobilesam-tests.log | tr -d '=') | $(grep '^SUMMARY' /tmp/ggpy-mobilesam-bench.log)"
    # segmentation (prompt encoder + mask decoder) on CUDA: SamPredictor comparison, then per-prompt timing
    $PY -m pytest -q -p no:cacheprovider -rfE tests/models/test_mobilesam_decoder.py -k cuda 2>&1 | tee /tmp/ggpy-mobilesam-decoder-tests.log | tail -n 15
    PYTHONUNBUFFERED=1 $PY benchmarks/mobilesam_decoder.py -b cuda ${DECODER_BENCH_ARGS:---runs 20 --rounds 3} 2>&1 | tee /tmp/ggpy-mobilesam-decoder-bench.log | tail -n 20
    echo "SUMMARY mobilesam decoder: tests $(tail -n 1 /tmp/ggpy-mobilesam-decoder-tests.log | tr -d '=') | $(grep '^summary' /tmp/ggpy-mobilesam-decoder-bench.log)"
fi
if [ -n "${GGPY_LOG_DIR:-}" ]; then
    mkdir -p "$GGPY_LOG_DIR" && cp /tmp/ggpy-op-tests.log /tmp/ggpy-tests.log /tmp/ggpy-llama-bench.log /tmp/ggpy-mobilesam-*.log "$GGPY_LOG_DIR"/ 2>/dev/null
fi
