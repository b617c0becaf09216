//! `tra run` (tra_api::run::run_command): a program from a file, inputs from
//! `.npy` files in both layouts, outputs written both ways, the JSON summary
//! (measured floats = predicted), and the errors a user sees; `--alternative`
//! and `--plan` on the thread runtime, and plan files that are not plans for
//! the program.

mod common;

use common::TempDir;
use std::collections::BTreeMap;
use tra_api::run::{run_command, run_command_with, PlanChoice, RunArgs};
use tra_executor::npy::{self, Layout};
use tra_executor::reference::{compare, eval_tra, random_relation, Relation};
use tra_executor::threads::{Pool, TRelation};
use tra_optimizer::Program;

const MATMUL: &str = r#"{
  "inputs": {"X": {"key_bounds": [3, 2], "array_bounds": [4, 5]},
             "Y": {"key_bounds": [2, 3], "array_bounds": [5, 2]}},
  "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
            "R": {"op": "transform", "input": "Z", "kernel": "relu"}},
  "outputs": ["Z", "R"],
  "cluster": {"sites": 3}
}"#;

fn args(dir: &TempDir, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> RunArgs {
    RunArgs {
        file: dir.s("p.json"),
        inputs: inputs.iter().map(|(n, f)| format!("{n}={}", dir.s(f))).collect(),
        outputs: outputs.iter().map(|(n, f)| format!("{n}={}", dir.s(f))).collect(),
        dense: false,
        layouts: Vec::new(),
        sites: None,
        dtype: None,
        threads: Some(2),
        no_progress: true,
        strict: true,
        cost: Default::default(),
        bounds: Default::default(),
    }
}

fn setup(tag: &str) -> (TempDir, BTreeMap<String, Relation>) {
    let dir = TempDir::new(tag);
    std::fs::write(dir.path("p.json"), MATMUL).unwrap();
    let x = random_relation(&[3, 2], &[4, 5], 1);
    let y = random_relation(&[2, 3], &[5, 2], 2);
    let pool = Pool::<f64>::new();
    // X in the relation layout, Y dense.
    npy::write_relation(&dir.path("x.npy"), &TRelation::from_relation(&x, &pool), &[3, 2], &[4, 5], Layout::Relation)
        .unwrap();
    npy::write_array(&dir.path("y.npy"), &[10, 6], y.to_dense().unwrap().as_slice().unwrap()).unwrap();
    let inputs = [("X".to_string(), x), ("Y".to_string(), y)].into();
    (dir, inputs)
}

#[test]
fn runs_and_writes_both_layouts() {
    let (dir, inputs) = setup("ok");
    let want = eval_tra(&Program::from_json(MATMUL).unwrap(), &inputs).unwrap();
    // Key arity equals block rank: dense by default, relation when asked.
    let relation = vec!["Z=relation".to_string(), "R=relation".to_string()];
    for (dense, layouts, expected) in
        [(false, vec![], Layout::Dense), (false, relation, Layout::Relation), (true, vec![], Layout::Dense)]
    {
        let mut a = args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy"), ("R", "r.npy")]);
        a.dense = dense;
        a.layouts = layouts;
        let out: serde_json::Value = serde_json::from_str(&run_command(a).unwrap()).unwrap();
        assert_eq!(out["floats_match"], true, "{out}");
        assert_eq!(out["network_floats_measured"], out["network_floats_predicted"]);
        assert_eq!(out["dtype"], "f64");
        assert_eq!(out["sites"], 3);
        assert_eq!(out["inputs"]["X"]["layout"], "relation");
        assert_eq!(out["inputs"]["Y"]["layout"], "dense");
        let ops = out["operators"].as_array().unwrap();
        assert!(ops.iter().all(|o| o["wall_ms"].as_f64().is_some()));
        for o in ops.iter().filter(|o| o["op"] == "shuffle" || o["op"] == "broadcast") {
            assert_eq!(o["floats_moved"], o["predicted_floats"], "{o}");
        }
        for (name, file) in [("Z", "z.npy"), ("R", "r.npy")] {
            let pool = Pool::<f64>::new();
            let (rel, layout, _) = npy::read_relation::<f64>(&dir.path(file), &[3, 3], &[4, 2], &pool).unwrap();
            assert_eq!(layout, expected);
            assert_eq!(out["outputs"][name]["layout"], serde_json::to_value(expected).unwrap());
            compare(&want[name], &rel.to_relation(), 1e-12).unwrap();
            let sum: f64 = want[name].tuples.values().map(|b| b.sum()).sum();
            assert!((out["outputs"][name]["checksum"]["sum"].as_f64().unwrap() - sum).abs() < 1e-9);
        }
    }
    // f32 files run in f32.
    let pool = Pool::<f32>::new();
    npy::write_relation(
        &dir.path("x32.npy"),
        &TRelation::from_relation(&inputs["X"], &pool),
        &[3, 2],
        &[4, 5],
        Layout::Relation,
    )
    .unwrap();
    npy::write_relation(
        &dir.path("y32.npy"),
        &TRelation::from_relation(&inputs["Y"], &pool),
        &[2, 3],
        &[5, 2],
        Layout::Dense,
    )
    .unwrap();
    let a = args(&dir, &[("X", "x32.npy"), ("Y", "y32.npy")], &[("Z", "z32.npy")]);
    let out: serde_json::Value = serde_json::from_str(&run_command(a).unwrap()).unwrap();
    assert_eq!(out["dtype"], "f32");
    assert_eq!(npy::read_file_header(&dir.path("z32.npy")).unwrap().dtype.descr, "<f4");
    // Mixed dtypes need --dtype.
    let a = args(&dir, &[("X", "x32.npy"), ("Y", "y.npy")], &[]);
    let e = run_command(a.clone()).unwrap_err();
    assert!(e.contains("different dtypes") && e.contains("--dtype"), "{e}");
    let out: serde_json::Value =
        serde_json::from_str(&run_command(RunArgs { dtype: Some("f64".into()), ..a }).unwrap()).unwrap();
    assert_eq!(out["dtype"], "f64");
    // --sites overrides the program's.
    let a = RunArgs { sites: Some(5), ..args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[]) };
    let out: serde_json::Value = serde_json::from_str(&run_command(a).unwrap()).unwrap();
    assert_eq!(out["sites"], 5);
    assert_eq!(out["floats_match"], true);
}

