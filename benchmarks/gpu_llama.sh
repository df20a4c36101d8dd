#!/usr/bin/env bash
# Generation beside llama.cpp on the GPU machine (issue 28's measurement), in two calls on one warm machine:
#   bash benchmarks/gpu_llama.sh prepare   # llama.cpp's CUDA llama-bench + llama-quantize built from wheels/llama.cpp-src.tar.xz
#                                          # (../shared/tools/llama_cpp.sh, carried as wheels/llama_cpp.sh) while the CUDA
#                                          # tests of the decode path run; then the random models written and quantized
#   bash benchmarks/gpu_llama.sh bench [llama_gpu.py args]   # benchmarks/llama_gpu.py beside llama-bench
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama-build}
BIN=$LLAMA_DIR/llama.cpp/build/bin
MODELS=${MODELS:-smollm2-q4_1,smollm2-q8_0,llama1b-q4_k_m,llama1b-q8_0}
$PY -m pip install -q --no-index --no-deps --target /tmp/ggpy-wheels wheels/*.whl 2>&1 | grep -v "^WARNING" | tail -n 3
export PYTHONPATH=/tmp/ggpy-wheels:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
case "${1:-}" in
prepare)
    if [ ! -x "$BIN/llama-bench" ]; then
        (bash wheels/llama_cpp.sh build wheels/llama.cpp-src.tar.xz "$LLAMA_DIR" cuda > /tmp/llama-build.log 2>&1
         echo "llama.cpp build exit $?" >> /tmp/llama-build.log) &
    fi
    $PY -m pytest -q -p no:cacheprovider -rfE tests/models/test_llama_cuda.py tests/models/test_llama_next_token.py \
        tests/backends/test_cuda_flash_attn.py tests/backends/test_topk.py tests/backends/test_cuda_mmvq.py \
        tests/backends/test_norm_mat_vec.py tests/backends/test_rope_kv.py tests/core/test_runner.py \
        tests/backends/test_mul_mat_id.py tests/backends/test_quant_low_bits.py tests/models/test_mobilesam_cuda.py 2>&1 | tail -n 12
    $PY -m pytest -q -p no:cacheprovider -rfE tests/backends/test_backend_ops.py \
        -k "cuda- and (flash_attn or mul_mat or rms_norm or rope or set_rows or top_k or argmax or argsort or glu or add or cpy or cont)" 2>&1 | tail -n 8
    wait
    tail -n 3 /tmp/llama-build.log 2>/dev/null
    $PY benchmarks/llama_gpu.py --models "$MODELS" --llama-cpp "$BIN" --prepare-only ;;
bench)
    shift
    $PY benchmarks/llama_gpu.py --models "$MODELS" --llama-cpp "$BIN" "$@" ;;
*)
    sed -n 2,6p "$0"; exit 2 ;;
esac
