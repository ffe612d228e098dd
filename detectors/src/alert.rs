//! The alert state machine: inactive -> pending (`for`) -> firing -> resolved, with hysteresis
//! (`keep_firing_for`), as Prometheus evaluates alerting rules.
//!
//! Detectors report [`Finding`]s: "this condition holds now". [`AlertBook::update`] turns the
//! findings of one evaluation into state changes and returns the [`Transition`]s (firing,
//! resolved) that delivery and `replay` print. The same code runs live and in replay, with time
//! passed in, so both give the same transitions for the same windows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::observation::{key_label, label_value};

/// Label or annotation set, sorted by name so output is deterministic.
pub type Labels = BTreeMap<String, String>;

/// Alert severity: the `severity` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Look soon.
    Warning,
    /// Page.
    Critical,
}

impl Severity {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// A detector's report that its condition holds for one entity in the current evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The alert name (`HotShard`, ...).
    pub alertname: &'static str,
    /// Identifying labels other than `alertname` and `severity` (`group`, `shard`, `key`).
    pub labels: Labels,
    /// Severity.
    pub severity: Severity,
    /// `summary`, `description` and the figures behind the decision.
    pub annotations: Labels,
}

impl Finding {
    /// A finding with identifying `labels` and no annotations yet.
    ///
    /// Label values are the raw names (a group, a shard, a key as it arrived); they are rendered
    /// here, once, by [`identity`], so no detector can render one differently.
    pub fn new(alertname: &'static str, severity: Severity, labels: &[(&str, &str)]) -> Self {
        Finding {
            alertname,
            labels: identity(labels),
            severity,
            annotations: Labels::new(),
        }
    }

    /// Adds an annotation.
    pub fn annotate(mut self, name: &str, value: impl Into<String>) -> Self {
        self.annotations.insert(name.to_owned(), value.into());
        self
    }
}

/// The identifying labels of an alert from raw names: a `key` label as [`key_label`] renders
/// it (the empty key as `(empty)`), every other value as [`label_value`] does, so a literal
/// name can never pass for the empty key or the overflow series.
pub fn identity(labels: &[(&str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| {
            let value = if *k == "key" {
                key_label(v)
            } else {
                label_value(v)
            };
            ((*k).to_owned(), value.into_owned())
        })
        .collect()
}

/// Timing of one alert rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertRule {
    /// How long the condition must hold before the alert fires (Prometheus `for`).
    pub for_secs: f64,
    /// How long a firing alert keeps firing after the condition stops holding
    /// (Prometheus `keep_firing_for`): hysteresis against flapping.
    pub keep_firing_for_secs: f64,
}

impl Default for AlertRule {
    fn default() -> Self {
        AlertRule {
            for_secs: 0.0,
            keep_firing_for_secs: 60.0,
        }
    }
}

/// State of an active alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    /// The condition holds but not yet for `for_secs`.
    Pending,
    /// Firing.
    Firing,
}

/// An active (pending or firing) alert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// All labels, including `alertname` and `severity`.
    pub labels: Labels,
    /// Annotations from the latest evaluation in which the condition held.
    pub annotations: Labels,
    /// Pending or firing.
    pub state: AlertState,
    /// When the condition first held (unix seconds).
    pub active_at: f64,
    /// When the alert started firing.
    pub fired_at: Option<f64>,
    /// The latest evaluation in which the condition held.
    pub last_true_at: f64,
}

impl Alert {
    /// The `alertname` label.
    pub fn alertname(&self) -> &str {
        self.labels.get("alertname").map_or("", String::as_str)
    }
}

/// What a transition is to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransitionState {
    /// The alert started firing.
    Firing,
    /// The alert stopped firing.
    Resolved,
}

/// One alert changing state: what `replay` prints and delivery sends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// Evaluation time (end of the window), unix seconds.
    pub ts: f64,
    /// The alert name.
    pub alertname: String,
    /// Firing or resolved.
    pub state: TransitionState,
    /// All labels, including `alertname` and `severity`.
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
    /// When the alert started firing.
    #[serde(skip)]
    pub starts_at: f64,
}

type AlertKey = (String, Labels);

