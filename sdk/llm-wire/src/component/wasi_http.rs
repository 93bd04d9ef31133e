//! [`Transport`] over `wasi:http/outgoing-handler`, with deadlines from
//! `wasi:clocks/monotonic-clock` and `wasi:io/poll`.
//!
//! The host's allowlist decides what may be reached: a request to a host
//! outside the plugin's effective grant fails with `HTTP-request-denied`,
//! reported as `INVALID_REQUEST` (retrying cannot help; the operator must
//! grant the host).

use wasi::clocks::{monotonic_clock, wall_clock};
use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode as HttpCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasi::io::poll;
use wasi::io::streams::{InputStream, OutputStream, StreamError};

use crate::adapter::{HttpRequest, HttpResponse, ReadOutcome, ResponseBody, Transport};
use crate::error::{ErrorCode, WireError};

/// Largest single write of the request body (the host's `check-write`
/// budget may be smaller; it is asked before every write).
const MAX_WRITE: usize = 1 << 20;

fn now_ms() -> u64 {
    monotonic_clock::now() / 1_000_000
}

/// Blocks until `ready` says yes or `deadline_ms` passes; returns whether
/// it became ready.
fn wait_until(pollable: &poll::Pollable, deadline_ms: u64) -> bool {
    loop {
        if pollable.ready() {
            return true;
        }
        let now = now_ms();
        if now >= deadline_ms {
            return false;
        }
        let timer = monotonic_clock::subscribe_duration((deadline_ms - now).saturating_mul(1_000_000));
        poll::poll(&[pollable, &timer]);
    }
}

/// Hands `body` to the host in as few writes as the stream's `check-write`
/// budget allows, then flushes; waits on the stream when it is full, until
/// `deadline_ms`.
///
/// One write per budget rather than one `blocking-write-and-flush` per
/// 4 KiB: each write wakes the host's connection task, so a request whose
/// history had grown to 200 KiB cost 50 cross-thread hand-offs per step.
fn write_body(stream: &OutputStream, body: &[u8], deadline_ms: u64) -> Result<(), WireError> {
    let timed_out =
        || WireError::new(ErrorCode::Timeout, "sending the request: the connection took no more bytes in time");
    let mut rest = body;
    while !rest.is_empty() {
        let budget = stream.check_write().map_err(|e| stream_error(e, "sending the request"))?;
        if budget == 0 {
            if !wait_until(&stream.subscribe(), deadline_ms) {
                return Err(timed_out());
            }
            continue;
        }
        let n = rest.len().min(usize::try_from(budget).unwrap_or(usize::MAX)).min(MAX_WRITE);
        let (now, later) = rest.split_at(n);
        stream.write(now).map_err(|e| stream_error(e, "sending the request"))?;
        rest = later;
    }
    stream.flush().map_err(|e| stream_error(e, "sending the request"))?;
    // The flush is done once the stream can take bytes again.
    if !wait_until(&stream.subscribe(), deadline_ms) {
        return Err(timed_out());
    }
    stream.check_write().map(|_| ()).map_err(|e| stream_error(e, "sending the request"))
}

/// Maps a `wasi:http` error code.
fn map_code(code: &HttpCode, authority: &str) -> WireError {
    match code {
        HttpCode::HttpRequestDenied => WireError::new(
            ErrorCode::InvalidRequest,
            format!("outbound HTTP to {authority} is not granted to this plugin (grant.hosts)"),
        ),
        HttpCode::DnsTimeout
        | HttpCode::ConnectionTimeout
        | HttpCode::ConnectionReadTimeout
        | HttpCode::ConnectionWriteTimeout
        | HttpCode::HttpResponseTimeout => {
            WireError::new(ErrorCode::Timeout, format!("HTTP request to {authority} timed out: {code:?}"))
        }
        HttpCode::HttpRequestMethodInvalid | HttpCode::HttpRequestUriInvalid | HttpCode::HttpRequestUriTooLong => {
            WireError::new(ErrorCode::InvalidRequest, format!("HTTP request to {authority} is invalid: {code:?}"))
        }
        other => WireError::new(ErrorCode::Transport, format!("HTTP request to {authority} failed: {other:?}")),
    }
}

fn stream_error(e: StreamError, what: &str) -> WireError {
    match e {
        StreamError::Closed => WireError::new(ErrorCode::Transport, format!("{what}: the connection was closed")),
        StreamError::LastOperationFailed(err) => {
            let detail = match wasi::http::types::http_error_code(&err) {
                Some(code) => format!("{code:?}"),
                None => err.to_debug_string(),
            };
            WireError::new(ErrorCode::Transport, format!("{what}: {detail}"))
        }
    }
}

