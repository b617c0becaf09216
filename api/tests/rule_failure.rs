//! How the service answers when a rewrite rule is broken: a rule set with a
//! deliberately unsound R1-4 (the soundness harness's mutant that judges a
//! key map by its own output arity) optimizing `diag(A·B)`, the program that
//! once crashed the optimizer. By default the answer is the plan found
//! without the rule, with a warning naming the rule and the node; a strict
//! server answers 500 naming both. The contract documents `warnings`.

mod common;
use common::{get, post};
use serde_json::{json, Value};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tra_api::server::{router_with_rules, ServerConfig};
use tra_optimizer::rule::RuleDef;

fn broken_rules() -> Vec<RuleDef> {
    let m = tra_tests::soundness::mutants::all()
        .into_iter()
        .find(|m| m.name == "R1-4 judging the key map by its output arity")
        .expect("the arity mutant");
    tra_rules::all().into_iter().map(|r| if r.name == m.replaces { (m.make)() } else { r }).collect()
}

async fn start_with(config: ServerConfig, rules: Vec<RuleDef>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    // The server answers only requests for its own address (a Host check).
    let config = ServerConfig { addr, ..config };
    tokio::spawn(async move { axum::serve(listener, router_with_rules(config, rules)).await.expect("serve") });
    addr
}

fn diag_of_product() -> Value {
    serde_json::from_str(tra_tests::DIAG_OF_PRODUCT).expect("JSON")
}

#[tokio::test]
async fn a_broken_rule_is_left_out_with_a_warning() {
    let addr = start_with(ServerConfig::default(), broken_rules()).await;
    let r = post(addr, "/v1/optimize", &diag_of_product()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let a = r.json();
    let w = a["warnings"].as_array().expect("warnings");
    assert_eq!(w.len(), 1, "{a}");
    assert_eq!(
        (w[0]["code"].as_str(), w[0]["rule"].as_str(), w[0]["at"].as_str()),
        (Some("rule_failed"), Some("R1-4"), Some("D"))
    );
    assert!(!a["rules_applied"].as_array().unwrap().iter().any(|r| r == "R1-4"), "{a}");
    // The server keeps serving, and /v1/execute carries the warning too.
    let mut req = diag_of_product();
    req["data"] = json!({"A": {"random": {"seed": 1}}, "B": {"random": {"seed": 2}}});
    let r = post(addr, "/v1/execute", &req).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let x = r.json();
    assert_eq!(x["warnings"][0]["rule"], "R1-4", "{x}");
    assert_eq!(x["network_floats_measured"], x["network_floats_predicted"]);
    // A program the broken rule does not touch: no warning.
    let mut ok = diag_of_product();
    ok["nodes"].as_object_mut().unwrap().retain(|k, _| k == "J" || k == "S");
    ok["outputs"] = json!(["S"]);
    let a = post(addr, "/v1/optimize", &ok).await.json();
    assert_eq!(a["warnings"], json!([]), "{a}");
}

#[tokio::test]
async fn a_strict_server_answers_500_naming_the_rule_and_the_node() {
    let addr = start_with(ServerConfig { strict: true, ..ServerConfig::default() }, broken_rules()).await;
    let e = post(addr, "/v1/optimize", &diag_of_product()).await.error(500);
    assert_eq!(e["code"], "internal");
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("rule R1-4") && m.contains("program node D"), "{m}");
    assert_eq!(get(addr, "/healthz").await.status, 200, "the server keeps serving");
}

#[tokio::test]
async fn the_contract_documents_warnings() {
    let addr = start_with(ServerConfig::default(), tra_rules::all()).await;
    let doc = get(addr, "/openapi.json").await.json();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["OptimizeAnswer"]["properties"]["warnings"]["items"]["$ref"], "#/components/schemas/Warning");
    assert!(schemas["OptimizeAnswer"]["required"].as_array().unwrap().contains(&json!("warnings")));
    assert!(schemas["ExecuteAnswer"]["required"].as_array().unwrap().contains(&json!("warnings")));
    for f in ["code", "rule", "at", "message"] {
        assert!(schemas["Warning"]["properties"][f].is_object(), "Warning.{f}");
    }
    // And every answer has them (empty when nothing went wrong).
    let a = post(addr, "/v1/optimize", &diag_of_product()).await.json();
    assert_eq!(a["warnings"], json!([]), "{a}");
}
