//! 64 concurrent clients mixing valid and invalid requests (optimize, execute,
//! wrong programs, unreadable JSON): every one gets its answer, and the
//! server's resident memory does not grow round after round. Alone in its test
//! binary, so that the process's memory is the server's and this test's.

mod common;

use common::{http, post, start};
use serde_json::{json, Value};
use tra_api::server::ServerConfig;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0)))
        .unwrap_or(0)
}

fn small_matmul(seed: u64) -> Value {
    json!({
        "inputs": {"X": {"key_bounds": [2, 3], "array_bounds": [4, 4]}, "Y": {"key_bounds": [3, 2], "array_bounds": [4, 4]}},
        "nodes": {
            "XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
            "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}
        },
        "outputs": ["Z"],
        "cluster": {"sites": 1 + (seed % 5) as usize},
        "data": {"X": {"random": {"seed": seed}}, "Y": {"random": {"seed": seed + 1}}}
    })
}

async fn round(addr: std::net::SocketAddr, round: u64) {
    let mut handles = Vec::new();
    for client in 0..64u64 {
        handles.push(tokio::spawn(async move {
            let seed = round * 1000 + client;
            match client % 4 {
                0 => {
                    let r = post(addr, "/v1/execute", &small_matmul(seed)).await;
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                    let v = r.json();
                    assert_eq!(v["network_floats_measured"], v["network_floats_predicted"]);
                }
                1 => {
                    let r = post(addr, "/v1/optimize", &small_matmul(seed)).await;
                    assert_eq!(r.status, 200);
                }
                2 => {
                    let mut p = small_matmul(seed);
                    p["nodes"]["XY"]["kernel"] = json!("nope");
                    post(addr, "/v1/optimize", &p).await.error(422);
                }
                _ => {
                    http(addr, "POST", "/v1/optimize", Some(b"{\"inputs\": ")).await.error(400);
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("every client gets its answer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_and_memory_that_does_not_grow() {
    let addr = start(ServerConfig::default()).await;
    for r in 0..4 {
        round(addr, r).await;
    }
    let before = rss_kib();
    for r in 4..12 {
        round(addr, r).await;
    }
    let after = rss_kib();
    assert!(
        after < before + 16 * 1024,
        "resident memory grew from {before} KiB to {after} KiB over eight rounds of 64 clients"
    );
}
