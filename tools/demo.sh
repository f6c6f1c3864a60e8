#!/usr/bin/env bash
# `make demo`: the main job on bundled real data (a 2-layer GPT-2 joint graph
# traced by AOTAutograd), then the Python path on a freshly traced model.
set -euo pipefail
cd "$(dirname "$0")/.."
FX=${FX:-build/fxremat}
OUT=build/demo
rm -rf "$OUT"
mkdir -p "$OUT"
G=testdata/gpt2_2l.json.gz

echo "== 1. What the joint graph holds (fxremat inspect) =="
$FX inspect "$G" > "$OUT/inspect.txt"
sed -n '1,8p' "$OUT/inspect.txt"
echo "   ..."
sed -n '/classification/,$p' "$OUT/inspect.txt"
echo
echo "== 2. Partition it with the min-cut solver (fxremat partition; the default partitioner) =="
$FX partition "$G" -o "$OUT/gpt2_2l" > "$OUT/partition.txt"
sed -n '1,10p' "$OUT/partition.txt"
echo "   ... (every saved value, with its positions, in $OUT/gpt2_2l/signature.json)"
$FX partition "$G" --partitioner default -o "$OUT/gpt2_2l_default" > "$OUT/partition_default.txt"
echo "   functorch's default_partition on the same graph, for comparison:"
sed -n '1p' "$OUT/partition_default.txt" | sed 's/^/   /'
echo
echo "== 3. Prove it numerically through the libtorch dispatcher (fxremat verify) =="
$FX verify "$G" "$OUT/gpt2_2l" > "$OUT/verify.txt"
tail -n 3 "$OUT/verify.txt"
echo
echo "== 4. The small seed program, as readable code (fxremat partition --print code) =="
$FX partition testdata/sin_mm.json.gz --print code > "$OUT/sin_mm.txt"
grep -v "^# op \|^# input" "$OUT/sin_mm.txt" | sed "s/  # tag=.*//"
echo
echo "== 5. Python: export a model, partition it in C++, load the graphs back into PyTorch =="
.venv/bin/python tools/demo.py
if [ -f tools/demo_compile.py ]; then
  echo
  echo "== 6. torch.compile(model, backend=\"fxremat\"): a short training run =="
  .venv/bin/python tools/demo_compile.py
fi
echo
echo "== 7. Checkpoint policies on the GPT-2 graph (fxremat residuals --policy ...) =="
printf "   %-36s %s\n" "policy" "residuals"
for policy in "(none: the min cut alone)" nothing_saveable dots_with_no_batch_dims_saveable dots_saveable \
              everything_saveable offload_dot_with_no_batch_dims; do
  if [ "${policy:0:1}" = "(" ]; then args=(); else args=(--policy "$policy"); fi
  printf "   %-36s %s\n" "$policy" "$($FX residuals "$G" "${args[@]}" | grep " residuals: ")"
done
echo "   offload_dot_with_no_batch_dims, verified with the host copies (fxremat verify):"
$FX partition "$G" --policy offload_dot_with_no_batch_dims -o "$OUT/gpt2_2l_offload" > /dev/null
$FX verify "$G" "$OUT/gpt2_2l_offload" | tail -n 1 | sed 's/^/   /'
echo
echo "== 8. Named values from Python: seed 003's program with fxremat.checkpoint_name =="
.venv/bin/python tools/demo_policies.py
echo
echo "== 9. A memory budget on the step's peak (transformers Llama, 4 layers; docs/budget.md) =="
L=testdata/budget/llama_4l.json.gz
peak() { grep "step peak" | sed 's/^step peak (simulated): //'; }
echo "   min cut:                              $($FX partition "$L" | peak)"
echo "   the model's own per-layer checkpointing: $($FX partition testdata/budget/llama_4l_ckpt.json.gz | peak)"
echo "   PyTorch's meaning of budget 0 (save only the inputs): $($FX partition "$L" --config activation_memory_budget=0 --config budget_objective=saved | peak)"
echo "   fxremat budget 0 (the smallest peak):  $($FX partition "$L" --config activation_memory_budget=0 -o "$OUT/llama_budget0" | peak)"
$FX verify "$L" "$OUT/llama_budget0" | tail -n 1 | sed 's/^/   /'
echo "   the front (fxremat pareto --points 5; also $OUT/front.svg):"
$FX pareto "$L" --points 5 --plot "$OUT/front.svg" | grep -E "^point|^budget|^min cut|^inputs only" | sed 's/^/   /'