/// Z = X·Y (key arity 2, blocks of rank 2) and S, the block-row sums of
/// the products (key arity 1, blocks of rank 2: no dense form).
const TWO_LAYOUTS: &str = r#"{
  "inputs": {"X": {"key_bounds": [3, 2], "array_bounds": [4, 5]},
             "Y": {"key_bounds": [2, 3], "array_bounds": [5, 2]}},
  "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"},
            "S": {"op": "aggregate", "input": "XY", "group_by": [0], "kernel": "matAdd"}},
  "outputs": ["Z", "S"],
  "cluster": {"sites": 3}
}"#;

#[test]
fn each_output_gets_its_own_layout() {
    let (dir, inputs) = setup("layouts");
    std::fs::write(dir.path("p.json"), TWO_LAYOUTS).unwrap();
    let want = eval_tra(&Program::from_json(TWO_LAYOUTS).unwrap(), &inputs).unwrap();
    let pool = Pool::<f64>::new();
    let run = |dense: bool, layouts: &[&str]| {
        for f in ["z.npy", "s.npy"] {
            let _ = std::fs::remove_file(dir.path(f));
        }
        let mut a = args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy"), ("S", "s.npy")]);
        a.dense = dense;
        a.layouts = layouts.iter().map(|l| l.to_string()).collect();
        run_command(a)
    };
    let check = |z: Layout, s: Layout| {
        for (name, file, keys, blocks, layout, shape) in [
            (
                "Z",
                "z.npy",
                &[3u32, 3][..],
                &[4usize, 2][..],
                z,
                if z == Layout::Dense { vec![12, 6] } else { vec![3, 3, 4, 2] },
            ),
            ("S", "s.npy", &[3u32][..], &[4usize, 2][..], s, vec![3, 4, 2]),
        ] {
            assert_eq!(npy::read_file_header(&dir.path(file)).unwrap().shape, shape, "{name}");
            let (rel, got, _) = npy::read_relation::<f64>(&dir.path(file), keys, blocks, &pool).unwrap();
            assert_eq!(got, layout, "{name}");
            compare(&want[name], &rel.to_relation(), 1e-12).unwrap();
        }
    };
    // By default: Z dense, S (which cannot be) in the relation layout.
    let out: serde_json::Value = serde_json::from_str(&run(false, &[]).unwrap()).unwrap();
    assert_eq!((&out["outputs"]["Z"]["layout"], &out["outputs"]["S"]["layout"]), (&"dense".into(), &"relation".into()));
    check(Layout::Dense, Layout::Relation);
    // --layout per output.
    run(false, &["Z=relation"]).unwrap();
    check(Layout::Relation, Layout::Relation);
    // --dense everywhere it can be, with S said otherwise.
    run(true, &["S=relation"]).unwrap();
    check(Layout::Dense, Layout::Relation);
    // Dense where it cannot be: an error naming the output and the way out, before any file is written.
    let e = run(true, &[]).unwrap_err();
    assert!(e.contains("output `S` cannot be written dense (--dense)") && e.contains("--layout S=relation"), "{e}");
    assert!(e.contains("key bounds [3]") && e.contains("[4, 2]"), "{e}");
    assert!(!dir.path("z.npy").exists() && !dir.path("s.npy").exists());
    let e = run(false, &["S=dense"]).unwrap_err();
    assert!(e.contains("output `S` cannot be written dense (--layout S=dense)"), "{e}");
    // Wrong flags.
    let e = run(false, &["Z=sparse"]).unwrap_err();
    assert!(e.contains("--layout Z=sparse") && e.contains("`relation` or `dense`"), "{e}");
    let e = run(false, &["XY=dense"]).unwrap_err();
    assert!(e.contains("no output `XY`") && e.contains("Z, S"), "{e}");
    let e = run(false, &["Z"]).unwrap_err();
    assert!(e.contains("NAME=relation or NAME=dense"), "{e}");
    let e = run(false, &["Z=dense", "Z=relation"]).unwrap_err();
    assert!(e.contains("--layout Z: given twice"), "{e}");
    let mut a = args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy")]);
    a.layouts = vec!["S=relation".into()];
    let e = run_command(a).unwrap_err();
    assert!(e.contains("output `S` is not written") && e.contains("--output S=FILE.npy"), "{e}");
}

