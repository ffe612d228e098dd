//! What a request passes before its handler: a whole-request timeout, the bearer token and the
//! content type of a POST body.
//!
//! The token is checked from the headers alone, before anything reads the body, so a client
//! without it cannot make the agent buffer a megabyte. POST bodies must say they are JSON
//! (`application/json`, `application/x-ndjson` and the like) or OTLP protobuf: a web page can
//! post a form or plain text to any address without asking (a cross-site request), but not a
//! JSON content type, so this keeps a browser on the operator's machine from feeding the
//! agent.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ControlState;
use crate::config::Secret;

/// Content types a POST body may carry (compared without parameters, case-insensitively).
const BODY_TYPES: [&str; 6] = [
    "application/json",
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-protobuf",
    "application/protobuf",
];

/// Ends a request that takes longer than `timeout` (body, handling and answer) with 408.
pub async fn request_timeout(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(resp) => resp,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            [(header::CONNECTION, "close")],
            "the request took too long\n",
        )
            .into_response(),
    }
}

/// Refuses a request without the configured bearer token with 401, before its body is read.
pub async fn require_token(
    State(s): State<ControlState>,
    request: Request,
    next: Next,
) -> Response {
    let token = s.token.borrow().clone();
    if authorized(token.as_ref(), request.headers()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid bearer token is required\n",
        )
            .into_response()
    }
}

/// Refuses a POST whose body is not declared JSON or protobuf with 415.
pub async fn require_json_body(request: Request, next: Next) -> Response {
    match media_type(request.headers()) {
        Some(t) if BODY_TYPES.contains(&t.as_str()) => next.run(request).await,
        _ => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "send the body with Content-Type: application/x-ndjson or application/json \
                 (accepted: {})\n",
                BODY_TYPES.join(", ")
            ),
        )
            .into_response(),
    }
}

/// Lets a POST without a body type through (an admin request that reads no body), and one
/// declared JSON or protobuf; refuses anything else with 415, so a form that a web page posts
/// across sites, which always carries a form or text type, cannot reach the endpoint.
pub async fn refuse_form_body(request: Request, next: Next) -> Response {
    match media_type(request.headers()) {
        None => next.run(request).await,
        Some(t) if t.is_empty() || BODY_TYPES.contains(&t.as_str()) => next.run(request).await,
        Some(t) => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "`{t}` is not accepted here: send no Content-Type (the endpoint reads no body) \
                 or one of {}\n",
                BODY_TYPES.join(", ")
            ),
        )
            .into_response(),
    }
}

/// The media type `Content-Type` declares, lower-cased and without its parameters
/// (`Application/JSON; charset=utf-8` is `application/json`); `None` without a readable header.
pub(super) fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or("");
    Some(essence.trim().to_ascii_lowercase())
}

/// True when no token is configured, or `Authorization` carries it as a bearer token. The
/// scheme name is case-insensitive (RFC 9110); the token is not.
pub fn authorized(token: Option<&Secret>, headers: &HeaderMap) -> bool {
    let Some(token) = token else { return true };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, given)) = value.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && token.matches(given.trim().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_token_must_match_and_the_scheme_may_be_any_case() {
        let mut h = HeaderMap::new();
        let token = Secret::new(b"s3cret");
        let token = Some(&token);
        assert!(authorized(None, &h));
        assert!(!authorized(token, &h));
        for (value, ok) in [
            ("Bearer s3cre", false),
            ("Bearer s3cret", true),
            ("bearer s3cret", true),
            ("BEARER  s3cret ", true),
            ("Basic s3cret", false),
            ("Bearer S3CRET", false),
            ("s3cret", false),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(authorized(token, &h), ok, "{value}");
        }
    }
}
