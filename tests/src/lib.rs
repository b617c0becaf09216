//! Shared helpers of tra's test suites: program builders, a random program
//! generator, the value oracle of the e-graph analysis ([`oracle`]) and the
//! rule-soundness harness ([`soundness`]).
#![allow(missing_docs)]

use tra_optimizer::Program;

/// Parse a program from JSON text; panics with the error, for tests.
pub fn program(json: &str) -> Program {
    Program::from_json(json).unwrap_or_else(|e| panic!("test program does not parse: {e}"))
}

/// The API.md matmul program with the given key bounds, block sizes and sites.
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

pub mod gen;
pub mod oracle;
pub mod soundness;