#[test]
fn clear_errors() {
    let (dir, _) = setup("err");
    let run = |inputs: &[(&str, &str)], outputs: &[(&str, &str)]| run_command(args(&dir, inputs, outputs)).unwrap_err();
    let e = run(&[("X", "x.npy"), ("Y", "nope.npy")], &[]);
    assert!(e.contains("input `Y`") && e.contains("nope.npy") && e.contains("cannot open"), "{e}");
    let e = run(&[("X", "x.npy")], &[]);
    assert!(e.contains("input `Y` has no data") && e.contains("--input Y=FILE.npy"), "{e}");
    let e = run(&[("X", "x.npy"), ("Y", "y.npy"), ("W", "y.npy")], &[]);
    assert!(e.contains("no input `W`") && e.contains("X, Y"), "{e}");
    let e = run(&[("X", "x.npy"), ("Y", "y.npy")], &[("XY", "o.npy")]);
    assert!(e.contains("no output `XY`") && e.contains("Z, R"), "{e}");
    let e = run(&[("X", "y.npy"), ("Y", "y.npy")], &[]);
    assert!(e.contains("input `X`") && e.contains("has shape [10, 6]") && e.contains("[3, 2, 4, 5]"), "{e}");
    let dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }\n";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    bytes.extend_from_slice(&[0u8; 16]);
    std::fs::write(dir.path("int.npy"), bytes).unwrap();
    let e = run(&[("X", "x.npy"), ("Y", "int.npy")], &[]);
    assert!(e.contains("int64") && e.contains("float32 or float64"), "{e}");
    let e = run_command(RunArgs { inputs: vec!["X".into()], ..args(&dir, &[], &[]) }).unwrap_err();
    assert!(e.contains("NAME=FILE.npy"), "{e}");
    let e = run_command(RunArgs { file: dir.s("missing.json"), ..args(&dir, &[], &[]) }).unwrap_err();
    assert!(e.contains("cannot read"), "{e}");
}

