//! The service under hostile input and load: random mutations of valid
//! programs always get a JSON answer and never kill the server; deep and huge
//! programs get an answer. (64 concurrent clients: `memory.rs`, alone in its
//! process so that its memory figures are its own.)
//!
//! `TRA_FUZZ_CASES` sets the number of mutated programs (default 300).

mod common;

use common::{get, http, post, start};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use tra_api::server::ServerConfig;

fn examples() -> Vec<Value> {
    tra_api::examples::all().into_iter().map(|e| e.program).collect()
}

/// One random mutation of a JSON value: delete, retype or corrupt a field.
fn mutate(v: &mut Value, rng: &mut ChaCha8Rng, depth: usize) {
    let junk = || -> Vec<Value> {
        vec![
            json!(null),
            json!(-1),
            json!(0),
            json!(1e300),
            json!(18446744073709551615u64),
            json!("k0 = = k1"),
            json!("[k0, 2*]"),
            json!("matMull"),
            json!("X"),
            json!([]),
            json!({}),
            json!([0, 0, 7]),
            json!("\u{0}\u{ffff}"),
            json!({"compose": ["relu"]}),
        ]
    };
    match v {
        Value::Object(m) if !m.is_empty() && (depth < 4 || rng.random_bool(0.5)) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = keys.choose(rng).unwrap().clone();
            match rng.random_range(0..6) {
                0 => {
                    m.remove(&k);
                }
                1 => {
                    m.insert(k, junk().choose(rng).unwrap().clone());
                }
                2 => {
                    m.insert(format!("{k}_extra"), json!(1));
                }
                _ => mutate(m.get_mut(&k).unwrap(), rng, depth + 1),
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = rng.random_range(0..a.len());
            match rng.random_range(0..4) {
                0 => {
                    a.remove(i);
                }
                1 => a.push(junk().choose(rng).unwrap().clone()),
                _ => mutate(&mut a[i], rng, depth + 1),
            }
        }
        _ => *v = junk().choose(rng).unwrap().clone(),
    }
}

fn cases() -> u64 {
    std::env::var("TRA_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300)
}

#[tokio::test]
async fn mutated_programs_always_get_a_json_answer() {
    let addr = start(ServerConfig::default()).await;
    let bases = examples();
    let mut rng = ChaCha8Rng::seed_from_u64(0xf022);
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..cases() {
        let mut p = bases.choose(&mut rng).unwrap().clone();
        for _ in 0..rng.random_range(1..=3) {
            mutate(&mut p, &mut rng, 0);
        }
        let mut text = serde_json::to_vec(&p).unwrap();
        if rng.random_bool(0.1) {
            let cut = rng.random_range(0..text.len());
            text.truncate(cut);
        }
        let path = if rng.random_bool(0.8) { "/v1/optimize" } else { "/v1/execute" };
        let r = http(addr, "POST", path, Some(&text)).await;
        let v: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| {
            panic!("case {case}: status {} without a JSON body ({e}): {}", r.status, String::from_utf8_lossy(&r.body))
        });
        assert!([200, 400, 413, 422, 503].contains(&r.status), "case {case}: status {}: {v}", r.status);
        if r.status != 200 {
            assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "case {case}: {v}");
        }
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    assert_eq!(get(addr, "/healthz").await.status, 200, "the server still serves");
    assert!(statuses.get(&422).copied().unwrap_or(0) > 0, "some mutations are wrong programs: {statuses:?}");
}

fn chain(n: usize) -> Value {
    chain_of(n, |input| json!({"op": "transform", "input": input, "kernel": "relu"}))
}

/// `n` operators, each made by `op` from the name of its input.
fn chain_of(n: usize, op: impl Fn(String) -> Value) -> Value {
    let mut nodes = serde_json::Map::new();
    nodes.insert("N0".into(), op("X".into()));
    for i in 1..n {
        nodes.insert(format!("N{i}"), op(format!("N{}", i - 1)));
    }
    json!({"inputs": {"X": {"key_bounds": [2], "array_bounds": [2]}}, "nodes": nodes, "outputs": [format!("N{}", n - 1)]})
}

#[tokio::test]
async fn deep_and_huge_programs_get_an_answer() {
    let addr = start(ServerConfig { max_body_bytes: 64 << 20, ..ServerConfig::default() }).await;
    // Deep: a chain of 3,000 operators — answered (optimized or refused by a limit), no stack overflow.
    let r = post(addr, "/v1/optimize", &chain(3000)).await;
    assert!([200, 503].contains(&r.status), "{}", String::from_utf8_lossy(&r.body));
    // Deep through operators the label reads through (key-only maps).
    let rekeys = chain_of(3000, |input| json!({"op": "rekey", "input": input, "key": "[k0]"}));
    let r = post(addr, "/v1/optimize", &rekeys).await;
    assert!([200, 503].contains(&r.status), "{}", String::from_utf8_lossy(&r.body));
    // Huge: more nodes than allowed.
    let r = post(addr, "/v1/optimize", &chain(20_000)).await;
    let e = r.error(503);
    assert_eq!(e["code"], "limit_exceeded", "{e}");
    // Deeply nested JSON.
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let r = http(addr, "POST", "/v1/optimize", Some(nested.as_bytes())).await;
    r.error(400);
    // Deeply nested key expression.
    let mut p = chain(1);
    p["nodes"]["N0"] =
        json!({"op": "filter", "input": "X", "predicate": format!("{}k0 == 0{}", "(".repeat(5000), ")".repeat(5000))});
    let r = post(addr, "/v1/optimize", &p).await;
    r.error(422);
    assert_eq!(get(addr, "/healthz").await.status, 200);
}
