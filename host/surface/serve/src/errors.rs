//! Every error answer as `{"error": "…"}`. The routes answer so
//! themselves; this layer rewrites what the framework answers before (or
//! instead of) a handler: a malformed JSON body, a body of the wrong shape,
//! a body over the size limit, a bad query string or path, a method the
//! route does not take (405, with its `Allow` header kept).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// Most bytes of a framework's error text kept as the message.
const MAX_MESSAGE: usize = 4096;

fn is_json(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

/// The middleware: an error status whose body is not JSON gets the body
/// `{"error": TEXT}`, TEXT being the framework's text (or the status's
/// reason when it had none); the status and other headers are kept.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&r) {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    // The framework's texts are short; anything longer is cut.
    let text = match axum::body::to_bytes(body, 64 << 10).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let mut message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_ascii_lowercase()
    } else {
        wharf_core::util::cut_str(&text, MAX_MESSAGE).to_string()
    };
    if status == axum::http::StatusCode::METHOD_NOT_ALLOWED
        && let Some(allow) = parts.headers.get(header::ALLOW).and_then(|v| v.to_str().ok())
        && !allow.is_empty()
    {
        message = format!("{message} (allowed: {allow})");
    }
    let body = serde_json::json!({ "error": message }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(body))
}
