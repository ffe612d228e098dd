//! A small Prometheus text-format reader for tests: find a series by name and labels,
//! regardless of line order (after linkerd's `MetricMatch`).

use std::collections::BTreeMap;

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
    /// Parses a text-format page; panics on a line it cannot read, since that is a bug.
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            samples.push(parse_line(line).unwrap_or_else(|| panic!("unreadable line: {line}")));
        }
        Scrape {
            samples,
            text: text.to_owned(),
        }
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
        );
        assert_eq!(s.value("x", &[("a", "q\"\\")]), 1.5);
        assert_eq!(s.value("y", &[]), 3.0);
        assert_eq!(s.get("x", &[("a", "z")]), Some(f64::INFINITY));
    }
}
