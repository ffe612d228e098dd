//! Where `skewwatch top` reads from: the agent's URL, its token, and the two GET answers it
//! reads every window (`/api/v1/history` and `/api/v1/alerts`), as the client sees them.
//!
//! The JSON shapes are declared here, on the reading side, with only the fields the view uses
//! (serde ignores the rest), so the agent can add fields without breaking an older `top`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client;

/// Connect, write and read timeout of one request: an agent that takes longer is treated as
/// not answering, and the view says so rather than freezing.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Shard rows asked for: the most `/api/v1/history` answers (its `MAX_SHARDS`), so the filter
/// searches every row the agent keeps.
pub const ROWS: usize = 64;
/// Largest token file read (a bearer token is a line, not a document).
const MAX_TOKEN_BYTES: u64 = 4096;

/// Why the agent could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The URL is not `http://host[:port][/prefix]`.
    #[error("--url {url}: {why}; expected http://HOST[:PORT][/PREFIX], e.g. http://127.0.0.1:9477")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The host name did not resolve.
    #[error("--url {url}: cannot resolve {host}: {cause}")]
    Resolve {
        /// The URL as given.
        url: String,
        /// The host and port looked up.
        host: String,
        /// The resolver's error (in the message, so the banner shows it too).
        cause: std::io::Error,
    },
    /// The token file could not be read, or holds no token.
    #[error("--token-file {}: {why}", path.display())]
    Token {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// The agent did not answer (refused, timed out, closed early).
    #[error("GET {path} from {addr}: {cause} (is the agent running, and is --url right?)")]
    Unreachable {
        /// The agent's address.
        addr: SocketAddr,
        /// The path asked for.
        path: String,
        /// The transport error.
        cause: std::io::Error,
    },
    /// The agent answered with an error status.
    #[error("GET {path} from {addr} answered {status}{hint}")]
    Status {
        /// The agent's address.
        addr: SocketAddr,
        /// The path asked for.
        path: String,
        /// The status code.
        status: u16,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// The answer is not the JSON this version reads.
    #[error(
        "GET {path} from {addr}: unexpected answer ({cause}); is --url a skewwatch agent of a compatible version?"
    )]
    Json {
        /// The agent's address.
        addr: SocketAddr,
        /// The path asked for.
        path: String,
        /// The decoder's error.
        cause: serde_json::Error,
    },
}

/// An agent to read: its address, the path prefix it is served under and the bearer token.
#[derive(Clone)]
pub struct Source {
    /// The URL as the user gave it (for titles and errors).
    pub url: String,
    addr: SocketAddr,
    prefix: String,
    authorization: Option<String>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token never shows, not even in a debug print.
        f.debug_struct("Source")
            .field("url", &self.url)
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .field("token", &self.authorization.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// What one poll read: the group's history and every active alert.
#[derive(Debug, Clone)]
pub struct Reading {
    /// `GET /api/v1/history`.
    pub history: History,
    /// `GET /api/v1/alerts`, the alerts only.
    pub alerts: Vec<ActiveAlert>,
}

/// `GET /api/v1/history`: one group's last windows (docs/live-view.md has every field).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct History {
    /// Window length in seconds.
    pub window_secs: f64,
    /// Windows the agent's ring keeps.
    pub capacity: usize,
    /// The latest window's groups, busiest first.
    pub groups: Vec<String>,
    /// The group answered.
    pub group: Option<String>,
    /// Row names, busiest in the latest window first (names in natural order on a tie).
    pub shards: Vec<String>,
    /// Shards of the group in the latest window.
    pub shards_total: usize,
    /// Oldest first.
    pub windows: Vec<Window>,
    /// The cache loop, when the group reports cache results.
    pub cache: Option<Cache>,
    /// The group's current top keys.
    pub top_keys: Vec<Key>,
    /// The top keys are exact within their bounds.
    pub keys_certified: bool,
    /// Each row's current top keys, in row order.
    pub shard_keys: Vec<Vec<Key>>,
    /// The what-if curve of the group's cache in the latest window, when its records name a
    /// cache key (absent from agents that do not simulate).
    #[serde(default)]
    pub whatif: Option<WhatIf>,
}

/// The simulated cache in the latest window: hit ratio against TTL.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct WhatIf {
    /// Requests with a cache key.
    pub requests: u64,
    /// The cache's own hit ratio.
    pub cache_hit_ratio: Option<f64>,
    /// The observed policy's simulated hit ratio minus the cache's own.
    pub check_error: Option<f64>,
    /// The share of keys simulated.
    pub sample_rate: f64,
    /// The cache as configured and the candidates that change only its TTL, shortest first.
    pub ttl_curve: Vec<PolicyPoint>,
    /// The other candidates, at their TTL.
    pub others: Vec<PolicyPoint>,
}

