#!/usr/bin/env python3
"""tra.onnx: ONNX models run on tra, against ONNX's own expectations and onnxruntime.

1. The ONNX backend node conformance cases of every operator tra.onnx
   translates, regenerated from the installed onnx package's generators, run
   through ``tra.onnx.run``: a table per operator (cases; float cases, i.e.
   every data input and output a float tensor; passed; refused with the
   reason; wrong) is printed and written to target/onnx-conformance.md. A
   wrong value fails; so do fewer than 90% of float cases passing.
2. A transformer encoder block built with onnx.helper equals onnxruntime.
3. Mistakes (an unsupported operator, an int64 model input, a Reshape that
   cannot be satisfied) raise a TraError naming them.

    python3 python/tests/test_onnx.py [--tra target/debug/tra]

Runs with pytest too (each `test_*` function); the server is started once.
"""

import argparse
import collections
import os
import subprocess
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared server and runner)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tra  # noqa: E402
import tra.onnx  # noqa: E402

if "pytest" in sys.modules:
    import pytest

    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRA = harness.default_binary()
REPORT = os.path.join(ROOT, "target", "onnx-conformance.md")
RTOL, ATOL = 1e-3, 1e-6
MIN_PASS = 0.90
#: operators whose conformance cases also run through `tra run` (tra.connect_local).
LOCAL_OPS = ("MatMul", "Gemm", "Softmax", "LayerNormalization", "Reshape", "Concat")
_server = None
_url = None


def setup_module(module=None):
    """Start `tra serve` on a free port and connect to it."""
    global _server, _url
    if _server is not None:
        return
    _server, url = harness.serve(TRA)
    _url = url
    tra.connect(url, sites=3)


def teardown_module(module=None):
    global _server
    harness.stop(_server)
    _server = None


# ------------------------------------------------------------ conformance
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
_cases = None


def conformance_cases():
    """{op: [TestCase]}: the backend node cases of each operator tra.onnx
    translates. Only single-node cases of the operator itself: the
    '_expanded' cases are the operator's function body, other operators."""
    global _cases
    if _cases is None:
        from onnx.backend.test.case.node import collect_testcases

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            every = collect_testcases()  # generated once per process: filter here, not by op_type
        ops = set(tra.onnx.supported_ops())
        _cases = collections.defaultdict(list)
        for case in every:
            nodes = case.model.graph.node
            if len(nodes) == 1 and nodes[0].op_type in ops and not case.name.endswith("_expanded"):
                _cases[nodes[0].op_type].append(case)
    return _cases


def _params(node, opset):
    """Positions of the node's inputs that are shape/axes parameters: the
    formal inputs typed as a fixed integer tensor (Reshape's shape, axes)."""
    schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=node.domain)
    formal = list(schema.inputs)
    out = set()
    for i in range(len(node.input)):
        f = formal[min(i, len(formal) - 1)]
        if f.type_str in ("tensor(int64)", "tensor(int32)"):
            out.add(i)
    return out


def is_float_case(case):
    """Whether every data input and every output is a float tensor."""
    g = case.model.graph
    node = g.node[0]
    types = {vi.name: vi.type for vi in list(g.input) + list(g.output)}
    params = _params(node, tra.onnx._opset(case.model))

    def is_float(name):
        t = types.get(name)
        return (t is not None and t.WhichOneof("value") == "tensor_type"
                and t.tensor_type.elem_type in _FLOAT_TYPES)

    data = [nm for i, nm in enumerate(node.input) if nm and i not in params and nm in types]
    return all(is_float(nm) for nm in data) and all(is_float(vi.name) for vi in g.output)


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, TensorProto) else v


