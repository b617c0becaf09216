//! `docs/API.md` and the served `GET /openapi.json` tell the same story:
//! the same endpoints (a `### METHOD /path` section each), the same status
//! codes per endpoint (its `Status:` line), every field of every schema
//! named in the text, every schema by name, and the same error codes; and
//! real answers of every endpoint conform to the schemas served.

mod common;

use common::{get, post, start};
use serde_json::Value;
use std::collections::BTreeSet;
use tra_api::server::ServerConfig;

fn api_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/API.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(METHOD, /path)` of every `### METHOD /path` heading.
fn doc_endpoints(doc: &str) -> BTreeSet<(String, String)> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|h| {
            let mut words = h.split_whitespace();
            let (method, path) = (words.next()?, words.next()?);
            (["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) && path.starts_with('/'))
                .then(|| (method.to_string(), path.to_string()))
        })
        .collect()
}

/// The text of the section under `heading`, up to the next heading of its level or above.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("docs/API.md has no `{heading}`"));
    let rest = &doc[start + heading.len() + 2..];
    let end = ["\n### ", "\n## ", "\n# "].iter().filter_map(|h| rest.find(h)).min().unwrap_or(rest.len());
    &rest[..end]
}

/// Every property name of every object schema under `v`.
fn property_names(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            for child in map.values() {
                property_names(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| property_names(i, out)),
        _ => {}
    }
}

