//! Messages API errors → Wharf's error codes.
//!
//! The body is `{"type":"error","error":{"type":T,"message":M}}`; the type
//! decides, the status only when there is no type:
//!
//! | `error.type` | status | code |
//! |---|---|---|
//! | `invalid_request_error` | 400 | `INVALID_REQUEST` (`CONTEXT_WINDOW_EXCEEDED` when the message says the prompt is too long) |
//! | `authentication_error` | 401 | `AUTH` (the message names the key's variable) |
//! | `permission_error` | 403 | `AUTH` |
//! | `not_found_error` | 404 | `INVALID_REQUEST` |
//! | `request_too_large` | 413 | `INVALID_REQUEST` (or `CONTEXT_WINDOW_EXCEEDED`, as above) |
//! | `rate_limit_error` | 429 | `RATE_LIMIT` (with `retry-after`) |
//! | `billing_error` | 402 | `QUOTA` |
//! | `api_error` | 500 | `SERVER` |
//! | `overloaded_error` | 529 | `SERVER` |
//! | `timeout_error` | 504 | `TIMEOUT` |
//!
//! `RATE_LIMIT`, `SERVER` and `TIMEOUT` are what the host's retry policy
//! retries (honouring `retry_after_ms`), exactly as for DeepSeek.

use serde_json::Value;
use wharf_llm_wire::error::{MAX_MESSAGE_CHARS, truncate_chars};
use wharf_llm_wire::{ErrorCode, WireError, is_context_overflow, map_http_error, parse_retry_after};

/// The code of an Anthropic error type (`None`: unknown type).
pub fn code_of_type(kind: &str, message: &str) -> Option<ErrorCode> {
    Some(match kind {
        "invalid_request_error" | "request_too_large" if is_context_overflow(message) => {
            ErrorCode::ContextWindowExceeded
        }
        "invalid_request_error" | "not_found_error" | "request_too_large" => ErrorCode::InvalidRequest,
        "authentication_error" | "permission_error" => ErrorCode::Auth,
        "rate_limit_error" => ErrorCode::RateLimit,
        "billing_error" => ErrorCode::Quota,
        "api_error" | "overloaded_error" => ErrorCode::Server,
        "timeout_error" => ErrorCode::Timeout,
        _ => return None,
    })
}

/// Maps an `error` object (of an error body or an `error` event).
pub fn map_error_object(e: &Value, status: Option<u16>, what: &str) -> WireError {
    let kind = e.get("type").and_then(Value::as_str).unwrap_or("");
    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
    let code = code_of_type(kind, message).unwrap_or_else(|| match status {
        Some(s) => map_http_error(s, message.as_bytes(), None, 0, "").code,
        None => ErrorCode::Server,
    });
    let detail = truncate_chars(message, MAX_MESSAGE_CHARS);
    let label = if kind.is_empty() { String::new() } else { format!(" ({kind})") };
    let mut err = WireError::new(code, format!("{what}{label}: {detail}"));
    err.http_status = status;
    err
}

/// Maps a non-2xx response: `body` as read (bounded by the caller),
/// `retry_after` the header.
pub fn map_http(status: u16, body: &[u8], retry_after: Option<&str>, now_unix_secs: u64, key_env: &str) -> WireError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let mut err = match parsed.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object()) {
        Some(e) => map_error_object(e, Some(status), &format!("HTTP {status}")),
        None => map_http_error(status, body, None, now_unix_secs, ""),
    };
    err.retry_after_ms = retry_after.and_then(|v| parse_retry_after(v, now_unix_secs));
    if err.code == ErrorCode::Auth {
        err.message = format!("{} — check the API key in {key_env}", err.message);
    }
    err
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn body(kind: &str, message: &str) -> Vec<u8> {
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}}).to_string().into_bytes()
    }

    #[test]
    fn types_map_to_codes() {
        let cases = [
            (400, "invalid_request_error", "bad", ErrorCode::InvalidRequest),
            (
                400,
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
                ErrorCode::ContextWindowExceeded,
            ),
            (401, "authentication_error", "invalid x-api-key", ErrorCode::Auth),
            (403, "permission_error", "no", ErrorCode::Auth),
            (404, "not_found_error", "model", ErrorCode::InvalidRequest),
            (
                413,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes",
                ErrorCode::InvalidRequest,
            ),
            (429, "rate_limit_error", "slow down", ErrorCode::RateLimit),
            (500, "api_error", "oops", ErrorCode::Server),
            (529, "overloaded_error", "Overloaded", ErrorCode::Server),
            (503, "", "", ErrorCode::Server),
        ];
        for (status, kind, msg, code) in cases {
            let e = map_http(status, &body(kind, msg), Some("2"), 0, "ANTHROPIC_API_KEY");
            assert_eq!((e.code, e.http_status, e.retry_after_ms), (code, Some(status), Some(2000)), "{kind}");
        }
        let e = map_http(401, &body("authentication_error", "invalid x-api-key"), None, 0, "MY_KEY");
        assert!(e.message.contains("MY_KEY") && e.message.contains("invalid x-api-key"), "{}", e.message);
        let e = map_http(502, b"<html>bad gateway</html>", None, 0, "K");
        assert_eq!(e.code, ErrorCode::Server);
    }
}
