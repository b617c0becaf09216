//! Key expressions and predicates: a small, safe language over key components.
//! (SKELETON: the API is fixed; bodies are being written.)

use std::collections::BTreeSet;
use std::fmt;

/// A key: one natural number per key dimension.
pub type Key = Vec<u32>;

/// A parse error: where (1-based column) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: expected {expected}, found {found}")]
pub struct ParseError {
    /// 1-based column of the offending character.
    pub column: usize,
    /// What the parser expected there.
    pub expected: String,
    /// What it found (a token, or `end of input`).
    pub found: String,
}

/// An evaluation error (a component out of range, division by zero, a negative result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

/// A key expression: `[k0, 2*k1 + k2]`; a component may be a range `0..4`
/// (one input key gives one output key per value: replication).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyFn {
    _todo: (),
}

/// A predicate over key components: `k0 == k1 && k2 < 3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Predicate {
    _todo: (),
}

impl KeyFn {
    /// Parse `[e, e, ...]`, a bare single expression `e`, or `[]`.
    pub fn parse(_src: &str) -> Result<KeyFn, ParseError> {
        unimplemented!()
    }
    /// `[k0, ..., k{arity-1}]`.
    pub fn identity(_arity: usize) -> KeyFn {
        unimplemented!()
    }
    /// Identity with a range component `0..n` inserted at position `dim`.
    pub fn replicate(_arity: usize, _dim: usize, _n: u32) -> KeyFn {
        unimplemented!()
    }
    /// Number of components of each output key.
    pub fn output_arity(&self) -> usize {
        unimplemented!()
    }
    /// The key components `ki` the expression reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        unimplemented!()
    }
    /// Output keys per input key (product of the range lengths; 1 without ranges).
    pub fn fanout(&self) -> u64 {
        unimplemented!()
    }
    /// The output keys for one input key, ranges enumerated in lexicographic order.
    pub fn eval(&self, _key: &[u32]) -> Result<Vec<Key>, EvalError> {
        unimplemented!()
    }
    /// True when this is `[k0, ..., k{arity-1}]`.
    pub fn is_identity(&self, _arity: usize) -> bool {
        unimplemented!()
    }
    /// Per output component, `Some(i)` when it is exactly `ki`.
    pub fn passthrough(&self) -> Vec<Option<usize>> {
        unimplemented!()
    }
    /// `self ∘ inner`, when it can be written as one key expression.
    pub fn compose(&self, _inner: &KeyFn) -> Option<KeyFn> {
        unimplemented!()
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, _f: &dyn Fn(usize) -> usize) -> KeyFn {
        unimplemented!()
    }
}

impl Predicate {
    /// Parse a boolean expression.
    pub fn parse(_src: &str) -> Result<Predicate, ParseError> {
        unimplemented!()
    }
    /// `true`.
    pub fn always() -> Predicate {
        unimplemented!()
    }
    /// Evaluate on a key.
    pub fn eval(&self, _key: &[u32]) -> Result<bool, EvalError> {
        unimplemented!()
    }
    /// The key components `ki` the predicate reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        unimplemented!()
    }
    /// `self && other`.
    pub fn and(&self, _other: &Predicate) -> Predicate {
        unimplemented!()
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, _f: &dyn Fn(usize) -> usize) -> Predicate {
        unimplemented!()
    }
    /// The predicate read through a key map: `p(f(k))`, when `f` has no ranges.
    pub fn substitute(&self, _f: &KeyFn) -> Option<Predicate> {
        unimplemented!()
    }
}

impl fmt::Display for KeyFn {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        unimplemented!()
    }
}
impl fmt::Display for Predicate {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        unimplemented!()
    }
}
impl serde::Serialize for KeyFn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
impl<'de> serde::Deserialize<'de> for KeyFn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        KeyFn::parse(&s).map_err(|e| serde::de::Error::custom(format!("bad key expression `{s}`: {e}")))
    }
}
impl serde::Serialize for Predicate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
impl<'de> serde::Deserialize<'de> for Predicate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Predicate::parse(&s).map_err(|e| serde::de::Error::custom(format!("bad predicate `{s}`: {e}")))
    }
}