def run_case(case, session=None, runner=None):
    """('passed' | 'refused' | 'wrong', detail) of one conformance case."""
    runner = runner or tra.onnx.run
    g = case.model.graph
    inits = {t.name for t in g.initializer}
    names = [vi.name for vi in g.input if vi.name not in inits]
    inputs, expected = case.data_sets[0]
    try:
        feed = {nm: _array(v) for nm, v in zip(names, inputs)}
        with np.errstate(all="ignore"):
            got = runner(case.model, feed, session=session)
    except tra.TraError as e:
        return "refused", str(e)
    except Exception as e:  # noqa: BLE001 - anything else is a crash, not a refusal
        return "wrong", f"crashed: {type(e).__name__}: {e}"
    if len(got) != len(expected):
        return "wrong", f"{len(got)} outputs, expected {len(expected)}"
    for i, (v, want) in enumerate(zip(got, expected)):
        want = np.asarray(_array(want))
        v = np.asarray(v)
        if v.shape != want.shape:
            return "wrong", f"output {i}: shape {v.shape}, expected {want.shape}"
        if not np.allclose(v.astype(np.float64), want.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True):
            err = np.nanmax(np.abs(v.astype(np.float64) - want.astype(np.float64)))
            return "wrong", f"output {i}: max error {err:.3g}"
    return "passed", ""


def _reason(detail):
    """A refusal's message without the node prefix, for grouping."""
    text = detail.split(": ", 1)[1] if detail.startswith("onnx: ") else detail
    if text.startswith("node ") and "): " in text:
        text = text.split("): ", 1)[1]
    return text


def conformance(session=None, runner=None, ops=None):
    """Run the cases; returns (rows, failures): rows per operator."""
    rows, failures = [], []
    for op, cases in sorted(conformance_cases().items()):
        if ops is not None and op not in ops:
            continue
        row = collections.Counter(cases=len(cases))
        reasons = collections.Counter()
        for case in cases:
            floats = is_float_case(case)
            outcome, detail = run_case(case, session, runner)
            if outcome == "wrong":
                failures.append(f"{op} {case.name}: {detail}")
                row["wrong"] += 1
            if not floats:
                row["not float"] += 1
                row["not float passed"] += outcome == "passed"
                continue
            row["float"] += 1
            row[outcome] += 1
            if outcome == "refused":
                reasons[_reason(detail)] += 1
        rows.append((op, row, reasons))
    return rows, failures


