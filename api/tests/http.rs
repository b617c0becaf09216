//! The HTTP service end to end: a real server on 127.0.0.1 (port 0) and a
//! small HTTP/1.1 client over a TCP stream.

mod common;

use common::{get, http, post, start};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use tra_api::server::{ServerConfig, ROUTES};
use tra_executor::reference::{random_relation, Relation};

fn api_example() -> Value {
    json!({
        "inputs": {
            "X": {"key_bounds": [4, 4], "array_bounds": [1000, 1000], "placement": {"hash": [0]}},
            "Y": {"key_bounds": [4, 4], "array_bounds": [1000, 1000]}
        },
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z":  {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}
        },
        "outputs": ["Z"],
        "cluster": {"sites": 10}
    })
}

/// A matmul of `kx` (key bounds of X), `ky` (of Y), blocks `b`×`b`, on `sites` sites.
fn matmul(kx: [u32; 2], ky: [u32; 2], b: usize, sites: usize) -> Value {
    json!({
        "inputs": {
            "X": {"key_bounds": kx, "array_bounds": [b, b]},
            "Y": {"key_bounds": ky, "array_bounds": [b, b]}
        },
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z":  {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}
        },
        "outputs": ["Z"],
        "cluster": {"sites": sites}
    })
}

fn costs(alts: &Value) -> Vec<f64> {
    alts.as_array().unwrap().iter().map(|a| a["cost"]["total"].as_f64().unwrap()).collect()
}

#[tokio::test]
async fn healthz_and_index() {
    let addr = start(ServerConfig::default()).await;
    let r = get(addr, "/healthz").await;
    assert_eq!(r.status, 200);
    let h = r.json();
    assert_eq!(h["status"], "ok");
    // The budgets and their use, for operators.
    assert_eq!(h["answer_cache"]["budget_bytes"], 64 << 20, "{h}");
    assert_eq!(h["execution_memory"]["budget_bytes"], 1u64 << 30, "{h}");
    for f in ["optimizations", "executions", "connections", "executor_pool"] {
        assert!(h[f].is_object(), "{f}: {h}");
    }

    let r = get(addr, "/").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let page = String::from_utf8(r.body).unwrap();
    assert!(page.contains("/v1/examples") && page.contains("/v1/optimize") && page.contains("<textarea"));
}

#[tokio::test]
async fn optimize_the_api_example() {
    let addr = start(ServerConfig::default()).await;
    let r = post(addr, "/v1/optimize", &api_example()).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    assert_eq!(v["plan"]["outputs"], json!(["Z"]));
    assert!(v["plan"]["nodes"]["Z"].is_object(), "the output node keeps its name: {}", v["plan"]);
    for f in ["network_floats", "flops", "total"] {
        assert!(v["cost"][f].is_number(), "cost.{f}: {}", v["cost"]);
    }
    let alts = &v["alternatives"];
    assert!(alts.as_array().unwrap().len() >= 2, "alternatives: {alts}");
    let c = costs(alts);
    assert!(c.windows(2).all(|w| w[0] <= w[1]), "alternatives not cheapest first: {c:?}");
    assert_eq!(alts[0]["plan"], v["plan"], "the chosen plan is alternatives[0]");
    for a in alts.as_array().unwrap() {
        assert!(a["label"].is_string() && a["plan"]["nodes"].is_object());
    }
    assert!(v["rules_applied"].is_array());
    let s = &v["stats"];
    let stop = s["stop_reason"].as_str().expect("stop_reason");
    assert!(["saturated", "node_limit", "time_limit", "iteration_limit"].contains(&stop), "{stop}");
    for f in ["egraph_nodes", "egraph_classes", "iterations", "optimize_ms"] {
        assert!(s[f].is_number(), "stats.{f}: {s}");
    }
    // The per-operator report covers every plan node and adds up to the cost.
    let report = v["report"].as_object().expect("report");
    let plan_nodes = v["plan"]["nodes"].as_object().unwrap();
    assert_eq!(report.len(), plan_nodes.len());
    let moved: u64 = report.values().map(|n| n["network_floats"].as_u64().unwrap()).sum();
    assert_eq!(moved, v["cost"]["network_floats"].as_u64().unwrap());
}

#[tokio::test]
async fn every_example_optimizes() {
    let addr = start(ServerConfig::default()).await;
    let examples = get(addr, "/v1/examples").await.json();
    let examples = examples.as_object().unwrap();
    for name in ["matmul", "matmul-common-large-dim", "matmul-two-large-dims", "diag-x-plus-y"] {
        assert!(examples.contains_key(name), "example {name} missing: {:?}", examples.keys());
    }
    for (name, ex) in examples {
        assert!(ex["description"].as_str().is_some_and(|d| !d.is_empty()), "{name}: description");
        let r = post(addr, "/v1/optimize", &ex["program"]).await;
        let v = r.json();
        assert_eq!(r.status, 200, "{name}: {v}");
        assert_eq!(v["plan"]["outputs"], ex["program"]["outputs"], "{name}");
        let c = costs(&v["alternatives"]);
        assert!(c.windows(2).all(|w| w[0] <= w[1]), "{name}: {c:?}");
        // Which strategy wins is the optimizer's business (its own tests); here
        // every matmul shape must at least offer several strategies.
        if name.starts_with("matmul") {
            assert!(c.len() >= 2, "{name}: only {} alternative(s)", c.len());
        }
    }
}

