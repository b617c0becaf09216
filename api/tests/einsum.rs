//! The einsum front-end end to end: `tra einsum` (`einsum_command`) on
//! `.npy` files, and `POST /v1/einsum` on a real server.

mod common;

use common::TempDir;

use ndarray::{ArrayD, IxDyn};
use serde_json::{json, Value};
use std::net::SocketAddr;
use tra_api::einsum::{einsum_command, EinsumArgs};
use tra_api::server::ServerConfig;
use tra_executor::npy;

fn write(dir: &TempDir, name: &str, a: &ArrayD<f64>) -> String {
    let p = dir.s(name);
    npy::write_array::<f64>(std::path::Path::new(&p), a.shape(), a.as_standard_layout().as_slice().unwrap()).unwrap();
    p
}

fn array(shape: &[usize], seed: usize) -> ArrayD<f64> {
    let mut i = seed;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        i = (i * 7 + 3) % 11;
        i as f64 - 5.0
    })
}

fn args(expr: &str, inputs: Vec<String>, output: Option<String>, block: usize, executor: &str) -> EinsumArgs {
    EinsumArgs {
        expression: expr.into(),
        inputs,
        output,
        block,
        sites: 3,
        executor: executor.into(),
        show_program: false,
        strict: true,
        bounds: Default::default(),
    }
}

