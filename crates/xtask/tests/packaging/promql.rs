//! Just enough PromQL lexing to list the metric names a query selects: strings, label
//! matchers, range/subquery brackets and grouping label lists are skipped; an identifier
//! followed by `(` is a function or aggregation; keywords are not names.
use std::collections::BTreeSet;

const KEYWORDS: &[&str] =
    &["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2"];
const GROUPING: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_until(&chars, i, '}'),
            '[' => i = skip_until(&chars, i, ']'),
            '#' => i = skip_until(&chars, i, '\n'),
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                // Numbers, durations and exponents: 0.99, 1e3, 5m.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                    i += 1;
                }
            }
            '$' => {
                // A Grafana variable outside brackets, e.g. `$__range` in a function argument.
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let rest: String = chars[j..].iter().take(8).collect();
                // `sum by (x) (…)`: an aggregation whose grouping comes before its argument.
                let grouped_aggregation = AGGREGATIONS.contains(&word.as_str())
                    && (rest.starts_with("by") || rest.starts_with("without"))
                    && rest
                        .chars()
                        .nth(if rest.starts_with("by") { 2 } else { 7 })
                        .is_some_and(|c| c == ' ' || c == '(');
                let call = chars.get(j) == Some(&'(') || grouped_aggregation;
                if GROUPING.contains(&word.as_str()) && call {
                    i = skip_until(&chars, j, ')');
                } else if !call && !KEYWORDS.contains(&word.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn skip_string(chars: &[char], open: usize) -> usize {
    let q = chars[open];
    let mut i = open + 1;
    while i < chars.len() && chars[i] != q {
        if chars[i] == '\\' && q != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// Skips to just past `close`, jumping over quoted strings on the way.
fn skip_until(chars: &[char], open: usize, close: char) -> usize {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != close {
        if matches!(chars[i], '"' | '\'' | '`') {
            i = skip_string(chars, i);
        } else {
            i += 1;
        }
    }
    i + 1
}

/// One label matcher of a selector: `name op "value"`, op one of `=`, `!=`, `=~`, `!~`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

impl Matcher {
    /// Whether a series with `labels` passes this matcher (an absent label reads as "").
    /// Regexes are anchored alternations of literals, all the shipped rules use.
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.label).map(String::as_str).unwrap_or("");
        match self.op.as_str() {
            "=" => v == self.value,
            "!=" => v != self.value,
            "=~" => self.value.split('|').any(|a| a == v),
            "!~" => !self.value.split('|').any(|a| a == v),
            op => panic!("unknown matcher op {op}"),
        }
    }
}

/// The matchers of every `metric{...}` selector in `expr` (one list per occurrence).
pub fn selectors(expr: &str, metric: &str) -> Vec<Vec<Matcher>> {
    let open = format!("{metric}{{");
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(&open) {
        let body_start = at + open.len();
        let chars: Vec<char> = rest[body_start..].chars().collect();
        let mut ms = Vec::new();
        let mut i = 0;
        loop {
            while i < chars.len() && (chars[i] == ',' || chars[i].is_whitespace()) {
                i += 1;
            }
            if i >= chars.len() || chars[i] == '}' {
                break;
            }
            let name_start = i;
            while chars[i].is_alphanumeric() || chars[i] == '_' {
                i += 1;
            }
            let label: String = chars[name_start..i].iter().collect();
            let op_start = i;
            while matches!(chars[i], '=' | '!' | '~') {
                i += 1;
            }
            let op: String = chars[op_start..i].iter().collect();
            assert_eq!(chars[i], '"', "a quoted matcher value in {expr}");
            let end = skip_string(&chars, i);
            let value: String = chars[i + 1..end - 1].iter().collect();
            ms.push(Matcher { label, op, value });
            i = end;
        }
        out.push(ms);
        let consumed: usize = chars[..i].iter().map(|c| c.len_utf8()).sum();
        rest = &rest[body_start + consumed..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::metric_names;

    #[test]
    fn selectors_list_each_matcher() {
        let s = super::selectors(r#"max by (kind) (m{kind=~"A|B",phase="F"}) == 1 or m{x!="y"}"#, "m");
        let flat: Vec<Vec<(String, String, String)>> =
            s.into_iter().map(|ms| ms.into_iter().map(|m| (m.label, m.op, m.value)).collect()).collect();
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(flat, [vec![t("kind", "=~", "A|B"), t("phase", "=", "F")], vec![t("x", "!=", "y")]]);
    }

    fn names(e: &str) -> Vec<String> {
        metric_names(e).into_iter().collect()
    }

    #[test]
    fn lists_selected_metrics_only() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (kind, le) (rate(kopiur_controller_reconcile_duration_seconds_bucket{kind=~"a|b}"}[$__rate_interval])))"#
            ),
            ["kopiur_controller_reconcile_duration_seconds_bucket"]
        );
        assert_eq!(
            names("time() - max by (namespace,policy) (kopiur_policy_last_backup_success_timestamp_seconds) > 172800"),
            ["kopiur_policy_last_backup_success_timestamp_seconds"]
        );
        assert_eq!(names("count(a_metric) or vector(0)"), ["a_metric"]);
        assert_eq!(names("x / on (namespace) group_left (policy) y offset 5m"), ["x", "y"]);
        assert_eq!(names("up == bool 1 and 1e3 < other"), ["other", "up"]);
        assert_eq!(names("sum without (pod) (a) / count by(x) (b)"), ["a", "b"]);
        assert_eq!(names("sum + by_name"), ["by_name", "sum"]);
    }
}
