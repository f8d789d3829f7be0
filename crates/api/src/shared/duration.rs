//! The one `Duration` type of the API (docs/design/api-contract.md §1.3): bare seconds (`300`) or one or more
//! `<integer><unit>` groups with unit `h`, `m` or `s` (`1h30m`). No days, fractions, signs,
//! `ms` or ISO-8601.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;
use crate::schema::pattern;

/// A parsed duration that remembers the text it came from, so a round trip through the API
/// never rewrites what the user wrote.
#[derive(Clone, Debug)]
pub struct Duration {
    text: String,
    seconds: u64,
}

impl Duration {
    /// The longest accepted text (`maxLength` in the schema).
    pub const MAX_LEN: usize = 20;

    pub fn parse(input: &str) -> Result<Self, Error> {
        let seconds = parse_seconds(input)?;
        Ok(Self { text: input.to_owned(), seconds })
    }

    /// A duration of whole seconds, written in canonical `h`/`m`/`s` groups.
    pub fn from_secs(seconds: u64) -> Self {
        Self { text: canonical(seconds), seconds }
    }

    pub fn as_secs(&self) -> u64 {
        self.seconds
    }

    pub fn as_std(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.seconds)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Duration {
    fn eq(&self, other: &Self) -> bool {
        self.seconds == other.seconds
    }
}
impl Eq for Duration {}

impl PartialOrd for Duration {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Duration {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.seconds.cmp(&other.seconds)
    }
}

impl std::hash::Hash for Duration {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.seconds.hash(state);
    }
}

fn invalid(input: &str, why: &'static str) -> Error {
    Error::InvalidDuration { input: input.to_owned(), why }
}

fn parse_seconds(input: &str) -> Result<u64, Error> {
    if input.is_empty() {
        return Err(invalid(input, "empty"));
    }
    if input.len() > Duration::MAX_LEN {
        return Err(invalid(input, "longer than 20 characters"));
    }
    if input.bytes().all(|b| b.is_ascii_digit()) {
        return input.parse::<u64>().map_err(|_| invalid(input, "out of range"));
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for ch in input.chars() {
        match ch {
            '0'..='9' => {
                let digit = u64::from(ch as u8 - b'0');
                let next = number
                    .unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(digit))
                    .ok_or_else(|| invalid(input, "out of range"))?;
                number = Some(next);
            }
            'h' => total = add_group(input, total, number.take(), 3600)?,
            'm' => total = add_group(input, total, number.take(), 60)?,
            's' => total = add_group(input, total, number.take(), 1)?,
            'd' => return Err(invalid(input, "days are not a unit")),
            '-' | '+' => return Err(invalid(input, "signs are not allowed")),
            '.' => return Err(invalid(input, "fractions are not allowed")),
            _unexpected => return Err(invalid(input, "only the units h, m and s are allowed")),
        }
    }
    if number.is_some() {
        return Err(invalid(input, "a number without a unit must stand alone"));
    }
    // CEL's duration type tops out near 290 years; stay inside it so admission and Rust agree.
    if total > i64::MAX as u64 / 1_000_000_000 {
        return Err(invalid(input, "out of range"));
    }
    Ok(total)
}

fn add_group(input: &str, total: u64, number: Option<u64>, factor: u64) -> Result<u64, Error> {
    let n = number.ok_or_else(|| invalid(input, "a unit must follow a number"))?;
    n.checked_mul(factor).and_then(|v| total.checked_add(v)).ok_or_else(|| invalid(input, "out of range"))
}

fn canonical(seconds: u64) -> String {
    if seconds == 0 {
        return "0s".to_owned();
    }
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

impl FromStr for Duration {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": pattern::DURATION,
            "maxLength": Duration::MAX_LEN,
        })
    }
}