#[tokio::test]
async fn every_error_class() {
    let addr = start(ServerConfig::default()).await;

    // 400: not JSON.
    for body in [&b"{\"inputs\": "[..], b"not json", b""] {
        let r = http(addr, "POST", "/v1/optimize", Some(body)).await;
        assert_eq!(r.error(400)["code"], "bad_json");
    }
    // 400: JSON, but not an object.
    let r = post(addr, "/v1/optimize", &json!([1, 2])).await;
    assert_eq!(r.error(400)["code"], "bad_json");

    // 422: well-formed JSON, wrong program.
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "unknown input",
            {
                let mut p = api_example();
                p["nodes"]["XY"]["right"] = json!("W");
                p
            },
            "unknown_input",
            "XY",
        ),
        (
            "unknown kernel",
            {
                let mut p = api_example();
                p["nodes"]["XY"]["kernel"] = json!("matMull");
                p
            },
            "unknown_kernel",
            "XY",
        ),
        (
            "unknown op",
            {
                let mut p = api_example();
                p["nodes"]["XY"]["op"] = json!("crossjoin");
                p
            },
            "unknown_op",
            "XY",
        ),
        (
            "cycle",
            {
                let mut p = api_example();
                p["nodes"]["XY"]["left"] = json!("Z");
                p
            },
            "cycle",
            "",
        ),
        (
            "join bounds mismatch",
            {
                let mut p = api_example();
                p["inputs"]["Y"]["key_bounds"] = json!([3, 4]);
                p
            },
            "bounds_mismatch",
            "XY",
        ),
        (
            "bad key expression",
            json!({
                "inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [10, 10]}},
                "nodes": {"R": {"op": "rekey", "input": "X", "key": "[k0 +* 2]"}},
                "outputs": ["R"]
            }),
            "bad_expression",
            "R",
        ),
        (
            "bad predicate",
            json!({
                "inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [10, 10]}},
                "nodes": {"F": {"op": "filter", "input": "X", "predicate": "k0 === k1"}},
                "outputs": ["F"]
            }),
            "bad_expression",
            "F",
        ),
        (
            "unknown output",
            {
                let mut p = api_example();
                p["outputs"] = json!(["Q"]);
                p
            },
            "unknown_output",
            "",
        ),
        (
            "missing field",
            {
                let mut p = api_example();
                p.as_object_mut().unwrap().remove("nodes");
                p
            },
            "bad_field",
            "nodes",
        ),
    ];
    for (what, program, code, at) in cases {
        for route in ["/v1/optimize", "/v1/execute"] {
            let r = post(addr, route, &program).await;
            let e = r.error(422);
            assert_eq!(e["code"], code, "{what} on {route}: {e}");
            let got = e["at"].as_str().unwrap();
            if at.is_empty() {
                // The cycle names one of its nodes; an unknown output names the output list.
                assert!(!got.is_empty() || code == "unknown_output", "{what}: `at` is empty: {e}");
            } else {
                assert!(got == at || got.starts_with(&format!("{at}.")), "{what}: at = {got}, expected {at}: {e}");
            }
        }
    }

    // 404 and 405, as JSON.
    let r = get(addr, "/v2/nothing").await;
    assert_eq!(r.error(404)["code"], "not_found");
    let r = get(addr, "/v1/optimize").await;
    assert_eq!(r.error(405)["code"], "method_not_allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = post(addr, "/v1/rules", &json!({})).await;
    assert_eq!(r.error(405)["code"], "method_not_allowed");
}

#[tokio::test]
async fn oversized_bodies_get_413_json() {
    let addr = start(ServerConfig { max_body_bytes: 1024, ..ServerConfig::default() }).await;
    let mut program = api_example();
    program["padding"] = json!("x".repeat(3000));
    for route in ["/v1/optimize", "/v1/execute"] {
        let r = post(addr, route, &program).await;
        let e = r.error(413);
        assert_eq!(e["code"], "body_too_large");
        assert!(e["message"].as_str().unwrap().contains("1024"), "the message names the limit: {e}");
    }
    // Under the limit, the same server answers.
    assert_eq!(post(addr, "/v1/optimize", &api_example()).await.status, 200);
}

