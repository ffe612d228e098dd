//! `CardinalityOverflow`: records are being folded into `__other__` because a cap is full.
//!
//! **Signal**, per group and window: the records that arrived for a shard the group could not
//! track (its shard cap, `limits.max_shards_per_group`, or the agent's shard budget,
//! `limits.max_shards_total`, was full, and no idle shard could give up its slot) and went to
//! the group's `__other__` shard; and, for the overflow group, the records of groups that
//! arrived when the group cap (`limits.max_groups`) was full.
//!
//! **Condition**: at least `min_folded_records` folded records in a window, for
//! `consecutive_windows` windows. Labels: `group` (the group whose shards fold), or
//! `group="__other__"` for groups that fold.
//!
//! **Why it matters**: folded traffic is counted, so totals stay right, but it is nobody's:
//! no detector judges `__other__`, so a hot shard or a failing group that folds cannot alert.
//! The usual causes are a cap set too low for the system, a new and much larger system, or
//! junk names (a client that puts request ids in the shard tag). The annotation says which cap
//! and what to do.
//!
//! **Why it does not false-alarm**: nothing folds while the caps hold, and idle groups and
//! shards give up their slots before anything folds, so churn alone does not fire it.
//!
//! Its one firing path, as the `proven_by` annotation names it: `consecutive_windows`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, Detector, DetectorKind, DetectorSettings, Problems, RuleSettings, pct,
    restore_state_into, save_state_of,
};
use crate::observation::{OTHER_LABEL, quote};
use crate::snapshot::GroupSnapshot;

/// `detectors.cardinality_overflow` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CardinalityOverflowConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Fewest folded records in a window that count.
    pub min_folded_records: u64,
    /// Windows in a row with folding before the detector reports it.
    pub consecutive_windows: u32,
}

impl Default for CardinalityOverflowConfig {
    fn default() -> Self {
        CardinalityOverflowConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 600.0),
            min_folded_records: 1,
            consecutive_windows: 1,
        }
    }
}

impl DetectorSettings for CardinalityOverflowConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        if self.min_folded_records == 0 {
            p.fail(
                "min_folded_records",
                "0 would fire on every window: use 1 or more",
            );
        }
        p.windows("consecutive_windows", self.consecutive_windows);
    }
}

/// The `CardinalityOverflow` detector. See the module docs.
#[derive(Debug, Clone)]
pub struct CardinalityOverflow {
    cfg: CardinalityOverflowConfig,
    /// Windows in a row with folding, per group (`__other__` for the overflow group).
    streaks: BTreeMap<String, u32>,
}

/// What one group's folding looks like in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    folded: u64,
    requests: u64,
    windows: u32,
}

impl Figures {
    fn share(&self) -> f64 {
        self.folded as f64 / self.requests.max(1) as f64
    }
}

fn render(cfg: &CardinalityOverflowConfig, g: &GroupSnapshot, fig: &Figures) -> Finding {
    let mut f = if g.overflow {
        let mut f = Finding::new(CardinalityOverflow::ALERTNAME, cfg.rule.severity, &[]);
        // The overflow group's identity is the overflow label itself, not a name to escape.
        f.labels.insert("group".into(), OTHER_LABEL.into());
        f
    } else {
        Finding::new(
            CardinalityOverflow::ALERTNAME,
            cfg.rule.severity,
            &[("group", &g.group)],
        )
    };
    let (summary, description) = if g.overflow {
        (
            format!(
                "{} records of groups over the group cap were folded into __other__",
                fig.folded
            ),
            format!(
                "{} records in the last window came from groups the agent could not track: \
                 limits.max_groups is full and no group was idle long enough to give up its \
                 slot. Their traffic is counted under group __other__, where no detector \
                 judges it. Raise limits.max_groups, list the groups that matter in \
                 limits.pinned_groups, or find the client that sends unexpected group names.",
                fig.folded
            ),
        )
    } else {
        let group = quote(&g.group);
        (
            format!(
                "{} of {group}'s records were folded into its __other__ shard",
                pct(fig.share())
            ),
            format!(
                "{} of {group}'s {} records in the last window went to shards the agent could \
                 not track: limits.max_shards_per_group or limits.max_shards_total is full and \
                 no shard was idle long enough to give up its slot. That traffic is counted \
                 under shard __other__, where no detector judges it, so a hot shard among it \
                 cannot alert. Raise the caps (each shard costs memory: see the configuration \
                 reference), or find the client that sends unexpected shard names.",
                fig.folded, fig.requests
            ),
        )
    };
    f = f
        .annotate("folded_records", fig.folded.to_string())
        .annotate("folded_share", pct(fig.share()))
        .annotate("level", if g.overflow { "group" } else { "shard" })
        .annotate("windows", fig.windows.to_string())
        .annotate("summary", summary)
        .annotate("description", description);
    f
}

