#!/usr/bin/env python3
"""Seed corpus for build-fuzz/tests/fxremat_fuzz_loader (`make fuzz`).

    python tests/fuzz/make_corpus.py OUT_DIR

Writes one file per seed into OUT_DIR (standard library only, deterministic):

- every graph of testdata/ (gunzipped, compact JSON) and every case of
  tests/bad_inputs/ (.json, .json.gz gunzipped, .fxir);
- the IR text of every graph in tests/golden/*.test;
- policy files and --policy strings (every kind of docs/policies.md);
- structural mutations of a small joint graph, in both forms, of the kinds that
  broke the readers (issue 12): deep nesting of args / kwargs / meta.val /
  policy all_of / text-IR arguments and annotations, negative, INT64_MIN,
  2^63-1 and 2^64 dims, non-finite and fractional numbers, bad symbol hints,
  reversed value ranges, bad dtypes, chains listed out of topological order,
  truncations.

Seeds above MAX_LEN bytes are left out (libFuzzer would truncate them).
"""
from __future__ import annotations

import copy
import gzip
import hashlib
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LEN = 65536
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def compact(doc) -> str:
    """Compact JSON; a Deep value is written as text (json.dumps recurses)."""
    deep = []

    def default(o):
        deep.append(o)
        return f"@DEEP{len(deep) - 1}@"

    text = json.dumps(doc, separators=(",", ":"), default=default)
    for i, d in enumerate(deep):
        text = text.replace(f'"@DEEP{i}@"', d.open * d.depth + compact(d.inner) + d.close * d.depth)
    return text


class Deep:
    """`inner` wrapped `depth` times in open ... close (JSON text)."""

    def __init__(self, inner, depth, open_, close):
        self.inner, self.depth, self.open, self.close = inner, depth, open_, close


def graphs_from_testdata():
    for path in sorted(ROOT.glob("testdata/**/*.json.gz")):
        with gzip.open(path, "rt") as f:
            yield path.name, compact(json.load(f))


def bad_inputs():
    for path in sorted((ROOT / "tests/bad_inputs").iterdir()):
        if path.suffix in (".json", ".fxir", ".args", ".tsv"):
            yield path.name, path.read_bytes()
        elif path.name.endswith(".json.gz"):
            try:
                yield path.name, gzip.decompress(path.read_bytes())
            except (OSError, EOFError):
                yield path.name, path.read_bytes()


def golden_graphs():
    """The IR text of each graph in the golden tests (sections split by '// -----')."""
    for path in sorted((ROOT / "tests/golden").glob("*.test")):
        for i, section in enumerate(re.split(r"^// -----.*$", path.read_text(), flags=re.M)):
            lines = [line for line in section.splitlines() if not line.startswith("//")]
            text = "\n".join(lines).strip()
            if "def forward" in text:
                yield f"{path.stem}_{i}", text + "\n"


POLICY_STRINGS = [
    "everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
    "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims",
    "save_only_these_names:attn_out,mlp_out", "save_any_names_but_these:a",
    "save_and_offload_only_these_names:save=y;offload=z",
    "offload_dot_with_no_batch_dims", "offload_dot_with_no_batch_dims:device,pinned_host",
    "save_ops:aten.mm,aten.addmm",
    "checkpoint_policy:a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE",
    "save_from_both_policies:dots_saveable|save_only_these_names:a",
    "dots_saveable+save_only_these_names:a+nothing_saveable",
    "save_only_these_names:" + ",".join(f"n{i}" for i in range(300)),
    "+".join(["nothing_saveable"] * 300),
    "save_from_both_policies:" + "|".join(["dots_saveable"] * 300),
]

