#!/usr/bin/env python3
"""Large bad inputs (issue 12), generated rather than committed:

    python tests/bad_inputs/make_large.py OUT_DIR

writes OUT_DIR/expected.tsv and the cases it lists, in the layout of
tests/bad_inputs/ (tests/run_bad_inputs.cmake runs them: each must exit 2 with its
located message and write nothing; CTest `cli_bad_inputs_large`):

- JSON `args`, `kwargs` and `meta.val` nested 100,000 deep, a policy file nested
  100,000 deep (--policy-file), text-IR arguments nested 200,000 deep and a type
  annotation of 100,000 '(' (each crashed the CLI by recursion);
- a 60,000-node chain listed out of topological order, in both forms (the order
  report recursed once per node).

Standard library only; also the chain writer of tests/python/test_million_chain.py
and tests/fuzz/make_corpus.py.
"""
from __future__ import annotations

import gzip
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]

_VAL = '{"kind":"tensor","dtype":"float32","shape":[4],"stride":[1],"device":"cpu"}'
_OPS = ('{"aten.sin.default":{"schema":"aten::sin(Tensor self) -> Tensor","tags":["core","pointwise"]},'
        '"aten.mul.Tensor":{"schema":"aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",'
        '"tags":["core","pointwise"]}}')


def _chain_body(n: int) -> list[tuple[str, str]]:
    """(name, input) of the chain's calls: s0 = sin(primals_1), s1 = sin(s0), ..."""
    return [(f"s{i}", f"s{i - 1}" if i else "primals_1") for i in range(n)]


def write_chain_json(path: pathlib.Path, n: int, *, reverse: bool = False) -> None:
    """A joint graph: an n-node sin chain over primals_1 and the product of its end with
    the tangent (the gradient output is that product, for brevity), compact JSON,
    streamed (a million nodes is ~150 MB). ``reverse``: the chain's calls listed last
    first, so every use precedes its definition (invalid)."""
    body = _chain_body(n)
    if reverse:
        body.reverse()
    last = f"s{n - 1}"
    with open(path, "w") as f:
        f.write('{"format":"fxremat.graph","version":[1,2],"name":"chain","kind":"joint",'
                '"joint":{"num_fwd_outputs":1,"tangent_outputs":[0]},"ops":' + _OPS + ',"nodes":[')
        f.write('{"name":"primals_1","op":"placeholder","target":"primals_1","role":"primal",'
                '"meta":{"val":' + _VAL[:-1] + ',"requires_grad":true},"partitioner_tag":"is_forward"}},')
        f.write('{"name":"tangents_1","op":"placeholder","target":"tangents_1","role":"tangent",'
                '"meta":{"val":' + _VAL + ',"partitioner_tag":"is_backward"}},')
        step = ('{{"name":"{}","op":"call_function","target":"aten.sin.default","args":[{{"node":"{}"}}],'
                '"meta":{{"val":' + _VAL.replace("{", "{{").replace("}", "}}") + ',"partitioner_tag":"is_forward"}}}},')
        for start in range(0, n, 10000):
            f.write("".join(step.format(name, arg) for name, arg in body[start:start + 10000]))
        f.write('{"name":"g","op":"call_function","target":"aten.mul.Tensor",'
                '"args":[{"node":"tangents_1"},{"node":"' + last + '"}],'
                '"meta":{"val":' + _VAL + ',"partitioner_tag":"is_backward"}},')
        f.write('{"name":"output","op":"output","target":"output","args":[[{"node":"' + last + '"},{"node":"g"}]]}]}')


def write_chain_text(path: pathlib.Path, n: int, *, reverse: bool = False) -> None:
    """The same chain in the IR text form."""
    body = _chain_body(n)
    if reverse:
        body.reverse()
    last = f"s{n - 1}"
    with open(path, "w") as f:
        f.write("# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]\n"
                "# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]\n"
                "# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]\n"
                "# input primals_1 role=primal tag=is_forward\n"
                "# input tangents_1 role=tangent tag=is_backward\n"
                'def forward(self, primals_1: "f32[4][1]cpu rg", tangents_1: "f32[4][1]cpu"):\n')
        for start in range(0, n, 10000):
            f.write("".join(f'    {name}: "f32[4][1]cpu" = torch.ops.aten.sin.default({arg})  # tag=is_forward\n'
                            for name, arg in body[start:start + 10000]))
        f.write(f'    g: "f32[4][1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, {last})  # tag=is_backward\n'
                f"    return ({last}, g)\n")


