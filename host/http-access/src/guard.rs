//! The middleware ([`guard`]): Host, Origin and token checks for every
//! request, and the security headers of every answer (rules: crate docs).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::access::Access;

/// Compares without leaking where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The token a request presents, from a header or the cookie.
fn presented<'a>(headers: &'a HeaderMap, cookie_name: &str) -> Option<&'a str> {
    if let Some(t) = header_str(headers, "x-wharf-token") {
        return Some(t.trim());
    }
    if let Some(t) = header_str(headers, header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ")) {
        return Some(t.trim());
    }
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((k, v)) = pair.trim().split_once('=')
                && k == cookie_name
            {
                return Some(v);
            }
        }
    }
    None
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| kv.strip_prefix("token=")).map(|v| v.replace("%2B", "+"))
}

fn refuse(status: StatusCode, api: bool, message: &str) -> Response {
    let mut r = if api {
        (status, axum::Json(json!({"error": message}))).into_response()
    } else {
        let body = format!(
            "<!doctype html><meta charset=utf-8><title>wharf</title>\
             <p style=\"font-family:sans-serif\">{}</p>",
            message.replace('&', "&amp;").replace('<', "&lt;")
        );
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
    };
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The middleware: Host, then Origin, then the token.
pub async fn guard(State(access): State<Access>, req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api/");
    let headers = req.headers();
    let host = header_str(headers, header::HOST).map(str::to_ascii_lowercase);
    let host_ok = match &host {
        Some(h) => access.any_host || access.hosts.iter().any(|a| a == h),
        None => false,
    };
    if !host_ok {
        return refuse(StatusCode::FORBIDDEN, api, "forbidden: unexpected Host header");
    }
    let host = host.unwrap_or_default();
    let state_changing = !matches!(*req.method(), Method::GET | Method::HEAD);
    let streaming = req.uri().path().ends_with("/events")
        || header_str(headers, header::ACCEPT).is_some_and(|a| a.contains("text/event-stream"));
    if state_changing || streaming {
        if let Some(origin) = header_str(headers, header::ORIGIN)
            && !origin.eq_ignore_ascii_case(&format!("http://{host}"))
        {
            return refuse(StatusCode::FORBIDDEN, api, "forbidden: cross-origin request");
        }
        if header_str(headers, "sec-fetch-site") == Some("cross-site") {
            return refuse(StatusCode::FORBIDDEN, api, "forbidden: cross-site request");
        }
    }
    // `/?token=…`: set the cookie and drop the token from the address bar.
    if req.method() == Method::GET
        && req.uri().path() == "/"
        && let Some(t) = query_token(req.uri().query())
    {
        if !same(t.as_bytes(), access.token.as_bytes()) {
            return refuse(StatusCode::UNAUTHORIZED, false, "unauthorized: wrong token");
        }
        let cookie = format!("{}={}; HttpOnly; SameSite=Strict; Path=/", access.cookie, access.token);
        let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(header::SET_COOKIE, v);
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return r;
    }
    match presented(headers, &access.cookie) {
        Some(t) if same(t.as_bytes(), access.token.as_bytes()) => {}
        Some(_) => return refuse(StatusCode::UNAUTHORIZED, api, "unauthorized: wrong token"),
        None => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                api,
                "unauthorized: open the address the server printed at start (it carries the access token), \
                 or send it as `Authorization: Bearer TOKEN`",
            );
        }
    }
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_from_headers_and_cookies() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h, "c"), None);
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; c=tok; d=2"));
        assert_eq!(presented(&h, "c"), Some("tok"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer bt"));
        assert_eq!(presented(&h, "c"), Some("bt"));
        h.insert("x-wharf-token", HeaderValue::from_static("xt"));
        assert_eq!(presented(&h, "c"), Some("xt"));
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert_eq!(query_token(Some("x=1&token=t")), Some("t".into()));
    }
}
