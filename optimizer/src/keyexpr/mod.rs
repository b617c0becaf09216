//! Key expressions and predicates: a small, safe language over key components.
//!
//! A *key* ([`Key`]) is a vector of natural numbers, one `u32` per key
//! dimension; `k0`, `k1`, … name its components. Two kinds of expression are
//! written in this language:
//!
//! * a [`KeyFn`] maps one key to one or more keys: `[k0, 2*k1 + k2]`. A
//!   component may be a *range* `lo..hi`, which replicates the input key once
//!   per value in `lo..hi`: `[k0, 0..4]` maps `[7]` to `[7, 0]`, `[7, 1]`,
//!   `[7, 2]`, `[7, 3]`;
//! * a [`Predicate`] is a boolean condition on one key: `k0 == k1 && k2 < 3`.
//!
//! # Grammar
//!
//! ```text
//! keyfn     := '[' ']' | '[' component (',' component)* ','? ']' | intexpr
//!                                       (a bare intexpr means a 1-tuple)
//! component := INT '..' INT             (a range; lo < hi, both at most u32::MAX)
//!            | intexpr
//! predicate := or
//! or        := and ('||' and)*
//! and       := not ('&&' not)*
//! not       := '!' not | cmp
//! cmp       := intexpr (('=='|'!='|'<'|'<='|'>'|'>=') intexpr)?
//!            | 'true' | 'false' | '(' predicate ')'
//! intexpr   := term (('+'|'-') term)*
//! term      := unary (('*'|'/'|'%') unary)*
//! unary     := '-' unary | atom
//! atom      := INT | 'k' INT | '(' intexpr ')'
//! ```
//!
//! `INT` is a run of decimal digits (at most `i64::MAX`; negative numbers are
//! written with unary minus). `k12` is a single token: key component 12.
//! Whitespace is allowed anywhere between tokens. Comparisons do not chain
//! (`a < b < c` is an error), a predicate must be boolean (`k0 + 1` alone is an
//! error: "expected a comparison") and a key component must be an integer
//! (`[k0 == 1]` is an error). Parenthesised groups may hold either kind of
//! expression: `(k0 + 1) == k1` and `(k0 == k1) && true` both parse.
//!
//! Parse errors are [`ParseError`]s carrying the 1-based *character* column of
//! the offending token, what was expected there and what was found.
//!
//! # Semantics
//!
//! Expressions are evaluated in `i64` with checked arithmetic: an overflow is
//! an [`EvalError`], never a wrap-around. `/` and `%` are **Euclidean**
//! ([`i64::div_euclid`], [`i64::rem_euclid`]): the remainder is never negative,
//! so `-7 / 2 == -4`, `-7 % 2 == 1`, `7 / -2 == -3` and `7 % -2 == 1`. Division
//! or remainder by zero is an [`EvalError`]. Intermediate values may be
//! negative, but every component of an output key must lie in `0..=u32::MAX`.
//! Reading `ki` from a key with at most `i` components is an [`EvalError`].
//! `&&` and `||` evaluate their operands left to right and short-circuit, so
//! `k1 != 0 && k0 / k1 == 2` never divides by zero.
//!
//! A key expression with range components returns the cartesian product of the
//! range values, in lexicographic order of those values (earlier range
//! components vary slowest).
//!
//! # Canonical form
//!
//! Parentheses are not stored. A run of `+`/`-` (or of `*`/`/`/`%`) at one
//! level is stored as one n-ary node and a parenthesised sum inside a sum stays
//! a separate node, so `a + b + c` and `(a + b) + c` are different (if
//! equivalent) values: arithmetic is never reassociated, as that could move an
//! overflow. Chains of `&&` (and of `||`) are flattened, so `(a && b) && c`
//! equals `a && b && c`. Note that `!` binds looser than comparisons:
//! `!k0 == 1` is `!(k0 == 1)`, which is how it is displayed. The [`Display`](fmt::Display) form writes the minimum
//! parentheses and re-parses to an equal value: `parse(x.to_string()) == x`.
//! Serde uses this text form.
//!
//! # Limits
//!
//! Parentheses and prefix operators (`-`, `!`) may be nested at most
//! [`MAX_NESTING`] levels deep; deeper input is a [`ParseError`] ("expression
//! nested too deeply"), not a stack overflow. [`KeyFn::compose`] and
//! [`Predicate::substitute`] return `None` rather than build a value whose text
//! form would exceed that limit. (Only [`Predicate::and`] can exceed it, by one
//! level, when a conjunct is a `||` already nested [`MAX_NESTING`] deep.)
//!
//! # Layout
//!
//! `ast` holds the syntax tree, its structural operations and its text form;
//! `lexer` the tokens; `parser` the parser and [`ParseError`]; `eval` the
//! evaluator and [`EvalError`]. This module keeps the public types and their
//! operations (composition, substitution, remapping).

