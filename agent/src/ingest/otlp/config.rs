//! The validated `otlp:` section: which attributes and metric names the decoders read, as a
//! [`Mapping`], checked by [`validate`].

use super::{Lists, Mapping};
use crate::config::raw::RawOtlp;
use crate::config::validate::Check;

/// Most entries one `otlp:` list may hold: each is tried on every span until one matches.
const MAX_OTLP_NAMES: usize = 16;

/// Validates the `otlp:` section into the [`Mapping`], every problem pushed to `c` with
/// its field (`otlp.shard_attributes`).
pub fn validate(c: &mut Check<'_>, raw: RawOtlp) -> Mapping {
    let d = Mapping::default();
    let mut names = |field: &str, v: Option<Vec<String>>, default: &[String], required: bool| {
        let field = format!("otlp.{field}");
        let v = v.unwrap_or_else(|| default.to_vec());
        if required && v.is_empty() {
            c.fail(&field, "list at least one attribute name or template");
        }
        if v.len() > MAX_OTLP_NAMES {
            c.fail(
                &field,
                format!("{} entries: list at most {MAX_OTLP_NAMES}", v.len()),
            );
        }
        if let Some(bad) = v.iter().find(|n| n.is_empty() || n.len() > 255) {
            c.fail(&field, format!("`{bad}`: an entry takes 1..=255 bytes"));
        }
        v
    };
    let lists = Lists {
        group: names(
            "group_attributes",
            raw.group_attributes,
            &d.lists.group,
            true,
        ),
        shard: names(
            "shard_attributes",
            raw.shard_attributes,
            &d.lists.shard,
            true,
        ),
        key: names("key_attributes", raw.key_attributes, &d.lists.key, false),
        cache: names(
            "cache_attributes",
            raw.cache_attributes,
            &d.lists.cache,
            false,
        ),
        cache_key: names(
            "cache_key_attributes",
            raw.cache_key_attributes,
            &d.lists.cache_key,
            false,
        ),
    };
    let metric_names = names("metric_names", raw.metric_names, &d.metric_names, false);
    let max_cumulative_series = c.range(
        "otlp.max_cumulative_series",
        raw.max_cumulative_series,
        d.max_cumulative_series,
        1,
        1_000_000,
    );
    let mut m = match Mapping::new(lists) {
        Ok(m) => m,
        Err((which, e)) => {
            c.fail(&format!("otlp.{which}_attributes"), e);
            d.clone()
        }
    };
    m.client_spans_only = raw.client_spans_only.unwrap_or(d.client_spans_only);
    m.metric_names = metric_names;
    m.max_cumulative_series = max_cumulative_series;
    m
}
