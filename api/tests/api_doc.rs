//! `docs/API.md` and the served `GET /openapi.json` tell the same story:
//! the same endpoints (a `### METHOD /path` section each), the same status
//! codes per endpoint (its `Status:` line), every field of every schema
//! named in the text, every schema by name, and the same error codes.

mod common;

use common::{get, start};
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
