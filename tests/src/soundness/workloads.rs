//! The workload programs of `examples/*.json`, shrunk so that they evaluate
//! quickly while keeping their structure: every key bound and every block
//! extent is replaced by a small one through a map that sends equal values to
//! equal values and keeps their order (so joins, kernels and the asymmetries
//! that make the plans differ — a large common dimension, two large ones —
//! survive), the sites are kept.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use tra_optimizer::check::check_program;
use tra_optimizer::Program;

/// The folder of the workload examples.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("examples")
}

/// Replace each value by `base + its rank` among the distinct values (`1`
/// stays `1`), at most `cap`.
fn rank_map(values: &BTreeSet<i64>, base: i64, cap: i64) -> impl Fn(i64) -> i64 + '_ {
    move |v| {
        if v <= 1 {
            return v;
        }
        let rank = values.iter().filter(|&&x| x > 1 && x < v).count() as i64;
        (base + rank).min(cap)
    }
}

/// Shrink a program given as JSON.
pub fn shrink(program: &Value) -> Value {
    let mut p = program.clone();
    let mut keys = BTreeSet::new();
    let mut blocks = BTreeSet::new();
    if let Some(inputs) = p["inputs"].as_object() {
        for d in inputs.values() {
            keys.extend(d["key_bounds"].as_array().into_iter().flatten().filter_map(Value::as_i64));
            blocks.extend(d["array_bounds"].as_array().into_iter().flatten().filter_map(Value::as_i64));
        }
    }
    let kmap = rank_map(&keys, 2, 4);
    let bmap = rank_map(&blocks, 2, 5);
    if let Some(inputs) = p["inputs"].as_object_mut() {
        for d in inputs.values_mut() {
            for (field, f) in [("key_bounds", &kmap as &dyn Fn(i64) -> i64), ("array_bounds", &bmap)] {
                if let Some(a) = d[field].as_array_mut() {
                    for x in a.iter_mut() {
                        if let Some(v) = x.as_i64() {
                            *x = Value::from(f(v));
                        }
                    }
                }
            }
        }
    }
    p
}

/// Every example, shrunk and checked: (file name, program).
pub fn shrunk_examples() -> Vec<(String, Program)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_name().expect("a file").to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let p = Program::from_value(&shrink(&v)).unwrap_or_else(|e| panic!("{name} shrunk: {e}"));
            check_program(&p).unwrap_or_else(|e| panic!("{name} shrunk does not type: {e}"));
            (name, p)
        })
        .collect()
}
