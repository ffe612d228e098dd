//! A small Prometheus text-format reader: find a series by name and labels, regardless of line
//! order (after linkerd's `MetricMatch`). `skewwatch bench` reads the agent's counters with it,
//! and the end-to-end tests read every scrape with it.

use std::collections::BTreeMap;

/// A line of a text-format page that is not a sample, a comment or empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Prometheus text-format line: {0}")]
pub struct UnreadableLine(pub String);

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels, sorted by name.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Every sample, in page order.
    pub samples: Vec<Sample>,
    /// The raw page.
    pub text: String,
}

impl Scrape {
    /// Parses a text-format page; a line it cannot read is an error naming the line.
    pub fn parse(text: &str) -> Result<Scrape, UnreadableLine> {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            samples.push(parse_line(line).ok_or_else(|| UnreadableLine(line.to_owned()))?);
        }
        Ok(Scrape {
            samples,
            text: text.to_owned(),
        })
    }

    /// The sum of every sample named `name` whose labels include all of `labels` (0 when none
    /// does).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.all(name, labels).iter().map(|s| s.value).sum()
    }

    /// Every sample named `name` whose labels include all of `labels`.
    pub fn all(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample named `name` with all of `labels`.
    ///
    /// # Panics
    /// When several series match: the caller must name enough labels to pick one.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.all(name, labels);
        assert!(
            found.len() <= 1,
            "{name}{labels:?} matches {} series; add labels",
            found.len()
        );
        found.first().map(|s| s.value)
    }

    /// Like [`Scrape::get`] but panics with the page when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in:\n{}", self.text))
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.find('{') {
        None => (series.to_owned(), BTreeMap::new()),
        Some(i) => (series[..i].to_owned(), parse_labels(&series[i + 1..])?),
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            if c == '}' {
                return Some(out);
            }
            if c != ',' {
                key.push(c);
            }
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut val = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => val.push('\n'),
                    c => val.push(c),
                },
                '"' => break,
                c => val.push(c),
            }
        }
        out.insert(key, val);
        if chars.peek() == Some(&'}') {
            return Some(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_escaped_labels_in_any_order() {
        let s = Scrape::parse(
            "# HELP x y\nx{b=\"2\",a=\"q\\\"\\\\\"} 1.5\ny 3\nx{a=\"z\",b=\"2\"} +Inf\n",
        )
        .unwrap();
        assert_eq!(s.value("x", &[("a", "q\"\\")]), 1.5);
        assert_eq!(s.value("y", &[]), 3.0);
        assert_eq!(s.get("x", &[("a", "z")]), Some(f64::INFINITY));
    }

    #[test]
    fn sums_matching_series_and_names_an_unreadable_line() {
        let s =
            Scrape::parse("a{s=\"x\",r=\"1\"} 2\na{s=\"x\",r=\"2\"} 3\na{s=\"y\"} 7\n").unwrap();
        assert_eq!(s.sum("a", &[("s", "x")]), 5.0);
        assert_eq!(s.sum("a", &[]), 12.0);
        assert_eq!(s.sum("b", &[]), 0.0);
        let err = Scrape::parse("ok 1\nnot a sample\n").unwrap_err();
        assert_eq!(err, UnreadableLine("not a sample".into()));
    }
}
