//! Shared helpers of tra's test suites: program builders, a random program
//! generator, the value oracle of the e-graph analysis ([`oracle`]) and the
//! rule-soundness harness ([`soundness`]).
#![allow(missing_docs)]

use tra_optimizer::Program;

/// Parse a program from JSON text; panics with the error, for tests.
pub fn program(json: &str) -> Program {
    Program::from_json(json).unwrap_or_else(|e| panic!("test program does not parse: {e}"))
}

/// `diag(A·B)` as users write it, over 2×2 blocks of 6×6 on 5 sites: the
/// product, its diagonal blocks (filter `k0 == k1`, rekey `[k0]`), `diag` of
/// each. It once crashed the optimizer (R1-4 judged the dropping key map
/// `[k0]` by its own output arity).
pub const DIAG_OF_PRODUCT: &str = r#"{
  "inputs": {"A": {"key_bounds": [2, 2], "array_bounds": [6, 6]}, "B": {"key_bounds": [2, 2], "array_bounds": [6, 6]}},
  "nodes": {"J": {"op": "join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "S": {"op": "aggregate", "input": "J", "group_by": [0, 2], "kernel": "matAdd"},
            "F": {"op": "filter", "input": "S", "predicate": "k0 == k1"},
            "R": {"op": "rekey", "input": "F", "key": "[k0]"},
            "D": {"op": "transform", "input": "R", "kernel": "diag"}},
  "outputs": ["D"], "cluster": {"sites": 5}
}"#;

/// The smallest program of the same shape: aggregate by both dims of a
/// `[2, 1]` relation, a rekey that drops the dim of bound 1, a kernel that
/// distributes over `matAdd`, on one site.
pub const MINIMAL_FORM: &str = r#"{
  "inputs": {"X": {"key_bounds": [2, 1], "array_bounds": [3, 4]}},
  "nodes": {"S": {"op": "aggregate", "input": "X", "group_by": [0, 1], "kernel": "matAdd"},
            "R": {"op": "rekey", "input": "S", "key": "[k0]"},
            "T": {"op": "transform", "input": "R", "kernel": "scale(2)"}},
  "outputs": ["T"], "cluster": {"sites": 1}
}"#;

/// The docs/API.md matmul program with the given key bounds, block sizes and sites.
pub fn matmul_program(i: u32, j: u32, k: u32, block: usize, sites: usize) -> Program {
    program(&format!(
        r#"{{
        "inputs": {{
            "X": {{"key_bounds": [{i}, {j}], "array_bounds": [{block}, {block}]}},
            "Y": {{"key_bounds": [{j}, {k}], "array_bounds": [{block}, {block}]}}
        }},
        "nodes": {{
            "XY": {{"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
            "Z": {{"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}}
        }},
        "outputs": ["Z"],
        "cluster": {{"sites": {sites}}}
    }}"#
    ))
}

/// Random data for every input of a program (integers in [-3, 3], the
/// reference's generator): input number `i` from seed `seed + i`.
pub fn random_inputs(p: &Program, seed: u64) -> std::collections::BTreeMap<String, tra_executor::reference::Relation> {
    // Programs here are generated or checked already: bounds that do not fit are a bug in the test.
    tra_executor::reference::random_inputs(&p.inputs, seed).expect("input bounds of a test program")
}

pub mod gen;
pub mod oracle;
pub mod soundness;