/// The optimization of a run is bounded as `tra optimize`'s and the
/// server's are (`--optimize-ms`, `--analysis-memory-bytes`): past either, a
/// limit naming the flag, and nothing run.
#[test]
fn the_optimization_of_a_run_is_bounded() {
    let (dir, _) = setup("bounds");
    let io = |d: &TempDir| args(d, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy")]);
    let at_once = tra_api::optimize_limits::OptimizeLimitArgs { optimize_ms: 0, ..Default::default() };
    let e = run_command(RunArgs { bounds: at_once, ..io(&dir) }).unwrap_err();
    assert!(e.starts_with("error [limit_exceeded]") && e.contains("--optimize-ms limit of 0 ms"), "{e}");
    assert!(!dir.path("z.npy").exists(), "nothing is run");
    run_command(io(&dir)).unwrap();
    assert!(dir.path("z.npy").exists());
}

/// The plan of the optimizer's answer for MATMUL whose label contains `text`, as plan JSON.
fn alternative_plan(text: &str) -> String {
    let p = Program::from_json(MATMUL).unwrap();
    let answer = tra_optimizer::optimize::optimize(&p, &tra_rules::all(), &Default::default()).unwrap();
    let alt = answer.alternatives.iter().find(|a| a.label.contains(text)).unwrap_or_else(|| panic!("no {text} plan"));
    serde_json::to_string_pretty(&alt.plan).unwrap()
}

fn outputs_match(dir: &TempDir, inputs: &BTreeMap<String, Relation>, file: &str) {
    let want = eval_tra(&Program::from_json(MATMUL).unwrap(), inputs).unwrap();
    let pool = Pool::<f64>::new();
    let (rel, _, _) = npy::read_relation::<f64>(&dir.path(file), &[3, 3], &[4, 2], &pool).unwrap();
    compare(&want["Z"], &rel.to_relation(), 1e-12).unwrap();
}

#[test]
fn alternative_and_plan_run_on_threads() {
    let (dir, inputs) = setup("choice");
    let a = || args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy")]);
    // --alternative: the cheapest plan whose label contains the text.
    for text in ["CMM", "bmm", "RMM"] {
        let choice = PlanChoice { alternative: Some(text.into()), ..PlanChoice::default() };
        let out: serde_json::Value = serde_json::from_str(&run_command_with(a(), &choice).unwrap()).unwrap();
        let label = out["strategy"].as_str().unwrap().to_lowercase();
        assert!(label.contains(&text.to_lowercase()), "{text}: {out}");
        assert_eq!(out["floats_match"], true, "{out}");
        outputs_match(&dir, &inputs, "z.npy");
    }
    let choice = PlanChoice { alternative: Some("no such strategy".into()), ..PlanChoice::default() };
    let e = run_command_with(a(), &choice).unwrap_err();
    assert!(
        e.contains("--alternative no such strategy") && e.contains("\n  CMM — shuffle X by k"),
        "one label a line: {e}"
    );
    // --plan: a plan file (here the optimizer's BMM plan) runs as given, without optimizing.
    std::fs::write(dir.path("bmm.json"), alternative_plan("BMM")).unwrap();
    let choice = PlanChoice { plan: Some(dir.path("bmm.json")), ..PlanChoice::default() };
    let out: serde_json::Value = serde_json::from_str(&run_command_with(a(), &choice).unwrap()).unwrap();
    assert!(out["strategy"].as_str().unwrap().contains("bmm.json"), "{out}");
    assert_eq!(out["floats_match"], true, "{out}");
    assert_eq!(out["timings_ms"]["optimize"], 0.0);
    assert!(out["plan"].as_str().unwrap().contains("broadcast"), "{out}");
    outputs_match(&dir, &inputs, "z.npy");
}

#[test]
fn garbage_plan_files_are_refused_clearly() {
    let (dir, _) = setup("garbage");
    let good: serde_json::Value = serde_json::from_str(&alternative_plan("CMM")).unwrap();
    let refuse = |name: &str, text: &str| -> String {
        std::fs::write(dir.path(name), text).unwrap();
        let choice = PlanChoice { plan: Some(dir.path(name)), ..PlanChoice::default() };
        let e = run_command_with(args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy")]), &choice)
            .expect_err(name);
        assert!(e.starts_with(&format!("--plan {}", dir.s(name))), "{name}: {e}");
        e
    };
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        serde_json::to_string(&v).unwrap()
    };
    let e = refuse("not-json.json", "this is not JSON");
    assert!(e.contains("not an IA plan") && e.contains("bad_json"), "{e}");
    let e = refuse("program.json", MATMUL);
    assert!(e.contains("not an IA plan") && e.contains("XY"), "a TRA program is not a plan: {e}");
    let e = refuse("empty.json", "{}");
    assert!(e.contains("not an IA plan") && e.contains("inputs"), "{e}");
    let e = refuse("inputs.json", &edit(&|v| v["inputs"]["X"]["key_bounds"] = serde_json::json!([3, 3])));
    assert!(e.contains("input `X` is declared differently"), "{e}");
    let e = refuse("missing-input.json", &edit(&|v| v["inputs"].as_object_mut().unwrap().retain(|k, _| k != "Y")));
    assert!(e.contains("input `Y`"), "{e}");
    let e = refuse("outputs.json", &edit(&|v| v["outputs"] = serde_json::json!(["Z"])));
    assert!(e.contains("no output `R`"), "{e}");
    let e = refuse(
        "ill-typed.json",
        &edit(&|v| {
            // The local join without its shuffles: operands not co-located.
            let nodes = v["nodes"].as_object_mut().unwrap();
            let join = nodes.values_mut().find(|n| n["op"] == "local_join").unwrap();
            join["left"] = serde_json::json!("X");
            join["right"] = serde_json::json!("Y");
        }),
    );
    assert!(e.contains("local_join") || e.contains("co-located") || e.contains("placed"), "{e}");
    let choice = PlanChoice { plan: Some(dir.path("no-such-plan.json")), ..PlanChoice::default() };
    let e = run_command_with(args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[]), &choice).unwrap_err();
    assert!(e.contains("no-such-plan.json") && e.contains("cannot read"), "{e}");
}