/// Every active alert, and the rules that time them.
#[derive(Debug, Clone, Default)]
pub struct AlertBook {
    rules: BTreeMap<String, AlertRule>,
    alerts: BTreeMap<AlertKey, Alert>,
    /// The `scope` label every alert carries, if any (`fleet` for a fleet instance).
    scope: Option<String>,
}

impl AlertBook {
    /// A book with a timing rule per alert name; names without a rule use the default.
    pub fn new(rules: BTreeMap<String, AlertRule>) -> Self {
        AlertBook {
            rules,
            alerts: BTreeMap::new(),
            scope: None,
        }
    }

    /// Every alert from now on carries the label `scope` with this value (`fleet` on a fleet
    /// instance, so receivers can route and inhibit by it); `None` adds none. The label is not
    /// part of an alert's identity within the book.
    pub fn set_scope(&mut self, scope: Option<String>) {
        self.scope = scope;
    }

    /// True when the alert named `alertname` with exactly these identifying labels is pending or
    /// firing. Detectors use it to freeze baselines while their alert is active.
    /// Labels are raw names, rendered as [`Finding::new`] renders them.
    pub fn is_active(&self, alertname: &str, labels: &[(&str, &str)]) -> bool {
        self.alerts
            .contains_key(&(alertname.to_owned(), identity(labels)))
    }

    /// True when any alert named `alertname` is active for `group` (a raw name).
    pub fn group_has_active(&self, alertname: &str, group: &str) -> bool {
        let group = label_value(group);
        self.alerts
            .iter()
            .any(|((n, l), _)| n == alertname && l.get("group").is_some_and(|g| *g == group))
    }

    /// Replaces the timing rules (a reload); active alerts keep their state and are timed by
    /// the new rules from now on.
    pub fn set_rules(&mut self, rules: BTreeMap<String, AlertRule>) {
        self.rules = rules;
    }

    /// Moves every alert's times by `delta` seconds: after the clock stepped, the durations
    /// `for` and `keep_firing_for` measure stay what they were.
    pub fn shift_time(&mut self, delta: f64) {
        for a in self.alerts.values_mut() {
            a.active_at += delta;
            a.last_true_at += delta;
            if let Some(f) = &mut a.fired_at {
                *f += delta;
            }
        }
    }

    /// The active alerts, to save across a restart.
    pub fn save(&self) -> Vec<Alert> {
        self.alerts.values().cloned().collect()
    }

    /// Takes back alerts saved by [`AlertBook::save`], replacing the active ones.
    pub fn restore(&mut self, alerts: Vec<Alert>) {
        self.alerts = alerts
            .into_iter()
            .map(|a| {
                let mut key = a.labels.clone();
                key.remove("alertname");
                key.remove("severity");
                key.remove("scope");
                ((a.alertname().to_owned(), key), a)
            })
            .collect();
    }

    /// Active alerts, sorted by name and labels.
    pub fn active(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    /// Firing alerts.
    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.alerts
            .values()
            .filter(|a| a.state == AlertState::Firing)
    }

    /// Applies one evaluation at `now`: `findings` are the conditions that hold now; every
    /// active alert not among them has stopped holding.
    pub fn update(&mut self, now: f64, findings: Vec<Finding>) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for f in findings {
            let rule = self.rules.get(f.alertname).copied().unwrap_or_default();
            let key = (f.alertname.to_owned(), f.labels.clone());
            let mut labels = f.labels;
            labels.insert("alertname".into(), f.alertname.into());
            labels.insert("severity".into(), f.severity.as_str().into());
            if let Some(scope) = &self.scope {
                labels.insert("scope".into(), scope.clone());
            }
            let alert = self.alerts.entry(key.clone()).or_insert_with(|| Alert {
                labels: labels.clone(),
                annotations: Labels::new(),
                state: AlertState::Pending,
                active_at: now,
                fired_at: None,
                last_true_at: now,
            });
            alert.labels = labels;
            alert.annotations = f.annotations;
            alert.last_true_at = now;
            if alert.state == AlertState::Pending && now - alert.active_at >= rule.for_secs - 1e-9 {
                alert.state = AlertState::Firing;
                alert.fired_at = Some(now);
                out.push(transition(now, alert, TransitionState::Firing));
            }
            seen.insert(key);
        }
        let rules = &self.rules;
        self.alerts.retain(|key, alert| {
            if seen.contains(key) {
                return true;
            }
            match alert.state {
                AlertState::Pending => false,
                AlertState::Firing => {
                    let rule = rules.get(&key.0).copied().unwrap_or_default();
                    if now - alert.last_true_at >= rule.keep_firing_for_secs - 1e-9 {
                        out.push(transition(now, alert, TransitionState::Resolved));
                        false
                    } else {
                        true
                    }
                }
            }
        });
        out
    }
}

