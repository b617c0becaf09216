//! Malformed programs: each gets one clear error naming the node or field,
//! never a panic.

use tra_optimizer::check::check_program;
use tra_optimizer::{ErrorCode, Program, ProgramError};

fn error_of(json: &str) -> ProgramError {
    match Program::from_json(json) {
        Err(e) => e,
        Ok(p) => match check_program(&p) {
            Err(e) => e,
            Ok(_) => panic!("expected an error for {json}"),
        },
    }
}

const X: &str = r#""X": {"key_bounds": [4, 4], "array_bounds": [2, 2]}"#;
const Y: &str = r#""Y": {"key_bounds": [4, 4], "array_bounds": [2, 2]}"#;

fn with_nodes(nodes: &str) -> String {
    format!(r#"{{"inputs": {{{X}, {Y}}}, "nodes": {{{nodes}}}, "outputs": ["Z"]}}"#)
}

fn assert_err(e: &ProgramError, code: ErrorCode, at: &str, words: &[&str]) {
    assert_eq!(e.code, code, "{e:?}");
    assert_eq!(e.at, at, "{e:?}");
    for w in words {
        assert!(e.message.contains(w), "message {:?} lacks {w:?}", e.message);
    }
}

#[test]
fn unknown_input() {
    let e = error_of(&with_nodes(r#""Z": {"op": "transform", "input": "W", "kernel": "relu"}"#));
    assert_err(&e, ErrorCode::UnknownInput, "Z.input", &["`W`", "neither an input nor a node"]);
}

/// An empty name would be reported at `at: ""` (the whole request); a long
/// one would be echoed whole in every error, report and plan.
#[test]
fn names_are_not_empty_and_not_too_long() {
    let e = error_of(r#"{"inputs": {"": {"key_bounds": [2], "array_bounds": [2]}}, "nodes": {}, "outputs": [""]}"#);
    assert_err(&e, ErrorCode::BadField, "inputs", &["an input's name is empty"]);
    let e = error_of(&with_nodes(r#""": {"op": "transform", "input": "X", "kernel": "relu"}"#));
    assert_err(&e, ErrorCode::BadField, "nodes", &["a node's name is empty"]);
    let long = "N".repeat(300);
    let e = error_of(&with_nodes(&format!(r#""{long}": {{"op": "transform", "input": "X", "kernel": "relu"}}"#)));
    assert_err(&e, ErrorCode::BadField, "nodes", &["300 bytes long", "at most 256 bytes", "(300 characters)"]);
    assert!(e.message.len() < 200, "the name is not echoed whole: {}", e.message);
    let fits = "N".repeat(256);
    let ok = with_nodes(&format!(
        r#""{fits}": {{"op": "transform", "input": "X", "kernel": "relu"}}, "Z": {{"op": "transform", "input": "{fits}", "kernel": "relu"}}"#
    ));
    check_program(&Program::from_json(&ok).unwrap()).expect("a name of 256 bytes is fine");
}

#[test]
fn unknown_kernel_with_suggestion() {
    let e = error_of(&with_nodes(r#""Z": {"op": "transform", "input": "X", "kernel": "rleu"}"#));
    assert_err(&e, ErrorCode::UnknownKernel, "Z.kernel", &["rleu"]);
    let e = error_of(&with_nodes(r#""Z": {"op": "transform", "input": "X", "kernel": "RELU"}"#));
    assert_err(&e, ErrorCode::UnknownKernel, "Z.kernel", &["relu"]);
}

#[test]
fn unknown_op() {
    let e = error_of(&with_nodes(r#""Z": {"op": "transpose", "input": "X"}"#));
    assert_err(&e, ErrorCode::UnknownOp, "Z.op", &["transpose", "join"]);
}

#[test]
fn cycle() {
    let e = error_of(&with_nodes(
        r#""A": {"op": "transform", "input": "Z", "kernel": "relu"},
           "Z": {"op": "transform", "input": "A", "kernel": "relu"}"#,
    ));
    assert_eq!(e.code, ErrorCode::Cycle);
    assert!(e.message.contains("A -> Z -> A") || e.message.contains("Z -> A -> Z"), "{}", e.message);
}

#[test]
fn join_bounds_differ() {
    let json = r#"{"inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [2, 2]},
                              "Y": {"key_bounds": [5, 4], "array_bounds": [2, 2]}},
                   "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                   "outputs": ["XY"]}"#;
    let e = error_of(json);
    assert_err(
        &e,
        ErrorCode::BoundsMismatch,
        "XY.right_keys",
        &["join XY: left key dim 1 has bound 4, right key dim 0 has bound 5"],
    );
}

#[test]
fn group_by_out_of_range() {
    let e = error_of(&with_nodes(r#""Z": {"op": "aggregate", "input": "X", "group_by": [0, 2], "kernel": "matAdd"}"#));
    assert_err(&e, ErrorCode::DimOutOfRange, "Z.group_by", &["aggregate Z", "dim 2", "arity 2"]);
}

#[test]
fn key_expression_does_not_parse() {
    let e = error_of(&with_nodes(r#""Z": {"op": "rekey", "input": "X", "key": "[k0, 2*]"}"#));
    assert_eq!(e.code, ErrorCode::BadExpression, "{e:?}");
    assert_eq!(e.at, "Z.key", "the field, not only the node");
    assert!(e.message.contains("column"), "{}", e.message);
    let e = error_of(&with_nodes(r#""Z": {"op": "filter", "input": "X", "predicate": "k0 = = k1"}"#));
    assert_eq!(e.code, ErrorCode::BadExpression, "{e:?}");
    assert_eq!(e.at, "Z.predicate");
    let e = error_of(&with_nodes(r#""Z": {"op": "transform", "input": "X", "kernel": "scale(abc)"}"#));
    assert_eq!(e.at, "Z.kernel", "{e:?}");
    // serde's words for a number out of range are the API's.
    let e = error_of(&with_nodes(r#""Z": {"op": "aggregate", "input": "X", "group_by": [-1], "kernel": "matAdd"}"#));
    assert_err(&e, ErrorCode::BadField, "Z.group_by", &["expected a whole number ≥ 0"]);
}

/// An output listed twice is refused (answers are keyed by output name:
/// it came back once, without a word).
#[test]
fn an_output_listed_twice_is_named() {
    let e =
        error_of(r#"{"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}}, "nodes": {}, "outputs": ["X", "X"]}"#);
    assert_err(&e, ErrorCode::BadField, "outputs[1]", &["`X` is listed twice"]);
}

/// A cluster field of the wrong type is named, in the API's words.
#[test]
fn a_cluster_field_of_the_wrong_type_is_named() {
    let program = |cluster: &str| {
        format!(
            r#"{{"inputs": {{"X": {{"key_bounds": [2], "array_bounds": [2]}}}}, "nodes": {{}}, "outputs": ["X"], "cluster": {cluster}}}"#
        )
    };
    let e = error_of(&program(r#"{"sites": -1}"#));
    assert_err(&e, ErrorCode::BadField, "cluster.sites", &["-1", "expected a whole number ≥ 0"]);
    let e = error_of(&program(r#"{"cost_model": "bogus"}"#));
    assert_err(&e, ErrorCode::BadField, "cluster.cost_model", &["bogus"]);
}

#[test]
fn zero_and_negative_bounds() {
    let e =
        error_of(r#"{"inputs": {"X": {"key_bounds": [0, 4], "array_bounds": [2, 2]}}, "nodes": {}, "outputs": ["X"]}"#);
    assert_err(&e, ErrorCode::BadBounds, "X.key_bounds", &["key bound 0 is 0"]);
    let e = error_of(r#"{"inputs": {"X": {"key_bounds": [4], "array_bounds": [-2]}}, "nodes": {}, "outputs": ["X"]}"#);
    assert_err(&e, ErrorCode::BadBounds, "X.array_bounds", &["array bound 0 is -2"]);
}

#[test]
fn a_bound_that_is_not_a_whole_number_is_named_by_its_index() {
    let e =
        error_of(r#"{"inputs": {"X": {"key_bounds": [4], "array_bounds": [2, "a"]}}, "nodes": {}, "outputs": ["X"]}"#);
    assert_err(&e, ErrorCode::BadField, "X.array_bounds[1]", &["array_bounds[1]", "whole number", "the string \"a\""]);
    let e = error_of(r#"{"inputs": {"X": {"key_bounds": [4.5], "array_bounds": [2]}}, "nodes": {}, "outputs": ["X"]}"#);
    assert_err(&e, ErrorCode::BadField, "X.key_bounds[0]", &["the number 4.5"]);
    let e = error_of(r#"{"inputs": {"X": {"key_bounds": 4, "array_bounds": [2]}}, "nodes": {}, "outputs": ["X"]}"#);
    assert_err(&e, ErrorCode::BadField, "X.key_bounds", &["must be a list"]);
    let e = error_of(
        r#"{"inputs": {"X": {"key_bounds": [4], "array_bounds": [18446744073709551615]}}, "nodes": {}, "outputs": ["X"]}"#,
    );
    assert_err(&e, ErrorCode::BadField, "X.array_bounds[0]", &["too large"]);
    // Whole, but written as a float (Python's json.dumps of 50.0): the fix is said.
    let e = error_of(
        r#"{"inputs": {"X": {"key_bounds": [4], "array_bounds": [50.0, 1e2]}}, "nodes": {}, "outputs": ["X"]}"#,
    );
    assert_err(&e, ErrorCode::BadField, "X.array_bounds[0]", &["50.0", "write it as the integer 50"]);
}

#[test]
fn bounds_whose_product_overflows() {
    let e = error_of(
        r#"{"inputs": {"X": {"key_bounds": [4000000000, 4000000000, 4000000000], "array_bounds": [2]}}, "nodes": {}, "outputs": ["X"]}"#,
    );
    assert_err(&e, ErrorCode::BadBounds, "X.key_bounds", &["overflows"]);
}

#[test]
fn rekey_that_breaks_uniqueness() {
    let e = error_of(&with_nodes(r#""Z": {"op": "rekey", "input": "X", "key": "[k0]"}"#));
    assert_err(&e, ErrorCode::BadKeyMap, "Z.key", &["both to", "unique"]);
}

#[test]
fn unknown_output_and_empty_outputs() {
    let e = error_of(&format!(r#"{{"inputs": {{{X}}}, "nodes": {{}}, "outputs": ["Q"]}}"#));
    assert_err(&e, ErrorCode::UnknownOutput, "outputs", &["`Q`"]);
    let e = error_of(&format!(r#"{{"inputs": {{{X}}}, "nodes": {{}}, "outputs": []}}"#));
    assert_eq!(e.code, ErrorCode::BadField);
}

#[test]
fn kernel_shapes_disagree() {
    let json = r#"{"inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [2, 3]},
                              "Y": {"key_bounds": [2, 2], "array_bounds": [2, 3]}},
                   "nodes": {"Z": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"}},
                   "outputs": ["Z"]}"#;
    let e = error_of(json);
    assert_eq!(e.code, ErrorCode::BadKernelShape, "{e:?}");
    assert_eq!(e.at, "Z.kernel");
    assert!(e.message.starts_with("join Z: "), "{}", e.message);
}

#[test]
fn missing_field_and_not_json() {
    let e = error_of(&with_nodes(r#""Z": {"op": "join", "left": "X", "right": "Y", "kernel": "matMul"}"#));
    assert_eq!(e.code, ErrorCode::BadField);
    assert_eq!(e.at, "Z");
    assert!(e.message.contains("left_keys"), "{}", e.message);
    let e = error_of("{\"inputs\": ");
    assert_eq!(e.code, ErrorCode::BadJson);
}

#[test]
fn huge_key_space_filter_is_refused_not_hung() {
    let json = r#"{"inputs": {"X": {"key_bounds": [100000, 100000], "array_bounds": [1]}},
                   "nodes": {"Z": {"op": "filter", "input": "X", "predicate": "k0 == k1"}},
                   "outputs": ["Z"]}"#;
    let e = error_of(json);
    assert_eq!(e.code, ErrorCode::LimitExceeded, "{e:?}");
    assert_eq!(e.at, "Z.predicate");
}

#[test]
fn deep_chain_is_checked_without_stack_overflow() {
    let mut nodes = vec![r#""N0": {"op": "transform", "input": "X", "kernel": "relu"}"#.to_string()];
    for i in 1..5000 {
        nodes.push(format!(r#""N{i}": {{"op": "transform", "input": "N{}", "kernel": "relu"}}"#, i - 1));
    }
    let json = format!(r#"{{"inputs": {{{X}}}, "nodes": {{{}}}, "outputs": ["N4999"]}}"#, nodes.join(","));
    let p = Program::from_json(&json).unwrap();
    let t = check_program(&p).unwrap();
    assert_eq!(t.order.len(), 5000);
    assert!(!p.to_sexpr().is_empty());
}

#[test]
fn an_empty_axis_cannot_be_tiled() {
    let e = error_of(
        r#"{"inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [0, 4]}},
            "nodes": {"T": {"op": "tile", "input": "X", "dim": 0, "size": 2}}, "outputs": ["T"]}"#,
    );
    assert_err(&e, ErrorCode::BadField, "T.dim", &["array dim 0 is empty"]);
}
