//! `.npy` files inside the JSON of `POST /v1/execute`, as base64 text: an
//! input's data `{"npy": "…"}`, and every output's value when the request
//! asks `"return": {"format": "npy"}`. Nested JSON arrays cost ~20 bytes
//! and a parse per float; base64 `.npy` costs 4/3 of the float's own bytes.
//!
//! The `.npy` header is read and written by [`tra_executor::npy`], the code
//! behind `tra run --input`/`--output`: the two layouts are the same (the
//! relation array of shape `key_bounds ++ array_bounds`, or the dense tensor
//! of shape `key_bounds[i]·array_bounds[i]` when key arity equals block
//! rank), and the service reads what `tra run` reads but for the forms a
//! client has no reason to send: float32 or float64, little-endian, C order.

use super::ApiError;
use serde_json::Value;
use std::path::Path;
use tra_executor::npy::{self, Layout};
use tra_executor::threads::Dtype;

/// How `POST /v1/execute` returns its outputs (the request's `return`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnSpec {
    /// Every output as a base64 `.npy` (`"format": "npy"`); else nested
    /// JSON arrays for outputs of at most 10,000 floats (`"json"`, the default).
    pub npy: bool,
    /// The `.npy`'s element type (`"dtype"`; float64 by default).
    pub dtype: Dtype,
}

impl Default for ReturnSpec {
    fn default() -> Self {
        ReturnSpec { npy: false, dtype: Dtype::F64 }
    }
}

impl ReturnSpec {
    /// Read the request's `return`: absent or null is JSON, float64.
    pub fn parse(v: Option<&Value>) -> Result<ReturnSpec, ApiError> {
        let bad = |at: &str, m: String| ApiError::unprocessable("bad_field", at, m);
        let obj = match v {
            None | Some(Value::Null) => return Ok(ReturnSpec::default()),
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(bad(
                    "return",
                    format!(
                        "`return` must be an object like {{\"format\": \"npy\", \"dtype\": \"float32\"}}, not {}",
                        shown(other)
                    ),
                ))
            }
        };
        if let Some(k) = obj.keys().find(|k| !["format", "dtype"].contains(&k.as_str())) {
            return Err(bad(
                &format!("return.{k}"),
                format!("unknown field `{}` of `return` (the fields are `format` and `dtype`)", truncate(k, 40)),
            ));
        }
        let npy = match obj.get("format") {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) if s == "json" => false,
            Some(Value::String(s)) if s == "npy" => true,
            Some(other) => {
                return Err(bad(
                    "return.format",
                    format!(
                        "`return.format` is {}; it is \"json\" (nested arrays, outputs of at most 10,000 floats) or \
                         \"npy\" (every output as a base64 .npy file)",
                        shown(other)
                    ),
                ))
            }
        };
        let dtype = match obj.get("dtype") {
            None | Some(Value::Null) => Dtype::F64,
            Some(Value::String(s)) if s == "float64" => Dtype::F64,
            Some(Value::String(s)) if s == "float32" => Dtype::F32,
            Some(other) => {
                return Err(bad(
                    "return.dtype",
                    format!("`return.dtype` is {}; it is \"float32\" or \"float64\"", shown(other)),
                ))
            }
        };
        if !npy && dtype == Dtype::F32 {
            return Err(bad(
                "return.dtype",
                "`return.dtype` float32 is for `\"format\": \"npy\"`; JSON numbers are float64".to_string(),
            ));
        }
        Ok(ReturnSpec { npy, dtype })
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

fn shown(v: &Value) -> String {
    truncate(&v.to_string(), 60)
}

// ------------------------------------------------------------------ base64

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The value of each base64 character; 0xff for any other byte.
const DECODE: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Characters of the base64 text of `bytes` bytes (padded).
pub fn base64_len(bytes: u64) -> u64 {
    bytes.div_ceil(3).saturating_mul(4)
}

/// Base64 (standard alphabet, padded) written piece by piece, so that a
/// large array is encoded without first being copied into one byte buffer.
pub struct Base64Writer {
    out: Vec<u8>,
    pending: [u8; 3],
    held: usize,
}