/// Through the binary: `tra run --plan` and `--alternative` without
/// `--processes` run on threads; a garbage plan file exits non-zero.
#[test]
fn the_command_line_honours_plan_and_alternative_on_threads() {
    let (dir, _) = setup("cli");
    let tra = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tra"));
        cmd.args(["run", "--format", "json", &dir.s("p.json"), "--input", &format!("X={}", dir.s("x.npy"))])
            .args(["--input", &format!("Y={}", dir.s("y.npy")), "--no-progress", "--threads", "2"])
            .args(extra);
        let out = cmd.output().expect("run tra");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    std::fs::write(dir.path("garbage.json"), "[1, 2, 3]").unwrap();
    let (ok, _, err) = tra(&["--plan", &dir.s("garbage.json")]);
    assert!(!ok && err.contains("--plan") && err.contains("garbage.json"), "{err}");
    std::fs::write(dir.path("cmm.json"), alternative_plan("CMM")).unwrap();
    let (ok, out, err) = tra(&["--plan", &dir.s("cmm.json")]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["strategy"].as_str().unwrap().contains("cmm.json") && v["floats_match"] == true, "{v}");
    let (ok, out, err) = tra(&["--alternative", "RMM"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["strategy"].as_str().unwrap().contains("RMM"), "{v}");
    let (ok, _, err) = tra(&["--alternative", "RMM", "--plan", &dir.s("cmm.json")]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}

/// Without `--format json`, `tra run` prints a few lines for a person: the
/// plan, floats measured against predicted, the time, where outputs went.
#[test]
fn the_command_line_prints_a_summary_by_default() {
    let (dir, _) = setup("summary");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tra"))
        .args(["run", &dir.s("p.json"), "--input", &format!("X={}", dir.s("x.npy"))])
        .args(["--input", &format!("Y={}", dir.s("y.npy")), "--no-progress", "--threads", "2"])
        .args(["--output", &format!("Z={}", dir.s("z.npy")), "--alternative", "CMM"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_err(), "{text}");
    assert!(text.lines().count() <= 12, "{text}");
    assert!(text.starts_with("ran ") && text.contains("3 sites (2 threads), f64"), "{text}");
    assert!(text.contains("plan: CMM"), "{text}");
    assert!(text.contains("network floats:") && text.contains("measured") && text.contains("as predicted"), "{text}");
    assert!(text.contains("time: "), "{text}");
    assert!(text.contains(&format!("Z → {}  dense (12, 6)", dir.s("z.npy"))), "{text}");
    assert!(text.contains("R: not written (--output R=FILE.npy writes it)"), "{text}");
}
