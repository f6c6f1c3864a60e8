#!/usr/bin/env bash
# Builds fxremat._C (core + pybind11 extension, no libtorch bridge, no CLI) on a lent
# GPU machine whose image has torch, cmake, ninja and pybind11 but none of the Debian
# dev packages. The packages travel as .deb files in .devdeps/ (git-ignored; made here
# with `apt-get download`, see bench/gpu_budget_bench.py) and are unpacked under
# /tmp/fxremat-deps. Prints the two exports a caller needs:
#   eval "$(bash bench/gpu_setup.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=/tmp/fxremat-deps
PY=${PYTHON:-python3}
mkdir -p "$DEPS"
for f in .devdeps/*.deb; do dpkg -x "$f" "$DEPS"; done
LIB="$DEPS/usr/lib/x86_64-linux-gnu"
# zlib1g-dev's libz.so is an absolute link to /lib/...: name the unpacked shared
# library itself (FindZLIB would fall back to the non-PIC libz.a).
ZLIB_SO=""
# (zlib1g's .deb when it travels, else the image's own libz.so.1: every image has one)
for z in "$DEPS"/lib/x86_64-linux-gnu/libz.so.1 "$DEPS"/usr/lib/x86_64-linux-gnu/libz.so.1 \
         /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1; do
  if [ -z "$ZLIB_SO" ] && [ -e "$z" ]; then ZLIB_SO=$z; fi
done
"$PY" -m cmake --version >/dev/null 2>&1 && CMAKE="$PY -m cmake" || CMAKE=cmake
$CMAKE -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$DEPS/usr" -DFXREMAT_WITH_TORCH=OFF -DFXREMAT_BUILD_TESTS=OFF \
  -DFXREMAT_BUILD_BENCH=OFF -DFXREMAT_WITH_CBC=OFF -DFXREMAT_PYTHON="$(command -v "$PY")" \
  -DPython_EXECUTABLE="$(command -v "$PY")" -DZLIB_LIBRARY="$ZLIB_SO" -DZLIB_LIBRARY_RELEASE="$ZLIB_SO" -DZLIB_INCLUDE_DIR="$DEPS/usr/include" >&2
$CMAKE --build build-gpu --target fxremat_python -j "$(nproc)" >&2
echo "export LD_LIBRARY_PATH=$LIB:\${LD_LIBRARY_PATH:-}"
echo "export PYTHONPATH=$PWD/python:\${PYTHONPATH:-}"