def _small_graph() -> str:
    with gzip.open(ROOT / "testdata/sin_mm.json.gz", "rt") as f:
        return json.dumps(json.load(f), separators=(",", ":"))


def _deep(depth: int, open_: str, inner: str, close: str) -> str:
    return open_ * depth + inner + close * depth


def _after(doc: str, anchor: str, text: str) -> str:
    """`doc` with `text` inserted after the first `anchor`."""
    at = doc.index(anchor) + len(anchor)
    return doc[:at] + text + doc[at:]


N = 100_000
_SIN = '"target":"aten.sin.default",'
# name, expected message (a substring of stderr), how to make it (dir, small graph)
CASES = [
    ("deep_args.json", "the JSON document nests deeper than 256 levels at line 1, column",
     lambda d, g: (d / "deep_args.json").write_text(_after(g, _SIN + '"args":[', _deep(N, "[", "1", "]") + ","))),
    ("deep_kwargs.json", "the JSON document nests deeper than 256 levels at line 1, column",
     lambda d, g: (d / "deep_kwargs.json").write_text(
         _after(g, _SIN, '"kwargs":{"x":' + _deep(N, "[", "1", "]") + "},"))),
    ("deep_meta_val.json", "the JSON document nests deeper than 256 levels at line 1, column",
     lambda d, g: (d / "deep_meta_val.json").write_text(g.replace(
         _SIN, _SIN + '"meta":{"val":' + _deep(N, '{"kind":"tuple","items":[', '{"kind":"none"}', "]}") + "},"
         '"old_meta":', 1).replace('"old_meta":"args"', '"args"', 1))),
    ("deep_policy_file.args", "the policy JSON nests deeper than 256 levels at line 1, column 257",
     lambda d, g: ((d / "deep_policy.json").write_text(_deep(N, "[", '{"policy":"dots_saveable"}', "]")),
                   (d / "deep_policy_file.args").write_text(
                       f"{ROOT / 'testdata/sin_mm.json.gz'}\n--policy-file\n@BAD_DIR@/deep_policy.json\n"))),
    ("text_deep_args.fxir", "line 10, col 195: arguments nest deeper than 128 levels",
     lambda d, g: (d / "text_deep_args.fxir").write_text(_text_with(
         "sin_1", lambda line: line.replace("(sin)", "(sin, " + _deep(2 * N, "[", "1", "]") + ")")))),
    ("text_deep_annotation.fxir", "line 10, col 12: bad type annotation<...>tuples nest deeper than 64 levels",
     lambda d, g: (d / "text_deep_annotation.fxir").write_text(_text_with(
         "sin_1", lambda line: line.replace('"f32[1024][1]cpu rg"', '"' + "(" * N + 'f32[1024][1]cpu rg"')))),
    ("reversed_chain.json", "uses 's59998' before it is defined (nodes must be in topological order)",
     lambda d, g: write_chain_json(d / "reversed_chain.json", 60_000, reverse=True)),
    ("reversed_chain.fxir", "line 7, col 57: 's59998' is not defined before this use",
     lambda d, g: write_chain_text(d / "reversed_chain.fxir", 60_000, reverse=True)),
]


def _text_with(node: str, edit) -> str:
    """The first graph of tests/golden/min_cut_partition.test with the line defining `node` edited."""
    text = (ROOT / "tests/golden/min_cut_partition.test").read_text().split("// -----")[0]
    lines = [line for line in text.splitlines() if not line.startswith("//")]
    return "\n".join(edit(line) if line.lstrip().startswith(node + ":") else line for line in lines).strip() + "\n"


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    graph = _small_graph()
    rows = ["# generated by tests/bad_inputs/make_large.py; see tests/bad_inputs/expected.tsv"]
    for name, expected, make in CASES:
        make(out, graph)
        rows.append(f"{name}\t{expected}")
    (out / "expected.tsv").write_text("\n".join(rows) + "\n")
    print(f"make_large: {len(CASES)} cases in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