fn internal(what: &str) -> WireError {
    WireError::new(ErrorCode::Transport, format!("wasi:http: {what}"))
}

/// The transport. Stateless: every request is a new exchange.
pub struct WasiTransport;

impl Transport for WasiTransport {
    type Body = WasiBody;

    fn send(&mut self, req: &HttpRequest) -> Result<HttpResponse<WasiBody>, WireError> {
        let authority = req.endpoint.authority.as_str();
        let headers = Fields::new();
        for (name, value) in &req.headers {
            // Never echo the value: it may be the key.
            headers
                .append(name, value.as_bytes())
                .map_err(|e| WireError::new(ErrorCode::InvalidRequest, format!("header {name}: {e:?}")))?;
        }
        let out = OutgoingRequest::new(headers);
        out.set_method(&Method::Post).map_err(|()| internal("set method"))?;
        let scheme = if req.endpoint.https { Scheme::Https } else { Scheme::Http };
        out.set_scheme(Some(&scheme)).map_err(|()| internal("set scheme"))?;
        out.set_authority(Some(authority))
            .map_err(|()| WireError::new(ErrorCode::InvalidRequest, format!("invalid authority {authority:?}")))?;
        out.set_path_with_query(Some(&req.endpoint.path))
            .map_err(|()| WireError::new(ErrorCode::InvalidRequest, format!("invalid path {:?}", req.endpoint.path)))?;
        let body = out.body().map_err(|()| internal("request body taken"))?;
        let options = RequestOptions::new();
        // The host may not support a knob; our own deadlines still apply.
        let _ = options.set_connect_timeout(Some(req.timeout_ms.saturating_mul(1_000_000)));
        let future = outgoing_handler::handle(out, Some(options)).map_err(|c| map_code(&c, authority))?;

        // Write the body after `handle`, so a large body streams instead of
        // filling the host's buffer before the request is sent.
        let write_result = (|| -> Result<(), WireError> {
            let stream = body.write().map_err(|()| internal("request body stream taken"))?;
            write_body(&stream, &req.body, now_ms().saturating_add(req.timeout_ms))
        })();
        let finish_result = OutgoingBody::finish(body, None).map_err(|c| map_code(&c, authority));

        let deadline = now_ms().saturating_add(req.timeout_ms);
        let ready = {
            let pollable = future.subscribe();
            wait_until(&pollable, deadline)
        };
        if !ready {
            write_result?;
            finish_result?;
            return Err(WireError::new(
                ErrorCode::Timeout,
                format!("no response from {authority} within {} ms (idle_timeout_ms)", req.timeout_ms),
            ));
        }
        let response = match future.get() {
            Some(Ok(Ok(r))) => r,
            Some(Ok(Err(code))) => return Err(map_code(&code, authority)),
            Some(Err(())) => return Err(internal("response already taken")),
            None => return Err(internal("response not ready")),
        };
        // A server may answer (e.g. 401) without reading the whole body: the
        // response wins over a failed write.
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response.consume().map_err(|()| internal("response body taken"))?;
        let stream = incoming.stream().map_err(|()| internal("response body stream taken"))?;
        Ok(HttpResponse { status, headers, body: WasiBody { stream, _body: incoming, _response: response } })
    }

    fn unix_secs(&self) -> u64 {
        wall_clock::now().seconds
    }
}

/// A response body. Fields drop in order: the stream before its body,
/// the body before its response, as `wasi:http` requires.
pub struct WasiBody {
    stream: InputStream,
    _body: IncomingBody,
    _response: IncomingResponse,
}

impl ResponseBody for WasiBody {
    fn read(&mut self, max: usize, wait_ms: u64) -> Result<ReadOutcome, WireError> {
        let deadline = now_ms().saturating_add(wait_ms);
        loop {
            match self.stream.read(max as u64) {
                Ok(bytes) if !bytes.is_empty() => return Ok(ReadOutcome::Bytes(bytes)),
                Ok(_) => {}
                Err(StreamError::Closed) => return Ok(ReadOutcome::Eof),
                Err(e) => return Err(stream_error(e, "reading the response")),
            }
            if now_ms() >= deadline {
                return Ok(ReadOutcome::TimedOut);
            }
            let pollable = self.stream.subscribe();
            if !wait_until(&pollable, deadline) {
                return Ok(ReadOutcome::TimedOut);
            }
        }
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }
}
