//! Checks every request passes before a handler sees it, so that a browser
//! cannot be used against a local server and an oversize body is refused
//! before a byte of it is read.
//!
//! - **Host.** A web page the user visits can send requests to
//!   `127.0.0.1:8080`; with DNS rebinding (a name of the attacker's that
//!   resolves to 127.0.0.1) it can also read the answers. The browser then
//!   sends the attacker's name in `Host`. Bound to a loopback address, the
//!   service answers only requests whose `Host` is `localhost`, `127.0.0.1`
//!   or `[::1]` with the bound port, or a name given with `--allow-host`;
//!   anything else gets 403 `host_not_allowed`. Bound to another address
//!   (the user chose to expose it), `Host` is checked only if `--allow-host`
//!   names the names to accept.
//! - **Content type.** Without a preflight, a page can only POST
//!   `text/plain`, `application/x-www-form-urlencoded` or
//!   `multipart/form-data`; requiring `Content-Type: application/json` (415
//!   `unsupported_media_type` otherwise) makes the browser ask first, and the
//!   service never grants cross-origin requests.
//! - **Declared size.** A `Content-Length` above the body limit gets 413
//!   `body_too_large` at once, before reading (and the connection is closed,
//!   not drained).
//!
//! Implemented as a `tower_http::validate_request` check, answering with
//! the API's error object.

use super::ApiError;
use axum::body::Body;
use axum::http::{header, Method, Request, Response, StatusCode};
use axum::response::IntoResponse;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use tower_http::validate_request::ValidateRequest;

/// Which `Host` values are accepted; `None`: any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    allowed: Option<BTreeSet<String>>,
}

impl HostPolicy {
    /// The policy of a server bound to `addr` with these `--allow-host`
    /// names (`name` accepts `name` and `name:PORT`; `name:port` only itself).
    pub fn new(addr: SocketAddr, extra: &[String]) -> HostPolicy {
        if !addr.ip().is_loopback() && extra.is_empty() {
            return HostPolicy { allowed: None };
        }
        let port = addr.port();
        let mut allowed = BTreeSet::new();
        let mut allow = |name: &str| {
            let name = name.trim().to_ascii_lowercase();
            let has_port = match name.strip_prefix('[') {
                Some(rest) => rest.contains("]:"),
                None => name.contains(':'),
            };
            if has_port {
                allowed.insert(name);
            } else {
                allowed.insert(format!("{name}:{port}"));
                if port == 80 {
                    allowed.insert(name);
                }
            }
        };
        if addr.ip().is_loopback() {
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                allow(name);
            }
        }
        for name in extra {
            allow(name);
        }
        HostPolicy { allowed: Some(allowed) }
    }

    /// Whether a `Host` value is accepted.
    pub fn accepts(&self, host: &str) -> bool {
        match &self.allowed {
            None => true,
            Some(set) => set.contains(&host.trim().to_ascii_lowercase()),
        }
    }

    /// The accepted values, for messages (`None`: any).
    pub fn names(&self) -> Option<Vec<String>> {
        self.allowed.as_ref().map(|s| s.iter().cloned().collect())
    }
}

/// The checks, as a `tower_http` request validator.
#[derive(Clone)]
pub struct Hygiene {
    hosts: Arc<HostPolicy>,
    max_body_bytes: usize,
}

impl Hygiene {
    /// Checks for a server with this host policy and body limit.
    pub fn new(hosts: HostPolicy, max_body_bytes: usize) -> Hygiene {
        Hygiene { hosts: Arc::new(hosts), max_body_bytes }
    }