#[tokio::test]
async fn limits_stop_work_with_503() {
    // A long chain needs several lowering iterations; a tiny e-graph cannot hold it.
    let mut nodes = serde_json::Map::new();
    let mut prev = "X".to_string();
    for i in 0..12 {
        let name = format!("T{i}");
        nodes.insert(name.clone(), json!({"op": "transform", "input": prev, "kernel": "relu"}));
        prev = name;
    }
    nodes.insert("S".into(), json!({"op": "aggregate", "input": prev, "group_by": [0], "kernel": "matAdd"}));
    let program = json!({
        "inputs": {"X": {"key_bounds": [4, 4], "array_bounds": [10, 10]}},
        "nodes": nodes,
        "outputs": ["S"]
    });
    let addr = start(ServerConfig { max_egraph_nodes: 10, ..ServerConfig::default() }).await;
    let r = post(addr, "/v1/optimize", &program).await;
    let e = r.error(503);
    assert_eq!(e["code"], "limit_exceeded");
    assert!(e["message"].as_str().unwrap().contains("10 e-graph nodes"), "the message names the limit: {e}");
}

/// A matmul of two inputs of 512² keys of 1×1 blocks (a 330-byte body)
/// makes 2²⁷ products: the per-site layout of its join outgrows the
/// analysis memory budget, which stops it as it grows (charged only once
/// whole, 1024² keys took the server's memory and it was killed). The same
/// server answers the next request.
#[tokio::test]
async fn a_join_larger_than_the_memory_budget_is_a_503_and_the_server_serves_on() {
    let input = json!({"key_bounds": [512, 512], "array_bounds": [1, 1]});
    let program = json!({
        "inputs": {"X": input, "Y": input},
        "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                  "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
        "outputs": ["Z"]
    });
    let addr = start(ServerConfig::default()).await;
    let e = post(addr, "/v1/optimize", &program).await.error(503);
    assert_eq!(e["code"], "limit_exceeded");
    assert!(e["message"].as_str().unwrap().contains("--analysis-memory-bytes"), "the message names the limit: {e}");
    assert_eq!(post(addr, "/v1/optimize", &api_example()).await.status, 200);
}

#[tokio::test]
async fn rules_kernels_examples_openapi() {
    let addr = start(ServerConfig::default()).await;

    let rules = get(addr, "/v1/rules").await.json();
    let rules = rules.as_array().expect("a list of rules");
    for r in rules {
        for f in ["name", "family", "equation", "condition", "why"] {
            assert!(r[f].is_string(), "rule field {f}: {r}");
        }
    }
    let names: Vec<&str> = rules.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"R2-6"), "{names:?}");

    let kernels = get(addr, "/v1/kernels").await.json();
    let kernels = kernels.as_array().expect("a list of kernels");
    let names: Vec<&str> = kernels.iter().map(|k| k["name"].as_str().unwrap()).collect();
    for k in ["matMul", "matAdd", "elemMul", "diag", "transpose", "relu", "matVecSub", "minIndex"] {
        assert!(names.contains(&k), "kernel {k} missing: {names:?}");
    }
    assert!(kernels.iter().all(|k| k["arity"].is_number() && k["doc"].is_string()));

    let examples = get(addr, "/v1/examples").await.json();
    let ex = examples.as_object().unwrap();
    assert!(ex.contains_key("matmul"), "{:?}", ex.keys());
    assert_eq!(ex["matmul"]["program"], api_example(), "the matmul example is docs/API.md's");

    let r = get(addr, "/openapi.json").await;
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (method, path, _) in ROUTES {
        assert!(doc["paths"][path][method.to_ascii_lowercase()].is_object(), "{method} {path} not documented");
    }
    assert!(doc["components"]["schemas"]["Error"].is_object());
}

/// Dense matrix of a relation with 2-d keys and 2-d blocks.
fn dense(r: &Relation, kb: [usize; 2], b: usize) -> Vec<Vec<f64>> {
    let mut m = vec![vec![0.0; kb[1] * b]; kb[0] * b];
    for (k, block) in &r.tuples {
        for i in 0..b {
            for j in 0..b {
                m[k[0] as usize * b + i][k[1] as usize * b + j] = block[[i, j]];
            }
        }
    }
    m
}

fn matmul_dense(x: &[Vec<f64>], y: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let (n, m, p) = (x.len(), y.len(), y[0].len());
    let mut z = vec![vec![0.0; p]; n];
    for i in 0..n {
        for k in 0..m {
            for j in 0..p {
                z[i][j] += x[i][k] * y[k][j];
            }
        }
    }
    z
}

fn as_matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect()
}

