#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Debian packages, a .venv with torch
# pinned to the CPU wheel, and the Python package installed editable without
# build isolation. Each step is skipped when what it makes is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-14-dev: the libFuzzer target (`make fuzz`, run by .ci/run).
# libsimdjson-dev: the JSON graph reader (src/json_io.cpp); libdeflate-dev: its .gz
# reading; coinor-libcbc-dev and
# pkg-config: the budget solver's optional MILP candidate (src/binary_program.h).
APT_PACKAGES=(nlohmann-json3-dev libsimdjson-dev libdeflate-dev libcli11-dev libfmt-dev catch2 zlib1g-dev libboost-graph-dev coinor-libcbc-dev pkg-config clang libclang-rt-14-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.fxremat-requirements
want=$(cat requirements-dev.txt constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing Python packages (torch pinned by constraints.txt)"
  .venv/bin/pip install -q -c constraints.txt -r requirements-dev.txt
  echo "$want" > "$stamp"
fi