/// One policy's prediction.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct PolicyPoint {
    /// Its written form (`observed`, `ttl=20m`, `serve-stale`).
    pub policy: String,
    /// Its TTL, seconds.
    pub ttl_secs: f64,
    /// The cache as configured.
    pub observed: bool,
    /// Predicted hit ratio.
    pub hit_ratio: f64,
    /// Predicted backend calls per request.
    pub backend_calls_per_request: f64,
    /// The sample's error bound of both.
    pub error_bound: f64,
}

/// One window of the group.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Window {
    /// Window end, unix seconds.
    pub end: f64,
    /// Requests in the window.
    pub requests: u64,
    /// Request rate.
    pub requests_per_second: f64,
    /// 1 / number of shards.
    pub fair_share: f64,
    /// Bias-corrected Gini.
    pub gini: Option<f64>,
    /// The Gini that Poisson noise explains at this volume.
    pub gini_noise_floor: Option<f64>,
    /// The busiest shard's share.
    pub top1_share: Option<f64>,
    /// The top-1 share that Poisson noise explains at this volume.
    pub top1_noise_floor: Option<f64>,
    /// Errors over requests.
    pub error_ratio: Option<f64>,
    /// p99 latency, milliseconds.
    pub p99_ms: Option<f64>,
    /// Per row: `[share, requests/s, error ratio, cache hit ratio, p99 ms]`, or null.
    pub cells: Vec<Option<Cell>>,
}

/// One shard in one window: share, requests/s, error ratio, cache hit ratio, p99 ms.
pub type Cell = (f64, f64, Option<f64>, Option<f64>, Option<f64>);

/// The cache loop now.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct Cache {
    /// Hit ratio of the newest window with traffic.
    pub hit_ratio: Option<f64>,
    /// Backend calls (misses) per request now.
    pub backend_calls_per_request: f64,
    /// The same in the calmest window answered.
    pub calmest_backend_calls_per_request: f64,
    /// Their ratio.
    pub amplification: Option<f64>,
}

/// A top key with its certified bounds.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Key {
    /// How to show it: `(empty)` for the empty key.
    pub label: String,
    /// Upper bound of its requests.
    pub requests: u64,
    /// Certified lower bound.
    pub lower_bound: u64,
    /// Upper-bound share.
    pub share: f64,
}

#[derive(Deserialize)]
struct AlertsReply {
    data: AlertsData,
}

#[derive(Deserialize)]
struct AlertsData {
    alerts: Vec<ActiveAlert>,
}

/// One alert of `GET /api/v1/alerts`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveAlert {
    /// Identifying labels (`alertname`, `group`, `shard`, ...).
    pub labels: BTreeMap<String, String>,
    /// `summary`, `description`, `mitigations` and the figures.
    pub annotations: BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: String,
    /// RFC 3339.
    pub active_at: String,
}

