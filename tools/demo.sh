#!/usr/bin/env bash
# `make demo`: the main job on bundled real data (a 2-layer GPT-2 joint graph
# traced by AOTAutograd), then a Python round trip on a freshly traced model.
set -euo pipefail
cd "$(dirname "$0")/.."
FX=build/fxremat
OUT=build/demo
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== 1. What the joint graph holds (fxremat inspect) =="
$FX inspect testdata/gpt2_2l.json.gz | head -n 12
echo "   ..."
$FX inspect testdata/gpt2_2l.json.gz | sed -n '/classification/,$p'
echo
echo "== 2. Partition it like functorch's default_partition (fxremat partition) =="
$FX partition testdata/gpt2_2l.json.gz --partitioner default -o "$OUT/gpt2_2l" | head -n 14
echo "   ... (full list in $OUT/gpt2_2l/signature.json)"
echo
echo "== 3. Prove it numerically through the libtorch dispatcher (fxremat verify) =="
$FX verify testdata/gpt2_2l.json.gz "$OUT/gpt2_2l" | tail -n 4
echo
echo "== 4. The small seed program, as readable code (fxremat partition --print code) =="
$FX partition testdata/sin_mm.json.gz --print code | grep -v "stack=" | sed 's/  # tag=[a-z_]*//'
echo
echo "== 5. Python: export a model, partition it in C++, load the graphs back into PyTorch =="
.venv/bin/python tools/demo.py