POLICY_DOCS = [
    {"policy": "save_only_these_names", "names": ["a", "b"]},
    {"policy": "save_and_offload_only_these_names", "names_which_can_be_saved": ["a"],
     "names_which_can_be_offloaded": ["b"], "offload_src": "device", "offload_dst": "pinned_host"},
    {"policy": "dots_saveable"},
    {"policy": "nothing_saveable"},
    {"policy": "everything_saveable"},
    {"policy": "offload_dot_with_no_batch_dims", "offload_src": "device", "offload_dst": "pinned_host"},
    {"policy": "save_ops", "ops": ["aten.mm"]},
    {"policy": "checkpoint_policy", "by_name": {"a": "MUST_SAVE"}, "by_op": {"aten.mm": "PREFER_RECOMPUTE"},
     "default": "PREFER_SAVE"},
    {"policy": "save_from_both_policies", "children": [{"policy": "dots_saveable"}, {"policy": "nothing_saveable"}]},
    [{"policy": "dots_saveable"}, {"policy": "save_only_these_names", "names": ["a"]}],
]


def graph_mutations(base: dict):
    """(name, document or raw text) pairs: mutations of a small joint graph."""
    nodes = base["nodes"]
    call = next(i for i, n in enumerate(nodes) if n["op"] == "call_function")
    first_tensor = next(i for i, n in enumerate(nodes) if n.get("meta", {}).get("val", {}).get("kind") == "tensor")

    def mutated(fn):
        doc = copy.deepcopy(base)
        fn(doc)
        return doc

    for depth in (200, 300, 5000):
        yield f"deep_args_{depth}", mutated(lambda d: d["nodes"][call]["args"].append(Deep(1, depth, "[", "]")))
        yield f"deep_kwargs_{depth}", mutated(lambda d: d["nodes"][call].setdefault("kwargs", {}).update(
            deep=Deep({"node": nodes[0]["name"]}, depth, "[", "]")))
        yield f"deep_meta_val_{depth}", mutated(lambda d: d["nodes"][call]["meta"].update(
            val=Deep(d["nodes"][call]["meta"]["val"], depth, '{"kind":"tuple","items":[', "]}")))
        yield f"deep_unknown_key_{depth}", mutated(lambda d: d.update(extra=Deep({}, depth, '{"x":', "}")))

    def set_dim(field, k, value):
        def fn(d):
            d["nodes"][first_tensor]["meta"]["val"][field][k] = value
        return fn

    for value in (-1, -2, INT64_MIN, INT64_MAX, 2**62, 2**64, 2**63, 0, 1.5, "4", None, True, {"sym": "s0"},
                  {"sym": "s0", "hint": -1}, {"sym": "s0", "hint": INT64_MAX}, {"sym": "s0", "hint": 2**64}):
        tag = re.sub(r"\W", "_", json.dumps(value))[:40]
        yield f"shape_{tag}", mutated(set_dim("shape", 0, value))
        yield f"stride_{tag}", mutated(set_dim("stride", 0, value))
    yield "all_dims_int64_max", mutated(lambda d: [
        n["meta"]["val"].update(shape=[INT64_MAX] * len(n["meta"]["val"]["shape"]))
        for n in d["nodes"] if n.get("meta", {}).get("val", {}).get("kind") == "tensor"])
    for hint in (-1, INT64_MIN, INT64_MAX, 2**64, 0, 1.5):
        tag = re.sub(r"\W", "_", json.dumps(hint))
        yield f"symbol_hint_{tag}", mutated(lambda d: (d.update(symbols={"s0": hint}),
                                                         set_dim("shape", 0, {"sym": "s0"})(d)))
    for rng in ([5, 1], [1, 1], [INT64_MIN, INT64_MAX], [0], [0, 1, 2], ["a", "b"], [1.5, 2]):
        yield f"value_range_{len(rng)}_{rng[0]}", mutated(lambda d: d["nodes"][0]["meta"].update(value_range=rng))
    for dtype in ("float33", "", 7, None, "symint", "complex128", "float8_e4m3fn"):
        yield f"dtype_{dtype}", mutated(lambda d: d["nodes"][first_tensor]["meta"]["val"].update(dtype=dtype))
        yield f"arg_dtype_{dtype}", mutated(lambda d: d["nodes"][call].setdefault("kwargs", {}).update(
            dtype={"dtype": dtype}))
    for arg in ({"float": "inf"}, {"float": "-inf"}, {"float": "nan"}, {"float": "1e999"}, 2**63, 2**64, -(2**63) - 1,
                {"layout": "jagged"}, {"memory_format": "banana"}, {"device": ""}, {"node": "output"}):
        tag = re.sub(r"\W", "_", json.dumps(arg))[:40]
        yield f"arg_{tag}", mutated(lambda d: d["nodes"][call]["args"].append(arg))
    yield "reversed_nodes", mutated(lambda d: d["nodes"].reverse())
    yield "rotated_nodes", mutated(lambda d: d.update(nodes=d["nodes"][call + 1:] + d["nodes"][:call + 1]))
    yield "output_first", mutated(lambda d: d["nodes"].insert(0, d["nodes"].pop()))
    yield "num_fwd_outputs_huge", mutated(lambda d: d["joint"].update(num_fwd_outputs=INT64_MAX))
    yield "num_fwd_outputs_negative", mutated(lambda d: d["joint"].update(num_fwd_outputs=-1))
    yield "tangent_outputs_bad", mutated(lambda d: d["joint"].update(tangent_outputs=[-1, INT64_MAX]))
    yield "version_huge", mutated(lambda d: d.update(version=[INT64_MAX, INT64_MIN]))