mod ast;
mod eval;
mod lexer;
mod parser;

pub use eval::EvalError;
pub use parser::ParseError;

use ast::{mk_and, Component, IntExpr, PredExpr};
use std::collections::BTreeSet;
use std::fmt;

/// A key: one natural number per key dimension.
pub type Key = Vec<u32>;

/// How deeply parentheses and prefix operators (`-`, `!`) may nest.
pub const MAX_NESTING: usize = 256;

/// A key expression: `[k0, 2*k1 + k2]`; a component may be a range `0..4`
/// (one input key gives one output key per value: replication).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyFn {
    components: Vec<Component>,
}

/// A predicate over key components: `k0 == k1 && k2 < 3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Predicate {
    expr: PredExpr,
}

impl KeyFn {
    /// `[k0, ..., k{arity-1}]`.
    pub fn identity(arity: usize) -> KeyFn {
        KeyFn { components: (0..arity).map(|i| Component::Expr(IntExpr::Key(i))).collect() }
    }
    /// Identity with a range component `0..n` inserted at position `dim`.
    ///
    /// # Panics
    /// When `dim > arity` or `n == 0` (an empty range is not a key expression).
    pub fn replicate(arity: usize, dim: usize, n: u32) -> KeyFn {
        assert!(dim <= arity, "KeyFn::replicate: dim {dim} is beyond arity {arity}");
        assert!(n > 0, "KeyFn::replicate: the range 0..0 is empty");
        let mut k = KeyFn::identity(arity);
        k.components.insert(dim, Component::Range(0, n));
        k
    }
    /// Number of components of each output key.
    pub fn output_arity(&self) -> usize {
        self.components.len()
    }
    /// The key components `ki` the expression reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for c in &self.components {
            if let Component::Expr(e) = c {
                e.collect_dims(&mut out);
            }
        }
        out
    }
    /// Output keys per input key (product of the range lengths; 1 without ranges).
    /// Saturates at `u64::MAX`.
    pub fn fanout(&self) -> u64 {
        self.components
            .iter()
            .map(|c| match c {
                Component::Range(lo, hi) => u64::from(hi - lo),
                Component::Expr(_) => 1,
            })
            .fold(1u64, u64::saturating_mul)
    }
    /// Per output component, `Some((lo, hi))` when it is a range `lo..hi`.
    pub fn ranges(&self) -> Vec<Option<(u32, u32)>> {
        self.components
            .iter()
            .map(|c| match c {
                Component::Range(lo, hi) => Some((*lo, *hi)),
                Component::Expr(_) => None,
            })
            .collect()
    }
    /// Whether some component is a range.
    pub fn has_ranges(&self) -> bool {
        self.components.iter().any(|c| matches!(c, Component::Range(..)))
    }
    /// True when this is `[k0, ..., k{arity-1}]`.
    pub fn is_identity(&self, arity: usize) -> bool {
        self.components.len() == arity
            && self.components.iter().enumerate().all(|(i, c)| *c == Component::Expr(IntExpr::Key(i)))
    }
    /// Per output component, `Some(i)` when it is exactly `ki`.
    pub fn passthrough(&self) -> Vec<Option<usize>> {
        self.components
            .iter()
            .map(|c| match c {
                Component::Expr(IntExpr::Key(i)) => Some(*i),
                _ => None,
            })
            .collect()
    }
    /// `self ∘ inner`, when it can be written as one key expression.
    ///
    /// The result applies `inner` first, then `self`: `inner`'s component
    /// expressions are substituted for `self`'s `ki`. `None` when `self` reads a
    /// component `inner` does not produce; when a range component of `inner` is
    /// not read by `self` exactly once, as a bare `ki` component (it then stays
    /// a range at that position; dropping it would produce duplicates, using it
    /// in arithmetic or twice cannot be written as ranges); or when the result
    /// would nest more than [`MAX_NESTING`] levels deep.
    ///
    /// The result yields the same keys as the two steps, as a multiset (their
    /// order differs when ranges are permuted). It may succeed on an input
    /// where the two steps fail because an intermediate component of `inner`
    /// is negative or too large: intermediate values are no longer checked.
    pub fn compose(&self, inner: &KeyFn) -> Option<KeyFn> {
        let mut range_uses = vec![0usize; inner.components.len()];
        let mut components = Vec::with_capacity(self.components.len());
        for c in &self.components {
            components.push(match c {
                Component::Range(lo, hi) => Component::Range(*lo, *hi),
                Component::Expr(IntExpr::Key(i)) => {
                    let ic = inner.components.get(*i)?;
                    if let Component::Range(..) = ic {
                        range_uses[*i] += 1;
                    }
                    ic.clone()
                }
                Component::Expr(e) => Component::Expr(e.subst(&|i| match inner.components.get(i)? {
                    Component::Expr(ie) => Some(ie.clone()),
                    Component::Range(..) => None,
                })?),
            });
        }
        let ranges_ok =
            inner.components.iter().zip(&range_uses).all(|(c, &uses)| !matches!(c, Component::Range(..)) || uses == 1);
        let k = KeyFn { components };
        (ranges_ok && k.nesting() <= MAX_NESTING).then_some(k)
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, f: &dyn Fn(usize) -> usize) -> KeyFn {
        KeyFn {
            components: self
                .components
                .iter()
                .map(|c| match c {
                    Component::Expr(e) => Component::Expr(e.remap(f)),
                    Component::Range(lo, hi) => Component::Range(*lo, *hi),
                })
                .collect(),
        }
    }

    fn nesting(&self) -> usize {
        self.components
            .iter()
            .map(|c| match c {
                Component::Expr(e) => e.nesting(),
                Component::Range(..) => 0,
            })
            .max()
            .unwrap_or(0)
    }
}