#[test]
fn cli_matmul_with_padding_writes_the_cropped_result() {
    let dir = TempDir::new("einsum-test-matmul");
    let (a, b) = (array(&[5, 7], 1), array(&[7, 3], 2));
    let pa = write(&dir, "a.npy", &a);
    let pb = write(&dir, "b.npy", &b);
    let a2 = a.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    let b2 = b.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    let want = a2.dot(&b2).into_dyn();
    for executor in ["threads", "reference"] {
        let out = dir.s(&format!("c-{executor}.npy"));
        let summary = einsum_command(args(
            "ij,jk->ik",
            vec![format!("A={pa}"), format!("B={pb}")],
            Some(format!("C={out}")),
            2,
            executor,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let s: Value = serde_json::from_str(&summary).unwrap();
        assert_eq!(s["output"]["name"], "C");
        assert_eq!(s["output"]["shape"], json!([5, 3]));
        assert_eq!(s["output"]["cropped"], true);
        assert_eq!(s["output"]["relation"]["key_bounds"], json!([3, 2]));
        assert!(s["padding"].as_str().unwrap().contains("zero-padded"));
        assert_eq!(s["network_floats_measured"], s["network_floats_predicted"]);
        let got = npy::read_array::<f64>(std::path::Path::new(&out)).unwrap();
        assert_eq!(got, want, "{executor}");
    }
}

/// `tra einsum`'s optimization (its contraction order included) is bounded
/// like `tra optimize`'s: past `--optimize-ms`, a limit naming the flag.
#[test]
fn cli_optimization_is_bounded() {
    let dir = TempDir::new("einsum-test-bounds");
    let pa = write(&dir, "a.npy", &array(&[5, 7], 1));
    let pb = write(&dir, "b.npy", &array(&[7, 3], 2));
    let out = dir.s("c.npy");
    let mut a = args("ij,jk->ik", vec![format!("A={pa}"), format!("B={pb}")], Some(format!("C={out}")), 2, "threads");
    a.bounds.optimize_ms = 0;
    let e = einsum_command(a).unwrap_err();
    assert!(e.contains("limit_exceeded") && e.contains("--optimize-ms limit of 0 ms"), "{e}");
    assert!(!std::path::Path::new(&out).exists(), "nothing is run");
}

#[test]
fn cli_trace_gives_a_scalar_and_inline_data() {
    let dir = TempDir::new("einsum-test-trace");
    let a = array(&[5, 5], 4);
    let pa = write(&dir, "a.npy", &a);
    let want: f64 = (0..5).map(|i| a[[i, i]]).sum();
    let s: Value =
        serde_json::from_str(&einsum_command(args("ii", vec![format!("A={pa}")], None, 2, "threads")).unwrap())
            .unwrap();
    assert_eq!(s["output"]["shape"], json!([]));
    assert_eq!(s["output"]["data"], json!(want));
    // Written, a 0-d array.
    let out = dir.s("t.npy");
    einsum_command(args("ii->", vec![format!("A={pa}")], Some(out.clone()), 2, "threads")).unwrap();
    let got = npy::read_array::<f64>(std::path::Path::new(&out)).unwrap();
    assert_eq!(got.shape(), &[] as &[usize]);
    assert_eq!(got[IxDyn(&[])], want);
}

#[test]
fn cli_three_operands_chain() {
    let dir = TempDir::new("einsum-test-chain");
    let (a, b, v) = (array(&[6, 5], 1), array(&[5, 4], 2), array(&[4], 3));
    let ins = vec![
        format!("A={}", write(&dir, "a.npy", &a)),
        format!("B={}", write(&dir, "b.npy", &b)),
        format!("V={}", write(&dir, "v.npy", &v)),
    ];
    let out = dir.s("y.npy");
    let s: Value =
        serde_json::from_str(&einsum_command(args("ij,jk,k->i", ins, Some(out.clone()), 2, "threads")).unwrap())
            .unwrap();
    assert_eq!(s["order"]["method"], "dp");
    let a2 = a.into_dimensionality::<ndarray::Ix2>().unwrap();
    let b2 = b.into_dimensionality::<ndarray::Ix2>().unwrap();
    let v1 = v.into_dimensionality::<ndarray::Ix1>().unwrap();
    let want = a2.dot(&b2.dot(&v1)).into_dyn();
    assert_eq!(npy::read_array::<f64>(std::path::Path::new(&out)).unwrap(), want);
}

#[test]
fn cli_errors_point_at_the_expression() {
    let dir = TempDir::new("einsum-test-errors");
    let pa = write(&dir, "a.npy", &array(&[2, 3], 1));
    let pb = write(&dir, "b.npy", &array(&[4, 5], 1));
    let e =
        einsum_command(args("ij,jk->ik", vec![format!("A={pa}"), format!("B={pb}")], None, 2, "threads")).unwrap_err();
    assert!(
        e.starts_with(
            "error [bounds_mismatch] at expression: einsum `ij,jk->ik`, position 3: index `j` has size 4 in B"
        ),
        "{e}"
    );
    assert!(e.ends_with("  ij,jk->ik\n     ^"), "{e}");
    let e = einsum_command(args("ij,jk->ik", vec![format!("A={pa}")], None, 2, "threads")).unwrap_err();
    assert!(e.contains("position 3") && e.contains("term `jk` has no input"), "{e}");
    let e =
        einsum_command(args("ij,j?->ik", vec![format!("A={pa}"), format!("B={pb}")], None, 2, "threads")).unwrap_err();
    assert!(e.contains("position 4") && e.contains("`?` is not an index"), "{e}");
    let e = einsum_command(args("ij", vec!["A".into()], None, 2, "threads")).unwrap_err();
    assert!(e.contains("NAME=FILE.npy"), "{e}");
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

async fn start() -> SocketAddr {
    common::start(ServerConfig::default()).await
}

/// One request: status and JSON body (`null` when the body is not JSON).
async fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let r = common::http(addr, method, path, Some(body.as_bytes())).await;
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn http_einsum_gives_the_program_and_its_optimization() {
    let addr = start().await;
    let body = json!({
        "expression": "ij,jk->ik",
        "inputs": {"A": {"shape": [4000, 4000], "block": 1000}, "B": {"shape": [4000, 4000]}},
        "block": 1000,
        "cluster": {"sites": 10}
    });
    let (status, v) = request(addr, "POST", "/v1/einsum", &body.to_string()).await;
    assert_eq!(status, 200, "{v}");
    // The docs/API.md matmul program.
    assert_eq!(v["program"]["inputs"]["A"], json!({"key_bounds": [4, 4], "array_bounds": [1000, 1000]}));
    assert_eq!(
        v["program"]["nodes"]["AB_join"],
        json!({"op": "join", "left": "A", "right": "B", "left_keys": [1], "right_keys": [0], "kernel": "matMul"})
    );
    assert_eq!(
        v["program"]["nodes"]["out"],
        json!({"op": "aggregate", "input": "AB_join", "group_by": [0, 2], "kernel": "matAdd"})
    );
    assert_eq!(v["program"]["outputs"], json!(["out"]));
    assert!(v["optimize"]["plan"]["nodes"].is_object());
    assert!(v["optimize"]["cost"]["network_floats"].is_number());
    assert!(v["optimize"]["alternatives"].as_array().unwrap().len() >= 2);
    assert_eq!(v["einsum"]["output"]["shape"], json!([4000, 4000]));
    assert_eq!(v["einsum"]["order"]["method"], "pair");
    // The labels name dims by the expression's letters: the contracted index is `j`.
    let labels: Vec<&str> =
        v["optimize"]["alternatives"].as_array().unwrap().iter().map(|a| a["label"].as_str().unwrap()).collect();
    assert!(labels.iter().any(|l| l.starts_with("CMM — shuffle A by j, B by j")), "{labels:?}");
    // The same program posted to /v1/optimize (no letters) keeps the paper's, cache or not.
    let (status, o) = request(addr, "POST", "/v1/optimize", &v["program"].to_string()).await;
    assert_eq!(status, 200, "{o}");
    let labels: Vec<&str> =
        o["alternatives"].as_array().unwrap().iter().map(|a| a["label"].as_str().unwrap()).collect();
    assert!(labels.iter().any(|l| l.starts_with("CMM — shuffle A by k, B by k")), "{labels:?}");
    // Other plans too: a batched product co-partitioned on the batch index.
    let batched = json!({"expression": "bij,bjk->bik", "inputs": {"A": {"shape": [4, 40, 40]}, "B": {"shape": [4, 40, 40]}},
                         "block": 10, "cluster": {"sites": 4}});
    let (status, v) = request(addr, "POST", "/v1/einsum", &batched.to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["optimize"]["alternatives"][0]["label"], "co-partitioned join — shuffle A by b, B by b", "{v}");

    // Three operands: the order and its costs.
    let body = json!({
        "expression": "ij,jk,k->i",
        "inputs": {"A": {"shape": [400, 400]}, "B": {"shape": [400, 400]}, "v": {"shape": [400]}},
        "block": 100, "output": "y"
    });
    let (status, v) = request(addr, "POST", "/v1/einsum", &body.to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["einsum"]["order"]["method"], "dp");
    assert_eq!(v["einsum"]["order"]["steps"][0]["left"], "B");
    assert_eq!(v["program"]["outputs"], json!(["y"]));
    assert!(
        v["einsum"]["order"]["cost"]["total"].as_f64() < v["einsum"]["order"]["left_to_right_cost"]["total"].as_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn http_einsum_errors_carry_the_position() {
    let addr = start().await;
    let (status, v) = request(
        addr,
        "POST",
        "/v1/einsum",
        &json!({"expression": "ij,jk->ik", "inputs": {"A": {"shape": [2, 3]}, "B": {"shape": [4, 5]}}}).to_string(),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "bounds_mismatch");
    assert_eq!(v["error"]["at"], "expression");
    assert_eq!(v["error"]["position"], 3);
    assert!(v["error"]["message"].as_str().unwrap().contains("index `j` has size 4 in B"));
    let (status, v) = request(
        addr,
        "POST",
        "/v1/einsum",
        &json!({"expression": "ij", "inputs": {"A": {"shape": [2, 3], "block": [1]}}}).to_string(),
    )
    .await;
    assert_eq!((status, v["error"]["at"].as_str()), (422, Some("inputs.A.block")), "{v}");
    let (status, v) = request(addr, "POST", "/v1/einsum", &json!({"inputs": {}}).to_string()).await;
    assert_eq!((status, v["error"]["at"].as_str()), (422, Some("expression")), "{v}");
    // The request's own cluster is named, not reported as tra's bug.
    let (status, v) = request(
        addr,
        "POST",
        "/v1/einsum",
        &json!({"expression": "ij,jk->ik", "inputs": {"A": {"shape": [2, 3]}, "B": {"shape": [3, 5]}},
                "cluster": {"sites": 0}})
        .to_string(),
    )
    .await;
    assert_eq!((status, v["error"]["at"].as_str()), (422, Some("cluster.sites")), "{v}");
    assert!(!v["error"]["message"].as_str().unwrap().contains("internal error"), "{v}");
    let (status, _) = request(addr, "POST", "/v1/einsum", "[1]").await;
    assert_eq!(status, 400);
    let (status, _) = request(addr, "GET", "/v1/einsum", "").await;
    assert_eq!(status, 405);
    let (status, doc) = request(addr, "GET", "/openapi.json", "").await;
    assert_eq!(status, 200);
    assert!(doc["paths"]["/v1/einsum"]["post"].is_object());
    assert!(doc["components"]["schemas"]["EinsumRequest"].is_object());
}