def chain(n: int, reverse: bool) -> dict:
    """A joint graph of an n-node sin chain (sin_1 = sin(sin_0) ...), optionally listed backwards."""
    val = {"kind": "tensor", "dtype": "float32", "shape": [4], "stride": [1], "device": "cpu"}
    nodes = [{"name": "primals_1", "op": "placeholder", "target": "primals_1", "role": "primal",
              "meta": {"val": dict(val, requires_grad=True), "partitioner_tag": "is_forward"}},
             {"name": "tangents_1", "op": "placeholder", "target": "tangents_1", "role": "tangent",
              "meta": {"val": val, "partitioner_tag": "is_backward"}}]
    body = []
    prev = "primals_1"
    for i in range(n):
        body.append({"name": f"s{i}", "op": "call_function", "target": "aten.sin.default", "args": [{"node": prev}],
                     "meta": {"val": val, "partitioner_tag": "is_forward"}})
        prev = f"s{i}"
    body.append({"name": "g", "op": "call_function", "target": "aten.mul.Tensor",
                 "args": [{"node": "tangents_1"}, {"node": prev}], "meta": {"val": val, "partitioner_tag": "is_backward"}})
    if reverse:
        body.reverse()
    nodes += body + [{"name": "output", "op": "output", "target": "output",
                      "args": [[{"node": prev}, {"node": "g"}]]}]
    return {"format": "fxremat.graph", "version": [1, 2], "name": "chain", "kind": "joint",
            "joint": {"num_fwd_outputs": 1, "tangent_outputs": [0]},
            "ops": {"aten.sin.default": {"schema": "aten::sin(Tensor self) -> Tensor", "tags": ["core", "pointwise"]},
                    "aten.mul.Tensor": {"schema": "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
                                        "tags": ["core", "pointwise"]}},
            "nodes": nodes}


def text_mutations(text: str):
    lines = text.splitlines()
    body = [i for i, line in enumerate(lines) if line.startswith("    ") and " = " in line]
    for depth in (200, 300, 5000):
        args = lines[:]
        k = body[0]
        args[k] = re.sub(r"\(([^()]*)\)(  #|$)", lambda m: "(" + m.group(1) + ", " + "[" * depth + "1" +
                         "]" * depth + ")" + m.group(2), args[k], count=1)
        yield f"text_deep_args_{depth}", "\n".join(args) + "\n"
        ann = lines[:]
        ann[k] = re.sub(r': "[^"]*"', ': "' + "(" * depth + "f32[4][1]cpu" + ")" * depth + '"', ann[k], count=1)
        yield f"text_deep_annotation_{depth}", "\n".join(ann) + "\n"
        yield f"text_unclosed_parens_{depth}", "\n".join(lines[:k] + [lines[k] + "(" * depth]) + "\n"
    for dim in ("-1", str(INT64_MIN), str(INT64_MAX), str(2**64), "s0", "1e999", "", "4, -4"):
        tag = re.sub(r"\W", "_", dim)
        yield f"text_dim_{tag}", re.sub(r'"f32\[(\d+)', '"f32[' + dim, text, count=2)
    for dtype in ("f33", "x", "", "i64", "b8", "c64"):
        yield f"text_dtype_{dtype}", re.sub(r'"f32\[', '"' + dtype + "[", text, count=2)
    yield "text_reversed_body", "\n".join(lines[:body[0]] + [lines[i] for i in reversed(body)] +
                                          lines[body[-1] + 1:]) + "\n"
    for cut in (0.1, 0.33, 0.5, 0.77, 0.95):
        yield f"text_truncated_{cut}", text[:int(len(text) * cut)]


