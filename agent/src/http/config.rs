//! The `http:` section, owned by the HTTP server: its limits and timeouts (and the body limit,
//! read from `limits:`), validated from the raw file.

use std::time::Duration;

use crate::config::raw::RawHttp;
use crate::config::validate::{Check, DEFAULT_HTTP_BODY_LIMIT_BYTES};

crate::config_part! {
    /// Validated `http:` settings (plus the body limit, from `limits:`).
    #[derive(Debug, Clone, PartialEq)]
    pub struct HttpConfig {
        /// Time to receive a request's headers. The clock starts when the server waits for a
        /// request, so on a keep-alive connection it is also the idle timeout.
        pub header_read_timeout: Duration => "http.header_read_timeout_secs",
        /// Time for a whole request, body included; past it the answer is 408.
        pub request_timeout: Duration => "http.request_timeout_secs",
        /// Connections served at once; a few more are admitted for health checks only.
        pub max_connections: usize => "http.max_connections",
        /// Ingest bodies read and parsed at once: with the body limit, it bounds the memory
        /// ingest can hold in requests.
        pub max_concurrent_ingest: usize => "http.max_concurrent_ingest",
        /// Largest request body.
        pub body_limit_bytes: usize => "limits.http_body_limit_bytes",
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_concurrent_ingest: 4,
            body_limit_bytes: DEFAULT_HTTP_BODY_LIMIT_BYTES,
        }
    }
}

/// Validates `http:`; the body limit comes from `limits:`.
pub fn validate(c: &mut Check<'_>, http: RawHttp, body_limit_bytes: usize) -> HttpConfig {
    let d = HttpConfig::default();
    HttpConfig {
        header_read_timeout: c.secs(
            "http.header_read_timeout_secs",
            http.header_read_timeout_secs,
            d.header_read_timeout,
            0.1,
            3600.0,
        ),
        request_timeout: c.secs(
            "http.request_timeout_secs",
            http.request_timeout_secs,
            d.request_timeout,
            0.1,
            3600.0,
        ),
        max_connections: c.range(
            "http.max_connections",
            http.max_connections,
            d.max_connections,
            1,
            65_536,
        ),
        max_concurrent_ingest: c.range(
            "http.max_concurrent_ingest",
            http.max_concurrent_ingest,
            d.max_concurrent_ingest,
            1,
            1024,
        ),
        body_limit_bytes,
    }
}
