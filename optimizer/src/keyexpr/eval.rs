//! Evaluation: checked `i64` arithmetic with Euclidean `/` and `%`,
//! short-circuiting `&&`/`||`, and output components that must fit in `u32`.
//! Every failure is an [`EvalError`] naming the component or operation.

use super::ast::{AddOp, CmpOp, Component, IntExpr, MulOp, PredExpr};
use super::{Key, KeyFn, Predicate};

/// An evaluation error (a component out of range, division by zero, a negative result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

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
    EvalError(format!("k{i} is out of range for a key of arity {}", key.len()))
}

impl IntExpr {
    pub(super) fn eval(&self, key: &[u32]) -> Result<i64, EvalError> {
        let overflow = || EvalError(format!("arithmetic overflow in `{self}` for key {key:?}"));
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
                        return Err(EvalError(format!("division by zero in `{self}` for key {key:?}")));
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

// Public API

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
                    let v = u32::try_from(v).map_err(|_| {
                        let why = if v < 0 {
                            "key components must be natural numbers".to_string()
                        } else {
                            format!("key components must be at most {}", u32::MAX)
                        };
                        EvalError(format!("component {pos} of `{self}` is {v} for key {key:?}: {why}"))
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
