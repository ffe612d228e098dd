//! The live view: `GET /` (the page), `GET /ui/app.js` and `GET /ui/app.css`.
//!
//! The three files live in `agent/ui/` and are compiled into the binary with `include_str!`, so
//! the page works offline and loads nothing from anywhere else. The page reads
//! `/api/v1/history` and `/api/v1/alerts` with GET only and draws them.
//!
//! Safe by construction:
//!
//! - every answer carries a Content-Security-Policy that allows scripts, styles and requests
//!   from this origin only (no inline script or style, no other origin, images only from
//!   `data:`), no framing, and `X-Content-Type-Options: nosniff`;
//! - the script writes every name from input with `textContent`, never as markup, so a shard
//!   called `<img src=x onerror=alert(1)>` shows as those characters.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;

/// The page.
pub const INDEX_HTML: &str = include_str!("../../ui/index.html");
/// Its style sheet.
pub const APP_CSS: &str = include_str!("../../ui/app.css");
/// Its script.
pub const APP_JS: &str = include_str!("../../ui/app.js");

/// What the page may load and do: its own script, style sheet and API, `data:` images (the
/// empty favicon), nothing inline, nothing from elsewhere, no framing, no form posts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The live view's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                HeaderName::from_static("referrer-policy"),
                HeaderValue::from_static("no-referrer"),
            ),
            // The assets change only with the binary; a restart to a new version must not
            // leave an old script talking to a new API.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// The page's weight in bytes: what a browser downloads to show it, before any data.
pub fn page_bytes() -> usize {
    INDEX_HTML.len() + APP_CSS.len() + APP_JS.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_no_inline_script_or_style_and_no_other_origin() {
        let lower = INDEX_HTML.to_ascii_lowercase();
        assert!(
            lower.contains(r#"<script src="/ui/app.js""#),
            "{INDEX_HTML}"
        );
        assert_eq!(lower.matches("<script").count(), 1, "one external script");
        assert!(!lower.contains("<style"), "no inline style sheet");
        assert!(!lower.contains(" style="), "no inline style attribute");
        assert!(!has_event_handler(&lower), "no inline event handler");
        for text in [INDEX_HTML, APP_CSS, APP_JS] {
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("//cdn") && !text.contains("@import"));
        }
    }

    /// The README and docs/live-view.md state the page's weight; a change to the assets
    /// must update them.
    #[test]
    fn the_docs_state_the_page_weight() {
        let n = page_bytes();
        let figure = format!("{},{:03} bytes", n / 1000, n % 1000);
        for doc in ["README.md", "docs/live-view.md"] {
            let text = std::fs::read_to_string(format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
            assert!(text.contains(&figure), "{doc} does not say {figure}");
        }
    }

    /// An attribute like ` onload=` or ` onerror =`.
    fn has_event_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name > 0 && rest[name..].trim_start().starts_with('=')
        })
    }

    #[test]
    fn the_script_never_writes_markup() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
    }
}
