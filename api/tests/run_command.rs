//! `tra run` (tra_api::run::run_command): a program from a file, inputs from
//! `.npy` files in both layouts, outputs written both ways, the JSON summary
//! (measured floats = predicted), and the errors a user sees.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tra_api::run::{run_command, RunArgs};
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

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("tra-run-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

fn args(dir: &Dir, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> RunArgs {
    RunArgs {
        file: dir.s("p.json"),
        inputs: inputs.iter().map(|(n, f)| format!("{n}={}", dir.s(f))).collect(),
        outputs: outputs.iter().map(|(n, f)| format!("{n}={}", dir.s(f))).collect(),
        dense: false,
        sites: None,
        dtype: None,
        threads: Some(2),
        no_progress: true,
    }
}

fn setup(tag: &str) -> (Dir, BTreeMap<String, Relation>) {
    let dir = Dir::new(tag);
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
    for dense in [false, true] {
        let mut a = args(&dir, &[("X", "x.npy"), ("Y", "y.npy")], &[("Z", "z.npy"), ("R", "r.npy")]);
        a.dense = dense;
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
            assert_eq!(layout, if dense { Layout::Dense } else { Layout::Relation });
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