#[tokio::test]
async fn execute_random_matmul_measures_what_it_predicts() {
    let addr = start(ServerConfig::default()).await;
    let mut req = matmul([2, 2], [2, 2], 3, 3);
    req["data"] = json!({"X": {"random": {"seed": 7}}, "Y": {"random": {"seed": 8}}});
    let r = post(addr, "/v1/execute", &req).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    let measured = v["network_floats_measured"].as_u64().unwrap();
    let predicted = v["network_floats_predicted"].as_u64().unwrap();
    assert_eq!(measured, predicted, "{v}");
    assert!(predicted > 0);
    assert!(v["timings_ms"]["total"].is_number());
    // Wall time per operator: every shuffle and broadcast of the chosen plan
    // has one, and moved what `floats_moved` says.
    let plan = v["plan"]["nodes"].as_object().unwrap();
    for (name, node) in plan {
        if matches!(node["op"].as_str(), Some("shuffle" | "broadcast")) {
            assert!(v["timings_ms"][name.as_str()].is_number(), "no timing for {name}: {v}");
            assert!(v["floats_moved"][name.as_str()].is_u64(), "no floats for {name}: {v}");
        }
    }
    let ops = v["operators"].as_array().unwrap();
    assert_eq!(ops.len(), plan.len(), "{v}");

    // The expected output, from the same generator.
    let x = dense(&random_relation(&[2, 2], &[3, 3], 7), [2, 2], 3);
    let y = dense(&random_relation(&[2, 2], &[3, 3], 8), [2, 2], 3);
    let z = matmul_dense(&x, &y);
    let z_out = &v["outputs"]["Z"];
    let expected_sum: f64 = z.iter().flatten().sum();
    assert!((z_out["checksum"].as_f64().unwrap() - expected_sum).abs() < 1e-9, "{z_out}");
    assert_eq!(z_out["key_bounds"], json!([2, 2]));
    assert_eq!(z_out["array_bounds"], json!([3, 3]));
    assert_eq!(as_matrix(&z_out["data"]), z);

    // Same seeds, same answer; an input without data gets seed 0.
    let r2 = post(addr, "/v1/execute", &req).await.json();
    assert_eq!(r2["outputs"]["Z"]["checksum"], z_out["checksum"]);
    let mut req0 = matmul([2, 2], [2, 2], 3, 3);
    req0["data"] = json!({"X": {"random": {"seed": 0}}});
    let v0 = post(addr, "/v1/execute", &req0).await.json();
    let x0 = dense(&random_relation(&[2, 2], &[3, 3], 0), [2, 2], 3);
    let expected0: f64 = matmul_dense(&x0, &x0).iter().flatten().sum();
    assert!((v0["outputs"]["Z"]["checksum"].as_f64().unwrap() - expected0).abs() < 1e-9, "{v0}");
}

#[tokio::test]
async fn execute_dense_data_matches_a_plain_matmul() {
    let addr = start(ServerConfig::default()).await;
    // X: 2×3 keys of 2×2 blocks (a 4×6 matrix); Y: 3×2 keys (6×4).
    let x: Vec<Vec<f64>> = (0..4).map(|i| (0..6).map(|j| (i * 6 + j) as f64 - 7.0).collect()).collect();
    let y: Vec<Vec<f64>> = (0..6).map(|i| (0..4).map(|j| ((i * 5 + j * 3) % 7) as f64 * 0.5).collect()).collect();
    let z = matmul_dense(&x, &y);
    let mut req = matmul([2, 3], [3, 2], 2, 4);
    req["data"] = json!({"X": {"dense": x}, "Y": {"dense": y}});
    let r = post(addr, "/v1/execute", &req).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    assert_eq!(v["network_floats_measured"], v["network_floats_predicted"]);
    let out = &v["outputs"]["Z"];
    assert_eq!(out["layout"], "dense");
    assert_eq!(as_matrix(&out["data"]), z);
    let expected_sum: f64 = z.iter().flatten().sum();
    assert!((out["checksum"].as_f64().unwrap() - expected_sum).abs() < 1e-9);

    // The same data as relation arrays (key_bounds ++ array_bounds) gives the same answer.
    let rel = |m: &Vec<Vec<f64>>, kb: [usize; 2]| -> Value {
        let blocks: Vec<Vec<Vec<Vec<f64>>>> = (0..kb[0])
            .map(|a| {
                (0..kb[1])
                    .map(|b| (0..2).map(|i| (0..2).map(|j| m[a * 2 + i][b * 2 + j]).collect()).collect())
                    .collect()
            })
            .collect();
        json!(blocks)
    };
    req["data"] = json!({"X": {"dense": rel(&x, [2, 3])}, "Y": {"dense": rel(&y, [3, 2])}});
    let v2 = post(addr, "/v1/execute", &req).await.json();
    assert_eq!(v2["outputs"]["Z"]["data"], out["data"], "{v2}");

    // A vector output (diag of X+Y) comes back as a dense vector.
    let diag = json!({
        "inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [2, 2]}, "Y": {"key_bounds": [2, 2], "array_bounds": [2, 2]}},
        "nodes": {
            "S": {"op": "join", "left": "X", "right": "Y", "left_keys": [0, 1], "right_keys": [0, 1], "kernel": "matAdd"},
            "F": {"op": "filter", "input": "S", "predicate": "k0 == k1"},
            "R": {"op": "rekey", "input": "F", "key": "[k0]"},
            "D": {"op": "transform", "input": "R", "kernel": "diag"}
        },
        "outputs": ["D"],
        "cluster": {"sites": 3},
        "data": {"X": {"dense": x[..4].iter().map(|r| r[..4].to_vec()).collect::<Vec<_>>()},
                 "Y": {"dense": y[..4].iter().map(|r| r[..4].to_vec()).collect::<Vec<_>>()}}
    });
    let r = post(addr, "/v1/execute", &diag).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    let expected: Vec<f64> = (0..4).map(|i| x[i][i] + y[i][i]).collect();
    let got: Vec<f64> = v["outputs"]["D"]["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!(got, expected);
    assert_eq!(v["network_floats_measured"], v["network_floats_predicted"]);
}

/// A top-level field a request does not have is refused, named, with the
/// field it is likely a misspelling of: dropped, `clsuter` optimized for the
/// default 4 sites and `dat` ran on random data, answering 200.
#[tokio::test]
async fn unknown_top_level_fields_and_keys_written_twice_are_refused_by_name() {
    let addr = start(ServerConfig::default()).await;
    let mut program = api_example();
    program["clsuter"] = json!({"sites": 10});
    let e = post(addr, "/v1/optimize", &program).await.error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bad_field"), Some("clsuter")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("did you mean `cluster`?"), "{e}");
    // An execute request's `data` is accepted (not read): one body serves both.
    let mut program = api_example();
    program["data"] = json!({});
    assert_eq!(post(addr, "/v1/optimize", &program).await.status, 200);

    let mut req = matmul([2, 2], [2, 2], 2, 2);
    req["dat"] = json!({"X": {"dense": [[1, 2], [3, 4]]}});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["at"], "dat", "{e}");
    assert!(e["message"].as_str().unwrap().contains("did you mean `data`?"), "{e}");
    // A key written twice: JSON keeps the last, so the first node `A`
    // would vanish without a word.
    let twice = r#"{"inputs": {"X": {"key_bounds": [1, 1], "array_bounds": [2, 2]}},
        "nodes": {"A": {"op": "transform", "input": "X", "kernel": "relu"},
                  "A": {"op": "transform", "input": "X", "kernel": "neg"}}, "outputs": ["A"]}"#;
    let e = http(addr, "POST", "/v1/optimize", Some(twice.as_bytes())).await.error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bad_field"), Some("A")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("written twice"), "{e}");
    req.as_object_mut().unwrap().remove("dat");
    req["data"] = json!({"X": {"random": {"seed": 3}}});
    assert_eq!(post(addr, "/v1/execute", &req).await.status, 200);
}