def text_chain(n: int, reverse: bool) -> str:
    head = ["# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]",
            "# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]",
            "# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]",
            "# input primals_1 role=primal tag=is_forward",
            "# input tangents_1 role=tangent tag=is_backward",
            'def forward(self, primals_1: "f32[4][1]cpu rg", tangents_1: "f32[4][1]cpu"):']
    body, prev = [], "primals_1"
    for i in range(n):
        body.append(f'    s{i}: "f32[4][1]cpu" = torch.ops.aten.sin.default({prev})  # tag=is_forward')
        prev = f"s{i}"
    body.append(f'    g: "f32[4][1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, {prev})  # tag=is_backward')
    if reverse:
        body.reverse()
    return "\n".join(head + body + [f"    return ({prev}, g)"]) + "\n"


def seeds():
    for name, text in graphs_from_testdata():
        yield "graph_" + name, text
    for name, data in bad_inputs():
        yield "bad_" + name, data
    golden = list(golden_graphs())
    for name, text in golden:
        yield "golden_" + name, text
    for i, text in enumerate(POLICY_STRINGS):
        yield f"policy_text_{i}", text
    for i, doc in enumerate(POLICY_DOCS):
        yield f"policy_json_{i}", compact(doc)
    for depth in (200, 300, 5000):
        yield f"policy_deep_list_{depth}", compact(Deep({"policy": "dots_saveable"}, depth, "[", "]"))
        yield f"policy_deep_children_{depth}", compact(Deep(
            {"policy": "dots_saveable"}, depth, '{"policy":"save_from_both_policies","children":[',
            ',{"policy":"nothing_saveable"}]}'))
    with gzip.open(ROOT / "testdata/sin_mm.json.gz", "rt") as f:
        base = json.load(f)
    for name, doc in graph_mutations(base):
        yield "mut_" + name, compact(doc)
    base_text = next(text for name, text in golden if name.startswith("min_cut_partition"))
    for name, text in text_mutations(base_text):
        yield "mut_" + name, text
    for n in (3, 300):
        for reverse in (False, True):
            yield f"chain_{n}_{'reversed' if reverse else 'in_order'}", compact(chain(n, reverse))
            yield f"text_chain_{n}_{'reversed' if reverse else 'in_order'}", text_chain(n, reverse)
    plain = compact(base)
    for cut in (1, 10, 100, len(plain) // 3, len(plain) // 2, len(plain) - 2):
        yield f"truncated_json_{cut}", plain[:cut]
    yield "nul_bytes", plain.replace('"sin"', '"s\\u0000in"', 1)
    yield "invalid_utf8", plain.encode().replace(b'"sin"', b'"s\xff\xfein"', 1)
    yield "duplicate_keys", plain.replace('"kind":"joint"', '"kind":"joint","kind":"forward"', 1)
    yield "number_overflow", plain.replace('"num_fwd_outputs":1', '"num_fwd_outputs":-1e999', 1)
    yield "nan_literal", plain.replace('"num_fwd_outputs":1', '"num_fwd_outputs":NaN', 1)


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    for name, data in seeds():
        data = data.encode() if isinstance(data, str) else data
        if len(data) > MAX_LEN:
            skipped += 1
            continue
        digest = hashlib.sha1(data).hexdigest()[:10]
        (out / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{digest}").write_bytes(data)
        written += 1
    print(f"make_corpus: {written} seeds in {out} ({skipped} over {MAX_LEN} bytes left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
