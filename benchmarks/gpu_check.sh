#!/usr/bin/env bash
# Everything to run on the GPU machine in one call: the environment, then the CUDA tests (later also the
# GPU benchmarks), ending with a short summary. Usage: bash benchmarks/gpu_check.sh [pytest args...]
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
export GGPY_CUDA_CACHE=${GGPY_CUDA_CACHE:-/tmp/ggpy-cuda-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import cuda.bindings, numpy, numba; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)"
$PY -c "import time; t = time.perf_counter(); import ggpy; b = ggpy.backends.make_backend('cuda'); b.module; print(b, f'kernels ready in {time.perf_counter() - t:.2f} s')"
$PY -m pytest -q -p no:cacheprovider -rfE tests/test_cuda_backend.py tests/test_cuda_conv.py "$@" 2>&1 | tail -n 40
echo "cuda tests exit status: ${PIPESTATUS[0]}"
