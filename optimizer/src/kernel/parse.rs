//! Kernel text and JSON: `matMul`, `tile(1,2)`, `compose(outer,inner)` (with
//! canonical numeric arguments), and the JSON forms (a string, or
//! `{"compose": [outer, inner]}`).

use super::catalog::canonical_number;
use super::einsum_spec::{is_spec_kernel, is_spec_token};
use super::{KernelError, KernelRef};
use std::fmt;

/// A small recursive-descent parser for kernel text.
struct Parser<'a> {
    src: &'a str,
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn err(&self, what: impl fmt::Display) -> KernelError {
        KernelError::BadUse(format!("cannot parse kernel `{}`: {what}", crate::error::shown(self.src)))
    }

    fn skip_ws(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    fn ident(&mut self) -> Result<&'a str, KernelError> {
        self.skip_ws();
        let first_ok = self.rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok {
            return Err(match self.rest.chars().next() {
                Some(c) => self.err(format!("expected a kernel name, found `{c}`")),
                None => self.err("expected a kernel name"),
            });
        }
        let end = self.rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(self.rest.len());
        let (id, rest) = self.rest.split_at(end);
        self.rest = rest;
        Ok(id)
    }

    fn kernel(&mut self) -> Result<KernelRef, KernelError> {
        let name = self.ident()?;
        if !self.eat('(') {
            if name == "compose" {
                return Err(self.err("compose takes two kernels: compose(outer,inner)"));
            }
            return Ok(KernelRef::named(name));
        }
        if name == "compose" {
            let outer = self.kernel()?;
            if !self.eat(',') {
                return Err(self.err("compose takes two kernels: compose(outer,inner)"));
            }
            let inner = self.kernel()?;
            if !self.eat(')') {
                return Err(self.err("expected `)` after the two kernels of compose"));
            }
            return Ok(KernelRef::compose(outer, inner));
        }
        if self.eat(')') {
            return Err(self.err(format!("empty argument list; write `{name}` without parentheses")));
        }
        let mut args = Vec::new();
        loop {
            self.skip_ws();
            let end = self.rest.find([',', ')']).ok_or_else(|| self.err("missing `)`"))?;
            let text = self.rest[..end].trim();
            if text.is_empty() {
                return Err(self.err("empty argument"));
            }
            let arg = match canonical_number(text) {
                Some(a) => a,
                // A spec (einSum, einMax, einMin) is a word of letters and
                // `_`, kept as written.
                None if is_spec_kernel(name) && is_spec_token(text) => text.to_string(),
                None if is_spec_kernel(name) => {
                    return Err(self
                        .err(format!("argument `{text}` of {name} is not a spec of letters and `_` like `ij_jk_ik`")))
                }
                None => return Err(self.err(format!("argument `{text}` of {name} is not a number"))),
            };
            args.push(arg);
            let sep = self.rest[end..].chars().next();
            self.rest = &self.rest[end + 1..];
            if sep == Some(')') {
                break;
            }
        }
        Ok(KernelRef::Named { name: name.to_string(), args })
    }
}

impl KernelRef {
    /// Parse `name` or `name(a,b)` (numeric arguments, stored as canonical
    /// text), or `compose(outer,inner)` as [`fmt::Display`] writes it. Spaces
    /// around tokens are allowed. Names are not looked up: [`KernelRef::check`]
    /// does that.
    pub fn parse(s: &str) -> Result<KernelRef, KernelError> {
        let mut p = Parser { src: s, rest: s };
        let k = p.kernel()?;
        p.skip_ws();
        if !p.rest.is_empty() {
            return Err(p.err(format!("unexpected `{}` after the kernel", p.rest)));
        }
        Ok(k)
    }
}

/// JSON: a string (`"matMul"`, `"tile(1,2)"`) or `{"compose": [outer, inner]}`.
impl serde::Serialize for KernelRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            KernelRef::Named { .. } => s.serialize_str(&self.to_string()),
            KernelRef::Compose(o, i) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("compose", &[o.as_ref(), i.as_ref()])?;
                m.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for KernelRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let v = serde_json::Value::deserialize(d)?;
        match v {
            serde_json::Value::String(s) => KernelRef::parse(&s).map_err(D::Error::custom),
            serde_json::Value::Object(m) if m.len() == 1 && m.contains_key("compose") => {
                let parts: Vec<KernelRef> = serde_json::from_value(m["compose"].clone()).map_err(D::Error::custom)?;
                match <[KernelRef; 2]>::try_from(parts) {
                    Ok([o, i]) => Ok(KernelRef::compose(o, i)),
                    Err(_) => Err(D::Error::custom("`compose` takes exactly two kernels: [outer, inner]")),
                }
            }
            other => Err(D::Error::custom(format!(
                "a kernel is a name like \"matMul\" or {{\"compose\": [outer, inner]}}, not {other}"
            ))),
        }
    }
}