impl Base64Writer {
    /// A writer with room for the text of `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> Base64Writer {
        Base64Writer { out: Vec::with_capacity(base64_len(bytes as u64) as usize), pending: [0; 3], held: 0 }
    }

    fn quad(&mut self, b: [u8; 3]) {
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        self.out.extend_from_slice(&[
            ALPHABET[(n >> 18) as usize & 63],
            ALPHABET[(n >> 12) as usize & 63],
            ALPHABET[(n >> 6) as usize & 63],
            ALPHABET[n as usize & 63],
        ]);
    }

    /// Append bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while self.held > 0 && !bytes.is_empty() {
            self.pending[self.held] = bytes[0];
            self.held += 1;
            bytes = &bytes[1..];
            if self.held == 3 {
                self.quad(self.pending);
                self.held = 0;
            }
        }
        if bytes.is_empty() {
            return;
        }
        let mut chunks = bytes.chunks_exact(3);
        for c in &mut chunks {
            self.quad([c[0], c[1], c[2]]);
        }
        let rest = chunks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.held = rest.len();
    }

    /// The text, padded with `=`.
    pub fn finish(mut self) -> String {
        if self.held > 0 {
            let held = self.held;
            let mut b = [0u8; 3];
            b[..held].copy_from_slice(&self.pending[..held]);
            self.quad(b);
            let len = self.out.len();
            for c in &mut self.out[len - (3 - held)..] {
                *c = b'=';
            }
        }
        String::from_utf8(self.out).expect("base64 is ASCII")
    }
}

/// The base64 text of `bytes`.
#[cfg(test)]
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut w = Base64Writer::with_capacity(bytes.len());
    w.push(bytes);
    w.finish()
}

/// Decode base64 (standard alphabet `A–Z a–z 0–9 + /`; the `=` padding may
/// be left out); the error names the first character at fault.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let body = bytes.strip_suffix(b"==").or_else(|| bytes.strip_suffix(b"=")).unwrap_or(bytes);
    if body.len() % 4 == 1 {
        return Err(format!(
            "its length ({} characters{}) is not that of base64 text (one character too many or too few)",
            bytes.len(),
            if body.len() < bytes.len() { " with padding" } else { "" }
        ));
    }
    if bytes.len() > body.len() && !bytes.len().is_multiple_of(4) {
        return Err(format!("its length ({}) with `=` padding is not a multiple of 4", bytes.len()));
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    let value = |i: usize| -> Result<u32, String> {
        let c = body[i];
        match DECODE[c as usize] {
            0xff => {
                let ch = text[i..].chars().next().unwrap_or('?');
                Err(format!(
                    "character {i} is {ch:?}, which is not base64 (the standard alphabet A–Z a–z 0–9 + /, `=` \
                     padding at the end only)"
                ))
            }
            v => Ok(u32::from(v)),
        }
    };
    let mut i = 0;
    while i + 4 <= body.len() {
        let n = (value(i)? << 18) | (value(i + 1)? << 12) | (value(i + 2)? << 6) | value(i + 3)?;
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
        i += 4;
    }
    match body.len() - i {
        0 => {}
        2 => {
            let n = (value(i)? << 18) | (value(i + 1)? << 12);
            out.push((n >> 16) as u8);
        }
        3 => {
            let n = (value(i)? << 18) | (value(i + 1)? << 12) | (value(i + 2)? << 6);
            out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]);
        }
        _ => unreachable!("a remainder of 1 was refused"),
    }
    Ok(out)
}

// ------------------------------------------------------------------- input

/// Why an input's `.npy` was refused.
#[derive(Debug)]
pub enum NpyInputError {
    /// Not base64, not a `.npy`, not float32/float64 little-endian C order,
    /// truncated (`bad_field`).
    Bad(String),
    /// A shape that is neither layout of the input (`bounds_mismatch`).
    Shape(String),
}

