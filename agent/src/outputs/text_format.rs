//! Writing Prometheus text format 0.0.4: label-value escaping, family headers, sample values,
//! and the label values of groups and shards. [`super::metrics`] writes its gauges and
//! [`super::totals`] its counters with these, so both agree on every byte.

use std::borrow::Cow;
use std::fmt::Write as _;

use skewwatch_detectors::observation::{OTHER_LABEL, label_value};
use skewwatch_detectors::snapshot::{GroupSnapshot, ShardSnapshot};

/// Appends `s` escaped as a label value.
pub(super) fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes the `# HELP` and `# TYPE` lines of a family of type `kind`.
pub(super) fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Appends a sample value: `NaN`, `+Inf`, `-Inf`, or the shortest decimal that reads back as
/// `v`.
pub(super) fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// A group's `group` label: `__other__` for the overflow group, the name (see
/// [`label_value`]) for any other, so a group really named `__other__` stays apart.
pub fn group_label(g: &GroupSnapshot) -> Cow<'_, str> {
    if g.overflow {
        Cow::Borrowed(OTHER_LABEL)
    } else {
        label_value(&g.group)
    }
}

/// A shard's `shard` label, as [`group_label`] writes groups.
pub fn shard_label(s: &ShardSnapshot) -> Cow<'_, str> {
    if s.overflow {
        Cow::Borrowed(OTHER_LABEL)
    } else {
        label_value(&s.shard)
    }
}
