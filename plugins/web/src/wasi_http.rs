//! [`Transport`] over `wasi:http/outgoing-handler`. Waits block in
//! `wasi:io/poll`; the host's per-call deadline bounds them.

use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingRequest, Scheme};
use wasi::io::streams::{InputStream, StreamError};

use crate::url::Url;
use crate::{Body, Head, NetError, Transport};

/// Largest single read from the body stream.
const READ_CHUNK: u64 = 64 << 10;

fn map_code(code: &ErrorCode) -> NetError {
    match code {
        ErrorCode::HttpRequestDenied => NetError::Denied,
        ErrorCode::DestinationIpProhibited => NetError::Prohibited,
        ErrorCode::DnsError(p) => NetError::Dns(p.rcode.clone().unwrap_or_else(|| "lookup failed".into())),
        ErrorCode::DnsTimeout => NetError::Timeout("name lookup".into()),
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::HttpResponseTimeout => NetError::Timeout(format!("{code:?}")),
        ErrorCode::ConnectionRefused => NetError::Other("connection refused".into()),
        other => NetError::Other(format!("{other:?}")),
    }
}

fn internal(what: &str) -> NetError {
    NetError::Other(format!("wasi:http: {what}"))
}

/// The transport. Stateless: every request is a new exchange.
pub struct WasiTransport;

impl Transport for WasiTransport {
    type Body = WasiBody;

    fn get(&mut self, url: &Url, headers: &[(&str, &str)]) -> Result<(Head, WasiBody), NetError> {
        let fields = Fields::new();
        for (name, value) in headers {
            fields.append(name, value.as_bytes()).map_err(|e| internal(&format!("header {name}: {e:?}")))?;
        }
        let req = OutgoingRequest::new(fields);
        req.set_method(&Method::Get).map_err(|()| internal("set method"))?;
        req.set_scheme(Some(if url.https { &Scheme::Https } else { &Scheme::Http }))
            .map_err(|()| internal("set scheme"))?;
        req.set_authority(Some(&url.authority()))
            .map_err(|()| NetError::Other(format!("invalid host {:?}", url.authority())))?;
        req.set_path_with_query(Some(&url.path_query))
            .map_err(|()| NetError::Other(format!("invalid path {:?}", url.path_query)))?;
        let future = outgoing_handler::handle(req, None).map_err(|c| map_code(&c))?;
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(r))) => r,
            Some(Ok(Err(code))) => return Err(map_code(&code)),
            Some(Err(())) => return Err(internal("response already taken")),
            None => return Err(internal("response not ready")),
        };
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response.consume().map_err(|()| internal("response body taken"))?;
        let stream = incoming.stream().map_err(|()| internal("response body stream taken"))?;
        Ok((Head { status, headers }, WasiBody { stream, _body: incoming, _response: response }))
    }
}

/// A response body. Fields drop in order: the stream before its body, the
/// body before its response, as `wasi:http` requires.
pub struct WasiBody {
    stream: InputStream,
    _body: IncomingBody,
    _response: IncomingResponse,
}

impl Body for WasiBody {
    fn read_capped(self, cap: usize) -> Result<(Vec<u8>, bool), NetError> {
        let mut out = Vec::new();
        let read_err = |e: StreamError| match e {
            StreamError::LastOperationFailed(err) => match wasi::http::types::http_error_code(&err) {
                Some(code) => map_code(&code),
                None => NetError::Other(err.to_debug_string()),
            },
            StreamError::Closed => NetError::Other("closed".into()),
        };
        while out.len() < cap {
            let want = ((cap - out.len()) as u64).min(READ_CHUNK);
            match self.stream.blocking_read(want) {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(StreamError::Closed) => return Ok((out, false)),
                Err(e) => return Err(read_err(e)),
            }
        }
        // At the cap: is there more? One byte tells.
        loop {
            match self.stream.blocking_read(1) {
                Ok(bytes) if bytes.is_empty() => continue,
                Ok(_) => return Ok((out, true)),
                Err(StreamError::Closed) => return Ok((out, false)),
                Err(e) => return Err(read_err(e)),
            }
        }
    }
}