impl Predicate {
    /// `true`.
    pub fn always() -> Predicate {
        Predicate { expr: PredExpr::Const(true) }
    }
    /// True when this is literally `true`.
    pub fn is_always(&self) -> bool {
        self.expr == PredExpr::Const(true)
    }
    /// The key components `ki` the predicate reads.
    pub fn dims_read(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        self.expr.collect_dims(&mut out);
        out
    }
    /// `self && other`.
    ///
    /// `true && p` and `p && true` simplify to `p`; nested conjunctions are
    /// flattened.
    pub fn and(&self, other: &Predicate) -> Predicate {
        if self.is_always() {
            return other.clone();
        }
        if other.is_always() {
            return self.clone();
        }
        // Idempotent: conjuncts already present are not repeated, so that
        // merging a filter with an equal one (R1-1) cannot grow forever.
        let mut items = match mk_and(vec![self.expr.clone()]) {
            PredExpr::And(v) => v,
            e => vec![e],
        };
        let others = match mk_and(vec![other.expr.clone()]) {
            PredExpr::And(v) => v,
            e => vec![e],
        };
        for o in others {
            if !items.contains(&o) {
                items.push(o);
            }
        }
        Predicate { expr: mk_and(items) }
    }
    /// Rename every `ki` to `k{f(i)}`.
    pub fn remap(&self, f: &dyn Fn(usize) -> usize) -> Predicate {
        Predicate { expr: self.expr.map_ints(&|e| Some(e.remap(f))).expect("renaming never fails") }
    }
    /// The predicate read through a key map: `p(f(k))`, when `f` has no ranges.
    ///
    /// `None` also when `self` reads a component beyond `f`'s output arity, or
    /// when the result would nest more than [`MAX_NESTING`] levels deep. As with
    /// [`KeyFn::compose`], intermediate key components are no longer checked
    /// to be natural numbers.
    pub fn substitute(&self, f: &KeyFn) -> Option<Predicate> {
        let exprs = f
            .components
            .iter()
            .map(|c| match c {
                Component::Expr(e) => Some(e),
                Component::Range(..) => None,
            })
            .collect::<Option<Vec<&IntExpr>>>()?;
        let sub = |i: usize| exprs.get(i).map(|e| (*e).clone());
        let expr = self.expr.map_ints(&|e| e.subst(&sub))?;
        (expr.nesting() <= MAX_NESTING).then_some(Predicate { expr })
    }
}

impl fmt::Display for KeyFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (n, c) in self.components.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            match c {
                Component::Expr(e) => write!(f, "{e}")?,
                Component::Range(lo, hi) => write!(f, "{lo}..{hi}")?,
            }
        }
        f.write_str("]")
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.expr)
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
        KeyFn::parse(&s)
            .map_err(|e| serde::de::Error::custom(format!("bad key expression `{}`: {e}", crate::error::shown(&s))))
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
        Predicate::parse(&s)
            .map_err(|e| serde::de::Error::custom(format!("bad predicate `{}`: {e}", crate::error::shown(&s))))
    }
}

#[cfg(test)]
mod tests;
