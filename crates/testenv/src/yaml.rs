//! YAML parsed the cluster's way: YAML -> JSON value -> typed.
use anyhow::Result;
use serde::de::DeserializeOwned;

/// Parses every non-empty document of a multi-document YAML stream.
pub fn parse_all<T: DeserializeOwned>(text: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        out.push(serde_json::from_value(v)?);
    }
    Ok(out)
}

pub fn parse_values(text: &str) -> Result<Vec<serde_json::Value>> {
    parse_all(text)
}
