//! `POST /v1/execute` with `.npy` files in its JSON, as base64: input data
//! `{"npy": …}` in either layout and float type, and outputs of any size
//! with `"return": {"format": "npy"}`, each mistake a 4xx naming the input
//! or output at fault.

mod common;

use common::{http, post, start};
use serde_json::{json, Value};
use tra_api::server::ServerConfig;
use tra_executor::npy;
use tra_executor::threads::Dtype;

// ------------------------------------------------- a client's side, by hand

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64(bytes: &[u8]) -> String {
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= c.len() { ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
        }
    }
    out
}

fn unb64(text: &str) -> Vec<u8> {
    let v = |c: u8| ALPHABET.iter().position(|&a| a == c).unwrap_or_else(|| panic!("not base64: {c}")) as u32;
    let body = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    for c in body.chunks(4) {
        let n = c.iter().enumerate().fold(0, |n, (i, &ch)| n | (v(ch) << (18 - 6 * i)));
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..c.len() - 1]);
    }
    out
}

/// The base64 `.npy` of a row-major array.
fn npy_of(dtype: Dtype, shape: &[usize], values: &[f64]) -> String {
    let mut bytes = npy::header_bytes(dtype, shape);
    for &x in values {
        match dtype {
            Dtype::F32 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
            Dtype::F64 => bytes.extend_from_slice(&x.to_le_bytes()),
        }
    }
    b64(&bytes)
}

/// The dtype, shape and values of a base64 `.npy` answer.
fn read_npy(text: &Value) -> (String, Vec<usize>, Vec<f64>) {
    let bytes = unb64(text.as_str().unwrap_or_else(|| panic!("no npy: {text}")));
    let mut rest: &[u8] = &bytes;
    let h = npy::read_header(&mut rest, std::path::Path::new("answer")).unwrap();
    assert!(!h.fortran_order);
    let values = match h.dtype.descr.as_str() {
        "<f4" => rest.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap()))).collect(),
        "<f8" => rest.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect::<Vec<_>>(),
        other => panic!("dtype {other}"),
    };
    assert_eq!(values.len(), h.shape.iter().product::<usize>(), "the data is exactly the shape's");
    (h.dtype.descr, h.shape, values)
}

/// `n`×`n` matrices X·Y in `k`×`k` keys of `n/k`-square blocks, on 4 sites.
fn matmul(n: usize, k: usize) -> Value {
    let b = n / k;
    json!({
        "inputs": {"X": {"key_bounds": [k, k], "array_bounds": [b, b]},
                   "Y": {"key_bounds": [k, k], "array_bounds": [b, b]}},
        "nodes": {"XY": {"op": "join", "left": "X", "right": "Y", "left_keys": [1], "right_keys": [0], "kernel": "matMul"},
                  "Z": {"op": "aggregate", "input": "XY", "group_by": [0, 2], "kernel": "matAdd"}},
        "outputs": ["Z"], "cluster": {"sites": 4}
    })
}

/// A row-major `n`×`n` matrix of small integers (products and sums exact).
fn matrix(n: usize, seed: usize) -> Vec<f64> {
    (0..n * n).map(|i| ((i * 7 + seed * 13 + i / n) % 7) as f64 - 3.0).collect()
}

fn product(x: &[f64], y: &[f64], n: usize) -> Vec<f64> {
    let mut z = vec![0.0; n * n];
    for i in 0..n {
        for l in 0..n {
            let a = x[i * n + l];
            for j in 0..n {
                z[i * n + j] += a * y[l * n + j];
            }
        }
    }
    z
}