/// The error codes the `Error` schema lists: `bad_json (400), host_not_allowed (403), …`.
fn openapi_error_codes(doc: &Value) -> BTreeSet<String> {
    let text = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["description"]
        .as_str()
        .expect("Error.code has a description listing the codes");
    // Outside parentheses, the text is `code, code / code, …`.
    let (mut depth, mut outside) = (0usize, String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    let codes: BTreeSet<String> =
        outside.split([',', '/']).map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect();
    for c in &codes {
        assert!(c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'), "not an error code: {c:?} in {text}");
    }
    codes
}

/// The codes of the doc's error table: rows `| `code` | status | … |`.
fn doc_error_codes(doc: &str) -> BTreeSet<String> {
    section(doc, "## Errors")
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn api_md_and_openapi_agree() {
    let addr = start(ServerConfig::default()).await;
    let doc: Value = get(addr, "/openapi.json").await.json();
    let md = api_md();

    // Endpoints, both ways.
    let mut served = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            served.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    let written = doc_endpoints(&md);
    let missing: Vec<_> = served.difference(&written).collect();
    let extra: Vec<_> = written.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "endpoints served but without a `### METHOD /path` section in docs/API.md: {missing:?}"
    );
    assert!(extra.is_empty(), "endpoints in docs/API.md that /openapi.json does not have: {extra:?}");

    // Status codes per endpoint, both ways.
    for (method, path) in &served {
        let codes: BTreeSet<String> =
            doc["paths"][path][method.to_ascii_lowercase()]["responses"].as_object().unwrap().keys().cloned().collect();
        let text = section(&md, &format!("### {method} {path}"));
        let line = text
            .lines()
            .find(|l| l.starts_with("Status:"))
            .unwrap_or_else(|| panic!("### {method} {path}: no `Status:` line"));
        let listed: BTreeSet<String> =
            line.split(|c: char| !c.is_ascii_digit()).filter(|w| w.len() == 3).map(str::to_string).collect();
        assert_eq!(listed, codes, "{method} {path}: the status codes of docs/API.md (left) and /openapi.json (right)");
    }

    // Every field of every schema, and every schema, is named.
    let mut fields = BTreeSet::new();
    property_names(&doc, &mut fields);
    let unnamed: Vec<&String> = fields.iter().filter(|f| !md.contains(&format!("`{f}`"))).collect();
    assert!(unnamed.is_empty(), "fields of /openapi.json that docs/API.md never names (as `field`): {unnamed:?}");
    let schemas: Vec<&String> =
        doc["components"]["schemas"].as_object().unwrap().keys().filter(|s| !md.contains(&format!("`{s}`"))).collect();
    assert!(schemas.is_empty(), "schemas of /openapi.json that docs/API.md never names: {schemas:?}");

    // Error codes, both ways.
    let (served, written) = (openapi_error_codes(&doc), doc_error_codes(&md));
    assert!(served.len() >= 20, "{served:?}");
    assert_eq!(written, served, "error codes of docs/API.md's table (left) and of /openapi.json (right)");
}

#[test]
fn the_checks_catch_a_disagreement() {
    // The parsers the agreement test relies on find what they should, so a
    // missing section or code cannot pass unnoticed.
    let md = "# t\n\n### GET /a\n\nStatus: 200, 404.\n\n### POST /b x\n\nStatus: 200\n\n## Errors\n\n| `bad_json` | 400 |\n| `cycle` | 422 |\n";
    assert_eq!(
        doc_endpoints(md),
        [("GET".to_string(), "/a".to_string()), ("POST".into(), "/b".into())].into_iter().collect()
    );
    assert!(section(md, "### GET /a").contains("404") && !section(md, "### GET /a").contains("POST"));
    assert_eq!(doc_error_codes(md), ["bad_json".to_string(), "cycle".into()].into_iter().collect());
    let mut names = BTreeSet::new();
    property_names(&serde_json::json!({"a": {"properties": {"x": {}, "y": {"properties": {"z": {}}}}}}), &mut names);
    assert_eq!(names, ["x", "y", "z"].iter().map(|s| s.to_string()).collect());
}

/// Where `value` does not conform to `schema` (resolving `$ref`s in `doc`):
/// a required property missing, a property the schema does not list (where
/// it lists them and allows no others), a value of another type, or no
/// `oneOf` alternative that fits. A structural check, the parts of JSON
/// Schema the served document uses.
fn nonconforming(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{at}: ref {r}"));
            &doc["components"]["schemas"][name]
        }
        None => schema,
    };
    if let Some(alternatives) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = alternatives.iter().any(|alt| {
            let mut problems = Vec::new();
            nonconforming(doc, alt, value, at, &mut problems);
            problems.is_empty()
        });
        if !fits {
            out.push(format!("{at}: fits no `oneOf` alternative: {value}"));
        }
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            out.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::Array(k) => k.iter().filter_map(Value::as_str).collect(),
            k => vec![k.as_str().unwrap()],
        };
        let fits = |k: &str| match k {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_u64() || value.is_i64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => panic!("{at}: type {other}"),
        };
        if !kinds.iter().any(|k| fits(k)) {
            out.push(format!("{at}: {value} is not of type {kinds:?}"));
            return;
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                let name = required.as_str().unwrap();
                if !map.contains_key(name) {
                    out.push(format!("{at}: required `{name}` missing"));
                }
            }
            let others = schema.get("additionalProperties");
            for (k, v) in map {
                let here = format!("{at}.{k}");
                match (props.and_then(|p| p.get(k)), others) {
                    (Some(s), _) => nonconforming(doc, s, v, &here, out),
                    (None, Some(Value::Bool(false))) => out.push(format!("{here}: not in the schema")),
                    (None, Some(s)) if s.is_object() => nonconforming(doc, s, v, &here, out),
                    (None, _) if props.is_some() => out.push(format!("{here}: not in the schema's properties")),
                    (None, _) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate().take(64) {
                    nonconforming(doc, s, item, &format!("{at}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The schema of a 200 answer of `method path`.
fn answer_schema<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let s = &doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(!s.is_null(), "{method} {path}: no schema for 200");
    s
}

/// Real answers of every endpoint have the fields their schema says they
/// have, and no field it does not list: a front-end generating its client
/// from /openapi.json reads them as they come.
#[tokio::test]
async fn answers_conform_to_their_schemas() {
    let addr = start(ServerConfig::default()).await;
    let doc: Value = get(addr, "/openapi.json").await.json();
    let matmul = serde_json::json!({
        "inputs": {"X": {"key_bounds": [2, 2], "array_bounds": [3, 3]},
                   "Y": {"key_bounds": [2, 2], "array_bounds": [3, 3], "placement": {"hash": [0]}}},
        "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                  "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
        "outputs": ["Z"], "cluster": {"sites": 2}});
    let mut timed = matmul.clone();
    timed["cluster"]["cost_model"] = "time".into();
    let einsum = serde_json::json!({"expression": "ij,jk->ik", "inputs": {"A": {"shape": [4, 4]}, "B": {"shape": [4, 4]}}, "block": 2});
    let mut problems = Vec::new();
    let mut check = |method: &str, path: &str, answer: common::Response| {
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.json());
        nonconforming(
            &doc,
            answer_schema(&doc, method, path),
            &answer.json(),
            &format!("{method} {path}"),
            &mut problems,
        );
    };
    for path in ["/healthz", "/v1/rules", "/v1/kernels", "/v1/examples"] {
        check("get", path, get(addr, path).await);
    }
    check("post", "/v1/optimize", post(addr, "/v1/optimize", &matmul).await);
    check("post", "/v1/optimize", post(addr, "/v1/optimize", &timed).await);
    check("post", "/v1/execute", post(addr, "/v1/execute", &matmul).await);
    check("post", "/v1/einsum", post(addr, "/v1/einsum", &einsum).await);
    assert!(problems.is_empty(), "answers that do not conform to /openapi.json:\n{}", problems.join("\n"));
}

/// The conformance check finds each kind of disagreement it looks for.
#[test]
fn the_conformance_check_catches_each_disagreement() {
    let doc = serde_json::json!({"components": {"schemas": {
        "A": {"type": "object", "properties": {"n": {"type": "integer"}, "f": {"oneOf": [{"type": "number"}, {"enum": ["NaN"]}]},
                                                "m": {"type": "object", "additionalProperties": {"type": "string"}}},
              "required": ["n"]}}}});
    let schema = serde_json::json!({"$ref": "#/components/schemas/A"});
    let problems = |v: Value| {
        let mut out = Vec::new();
        nonconforming(&doc, &schema, &v, "a", &mut out);
        out
    };
    assert!(problems(serde_json::json!({"n": 1, "f": "NaN", "m": {"k": "v"}})).is_empty());
    assert_eq!(problems(serde_json::json!({"f": 1.5})), ["a: required `n` missing"]);
    assert_eq!(problems(serde_json::json!({"n": 1, "x": 2})), ["a.x: not in the schema's properties"]);
    assert_eq!(problems(serde_json::json!({"n": 1.5})), ["a.n: 1.5 is not of type [\"integer\"]"]);
    assert_eq!(problems(serde_json::json!({"n": 1, "f": "inf"})), ["a.f: fits no `oneOf` alternative: \"inf\""]);
    assert_eq!(problems(serde_json::json!({"n": 1, "m": {"k": 3}})), ["a.m.k: 3 is not of type [\"string\"]"]);
}
