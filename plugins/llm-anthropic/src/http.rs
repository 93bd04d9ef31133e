//! [`Transport`] over `wasi:http/outgoing-handler`, with deadlines from
//! `wasi:clocks/monotonic-clock` and `wasi:io/poll` — the same exchange as
//! `wharf-llm-wire`'s (whose transport module is private to that crate).
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
use wasi::io::streams::{InputStream, StreamError};

use wharf_llm_wire::adapter::{HttpRequest, HttpResponse, ReadOutcome, ResponseBody, Transport};
use wharf_llm_wire::{ErrorCode, WireError};

/// Largest write `blocking-write-and-flush` accepts.
const WRITE_CHUNK: usize = 4096;

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

    fn send(&mut self, req: HttpRequest) -> Result<HttpResponse<WasiBody>, WireError> {
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
            for chunk in req.body.chunks(WRITE_CHUNK) {
                stream.blocking_write_and_flush(chunk).map_err(|e| stream_error(e, "sending the request"))?;
            }
            Ok(())
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