impl Source {
    /// Parses `url` (`http://HOST[:PORT][/PREFIX]`; the scheme may be left out) and reads the
    /// token file, if any.
    pub fn new(url: &str, token_file: Option<&Path>) -> Result<Source, SourceError> {
        let bad = |why| SourceError::BadUrl {
            url: url.to_owned(),
            why,
        };
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(bad(
                    "https is not supported (reach the agent over plain HTTP, e.g. through kubectl port-forward)",
                ));
            }
            Some(_) => return Err(bad("the scheme must be http")),
            None => url,
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') || prefix.contains(['?', '#']) {
            return Err(bad("user info, a query or a fragment cannot be given"));
        }
        // An IPv6 literal is bracketed; the port follows the last colon after it.
        let has_port = match authority.rfind(']') {
            Some(close) => authority[close..].contains(':'),
            None => authority.contains(':'),
        };
        let host = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addr = host
            .to_socket_addrs()
            .map_err(|cause| SourceError::Resolve {
                url: url.to_owned(),
                host: host.clone(),
                cause,
            })?
            .next()
            .ok_or_else(|| bad("the host resolves to no address"))?;
        let authorization = token_file.map(read_token).transpose()?;
        Ok(Source {
            url: url.to_owned(),
            addr,
            prefix: prefix.trim_end_matches('/').to_owned(),
            authorization: authorization.map(|t| format!("Bearer {t}")),
        })
    }

    /// Reads the history of `group` (the busiest group when `None`) and the active alerts.
    pub fn read(&self, group: Option<&str>) -> Result<Reading, SourceError> {
        let mut path = format!("/api/v1/history?shards={ROWS}");
        if let Some(g) = group {
            path.push_str("&group=");
            path.push_str(&percent_encode(g));
        }
        let history: History = self.get_json(&path)?;
        let alerts: AlertsReply = self.get_json("/api/v1/alerts")?;
        Ok(Reading {
            history,
            alerts: alerts.data.alerts,
        })
    }

    fn get_json<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, SourceError> {
        let full = format!("{}{path}", self.prefix);
        let headers: Vec<(&str, &str)> = self
            .authorization
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .chain([("Accept", "application/json")])
            .collect();
        let resp = client::request(self.addr, "GET", &full, &headers, b"", REQUEST_TIMEOUT)
            .map_err(|cause| SourceError::Unreachable {
                addr: self.addr,
                path: full.clone(),
                cause,
            })?;
        if resp.status != 200 {
            return Err(SourceError::Status {
                addr: self.addr,
                path: full,
                status: resp.status,
                hint: match resp.status {
                    401 | 403 => " (give the agent's token with --token-file)",
                    404 => " (is --url the agent's HTTP listener, with the right prefix?)",
                    _ => "",
                },
            });
        }
        serde_json::from_slice(&resp.body).map_err(|cause| SourceError::Json {
            addr: self.addr,
            path: full,
            cause,
        })
    }
}

/// The token in `path`: its content without surrounding white space, which must be one line of
/// printable characters.
fn read_token(path: &Path) -> Result<String, SourceError> {
    use std::io::Read as _;
    let err = |why: String| SourceError::Token {
        path: path.to_owned(),
        why,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_BYTES {
        return Err(err(format!("longer than {MAX_TOKEN_BYTES} bytes")));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(err("the file is empty".to_owned()));
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(err(
            "the token must be one line of printable characters".to_owned()
        ));
    }
    Ok(token.to_owned())
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a query value.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_and_without_scheme_port_and_prefix() {
        let s = Source::new("http://127.0.0.1:9477", None).unwrap();
        assert_eq!((s.addr.port(), s.prefix.as_str()), (9477, ""));
        let s = Source::new("127.0.0.1:1234/skew/", None).unwrap();
        assert_eq!((s.addr.port(), s.prefix.as_str()), (1234, "/skew"));
        let s = Source::new("http://[::1]/", None).unwrap();
        assert_eq!(s.addr.port(), 80);
        for bad in [
            "https://127.0.0.1:9477",
            "ftp://x",
            "http://",
            "http://u@127.0.0.1:1",
            "http://127.0.0.1:1/?x",
        ] {
            assert!(
                matches!(Source::new(bad, None), Err(SourceError::BadUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_token_is_one_trimmed_line_and_never_printed() {
        let dir = std::env::temp_dir().join(format!("skewwatch-top-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let s = Source::new("127.0.0.1:1", Some(&file)).unwrap();
        assert_eq!(s.authorization.as_deref(), Some("Bearer s3cret"));
        assert!(!format!("{s:?}").contains("s3cret"));
        std::fs::write(&file, "  \n").unwrap();
        assert!(matches!(
            Source::new("127.0.0.1:1", Some(&file)),
            Err(SourceError::Token { .. })
        ));
        std::fs::write(&file, "two\nlines").unwrap();
        assert!(Source::new("127.0.0.1:1", Some(&file)).is_err());
        assert!(Source::new("127.0.0.1:1", Some(&dir.join("missing"))).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn group_names_are_percent_encoded() {
        assert_eq!(percent_encode("metadata-db"), "metadata-db");
        assert_eq!(percent_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn an_agent_that_is_not_there_is_unreachable() {
        // A port just released: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s = Source::new(&format!("127.0.0.1:{port}"), None).unwrap();
        assert!(matches!(s.read(None), Err(SourceError::Unreachable { .. })));
    }
}
