//! The einsum front-end's error: the API's error object (code, message,
//! `at`) plus the character position in the expression, for a caret.

use serde::Serialize;
use std::fmt;
use tra_optimizer::{ErrorCode, ProgramError};

/// An einsum mistake: what kind (the API's code), where in the request
/// (`expression`, `inputs.A.block`, `output`), and for mistakes in the
/// expression the 0-based character position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct EinsumError {
    /// The kind of mistake, in the program-error vocabulary.
    pub code: ErrorCode,
    /// What is wrong, in einsum's words (starts with the position when there is one).
    pub message: String,
    /// `expression`, `inputs.NAME.shape`, `inputs.NAME.block`, `block`, `output`, or empty.
    pub at: String,
    /// 0-based character position in the expression.
    pub position: Option<usize>,
    /// The expression.
    pub expression: String,
}

impl EinsumError {
    pub(crate) fn at_pos(expr: &str, pos: usize, code: ErrorCode, msg: impl fmt::Display) -> EinsumError {
        EinsumError {
            code,
            message: format!("einsum `{expr}`, position {pos}: {msg}"),
            at: "expression".into(),
            position: Some(pos),
            expression: expr.into(),
        }
    }

    pub(crate) fn field(expr: &str, at: impl Into<String>, code: ErrorCode, msg: impl Into<String>) -> EinsumError {
        EinsumError { code, message: msg.into(), at: at.into(), position: None, expression: expr.into() }
    }

    /// The expression with a caret under the position (two lines), for a terminal.
    pub fn pointer(&self) -> Option<String> {
        self.position.map(|p| format!("  {}\n  {}^", self.expression, " ".repeat(p)))
    }
}

impl From<EinsumError> for ProgramError {
    fn from(e: EinsumError) -> ProgramError {
        ProgramError::new(e.code, e.at, e.message)
    }
}