/// The relation layout (`key_bounds ++ array_bounds`) of a row-major
/// `n`×`n` matrix cut in `k`×`k` keys.
fn relation_layout(m: &[f64], n: usize, k: usize) -> Vec<f64> {
    let b = n / k;
    let mut out = Vec::with_capacity(n * n);
    for ki in 0..k {
        for kj in 0..k {
            for i in 0..b {
                for j in 0..b {
                    out.push(m[(ki * b + i) * n + kj * b + j]);
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------ tests

/// The docs' problem: an output of 16,384 floats (128×128) has no data as
/// JSON (a note says how to get it) and comes back whole as a `.npy`,
/// equal to the product computed here and to its checksum.
#[tokio::test]
async fn an_output_of_16384_floats_comes_back_whole_as_npy() {
    let addr = start(ServerConfig::default()).await;
    let n = 128;
    let (x, y) = (matrix(n, 1), matrix(n, 2));
    let z = product(&x, &y, n);
    let mut req = matmul(n, 2);
    req["data"] = json!({"X": {"npy": npy_of(Dtype::F64, &[n, n], &x)}, "Y": {"npy": npy_of(Dtype::F64, &[n, n], &y)}});

    let r = post(addr, "/v1/execute", &req).await;
    let as_json = r.json();
    assert_eq!(r.status, 200, "{as_json}");
    let out = &as_json["outputs"]["Z"];
    assert!(out.get("data").is_none() && out.get("npy").is_none(), "{out}");
    let note = out["note"].as_str().expect("a note on the output too large for JSON");
    assert!(note.contains("16384") && note.contains(r#""return": {"format": "npy"}"#), "{note}");

    req["return"] = json!({"format": "npy"});
    let r = post(addr, "/v1/execute", &req).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    let out = &v["outputs"]["Z"];
    assert_eq!(out["layout"], "dense");
    assert!(out.get("data").is_none() && out.get("note").is_none(), "npy only: {out:.200}");
    let (descr, shape, values) = read_npy(&out["npy"]);
    assert_eq!((descr.as_str(), shape), ("<f8", vec![n, n]));
    assert_eq!(values, z, "the product, exactly (small integers)");
    assert_eq!(out["checksum"].as_f64().unwrap(), z.iter().sum::<f64>());
    assert_eq!(out["checksum"], as_json["outputs"]["Z"]["checksum"]);
    // Everything else is as in the JSON answer.
    for f in ["network_floats_measured", "network_floats_predicted", "plan", "cost", "sites", "runtime"] {
        assert_eq!(v[f], as_json[f], "{f}");
    }
    for f in ["key_bounds", "array_bounds", "tuples", "floats"] {
        assert_eq!(out[f], as_json["outputs"]["Z"][f], "{f}");
    }
    // The answer's base64 text is counted in the memory estimate.
    let (with, without) = (v["estimated_memory_bytes"].as_u64().unwrap(), as_json["estimated_memory_bytes"].as_u64());
    assert!(with >= without.unwrap() + (n * n * 8) as u64, "{with} vs {without:?}");
}

/// A small output reads the same as `.npy` and as JSON; float32 is asked
/// and given (`<f4`, the values rounded to float32), from float32 inputs.
#[tokio::test]
async fn npy_equals_json_and_float32_is_returned_as_asked() {
    let addr = start(ServerConfig::default()).await;
    let n = 16;
    // Eighths: every sum exact whatever its order (two runs may add in
    // different orders), yet not integers.
    let x: Vec<f64> = matrix(n, 5).iter().map(|a| a / 8.0).collect();
    let y: Vec<f64> = matrix(n, 6).iter().map(|a| a / 8.0 + 1.0 / 64.0).collect();
    let mut req = matmul(n, 4);
    req["data"] = json!({"X": {"npy": npy_of(Dtype::F64, &[n, n], &x)}, "Y": {"npy": npy_of(Dtype::F64, &[n, n], &y)}});
    let as_json = post(addr, "/v1/execute", &req).await.json();
    let data: Vec<f64> = as_json["outputs"]["Z"]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{as_json}"))
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
        .collect();
    req["return"] = json!({"format": "npy", "dtype": "float64"});
    let v = post(addr, "/v1/execute", &req).await.json();
    let (_, _, values) = read_npy(&v["outputs"]["Z"]["npy"]);
    assert_eq!(values, data, "the .npy holds the floats JSON spells");
    assert_eq!(values, product(&x, &y, n));

    // float32 in, float32 out.
    let x: Vec<f64> = (0..n * n).map(|i| (i as f64 * 0.37).sin()).collect();
    let y: Vec<f64> = (0..n * n).map(|i| (i as f64 * 0.11).cos()).collect();
    let x32: Vec<f64> = x.iter().map(|&a| f64::from(a as f32)).collect();
    let y32: Vec<f64> = y.iter().map(|&a| f64::from(a as f32)).collect();
    req["data"] = json!({"X": {"npy": npy_of(Dtype::F32, &[n, n], &x)}, "Y": {"npy": npy_of(Dtype::F32, &[n, n], &y)}});
    req["return"] = json!({"format": "npy", "dtype": "float32"});
    let r = post(addr, "/v1/execute", &req).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    let (descr, shape, values) = read_npy(&v["outputs"]["Z"]["npy"]);
    assert_eq!((descr.as_str(), shape), ("<f4", vec![n, n]));
    let expected: Vec<f64> = product(&x32, &y32, n).iter().map(|&a| f64::from(a as f32)).collect();
    for (i, (a, b)) in values.iter().zip(&expected).enumerate() {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "element {i}: {a} vs {b}");
    }
}

/// An input's `.npy` may be the dense tensor or the relation array
/// (`key_bounds ++ array_bounds`), float32 or float64: the same answer.
#[tokio::test]
async fn npy_inputs_are_read_in_both_layouts() {
    let addr = start(ServerConfig::default()).await;
    let (n, k) = (12, 3);
    let b = n / k;
    let (x, y) = (matrix(n, 3), matrix(n, 4));
    let mut req = matmul(n, k);
    req["return"] = json!({"format": "npy"});
    let mut answers = Vec::new();
    for (dtype, relation) in [(Dtype::F64, false), (Dtype::F64, true), (Dtype::F32, true), (Dtype::F32, false)] {
        let enc = |m: &[f64]| {
            if relation {
                npy_of(dtype, &[k, k, b, b], &relation_layout(m, n, k))
            } else {
                npy_of(dtype, &[n, n], m)
            }
        };
        req["data"] = json!({"X": {"npy": enc(&x)}, "Y": {"npy": enc(&y)}});
        let r = post(addr, "/v1/execute", &req).await;
        let v = r.json();
        assert_eq!(r.status, 200, "{dtype:?} relation={relation}: {v}");
        answers.push(read_npy(&v["outputs"]["Z"]["npy"]).2);
    }
    assert_eq!(answers[0], product(&x, &y, n));
    assert!(answers.iter().all(|a| *a == answers[0]), "the same product from every form");

    // An output whose key arity differs from its block rank comes back in
    // the relation layout: 3 keys of 2×2 blocks, [3, 2, 2].
    let rows = json!({
        "inputs": {"V": {"key_bounds": [3], "array_bounds": [2, 2]}},
        "nodes": {"R": {"op": "transform", "input": "V", "kernel": "relu"}},
        "outputs": ["R"],
        "data": {"V": {"npy": npy_of(Dtype::F64, &[3, 2, 2], &(0..12).map(|i| i as f64 - 6.0).collect::<Vec<_>>())}},
        "return": {"format": "npy"}
    });
    let v = post(addr, "/v1/execute", &rows).await.json();
    let out = &v["outputs"]["R"];
    assert_eq!(out["layout"], "relation", "{v}");
    let (_, shape, values) = read_npy(&out["npy"]);
    assert_eq!(shape, vec![3, 2, 2]);
    assert_eq!(values, (0..12).map(|i| (i as f64 - 6.0).max(0.0)).collect::<Vec<_>>());

    // An empty axis: a (4, 0) array in, a (4, 0) .npy out (its header alone).
    let empty = json!({
        "inputs": {"E": {"key_bounds": [2, 1], "array_bounds": [2, 0]}},
        "nodes": {"R": {"op": "transform", "input": "E", "kernel": "relu"}},
        "outputs": ["R"],
        "data": {"E": {"npy": npy_of(Dtype::F32, &[4, 0], &[])}},
        "return": {"format": "npy", "dtype": "float32"}
    });
    let r = post(addr, "/v1/execute", &empty).await;
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    assert_eq!(read_npy(&v["outputs"]["R"]["npy"]), ("<f4".to_string(), vec![4, 0], vec![]));
}

/// Every mistake is a 4xx naming the input (`data.X`) or output at fault.
#[tokio::test]
async fn npy_mistakes_are_named() {
    let addr = start(ServerConfig { max_return_floats: 10_000, ..ServerConfig::default() }).await;
    let n = 16;
    let ok = npy_of(Dtype::F64, &[n, n], &matrix(n, 1));
    let mut req = matmul(n, 4);
    let refused = |data: Value| {
        let mut r = req.clone();
        r["data"] = json!({"X": data, "Y": {"npy": ok}});
        r
    };

    // A dtype other than float32/float64.
    let mut ints = npy::header_bytes(Dtype::F64, &[n, n]);
    let at = ints.windows(3).position(|w| w == b"<f8").unwrap();
    ints[at..at + 3].copy_from_slice(b"<i8");
    ints.extend(std::iter::repeat_n(0u8, n * n * 8));
    let e = post(addr, "/v1/execute", &refused(json!({"npy": b64(&ints)}))).await.error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bad_field"), Some("data.X")), "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("input X") && m.contains("int64") && m.contains("float32 or float64"), "{m}");

    // A shape of neither layout: the shape found and both shapes accepted.
    let e = post(addr, "/v1/execute", &refused(json!({"npy": npy_of(Dtype::F64, &[n, n + 1], &[0.0; 16 * 17])})))
        .await
        .error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bounds_mismatch"), Some("data.X")), "{e}");
    let m = e["message"].as_str().unwrap();
    for part in ["input X", "[16, 17]", "[4, 4, 4, 4]", "[16, 16]"] {
        assert!(m.contains(part), "{part} in {m}");
    }

    // Not base64; base64 of no .npy; not a string.
    let e = post(addr, "/v1/execute", &refused(json!({"npy": "AAAA*AAA"}))).await.error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bad_field"), Some("data.X")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("not base64"), "{e}");
    let e = post(addr, "/v1/execute", &refused(json!({"npy": b64(b"just some bytes")}))).await.error(422);
    assert_eq!(e["at"], "data.X", "{e}");
    assert!(e["message"].as_str().unwrap().contains("not a .npy file"), "{e}");
    let e = post(addr, "/v1/execute", &refused(json!({"npy": [1, 2]}))).await.error(422);
    assert_eq!(e["at"], "data.X", "{e}");
    // A header that claims more data than follows.
    let short = &ok[..ok.len() / 2];
    let short = &short[..short.len() / 4 * 4];
    let e = post(addr, "/v1/execute", &refused(json!({"npy": short}))).await.error(422);
    assert_eq!(e["at"], "data.X", "{e}");
    assert!(e["message"].as_str().unwrap().contains("shorter than the header says"), "{e}");

    // A `return` that is not understood.
    req["return"] = json!({"format": "csv"});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("bad_field"), Some("return.format")), "{e}");
    req["return"] = json!({"format": "npy", "dtype": "float16"});
    let e = post(addr, "/v1/execute", &req).await.error(422);
    assert_eq!(e["at"], "return.dtype", "{e}");

    // Over --max-return-floats (10,000 here): 128×128 is refused before it
    // runs, naming the output, its size and the flag; 64×64 is returned.
    let mut big = matmul(128, 2);
    big["return"] = json!({"format": "npy"});
    let e = post(addr, "/v1/execute", &big).await.error(413);
    assert_eq!((e["code"].as_str(), e["at"].as_str()), (Some("data_too_large"), Some("Z")), "{e}");
    let m = e["message"].as_str().unwrap();
    for part in ["output Z", "16384 floats", "--max-return-floats", "10000", "raise it"] {
        assert!(m.contains(part), "{part} in {m}");
    }
    assert!(!m.contains("  "), "one line of words: {m}");
    let mut fits = matmul(64, 2);
    fits["return"] = json!({"format": "npy"});
    let r = post(addr, "/v1/execute", &fits).await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(read_npy(&r.json()["outputs"]["Z"]["npy"]).1, vec![64, 64]);
}

/// A `.npy` larger than --max-body-bytes gets the body's 413, naming the
/// flag; an optimize request accepts an execute request's `return` unread.
#[tokio::test]
async fn a_body_too_large_names_its_flag_and_optimize_accepts_return() {
    let addr = start(ServerConfig { max_body_bytes: 64 << 10, ..ServerConfig::default() }).await;
    let n = 128;
    let mut req = matmul(n, 2);
    req["return"] = json!({"format": "npy"});
    assert_eq!(post(addr, "/v1/optimize", &req).await.status, 200);
    // 128×128 float64 is 128 KiB, 171 KiB as base64.
    req["data"] = json!({"X": {"npy": npy_of(Dtype::F64, &[n, n], &matrix(n, 1))}});
    let e = http(addr, "POST", "/v1/execute", Some(req.to_string().as_bytes())).await.error(413);
    assert_eq!(e["code"], "body_too_large", "{e}");
    assert!(e["message"].as_str().unwrap().contains("--max-body-bytes"), "{e}");
}
