//! Errors about programs and plans: one type, shaped like the API's error object.

use serde::Serialize;

/// What kind of mistake a program has. The string form is the API's `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The text is not JSON, or a field has the wrong JSON type.
    BadJson,
    /// A node names an input or node that does not exist.
    UnknownInput,
    /// A kernel name that the catalog does not have.
    UnknownKernel,
    /// An `op` that is not a TRA (or IA) operator.
    UnknownOp,
    /// The nodes refer to each other in a cycle.
    Cycle,
    /// A field is missing or has a value of the wrong kind.
    BadField,
    /// Bounds that are zero, negative, or whose product overflows.
    BadBounds,
    /// Two bounds that must agree do not (join keys, kernel operand shapes).
    BoundsMismatch,
    /// A dimension index outside the key or array rank.
    DimOutOfRange,
    /// A key expression or predicate that does not parse.
    BadExpression,
    /// A key expression that cannot be evaluated on some key (negative result,
    /// division by zero) or that breaks key uniqueness.
    BadKeyMap,
    /// A kernel applied to operands of a shape it does not accept.
    BadKernelShape,
    /// An output name that is not a node or input.
    UnknownOutput,
    /// A limit (key space enumeration, e-graph size, time) stopped the work.
    LimitExceeded,
    /// A bug in tra (a rule broke an invariant of the e-graph), not in the program.
    Internal,
}

impl ErrorCode {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadJson => "bad_json",
            ErrorCode::UnknownInput => "unknown_input",
            ErrorCode::UnknownKernel => "unknown_kernel",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::Cycle => "cycle",
            ErrorCode::BadField => "bad_field",
            ErrorCode::BadBounds => "bad_bounds",
            ErrorCode::BoundsMismatch => "bounds_mismatch",
            ErrorCode::DimOutOfRange => "dim_out_of_range",
            ErrorCode::BadExpression => "bad_expression",
            ErrorCode::BadKeyMap => "bad_key_map",
            ErrorCode::BadKernelShape => "bad_kernel_shape",
            ErrorCode::UnknownOutput => "unknown_output",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::Internal => "internal",
        }
    }
}

/// A mistake in a program, naming where it is (`at`: a node, or `node.field`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct ProgramError {
    /// What kind of mistake.
    pub code: ErrorCode,
    /// Words a front-end author understands; starts with the node name.
    pub message: String,
    /// The node or `node.field` at fault (empty when the whole program is at fault).
    pub at: String,
}

impl ProgramError {
    /// A new error at `at`.
    pub fn new(code: ErrorCode, at: impl Into<String>, message: impl Into<String>) -> Self {
        ProgramError { code, message: message.into(), at: at.into() }
    }
}

/// Shorthand for results of program checking.
pub type Result<T, E = ProgramError> = std::result::Result<T, E>;

/// A user's text as an error message shows it: whole up to 80 characters,
/// else its first 60 and its length (a 3 MB kernel name made a 6 MB answer).
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let n = text.chars().count();
    if n <= 80 {
        return std::borrow::Cow::Borrowed(text);
    }
    let head: String = text.chars().take(60).collect();
    std::borrow::Cow::Owned(format!("{head}… ({n} characters)"))
}
