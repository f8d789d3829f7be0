//! The R rule on `spec.compression.compressor` (docs/design/api-contract.md §6.1): the name must be a
//! compressor kopia knows. A bad name would reach `kopia policy set --compression=<name>` in
//! every backup Job and fail it there; it is refused before any Job instead, with the list of
//! names kopia accepts. The policy is Stalled `InvalidSpec`; its Snapshots park Stalled with
//! the same reason and get no Job; both heal when the name is fixed.
use kopiur_api::snapshot_policy::SnapshotPolicySpec;

/// The names `kopia policy set --compression` accepts (kopia 0.23, the pinned mover version;
/// its own enum, minus `inherit` and `lz4`, see below). `none` turns compression off.
pub const KNOWN: &[&str] = &[
    "none",
    "deflate-best-compression",
    "deflate-best-speed",
    "deflate-default",
    "gzip",
    "gzip-best-compression",
    "gzip-best-speed",
    "pgzip",
    "pgzip-best-compression",
    "pgzip-best-speed",
    "s2-better",
    "s2-default",
    "s2-parallel-4",
    "s2-parallel-8",
    "zstd",
    "zstd-best-compression",
    "zstd-better-compression",
    "zstd-fastest",
];

/// Names kopia's flag accepts but a backup cannot use: `lz4` is read-only since kopia 0.22
/// (every write fails), and `inherit` resets the policy, which an absent `compressor` does.
const REFUSED: &[(&str, &str)] = &[
    ("lz4", "kopia no longer writes lz4 (it only reads legacy repositories that use it)"),
    ("inherit", "omit spec.compression.compressor to inherit kopia's default"),
];

/// `Some(message)` when `spec.compression.compressor` names no compressor kopia can write with.
pub fn unknown_compressor(spec: &SnapshotPolicySpec) -> Option<String> {
    let name = spec.compression.as_ref()?.compressor.as_deref()?;
    if KNOWN.contains(&name) {
        return None;
    }
    let why = REFUSED.iter().find(|(n, _)| *n == name).map(|(_, w)| format!(" ({w})")).unwrap_or_default();
    Some(format!(
        "spec.compression.compressor {name:?} is not a compressor kopia can write with{why}; use one of: {}",
        KNOWN.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(compression: serde_json::Value) -> SnapshotPolicySpec {
        let mut s = json!({"repository": {"name": "r"}, "copyMethod": "Direct", "sources": [{"pvc": {"name": "a"}}]});
        if !compression.is_null() {
            s["compression"] = compression;
        }
        serde_json::from_value(s).unwrap()
    }

    #[test]
    fn every_known_name_passes_and_absence_passes() {
        for n in KNOWN {
            assert_eq!(unknown_compressor(&spec(json!({"compressor": n}))), None, "{n}");
        }
        assert_eq!(unknown_compressor(&spec(serde_json::Value::Null)), None);
        assert_eq!(unknown_compressor(&spec(json!({"neverCompress": ["*.zip"]}))), None);
    }

    #[test]
    fn an_unknown_or_unwritable_name_is_refused_with_the_list() {
        let m = unknown_compressor(&spec(json!({"compressor": "zstd-turbo"}))).expect("refused");
        assert!(m.starts_with("spec.compression.compressor \"zstd-turbo\" is not a compressor kopia"), "{m}");
        assert!(m.contains("zstd-fastest") && m.contains("s2-default") && m.contains("none"), "{m}");
        // Case matters to kopia.
        assert!(unknown_compressor(&spec(json!({"compressor": "ZSTD"}))).is_some());
        let lz4 = unknown_compressor(&spec(json!({"compressor": "lz4"}))).expect("lz4 refused");
        assert!(lz4.contains("no longer writes lz4"), "{lz4}");
        assert!(unknown_compressor(&spec(json!({"compressor": "inherit"}))).is_some_and(|m| m.contains("omit")));
    }
}