/// A matrix product summed as it is made holds no relation of its products:
/// they are not counted against `--max-execute-floats` (the docs' example,
/// 64 M floats of products on a server taking 50 M, runs as it ships; here
/// in small: 256 floats of products under a limit of 200).
#[tokio::test]
async fn the_products_of_a_matmul_summed_as_made_are_not_counted_against_the_float_limit() {
    let addr = start(ServerConfig { max_execute_floats: 200, ..ServerConfig::default() }).await;
    let r = post(addr, "/v1/execute", &matmul([4, 4], [4, 4], 2, 4)).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let a = r.json();
    let fused: Vec<&Value> = a["operators"].as_array().unwrap().iter().filter(|o| !o["fused_into"].is_null()).collect();
    assert_eq!(fused.len(), 1, "the plan's join runs inside its aggregation: {}", a["operators"]);
    // The same product read twice (by its sum and as an output) is held.
    let mut twice = matmul([4, 4], [4, 4], 2, 4);
    twice["outputs"] = json!(["Z", "XY"]);
    let e = post(addr, "/v1/execute", &twice).await.error(413);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("data_too_large"), Some("XY")), "{e}");
}

#[tokio::test]
async fn execute_refuses_bad_or_too_much_data() {
    let addr = start(ServerConfig { max_execute_floats: 1000, ..ServerConfig::default() }).await;

    // 2·(4·4·10·10) = 3200 floats of input > 1000.
    let r = post(addr, "/v1/execute", &matmul([4, 4], [4, 4], 10, 4)).await;
    let e = r.error(413);
    assert_eq!(e["code"], "data_too_large");
    assert!(e["message"].as_str().unwrap().contains("1000"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("--max-execute-floats"), "the message names its flag: {e}");

    let mut req = matmul([2, 2], [2, 2], 2, 2);
    req["data"] = json!({"X": {"dense": [[1, 2], [3, 4]]}});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["code"], "bounds_mismatch");
    assert_eq!(e["at"], "data.X");

    req["data"] = json!({"W": {"random": {"seed": 1}}});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["code"], "unknown_input");
    assert_eq!(e["at"], "data.W");

    req["data"] = json!({"X": {"dense": [[1, 2], [3]]}});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["code"], "bad_field");

    req["data"] = json!({"X": {"zeros": true}});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["code"], "bad_field");
    assert_eq!(e["at"], "data.X");
}

#[tokio::test]
async fn concurrent_requests_are_served() {
    let addr = start(ServerConfig { max_concurrent_executions: 1, ..ServerConfig::default() }).await;
    let mut handles = Vec::new();
    for seed in 0..4u64 {
        handles.push(tokio::spawn(async move {
            let mut req = matmul([2, 2], [2, 2], 3, 3);
            req["data"] = json!({"X": {"random": {"seed": seed}}, "Y": {"random": {"seed": seed + 1}}});
            let r = post(addr, "/v1/execute", &req).await;
            assert_eq!(r.status, 200);
            r.json()["outputs"]["Z"]["checksum"].as_f64().unwrap()
        }));
        handles.push(tokio::spawn(async move {
            let r = post(addr, "/v1/optimize", &api_example()).await;
            assert_eq!(r.status, 200);
            0.0
        }));
    }
    let mut sums = BTreeMap::new();
    for (i, h) in handles.into_iter().enumerate() {
        sums.insert(i, h.await.unwrap());
    }
    assert_eq!(sums.len(), 8);
}

