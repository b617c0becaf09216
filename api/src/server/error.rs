//! The API's error object, `{"error": {"code", "message", "at"}}`, and the
//! HTTP status of each kind of mistake.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tra_optimizer::optimize::OptimizeError;
use tra_optimizer::{ErrorCode, ProgramError};

/// An error answer: status, code, words, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The API's `code` (`bad_json`, `unknown_input`, `body_too_large`, …).
    pub code: String,
    /// What is wrong, in words a front-end author understands.
    pub message: String,
    /// The node or `node.field` at fault; empty when the whole request is.
    pub at: String,
    /// Seconds after which a request refused for load may be tried again
    /// (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: impl Into<String>, at: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status, code: code.into(), message: message.into(), at: at.into(), retry_after: None }
    }

    /// 400 `bad_json`: the request body cannot be read as JSON.
    pub fn bad_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_json", "", message)
    }

    /// 422 with a code of the program-error vocabulary, at a field of the request.
    pub fn unprocessable(code: &str, at: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, at, message)
    }

    /// 503 `limit_exceeded`: a limit of the service stopped the work.
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "limit_exceeded", "", message)
    }

    /// 500 `internal`: a bug in tra.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message, "at": self.at}})
    }
}

impl From<ProgramError> for ApiError {
    fn from(e: ProgramError) -> Self {
        let status = match e.code {
            // Not even a JSON object: the request is unreadable.
            ErrorCode::BadJson => StatusCode::BAD_REQUEST,
            ErrorCode::LimitExceeded => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError { status, code: e.code.as_str().to_string(), message: e.message, at: e.at, retry_after: None }
    }
}

impl From<OptimizeError> for ApiError {
    fn from(e: OptimizeError) -> Self {
        match e {
            OptimizeError::Program(p) => p.into(),
            OptimizeError::Limit(m) => ApiError::limit(m),
            OptimizeError::Internal(m) => ApiError::internal(format!("internal error in the optimizer: {m}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}