fn transition(now: f64, a: &Alert, state: TransitionState) -> Transition {
    Transition {
        ts: now,
        alertname: a.alertname().to_owned(),
        state,
        labels: a.labels.clone(),
        annotations: a.annotations.clone(),
        starts_at: a.fired_at.unwrap_or(a.active_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(for_secs: f64, keep: f64) -> AlertBook {
        let mut rules = BTreeMap::new();
        rules.insert(
            "HotShard".to_owned(),
            AlertRule {
                for_secs,
                keep_firing_for_secs: keep,
            },
        );
        AlertBook::new(rules)
    }

    fn hot(shard: &str) -> Finding {
        Finding::new(
            "HotShard",
            Severity::Critical,
            &[("group", "g"), ("shard", shard)],
        )
        .annotate("summary", "hot")
    }

    #[test]
    fn pending_then_firing_after_for_then_resolved_after_keep_firing_for() {
        let mut b = book(20.0, 30.0);
        assert!(b.update(10.0, vec![hot("a")]).is_empty());
        assert!(b.is_active("HotShard", &[("group", "g"), ("shard", "a")]));
        assert!(b.update(20.0, vec![hot("a")]).is_empty());
        let t = b.update(30.0, vec![hot("a")]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].state, TransitionState::Firing);
        assert_eq!(t[0].labels["severity"], "critical");
        assert_eq!(t[0].labels["alertname"], "HotShard");
        // Condition stops at 40: keeps firing until 30 s after the last true evaluation (30).
        assert!(b.update(40.0, vec![]).is_empty());
        assert!(b.update(50.0, vec![]).is_empty());
        let t = b.update(60.0, vec![]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].state, TransitionState::Resolved);
        assert_eq!(b.active().count(), 0);
    }

    #[test]
    fn a_pending_alert_that_stops_holding_vanishes_without_a_transition() {
        let mut b = book(20.0, 30.0);
        b.update(10.0, vec![hot("a")]);
        assert!(b.update(20.0, vec![]).is_empty());
        assert_eq!(b.active().count(), 0);
    }

    #[test]
    fn hysteresis_keeps_a_flapping_condition_firing_once() {
        let mut b = book(0.0, 30.0);
        let mut firing = 0;
        for (i, holds) in [true, false, true, false, true, false].iter().enumerate() {
            let f = if *holds { vec![hot("a")] } else { vec![] };
            firing += b
                .update(i as f64 * 10.0, f)
                .iter()
                .filter(|t| t.state == TransitionState::Firing)
                .count();
        }
        assert_eq!(firing, 1);
    }

    #[test]
    fn a_scope_labels_every_alert_without_changing_its_identity() {
        let mut b = book(0.0, 0.0);
        b.set_scope(Some("fleet".to_owned()));
        let t = b.update(10.0, vec![hot("a")]);
        assert_eq!(t[0].labels["scope"], "fleet");
        assert!(b.is_active("HotShard", &[("group", "g"), ("shard", "a")]));
        assert_eq!(b.active().next().unwrap().labels["scope"], "fleet");
    }

    #[test]
    fn alerts_are_keyed_by_their_labels() {
        let mut b = book(0.0, 0.0);
        let t = b.update(0.0, vec![hot("a"), hot("b")]);
        assert_eq!(t.len(), 2);
        let t = b.update(10.0, vec![hot("b")]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].labels["shard"], "a");
        assert_eq!(t[0].state, TransitionState::Resolved);
    }
}