#[tokio::test]
async fn a_program_asked_again_is_answered_from_the_cache() {
    let program = matmul([3, 3], [3, 3], 10, 4);
    // The same program, spelled differently (field order, whitespace).
    let text = serde_json::to_string_pretty(&program).unwrap();
    let mut reordered: serde_json::Map<String, Value> = serde_json::Map::new();
    for (k, v) in program.as_object().unwrap().iter().rev() {
        reordered.insert(k.clone(), v.clone());
    }

    let cached = start(ServerConfig::default()).await;
    let a = http(cached, "POST", "/v1/optimize", Some(text.as_bytes())).await;
    let b = post(cached, "/v1/optimize", &Value::Object(reordered)).await;
    assert_eq!((a.status, b.status), (200, 200));
    // The stored answer, byte for byte (a second saturation would report its own time).
    assert_eq!(a.body, b.body);

    let uncached = start(ServerConfig { answer_cache_bytes: 0, ..ServerConfig::default() }).await;
    let a = post(uncached, "/v1/optimize", &program).await.json();
    let b = post(uncached, "/v1/optimize", &program).await.json();
    assert_eq!(a["plan"], b["plan"], "optimization is deterministic");
    assert_ne!(a["stats"]["optimize_ms"], b["stats"]["optimize_ms"], "with the cache off every request optimizes");
}

/// The skewed matmul: `X` (2×8 blocks, hashed on i) times `Y` (8×2, hashed
/// on j), blocks of 1024², on 10 sites.
fn skewed(cost_model: Option<&str>) -> Value {
    let mut v = json!({
        "inputs": {"X": {"key_bounds": [2, 8], "array_bounds": [1024, 1024], "placement": {"hash": [0]}},
                   "Y": {"key_bounds": [8, 2], "array_bounds": [1024, 1024], "placement": {"hash": [1]}}},
        "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                  "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
        "outputs": ["Z"], "cluster": {"sites": 10}});
    if let Some(m) = cost_model {
        v["cluster"]["cost_model"] = json!(m);
    }
    v
}

fn busy_sites(v: &Value) -> usize {
    v["site_loads"].as_array().unwrap().iter().filter(|l| l["flops"].as_u64().unwrap() > 0).count()
}

#[tokio::test]
async fn the_time_model_spreads_a_skewed_matmul_and_the_network_model_keeps_rmm() {
    let addr = start(ServerConfig::default()).await;
    let time = post(addr, "/v1/optimize", &skewed(Some("time"))).await.json();
    assert_eq!(time["stats"]["cost_model"], "time", "{}", time["stats"]);
    assert!(busy_sites(&time) >= 8, "the time model computes on ≥ 8 of 10 sites: {}", time["site_loads"]);
    let network = post(addr, "/v1/optimize", &skewed(None)).await.json();
    assert_eq!(network["stats"]["cost_model"], "network");
    let label = network["alternatives"][0]["label"].as_str().unwrap();
    assert!(label.starts_with("RMM"), "the network model still picks RMM: {label}");
    assert_eq!(network["cost"]["network_floats"], 33_554_432, "{}", network["cost"]);
    assert!(busy_sites(&network) <= 2, "RMM's products sit on the 2 sites of j: {}", network["site_loads"]);
    // Both answers report predicted seconds and a bottleneck for every alternative,
    // and the time model's choice is predicted faster than the network model's.
    for v in [&time, &network] {
        for a in v["alternatives"].as_array().unwrap() {
            assert!(a["cost"]["seconds"].as_f64().unwrap() > 0.0, "{}", a["cost"]);
            let b = &a["cost"]["bottleneck"];
            assert!(["compute", "link_in", "link_out"].contains(&b["resource"].as_str().unwrap()), "{b}");
            assert!(a["plan"]["nodes"][b["node"].as_str().unwrap()].is_object(), "{b}");
        }
    }
    assert!(time["cost"]["seconds"].as_f64() < network["cost"]["seconds"].as_f64());
    assert_eq!(time["cost"]["total"], time["cost"]["seconds"], "under time, total is the seconds");
    let c = costs(&time["alternatives"]);
    assert!(c.windows(2).all(|w| w[0] <= w[1]), "alternatives ranked by predicted seconds: {c:?}");
}

