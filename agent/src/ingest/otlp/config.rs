//! The validated `otlp:` section: which attributes and metric names the decoders read, as a
//! [`Mapping`], checked by [`validate`].

use super::Mapping;
use crate::config::raw::RawOtlp;
use crate::config::validate::Check;

/// Most attribute or metric names one `otlp:` list may hold: each is compared with every
/// attribute of every span.
const MAX_OTLP_NAMES: usize = 16;

/// Validates the `otlp:` section into the [`Mapping`], every problem pushed to `c` with
/// its field (`otlp.shard_attributes`).
pub fn validate(c: &mut Check<'_>, raw: RawOtlp) -> Mapping {
    let d = Mapping::default();
    let mut names = |field: &str, v: Option<Vec<String>>, default: Vec<String>, required: bool| {
        let field = format!("otlp.{field}");
        let v = v.unwrap_or(default);
        if required && v.is_empty() {
            c.fail(&field, "list at least one attribute name");
        }
        if v.len() > MAX_OTLP_NAMES {
            c.fail(
                &field,
                format!("{} names: list at most {MAX_OTLP_NAMES}", v.len()),
            );
        }
        if let Some(bad) = v.iter().find(|n| n.is_empty() || n.len() > 255) {
            c.fail(&field, format!("`{bad}`: a name takes 1..=255 bytes"));
        }
        v
    };
    let group = names("group_attributes", raw.group_attributes, d.group, true);
    let shard = names("shard_attributes", raw.shard_attributes, d.shard, true);
    let key = names("key_attributes", raw.key_attributes, d.key, false);
    let cache = names("cache_attributes", raw.cache_attributes, d.cache, false);
    let metric_names = names("metric_names", raw.metric_names, d.metric_names, false);
    let max_cumulative_series = c.range(
        "otlp.max_cumulative_series",
        raw.max_cumulative_series,
        d.max_cumulative_series,
        1,
        1_000_000,
    );
    Mapping {
        group,
        shard,
        key,
        cache,
        client_spans_only: raw.client_spans_only.unwrap_or(d.client_spans_only),
        metric_names,
        max_cumulative_series,
    }
}