impl DetectorKind for CardinalityOverflow {
    const ALERTNAME: &'static str = "CardinalityOverflow";
    const KEY: &'static str = "cardinality_overflow";
    type Config = CardinalityOverflowConfig;

    fn new(cfg: CardinalityOverflowConfig, _window_secs: f64) -> Self {
        CardinalityOverflow {
            cfg,
            streaks: BTreeMap::new(),
        }
    }
}

// Not a `GroupDetector`: it judges the `__other__` aggregate as a group of its own, whose streak
// must outlast windows with no group by that name (the shared implementation forgets what is
// not a group by name), and a window without folding ends a group's streak, so its whole state
// is rebuilt from each window rather than kept and pruned.
impl Detector for CardinalityOverflow {
    fn save_state(&self) -> serde_json::Value {
        save_state_of(&self.streaks)
    }

    fn restore_state(&mut self, state: serde_json::Value) -> Result<(), String> {
        restore_state_into(&mut self.streaks, state)
    }

    fn alertname(&self) -> &'static str {
        Self::ALERTNAME
    }

    fn evaluate(&mut self, ctx: &Context<'_>, out: &mut Vec<Finding>) {
        let mut seen = BTreeMap::new();
        for g in &ctx.snapshot.groups {
            let name = if g.overflow {
                OTHER_LABEL
            } else {
                g.group.as_str()
            };
            if g.folded_records < self.cfg.min_folded_records {
                continue;
            }
            let streak = self
                .streaks
                .get(name)
                .copied()
                .unwrap_or(0)
                .saturating_add(1);
            seen.insert(name.to_owned(), streak);
            if streak >= self.cfg.consecutive_windows {
                let fig = Figures {
                    folded: g.folded_records,
                    requests: g.requests,
                    windows: streak,
                };
                let f = render(&self.cfg, g, &fig);
                out.push(f.annotate("proven_by", "consecutive_windows"));
            }
        }
        // A window without folding ends a streak; state is kept only for folding groups.
        self.streaks = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertBook;
    use crate::detect::testkit;
    use crate::observation::ObservationRef;
    use crate::window::{WindowConfig, Windows};

    #[test]
    fn shard_folding_fires_for_the_group_and_group_folding_for_other() {
        let cfg = WindowConfig {
            max_groups: 1,
            max_shards_per_group: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for s in ["a", "b", "c", "d"] {
            w.record(&ObservationRef::new("db", s));
        }
        w.record(&ObservationRef::new("junk", "x"));
        let snap = w.close(10.0);
        let mut d = CardinalityOverflow::new(CardinalityOverflowConfig::default(), 10.0);
        let mut book = AlertBook::new(Default::default());
        let found = testkit::evaluate(&mut d, &mut book, &snap, 10.0);
        let groups: Vec<_> = found.iter().map(|f| f.labels["group"].as_str()).collect();
        assert_eq!(groups, ["__other__", "db"]);
        assert_eq!(found[0].annotations["level"], "group");
        assert_eq!(found[1].annotations["folded_records"], "2");
        assert_eq!(found[1].annotations["folded_share"], "50.0%");
        assert!(found[1].annotations["summary"].contains("\"db\""));
    }

    #[test]
    fn a_group_really_named_other_is_told_apart_from_the_overflow() {
        let cfg = WindowConfig {
            max_shards_per_group: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        w.record(&ObservationRef::new(OTHER_LABEL, "a"));
        w.record(&ObservationRef::new(OTHER_LABEL, "b"));
        let snap = w.close(10.0);
        let mut d = CardinalityOverflow::new(CardinalityOverflowConfig::default(), 10.0);
        let mut book = AlertBook::new(Default::default());
        let found = testkit::evaluate(&mut d, &mut book, &snap, 10.0);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].labels["group"], "\\__other__");
    }

    #[test]
    fn nothing_fires_while_the_caps_hold_and_a_streak_needs_consecutive_windows() {
        let cfg = CardinalityOverflowConfig {
            consecutive_windows: 2,
            ..CardinalityOverflowConfig::default()
        };
        let mut d = CardinalityOverflow::new(cfg, 10.0);
        let mut book = AlertBook::new(Default::default());
        let wcfg = WindowConfig {
            max_shards_per_group: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(wcfg, 0.0);
        let mut fired = Vec::new();
        for (i, shards) in [&["a"][..], &["a", "b"], &["a"], &["a", "b"], &["a", "b"]]
            .iter()
            .enumerate()
        {
            for s in *shards {
                w.record(&ObservationRef::new("db", s));
            }
            let snap = w.close(10.0 * (i + 1) as f64);
            fired.push(!testkit::evaluate(&mut d, &mut book, &snap, 10.0).is_empty());
        }
        assert_eq!(fired, [false, false, false, false, true]);
    }
}