/// Read the base64 `.npy` of an input with frontier `kb` and block shape
/// `ab`: the array's shape (one of the two layouts) and its values,
/// row-major, as `f64`.
pub fn read_input(text: &str, kb: &[u32], ab: &[usize]) -> Result<(Vec<usize>, Vec<f64>), NpyInputError> {
    use NpyInputError::{Bad, Shape};
    let bytes = base64_decode(text).map_err(|m| Bad(format!("`npy` is not base64: {m}")))?;
    let path = Path::new("`npy`");
    let mut rest: &[u8] = &bytes;
    let h = npy::read_header(&mut rest, path).map_err(|e| Bad(e.message))?;
    let header_len = (bytes.len() - rest.len()) as u64;
    let dtype = match h.dtype.float {
        Some(d) if !h.dtype.big_endian => d,
        Some(_) => {
            return Err(Bad(format!(
                "`npy` holds big-endian {} (dtype {:?}); send little-endian float32 or float64 (numpy: \
                 a.astype(a.dtype.newbyteorder('<')))",
                h.dtype.numpy_name(),
                h.dtype.descr
            )))
        }
        None => {
            return Err(Bad(format!(
            "`npy` holds {} values (dtype {:?}); the service reads float32 or float64 (numpy: a.astype(np.float64))",
            h.dtype.numpy_name(),
            h.dtype.descr
        )))
        }
    };
    if h.fortran_order {
        return Err(Bad(
            "`npy` is in Fortran (column-major) order; send it in C order (numpy: np.ascontiguousarray(a))".into(),
        ));
    }
    let rel = npy::layout_shape(Layout::Relation, kb, ab).expect("the relation layout always exists");
    let dense = npy::layout_shape(Layout::Dense, kb, ab);
    if h.shape != rel && dense.as_ref() != Some(&h.shape) {
        let expected = match &dense {
            Some(d) if *d != rel => {
                format!("{rel:?} (key_bounds ++ array_bounds) or {d:?} (the dense tensor)")
            }
            _ => format!("{rel:?} (key_bounds ++ array_bounds)"),
        };
        return Err(Shape(format!("`npy` has shape {:?}; expected {expected}", h.shape)));
    }
    let need = npy::check_data_length(path, &h, header_len, bytes.len() as u64).map_err(|e| Bad(e.message))?;
    let data = &bytes[header_len as usize..(header_len + need) as usize];
    let values = match dtype {
        Dtype::F32 => data.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect(),
        Dtype::F64 => {
            data.chunks_exact(8).map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect()
        }
    };
    Ok((h.shape, values))
}

// ------------------------------------------------------------------ output

