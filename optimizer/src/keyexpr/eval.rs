//! Evaluation: checked `i64` arithmetic with Euclidean `/` and `%`,
//! short-circuiting `&&`/`||`, and output components that must fit in `u32`.
//! Every failure is an [`EvalError`] naming the component or operation.

use super::ast::{AddOp, CmpOp, Component, IntExpr, MulOp, PredExpr};
use super::{Key, KeyFn, Predicate};

/// An evaluation error: what went wrong, in which expression, for which key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// `k<dim>` read from a key with too few components.
    #[error("k{dim} is out of range for a key of arity {arity}")]
    KeyOutOfRange {
        /// The component read.
        dim: usize,
        /// The key's arity.
        arity: usize,
    },
    /// A sum, product or negation outside `i64`.
    #[error("arithmetic overflow in `{expr}` for key {key:?}")]
    Overflow {
        /// The expression, as text.
        expr: String,
        /// The input key.
        key: Key,
    },
    /// `/` or `%` by zero.
    #[error("division by zero in `{expr}` for key {key:?}")]
    DivisionByZero {
        /// The expression, as text.
        expr: String,
        /// The input key.
        key: Key,
    },
    /// An output component below 0 or above `u32::MAX`.
    #[error(
        "component {position} of `{key_fn}` is {value} for key {key:?}: {}",
        if *value < 0 { "key components must be natural numbers".to_string() } else { format!("key components must be at most {}", u32::MAX) }
    )]
    ComponentOutOfRange {
        /// Which output component (0-based).
        position: usize,
        /// The key expression, as text.
        key_fn: String,
        /// The value it had.
        value: i64,
        /// The input key.
        key: Key,
    },
}

impl CmpOp {
    fn holds(self, l: i64, r: i64) -> bool {
        match self {
            CmpOp::Eq => l == r,
            CmpOp::Ne => l != r,
            CmpOp::Lt => l < r,
            CmpOp::Le => l <= r,
            CmpOp::Gt => l > r,
            CmpOp::Ge => l >= r,
        }
    }
}

fn key_out_of_range(i: usize, key: &[u32]) -> EvalError {
    EvalError::KeyOutOfRange { dim: i, arity: key.len() }
}

impl IntExpr {
    pub(super) fn eval(&self, key: &[u32]) -> Result<i64, EvalError> {
        let overflow = || EvalError::Overflow { expr: self.to_string(), key: key.to_vec() };
        match self {
            IntExpr::Lit(v) => Ok(*v),
            IntExpr::Key(i) => key.get(*i).map(|&v| i64::from(v)).ok_or_else(|| key_out_of_range(*i, key)),
            IntExpr::Neg(e) => e.eval(key)?.checked_neg().ok_or_else(overflow),
            IntExpr::Sum(first, rest) => {
                let mut acc = first.eval(key)?;
                for (op, e) in rest {
                    let v = e.eval(key)?;
                    acc = match op {
                        AddOp::Add => acc.checked_add(v),
                        AddOp::Sub => acc.checked_sub(v),
                    }
                    .ok_or_else(overflow)?;
                }
                Ok(acc)
            }
            IntExpr::Product(first, rest) => {
                let mut acc = first.eval(key)?;
                for (op, e) in rest {
                    let v = e.eval(key)?;
                    if v == 0 && *op != MulOp::Mul {
                        return Err(EvalError::DivisionByZero { expr: self.to_string(), key: key.to_vec() });
                    }
                    acc = match op {
                        MulOp::Mul => acc.checked_mul(v),
                        MulOp::Div => acc.checked_div_euclid(v),
                        MulOp::Mod => acc.checked_rem_euclid(v),
                    }
                    .ok_or_else(overflow)?;
                }
                Ok(acc)
            }
        }
    }
}

impl PredExpr {
    pub(super) fn eval(&self, key: &[u32]) -> Result<bool, EvalError> {
        Ok(match self {
            PredExpr::Const(b) => *b,
            PredExpr::Cmp(op, l, r) => op.holds(l.eval(key)?, r.eval(key)?),
            PredExpr::Not(e) => !e.eval(key)?,
            PredExpr::And(items) => {
                for item in items {
                    if !item.eval(key)? {
                        return Ok(false);
                    }
                }
                true
            }
            PredExpr::Or(items) => {
                for item in items {
                    if item.eval(key)? {
                        return Ok(true);
                    }
                }
                false
            }
        })
    }
}

impl KeyFn {
    /// The output keys for one input key, ranges enumerated in lexicographic order.
    pub fn eval(&self, key: &[u32]) -> Result<Vec<Key>, EvalError> {
        // Evaluate the expressions first: they do not depend on range values.
        let mut values = Vec::with_capacity(self.components.len());
        for (pos, c) in self.components.iter().enumerate() {
            values.push(match c {
                Component::Range(..) => None,
                Component::Expr(e) => {
                    let v = e.eval(key)?;
                    let v = u32::try_from(v).map_err(|_| EvalError::ComponentOutOfRange {
                        position: pos,
                        key_fn: self.to_string(),
                        value: v,
                        key: key.to_vec(),
                    })?;
                    Some(v)
                }
            });
        }
        let mut out: Vec<Key> = vec![Vec::with_capacity(self.components.len())];
        for (c, v) in self.components.iter().zip(values) {
            match (c, v) {
                (_, Some(v)) => out.iter_mut().for_each(|k| k.push(v)),
                (Component::Range(lo, hi), None) => {
                    out = out
                        .into_iter()
                        .flat_map(|k| {
                            (*lo..*hi).map(move |r| {
                                let mut k = k.clone();
                                k.push(r);
                                k
                            })
                        })
                        .collect();
                }
                (Component::Expr(_), None) => unreachable!("expressions were evaluated"),
            }
        }
        Ok(out)
    }
}

impl Predicate {
    /// Evaluate on a key.
    pub fn eval(&self, key: &[u32]) -> Result<bool, EvalError> {
        self.expr.eval(key)
    }
}
