//! The one parser of the operator's `/metrics` text (the Prometheus text exposition) and the
//! look-ups the tests make with it.

use std::collections::BTreeMap;

/// One sample line: `family{k="v",…} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample<'a> {
    pub family: &'a str,
    pub labels: Vec<(&'a str, &'a str)>,
    pub value: f64,
}

impl Sample<'_> {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// Whether every `(key, value)` of `want` is among the labels (others ignored).
    pub fn has(&self, want: &[(&str, &str)]) -> bool {
        want.iter().all(|w| self.labels.contains(w))
    }
}

/// Every sample of `text`, in order (comments, blank and unparsable lines skipped). Label
/// values are taken as written between the quotes (no label value the operator writes
/// carries an escape).
pub fn parse(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(parse_line)
}

fn parse_line(line: &str) -> Option<Sample<'_>> {
    let (series, value) = line.trim_end().rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (family, labels) = match series.split_once('{') {
        Some((family, rest)) => (family, parse_labels(rest.strip_suffix('}')?)?),
        None => (series, Vec::new()),
    };
    Some(Sample { family, labels, value })
}

fn parse_labels(mut s: &str) -> Option<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (k, rest) = s.split_once("=\"")?;
        let end = rest.find('"')?;
        out.push((k.trim(), &rest[..end]));
        s = rest[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

/// The samples of `family` whose labels include every pair of `want`.
pub fn matching<'t>(text: &'t str, family: &str, want: &[(&str, &str)]) -> Vec<Sample<'t>> {
    parse(text).filter(|s| s.family == family && s.has(want)).collect()
}

/// The values of the samples of `family` whose labels include every pair of `want`.
pub fn samples(text: &str, family: &str, want: &[(&str, &str)]) -> Vec<f64> {
    matching(text, family, want).into_iter().map(|s| s.value).collect()
}

/// The value of the first sample of `family` whose labels include every pair of `want`; None
/// when no sample matches.
pub fn sample(text: &str, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    parse(text).find(|s| s.family == family && s.has(want)).map(|s| s.value)
}

/// The sum over the samples of `family` whose labels include every pair of `want` (0 when none).
pub fn sum(text: &str, family: &str, want: &[(&str, &str)]) -> f64 {
    samples(text, family, want).iter().sum()
}

/// The samples of `family` matching `want`, summed by the value of label `by` (`""` where a
/// sample has none).
pub fn sum_by(text: &str, family: &str, want: &[(&str, &str)], by: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for s in matching(text, family, want) {
        *m.entry(s.label(by).unwrap_or("").to_string()).or_insert(0.0) += s.value;
    }
    m
}

/// The value of `family{…namespace="ns",name="name"…}`.
pub fn metric(text: &str, family: &str, ns: &str, name: &str) -> Option<f64> {
    sample(text, family, &[("namespace", ns), ("name", name)])
}