def table(rows):
    """The conformance table in markdown."""
    lines = ["| op | cases | float cases | passed | refused | wrong | not float (of which passed) | refused because |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    tot = collections.Counter()
    for op, row, reasons in rows:
        tot.update(row)
        why = "; ".join(f"{n}× {r}" for r, n in reasons.most_common())
        lines.append(f"| {op} | {row['cases']} | {row['float']} | {row['passed']} | {row['refused']} | "
                     f"{row['wrong']} | {row['not float']} ({row['not float passed']}) | {why} |")
    lines.append(f"| **all** | {tot['cases']} | {tot['float']} | {tot['passed']} | {tot['refused']} | "
                 f"{tot['wrong']} | {tot['not float']} ({tot['not float passed']}) | |")
    return "\n".join(lines), tot


def test_conformance():
    rows, failures = conformance()
    text, tot = table(rows)
    rate = tot["passed"] / max(tot["float"], 1)
    summary = (f"{tot['passed']} of {tot['float']} float cases pass ({rate:.1%}); {tot['refused']} refused; "
               f"{tot['wrong']} wrong; {tot['not float']} cases are not float (integer, bool, 8/4/2-bit, "
               f"sequence or optional data)")
    doc = (f"# tra.onnx: ONNX backend node conformance\n\nGenerated by python/tests/test_onnx.py with onnx "
           f"{onnx.__version__}: each operator's single-node cases, run through `tra.onnx.run` on `tra serve` "
           f"and compared with ONNX's expected outputs (rtol {RTOL:g}, atol {ATOL:g}). A float case has every "
           f"data input and output a float tensor (float32/64/16, bfloat16; Reshape's shape and the axes of "
           f"a reduction are parameters, not data).\n\n{text}\n\n{summary}\n")
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        f.write(doc)
    print(text)
    print(summary)
    assert not failures, "wrong values:\n" + "\n".join(failures)
    assert rate >= MIN_PASS, f"only {rate:.1%} of float cases pass (need {MIN_PASS:.0%})"


# ------------------------------------------------------------ transformer
def transformer_block(batch=2, seq=8, d_model=16, heads=2, d_ff=32, seed=0):
    """A pre-LN transformer encoder block, random weights as initializers."""
    rng = np.random.default_rng(seed)
    dh = d_model // heads
    inits = []

    def w(name, *shape, scale=None):
        scale = scale or 1 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype=np.int64):
        if name not in {t.name for t in inits}:
            inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    for ln in ("ln1", "ln2"):
        inits.append(numpy_helper.from_array((1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32),
                                             f"{ln}_g"))
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(d_model)).astype(np.float32), f"{ln}_b"))
    N = helper.make_node
    nodes = [N("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["h1"], name="ln1", axis=-1, epsilon=1e-5)]
    for p in "qkv":
        nodes += [N("MatMul", ["h1", w(f"W{p}", d_model, d_model)], [f"{p}0"], name=f"{p}_proj"),
                  N("Add", [f"{p}0", w(f"b{p}", d_model, scale=0.1)], [p], name=f"{p}_bias"),
                  N("Reshape", [p, const("heads_shape", [0, 0, heads, dh])], [f"{p}4"], name=f"{p}_heads")]
    nodes += [
        N("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3], name="q_t"),
        N("Transpose", ["k4"], ["khT"], perm=[0, 2, 3, 1], name="k_t"),
        N("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3], name="v_t"),
        N("MatMul", ["qh", "khT"], ["scores0"], name="qk"),
        N("Div", ["scores0", const("sqrt_dh", np.sqrt(dh), np.float32)], ["scores"], name="scale"),
        N("Softmax", ["scores"], ["attn"], axis=-1, name="softmax"),
        N("MatMul", ["attn", "vh"], ["ctx_h"], name="attn_v"),
        N("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3], name="ctx_t"),
        N("Reshape", ["ctx_t", const("model_shape", [batch, -1, d_model])], ["ctx"], name="merge_heads"),
        N("MatMul", ["ctx", w("Wo", d_model, d_model)], ["o0"], name="o_proj"),
        N("Add", ["o0", w("bo", d_model, scale=0.1)], ["o"], name="o_bias"),
        N("Add", ["x", "o"], ["r1"], name="residual1"),
        N("LayerNormalization", ["r1", "ln2_g", "ln2_b"], ["h2"], name="ln2", axis=-1, epsilon=1e-5),
        N("MatMul", ["h2", w("W1", d_model, d_ff)], ["f0"], name="ff1"),
        N("Add", ["f0", w("b1", d_ff, scale=0.1)], ["f1"], name="ff1_bias"),
        N("Relu", ["f1"], ["f2"], name="relu"),
        N("MatMul", ["f2", w("W2", d_ff, d_model)], ["f3"], name="ff2"),
        N("Add", ["f3", w("b2", d_model, scale=0.1)], ["f4"], name="ff2_bias"),
        N("Add", ["r1", "f4"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d_model])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = rng.standard_normal((batch, seq, d_model)).astype(np.float32)
    return model, {"x": x}


def onnxruntime_run(model, inputs):
    import onnxruntime

    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def test_transformer_block_matches_onnxruntime():
    check_transformer_block(session=None)


def check_transformer_block(session):
    model, inputs = transformer_block()
    want = onnxruntime_run(model, inputs)
    got = tra.onnx.run(model, inputs, session=session)
    assert len(got) == 1 and got[0].shape == want[0].shape and got[0].dtype == np.float32, \
        [(g.shape, g.dtype) for g in got]
    err = np.abs(got[0] - want[0]).max()
    assert np.allclose(got[0], want[0], rtol=1e-4, atol=1e-5), f"max error {err:.3g}"
    # Another input: the same program (placeholders), another answer, still onnxruntime's.
    x2 = {"x": np.random.default_rng(7).standard_normal(inputs["x"].shape).astype(np.float32)}
    assert tra.onnx.program(model, inputs) == tra.onnx.program(model, x2)
    assert np.allclose(tra.onnx.run(model, x2, session=session)[0], onnxruntime_run(model, x2)[0],
                       rtol=1e-4, atol=1e-5)
    # The input cut into blocks: the weights are cut to match, the answer is the same.
    blocked = tra.onnx.run(model, inputs, session=session, block={"x": (1, 4, 8)})[0]
    assert np.allclose(blocked, want[0], rtol=1e-4, atol=1e-5), np.abs(blocked - want[0]).max()


def test_program_is_tra_json():
    model, inputs = transformer_block()
    prog = tra.onnx.program(model, {"x": inputs["x"].shape})
    assert prog["nodes"] and prog["outputs"], prog
    assert prog == tra.onnx.program(model)  # shapes as the model declares them
    kernels = " ".join(str(n.get("kernel")) for n in prog["nodes"].values())
    assert "relu" in kernels, kernels


def test_local_run_subset():
    """Some conformance cases and the encoder block through `tra run`, the
    encoder also across two processes (`tra run --processes 2`)."""
    local = tra.connect_local(TRA)
    try:
        rows, failures = conformance(session=local, ops=LOCAL_OPS)
        assert not failures, failures
        text, tot = table(rows)
        print(text)
        assert tot["passed"] >= MIN_PASS * tot["float"], text
        check_transformer_block(session=local)
        check_transformer_block(session=tra.Session(binary=TRA, processes=2))
    finally:
        if _url:
            tra.connect(_url, sites=3)


def test_attribute_forms_and_older_opsets_match_onnxruntime():
    """Softmax before opset 13 (flattened at axis), reductions with axes as
    attributes, an Einsum with '...', Gemm with constants: as onnxruntime."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    N = helper.make_node
    cases = [
        (11, [N("Softmax", ["x"], ["y"], axis=1)]),
        (11, [N("LogSoftmax", ["x"], ["y"])]),
        (12, [N("Softmax", ["x"], ["y"], axis=-1)]),
        (11, [N("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)]),
        (13, [N("ReduceMean", ["x"], ["y"], axes=[0, 2])]),
        (13, [N("ReduceMax", ["x"], ["y"])]),
        (17, [N("ReduceMax", ["x"], ["y"], keepdims=0)]),
        (17, [N("Einsum", ["x", "x"], ["y"], equation="...ij,...kj->...ik")]),
        (17, [N("Flatten", ["x"], ["y"], axis=-1)]),
        (17, [N("Gemm", ["x2", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
              N("Flatten", ["x"], ["x2"], axis=1)]),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((5, 12)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((1, 5)).astype(np.float32), "c")]
    for opset, nodes in cases:
        nodes = nodes[1:] + nodes[:1]  # producers first
        used = [t for t in inits if any(t.name in nd.input for nd in nodes)]
        m = _model(nodes, [helper.make_tensor_value_info("x", f, list(x.shape))],
                   [helper.make_tensor_value_info("y", f, None)], used, opset=opset)
        want = onnxruntime_run(m, {"x": x})[0]
        got = tra.onnx.run(m, {"x": x})[0]
        what = f"opset {opset} {nodes[-1].op_type} {[(a.name, helper.get_attribute_value(a)) for a in nodes[-1].attribute]}"
        assert got.shape == want.shape, f"{what}: shape {got.shape}, onnxruntime {want.shape}"
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5), f"{what}: max error {np.abs(got - want).max()}"


# ------------------------------------------------------------- mistakes
def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", opset)])
    m.ir_version = 8
    return m


def _raises(fn, *texts):
    try:
        fn()
    except tra.TraError as e:
        for t in texts:
            assert t in str(e), f"{t!r} not in {str(e)!r}"
        return e
    raise AssertionError(f"no TraError (expected {texts})")


def test_errors_name_the_node_and_input():
    f = TensorProto.FLOAT
    x = np.ones((1, 1, 4, 4), np.float32)
    conv = _model([helper.make_node("Relu", ["x"], ["r"], name="act"),
                   helper.make_node("Conv", ["r", "w"], ["y"], name="conv1")],
                  [helper.make_tensor_value_info("x", f, [1, 1, 4, 4])],
                  [helper.make_tensor_value_info("y", f, None)],
                  [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
    e = _raises(lambda: tra.onnx.run(conv, {"x": x}), "node 1 'conv1' (Conv)", "operator Conv is not supported")
    assert e.op == "onnx"

    ids = _model([helper.make_node("Cast", ["ids"], ["idf"], to=f),
                  helper.make_node("Add", ["idf", "x"], ["y"])],
                 [helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
                  helper.make_tensor_value_info("x", f, [4])],
                 [helper.make_tensor_value_info("y", f, [4])])
    _raises(lambda: tra.onnx.run(ids, {"ids": np.arange(4), "x": np.ones(4, np.float32)}), "input 'ids'", "int64")

    bad = _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="to_five")],
                 [helper.make_tensor_value_info("x", f, [2, 3])],
                 [helper.make_tensor_value_info("y", f, None)],
                 [numpy_helper.from_array(np.array([5, -1], np.int64), "shape")])
    _raises(lambda: tra.onnx.run(bad, {"x": np.ones((2, 3), np.float32)}), "'to_five' (Reshape)",
            "cannot reshape (2, 3)")

    half = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, name="half")],
                  [helper.make_tensor_value_info("x", f, [2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
    _raises(lambda: tra.onnx.run(half, {"x": np.ones(2, np.float32)}), "'half' (Cast)", "float16")
    _raises(lambda: tra.onnx.run(half, {"y": np.ones(2, np.float32)}), "no input 'y'")
    _raises(lambda: tra.onnx.run(half, {}), "input 'x'", "not given")
    _raises(lambda: tra.onnx.run(half, {"x": np.ones(3, np.float32)}), "input 'x' has shape (3,)")


def test_constants_fold_and_numbers():
    """A subgraph of constants is computed with numpy; only the rest goes to tra."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32([1, 2, 3]))),
             helper.make_node("Mul", ["c", "c"], ["c2"]),
             helper.make_node("Exp", ["c2"], ["c3"]),
             helper.make_node("Add", ["x", "c3"], ["y"]),
             helper.make_node("Mul", ["y", "two"], ["z"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", f, [2, 3])],
               [helper.make_tensor_value_info("z", f, [2, 3]), helper.make_tensor_value_info("c3", f, [3])],
               [numpy_helper.from_array(np.float32(2.0), "two")])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    z, c3 = tra.onnx.run(m, {"x": x})
    assert np.allclose(c3, np.exp(np.float32([1, 4, 9]))) and c3.dtype == np.float32
    assert np.allclose(z, (x + np.exp(np.float32([1, 4, 9]))) * 2, rtol=1e-6)
    kernels = [str(n.get("kernel")) for n in tra.onnx.program(m)["nodes"].values()]
    assert not any("exp" in k for k in kernels), kernels  # folded


def test_import_without_onnx():
    code = ("import sys; sys.modules['onnx'] = None; import tra, tra.onnx\n"
            "try:\n    tra.onnx.run('m.onnx', {})\nexcept tra.TraError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert out.returncode == 0 and "onnx: pip install ./python[onnx]" in out.stdout, out


def main():
    global TRA
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tra", default=TRA)
    args = ap.parse_args()
    TRA = args.tra
    return harness.run_tests(globals(), "tra.onnx", setup_module, teardown_module)


if __name__ == "__main__":
    sys.exit(main())