/// The base64 `.npy` of a row-major array of `f64` of `shape`, written as `dtype`.
pub fn encode_output(shape: &[usize], values: impl Iterator<Item = f64>, dtype: Dtype) -> String {
    let header = npy::header_bytes(dtype, shape);
    let n: usize = shape.iter().product();
    let mut w = Base64Writer::with_capacity(header.len() + n * dtype.size());
    w.push(&header);
    const STEP: usize = 3 * 4096;
    let mut buf = Vec::with_capacity(STEP + 8);
    for x in values {
        match dtype {
            Dtype::F32 => buf.extend_from_slice(&(x as f32).to_le_bytes()),
            Dtype::F64 => buf.extend_from_slice(&x.to_le_bytes()),
        }
        if buf.len() >= STEP {
            w.push(&buf);
            buf.clear();
        }
    }
    w.push(&buf);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base64_matches_the_rfc_vectors_and_round_trips() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), coded);
            assert_eq!(base64_decode(coded).unwrap(), plain.as_bytes());
            assert_eq!(base64_decode(coded.trim_end_matches('=')).unwrap(), plain.as_bytes(), "unpadded");
        }
        let all: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        // Pushed in uneven pieces, as the output encoder does.
        let mut w = Base64Writer::with_capacity(all.len());
        for piece in all.chunks(7) {
            w.push(piece);
        }
        let text = w.finish();
        assert_eq!(text, base64_encode(&all));
        // Pieces of one byte and empty ones keep what is held (an empty
        // output's .npy is its header and an empty push).
        for n in [1, 2, 4, 128] {
            let mut w = Base64Writer::with_capacity(n);
            for piece in all[..n].chunks(1) {
                w.push(piece);
                w.push(&[]);
            }
            assert_eq!(w.finish(), base64_encode(&all[..n]), "{n} bytes one by one");
        }
        assert_eq!(base64_decode(&text).unwrap(), all);
        assert_eq!(base64_len(all.len() as u64), text.len() as u64);
        let e = base64_decode("Zm9v!mFy").unwrap_err();
        assert!(e.contains("character 4") && e.contains("'!'"), "{e}");
        assert!(base64_decode("Zm9vY").unwrap_err().contains("length"));
        assert!(base64_decode("Zm=").unwrap_err().contains("multiple of 4"));
    }

    /// A 4×4 float64 `.npy` with its header's `from` replaced by `to`.
    fn doctored(from: &str, to: &str) -> String {
        let mut bytes = npy::header_bytes(Dtype::F64, &[4, 4]);
        let at = bytes.windows(from.len()).position(|w| w == from.as_bytes()).expect("in the header");
        bytes.splice(at..at + from.len(), to.bytes());
        bytes.extend_from_slice(&[0u8; 128]);
        base64_encode(&bytes)
    }

    fn npy_text(dtype: Dtype, shape: &[usize], values: &[f64]) -> String {
        encode_output(shape, values.iter().copied(), dtype)
    }

    #[test]
    fn inputs_are_read_in_either_layout_and_either_float_type() {
        let values: Vec<f64> = (0..16).map(|i| i as f64 * 0.5).collect();
        for dtype in [Dtype::F32, Dtype::F64] {
            for shape in [vec![4, 4], vec![2, 2, 2, 2]] {
                let (s, v) = read_input(&npy_text(dtype, &shape, &values), &[2, 2], &[2, 2]).unwrap();
                assert_eq!((s, v), (shape, values.clone()));
            }
        }
        match read_input(&npy_text(Dtype::F64, &[4, 5], &[0.0; 20]), &[2, 2], &[2, 2]) {
            Err(NpyInputError::Shape(m)) => {
                assert!(m.contains("[4, 5]") && m.contains("[2, 2, 2, 2]") && m.contains("[4, 4]"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let bad = |text: &str| match read_input(text, &[2, 2], &[2, 2]) {
            Err(NpyInputError::Bad(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(bad("not base64!").contains("not base64"));
        assert!(bad(&base64_encode(b"hello, world")).contains("not a .npy file"));
        let m = bad(&doctored("<f8", "<i8"));
        assert!(m.contains("int64") && m.contains("float32 or float64"), "{m}");
        assert!(bad(&doctored("<f8", ">f8")).contains("big-endian"));
        assert!(bad(&doctored("False", "True ")).contains("C order"));
        // A header claiming more data than the file holds.
        let mut short = npy::header_bytes(Dtype::F64, &[4, 4]);
        short.extend_from_slice(&[0u8; 120]);
        assert!(bad(&base64_encode(&short)).contains("shorter than the header says"));
    }

    #[test]
    fn return_specs_are_read_and_mistakes_named() {
        assert_eq!(ReturnSpec::parse(None).unwrap(), ReturnSpec::default());
        let npy32 = ReturnSpec::parse(Some(&json!({"format": "npy", "dtype": "float32"}))).unwrap();
        assert_eq!(npy32, ReturnSpec { npy: true, dtype: Dtype::F32 });
        assert_eq!(ReturnSpec::parse(Some(&json!({"format": "npy"}))).unwrap().dtype, Dtype::F64);
        for (v, at) in [
            (json!("npy"), "return"),
            (json!({"format": "csv"}), "return.format"),
            (json!({"format": "npy", "dtype": "int32"}), "return.dtype"),
            (json!({"dtype": "float32"}), "return.dtype"),
            (json!({"fromat": "npy"}), "return.fromat"),
        ] {
            let e = ReturnSpec::parse(Some(&v)).unwrap_err();
            assert_eq!((e.status.as_u16(), e.code.as_str(), e.at.as_str()), (422, "bad_field", at), "{v}");
        }
    }
}