    /// The first check a request fails, as the API's error.
    pub fn check<B>(&self, req: &Request<B>) -> Result<(), ApiError> {
        // HTTP/1.1 requires Host; an absolute-form target carries it in the URI.
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok().map(str::to_string))
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        if let Some(host) = host {
            if !self.hosts.accepts(&host) {
                let names = self.hosts.names().unwrap_or_default().join(", ");
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "host_not_allowed",
                    "",
                    format!(
                        "requests for host {host:?} are refused: this server answers {names} (start it with \
                         --allow-host NAME to accept another name)"
                    ),
                ));
            }
        }
        if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
            if let Some(n) = len.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
                if n > self.max_body_bytes as u64 {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body_too_large",
                        "",
                        format!(
                            "the request declares a body of {n} bytes (Content-Length); this server's limit is {} bytes \
                             (--max-body-bytes)",
                            self.max_body_bytes
                        ),
                    ));
                }
            }
        }
        // Only a route that takes a body needs a JSON one: a POST to an
        // unknown route is a 404, to a GET route a 405, whatever it carries.
        let takes_body = super::ROUTES.iter().any(|(m, p, _)| *m == req.method().as_str() && *p == req.uri().path());
        if takes_body && matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
            let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let essence = ct.split(';').next().unwrap_or("").trim();
            if !essence.eq_ignore_ascii_case("application/json") {
                let got = if ct.is_empty() { "no Content-Type".to_string() } else { format!("Content-Type {ct:?}") };
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "",
                    format!("send the request body as JSON with Content-Type: application/json (got {got})"),
                ));
            }
        }
        Ok(())
    }
}

impl<B> ValidateRequest<B> for Hygiene {
    type ResponseBody = Body;

    fn validate(&mut self, req: &mut Request<B>) -> Result<(), Response<Body>> {
        self.check(req).map_err(|e| {
            let oversize = e.status == StatusCode::PAYLOAD_TOO_LARGE;
            let mut res = e.into_response();
            if oversize {
                // Do not drain a body that was refused for its size.
                res.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            }
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, host: Option<&str>, ct: Option<&str>, len: Option<&str>) -> Request<()> {
        let mut b = Request::builder().method(method).uri("/v1/optimize");
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        if let Some(c) = ct {
            b = b.header(header::CONTENT_TYPE, c);
        }
        if let Some(l) = len {
            b = b.header(header::CONTENT_LENGTH, l);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn loopback_answers_its_own_names_only() {
        let p = HostPolicy::new("127.0.0.1:8080".parse().unwrap(), &["tra.internal".into()]);
        for ok in ["127.0.0.1:8080", "LOCALHOST:8080", "[::1]:8080", "tra.internal:8080"] {
            assert!(p.accepts(ok), "{ok}");
        }
        for bad in ["evil.example:8080", "127.0.0.1:9090", "localhost", "tra.internal", "127.0.0.2:8080"] {
            assert!(!p.accepts(bad), "{bad}");
        }
        let port80 = HostPolicy::new("[::1]:80".parse().unwrap(), &[]);
        assert!(port80.accepts("localhost") && port80.accepts("[::1]:80"));
        let public = HostPolicy::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert!(public.accepts("anything:1"));
        let named = HostPolicy::new("0.0.0.0:8080".parse().unwrap(), &["tra.example:443".into()]);
        assert!(named.accepts("tra.example:443") && !named.accepts("localhost:8080"));
    }

    #[test]
    fn each_check_names_what_is_wrong() {
        let h = Hygiene::new(HostPolicy::new("127.0.0.1:8080".parse().unwrap(), &[]), 1000);
        let json = Some("application/json; charset=utf-8");
        assert!(h.check(&req("POST", Some("127.0.0.1:8080"), json, Some("10"))).is_ok());
        assert!(h.check(&req("POST", None, json, None)).is_ok(), "HTTP/1.0 without Host");
        let e = h.check(&req("POST", Some("rebound.example:8080"), json, None)).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (403, "host_not_allowed"));
        assert!(e.message.contains("rebound.example") && e.message.contains("--allow-host"), "{}", e.message);
        let e = h.check(&req("POST", Some("localhost:8080"), Some("text/plain"), None)).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (415, "unsupported_media_type"));
        let e = h.check(&req("POST", Some("localhost:8080"), None, None)).unwrap_err();
        assert!(e.message.contains("no Content-Type"), "{}", e.message);
        let e = h.check(&req("POST", Some("localhost:8080"), json, Some("1000000000000"))).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (413, "body_too_large"));
        assert!(h.check(&req("GET", Some("localhost:8080"), None, None)).is_ok(), "GET needs no content type");
        // A POST that no route takes is the router's to answer (404 or 405).
        let mut elsewhere = req("POST", Some("localhost:8080"), Some("text/plain"), None);
        *elsewhere.uri_mut() = "/nope".parse().unwrap();
        assert!(h.check(&elsewhere).is_ok(), "no route: 404, not 415");
        *elsewhere.uri_mut() = "/v1/rules".parse().unwrap();
        assert!(h.check(&elsewhere).is_ok(), "a GET route: 405, not 415");
    }
}
