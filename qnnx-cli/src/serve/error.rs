//! Errors as the OpenAI API gives them: an HTTP status and `{"error": {"message", "type",
//! "param", "code"}}`, so that clients (the `openai` package raises `BadRequestError`,
//! `RateLimitError`, ...) read them as they read OpenAI's.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// One refused or failed request.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `rate_limit_error`,
    /// `server_error`, ...
    pub kind: &'static str,
    pub message: String,
    /// The request field at fault.
    pub param: Option<&'static str>,
    /// A machine-readable code (`context_length_exceeded`, `queue_full`, ...).
    pub code: Option<&'static str>,
    /// Seconds, for `Retry-After` (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is wrong; the message says how.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the field at fault.
    pub fn param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param),
            ..ApiError::bad(message)
        }
    }

    pub fn with_code(self, code: &'static str) -> ApiError {
        ApiError {
            code: Some(code),
            ..self
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "a valid API key is required: send the header 'Authorization: Bearer KEY' with the \
             key the server was started with (--api-key or QNNX_API_KEY)",
        )
        .with_code("invalid_api_key")
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found_error", what)
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed here: the completions routes take POST, /v1/models and /health \
             take GET",
        )
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!(
                "the request body is larger than this server's limit of {limit} bytes \
                 (--max-body)"
            ),
        )
        .with_code("request_too_large")
    }

    /// 429: every slot of the queue is taken.
    pub fn queue_full(capacity: usize, retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "the server is busy: {capacity} requests are already waiting for the NPU \
                     (--queue); retry after {retry_after} s"
                ),
            )
            .with_code("queue_full")
        }
    }

    /// 503: the server is stopping.
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server is shutting down; the request was not run to its end",
        )
        .with_code("shutting_down")
    }

    /// 504: the per-request deadline passed.
    pub fn deadline(seconds: f64, tokens: usize) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            format!(
                "the request's deadline of {seconds} s (--deadline) passed after {tokens} new \
                 tokens: ask for fewer tokens, or retry when the server is less busy"
            ),
        )
        .with_code("deadline_exceeded")
    }

    /// 500: the server failed (a QNN call, a panic); the next request is served.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An engine error: the caller's input (400) or the server's failure (500).
    pub fn from_engine(e: qnnx_engine::Error) -> ApiError {
        match e {
            qnnx_engine::Error::Input(m) => ApiError::bad(m),
            other => ApiError::internal(format!("the generation failed on the NPU: {other}")),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({ "error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.to_json())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