/// `tra serve --profile` and `--cost-model`: a request that names neither
/// gets the server's, one that names them keeps its own, and the answer says
/// which profile it was predicted under (`stats.profile`), on every endpoint
/// that optimizes.
#[tokio::test]
async fn the_servers_profile_and_cost_model_apply_where_a_request_names_none() {
    use tra_optimizer::time::{CostModel, Profile};
    let slow = Profile { link_bytes_per_second: 1.25e7, ..Profile::default() };
    let plain = start(ServerConfig::default()).await;
    let served =
        start(ServerConfig { profile: Some(slow), cost_model: Some(CostModel::Time), ..ServerConfig::default() }).await;

    let defaults = post(plain, "/v1/optimize", &skewed(None)).await.json();
    assert_eq!(defaults["stats"]["cost_model"], "network");
    assert_eq!(defaults["stats"]["profile"]["link_bytes_per_second"], 1.25e9, "{}", defaults["stats"]);

    let servers = post(served, "/v1/optimize", &skewed(None)).await.json();
    assert_eq!(servers["stats"]["cost_model"], "time", "the server's model: {}", servers["stats"]);
    assert_eq!(servers["stats"]["profile"]["link_bytes_per_second"], 1.25e7, "{}", servers["stats"]);
    assert_eq!(servers["cost"]["total"], servers["cost"]["seconds"], "chosen by predicted seconds");
    // The same program under the server's figures named in the request: the same answer.
    let mut named = skewed(Some("time"));
    named["cluster"]["profile"] = json!({"link_bytes_per_second": 1.25e7});
    let same = post(plain, "/v1/optimize", &named).await.json();
    assert_eq!(same["plan"], servers["plan"]);
    assert_eq!(same["cost"], servers["cost"]);

    // A request's own model and profile win over the server's.
    let mut own = skewed(Some("network"));
    own["cluster"]["profile"] = json!({"link_bytes_per_second": 5e9});
    let own = post(served, "/v1/optimize", &own).await.json();
    assert_eq!(own["stats"]["cost_model"], "network", "{}", own["stats"]);
    assert_eq!(own["stats"]["profile"]["link_bytes_per_second"], 5e9, "{}", own["stats"]);
    assert_eq!(own["plan"], defaults["plan"], "network's choice does not depend on the profile");

    // A program with no `cluster` at all, and the einsum front-end, get them too.
    let mut bare = skewed(None);
    bare.as_object_mut().unwrap().remove("cluster");
    let bare = post(served, "/v1/optimize", &bare).await.json();
    assert_eq!(bare["stats"]["cost_model"], "time", "{}", bare["stats"]);
    let einsum = json!({"expression": "ij,jk->ik", "inputs": {"A": {"shape": [2048, 2048]}, "B": {"shape": [2048, 2048]}},
                        "block": 512});
    let e = post(served, "/v1/einsum", &einsum).await;
    assert_eq!(e.status, 200, "{}", e.json());
    let e = e.json();
    assert_eq!(e["optimize"]["stats"]["cost_model"], "time", "{}", e["optimize"]["stats"]);
    assert_eq!(e["optimize"]["stats"]["profile"]["link_bytes_per_second"], 1.25e7);
}

