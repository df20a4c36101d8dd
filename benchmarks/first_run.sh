#!/usr/bin/env bash
# The README's first command as on a fresh clone: no __pycache__, an empty numba cache (a fresh NUMBA_CACHE_DIR),
# and with `fresh` no random-weights GGUF in ~/.cache/ggpy either. Prints the seconds from the command to the
# embedding ("to_embedding") and to its end ("total"), the steady-state median and the load average at the start.
#   bash benchmarks/first_run.sh [keep|fresh] [python]        (from the repository root)
set -euo pipefail
model=${1:-keep}
python=${2:-python3}
find . -name __pycache__ -prune -exec rm -rf {} +
NUMBA_CACHE_DIR=$(mktemp -d)
export NUMBA_CACHE_DIR
trap 'rm -rf "$NUMBA_CACHE_DIR"' EXIT
if [ "$model" = fresh ]; then rm -f ~/.cache/ggpy/mobilesam-random-*.gguf; fi
log=$(mktemp)
load=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
"$python" -u -m ggpy.models.mobilesam encode --bench 3 -o "$(mktemp --suffix .npy)" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$log"
t1=$(grep -m1 " embedding (" "$log" | cut -d' ' -f1)
t2=$(tail -1 "$log" | cut -d' ' -f1)
median=$(grep -o "median_ms=[0-9.]*" "$log" || true)
printf 'model=%s to_embedding=%.1f s total=%.1f s %s load=%s\n' "$model" "$(echo "$t1 - $t0" | bc)" \
    "$(echo "$t2 - $t0" | bc)" "$median" "$load"