#[tokio::test]
async fn a_slow_network_profile_changes_the_prediction_and_a_bad_one_is_named() {
    let addr = start(ServerConfig::default()).await;
    let mut slow = skewed(Some("time"));
    slow["cluster"]["profile"] = json!({"link_bytes_per_second": 1.25e7});
    let fast = post(addr, "/v1/optimize", &skewed(Some("time"))).await.json();
    let slow = post(addr, "/v1/optimize", &slow).await.json();
    assert!(slow["cost"]["seconds"].as_f64().unwrap() > 10.0 * fast["cost"]["seconds"].as_f64().unwrap());
    assert!(slow["cost"]["bottleneck"]["resource"].as_str().unwrap().starts_with("link"), "{}", slow["cost"]);

    let mut bad = skewed(Some("time"));
    bad["cluster"]["profile"] = json!({"site_flops_per_second": 0});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.site_flops_per_second");
    bad["cluster"]["profile"] = json!({"job_overhead_seconds": -0.01});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.job_overhead_seconds");
    // The job's fixed time is in every plan's seconds, once (the plan may
    // change: plans within 5% of the fastest are not told apart).
    let mut overhead = skewed(Some("time"));
    overhead["cluster"]["profile"] = json!({"job_overhead_seconds": 2.0});
    let with = post(addr, "/v1/optimize", &overhead).await.json();
    let (with_s, fast_s) = (with["cost"]["seconds"].as_f64().unwrap(), fast["cost"]["seconds"].as_f64().unwrap());
    assert!(with_s >= 2.0 + fast_s / 1.05 - 1e-9 && with_s <= 1.05 * (2.0 + fast_s), "{} vs {fast_s}", with["cost"]);
    for a in with["alternatives"].as_array().unwrap() {
        assert!(a["cost"]["seconds"].as_f64().unwrap() >= 2.0, "{}", a["cost"]);
    }
    // Writing outputs is priced only with a write rate; a slow one bounds
    // the plan at the site that writes most, and a bad one is named.
    bad["cluster"]["profile"] = json!({"output_bytes_per_second": -1});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.output_bytes_per_second");
    // Values that would make every plan's cost infinite (reported as
    // `null`, the choice among them arbitrary) are refused, named.
    for (profile, at) in [
        (json!({"link_bytes_per_second": 1e-308}), "cluster.profile.link_bytes_per_second"),
        (json!({"site_flops_per_second": 0.5}), "cluster.profile.site_flops_per_second"),
        (json!({"latency_seconds": 1e308}), "cluster.profile.latency_seconds"),
    ] {
        bad["cluster"]["profile"] = profile;
        let r = post(addr, "/v1/optimize", &bad).await;
        assert_eq!(r.status, 422, "{}", r.json());
        assert_eq!(r.json()["error"]["at"], at);
    }
    let mut heavy = skewed(None);
    heavy["cluster"]["network_weight"] = json!(1e308);
    let r = post(addr, "/v1/optimize", &heavy).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.network_weight");
    // A shared machine needs a processor and a thread per site.
    bad["cluster"]["profile"] = json!({"machine_processors": 0, "site_threads": 1});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.machine_processors");
    bad["cluster"]["profile"] = json!({"machine_processors": 2, "site_threads": 1, "machine_sites": 0});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.machine_sites");
    bad["cluster"]["profile"] = json!({"machine_processors": 2, "site_threads": -1});
    let r = post(addr, "/v1/optimize", &bad).await;
    assert_eq!(r.status, 422, "{}", r.json());
    assert_eq!(r.json()["error"]["at"], "cluster.profile.site_threads");
    let mut writing = skewed(Some("time"));
    writing["cluster"]["profile"] = json!({"output_bytes_per_second": 1e3});
    let w = post(addr, "/v1/optimize", &writing).await.json();
    let b = &w["cost"]["bottleneck"];
    assert_eq!(b["resource"], "write", "{}", w["cost"]);
    assert_eq!(b["node"], "Z", "{}", w["cost"]);
    // Z is 2 × 2 blocks of 1024² floats: the busiest site writes at least one.
    assert!(b["seconds"].as_f64().unwrap() >= 4.0 * 1024.0 * 1024.0 / 1e3, "{b}");
    // No stage takes longer than the plan (the output is written as the
    // streamed matmul makes it: writing bounds that pipeline).
    assert!(w["cost"]["seconds"].as_f64().unwrap() >= b["seconds"].as_f64().unwrap(), "{}", w["cost"]);
    // The site loads show who writes Z: its 4 blocks once over the sites,
    // the bottleneck's site the most (under either model).
    for answer in [&w, &fast] {
        let written: Vec<u64> =
            answer["site_loads"].as_array().unwrap().iter().map(|l| l["output_bytes"].as_u64().unwrap()).collect();
        assert_eq!(written.iter().sum::<u64>(), 4 * 1024 * 1024 * 4, "{written:?}");
    }
    let written = |s: &serde_json::Value| s["output_bytes"].as_u64().unwrap();
    let loads = w["site_loads"].as_array().unwrap();
    assert_eq!(written(&loads[b["site"].as_u64().unwrap() as usize]), loads.iter().map(written).max().unwrap());
    let mut unknown = skewed(Some("speed"));
    unknown["cluster"]["cost_model"] = json!("speed");
    let r = post(addr, "/v1/optimize", &unknown).await;
    assert!([400, 422].contains(&r.status), "{}", r.json());
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("speed"), "{}", r.json());
}

#[tokio::test]
async fn execute_reports_the_predicted_seconds_next_to_the_measured_time() {
    let addr = start(ServerConfig::default()).await;
    let mut req = matmul([2, 2], [2, 2], 8, 2);
    req["cluster"]["cost_model"] = json!("time");
    req["data"] = json!({"X": {"random": {"seed": 1}}, "Y": {"random": {"seed": 2}}});
    let r = post(addr, "/v1/execute", &req).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    assert!(v["cost"]["seconds"].as_f64().unwrap() > 0.0, "{}", v["cost"]);
    assert!(v["cost"]["bottleneck"]["node"].is_string(), "{}", v["cost"]);
    let total_ms = v["timings_ms"]["total"].as_f64().unwrap();
    let measured = v["measured_seconds"].as_f64().unwrap_or_else(|| panic!("no measured_seconds: {v}"));
    assert!(measured > 0.0 && (measured * 1000.0 - total_ms).abs() < 1e-9, "{measured} s vs {total_ms} ms");
}

#[tokio::test]
async fn the_servers_profile_applies_to_requests_that_name_none() {
    let profile = tra_optimizer::time::Profile { link_bytes_per_second: 1.25e7, ..Default::default() };
    let addr = start(ServerConfig { profile: Some(profile), ..ServerConfig::default() }).await;
    let v = post(addr, "/v1/optimize", &skewed(Some("time"))).await.json();
    let plain = start(ServerConfig::default()).await;
    let w = post(plain, "/v1/optimize", &skewed(Some("time"))).await.json();
    assert!(v["cost"]["seconds"].as_f64().unwrap() > 10.0 * w["cost"]["seconds"].as_f64().unwrap());
}
