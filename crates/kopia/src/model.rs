//! Typed models of kopia's `--json` output. Unknown fields are ignored and most fields are
//! optional, so a newer kopia adding or dropping detail does not break parsing.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::KopiaError;

/// `repository status --json`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    #[serde(default)]
    pub config_file: String,
    /// The repository's identity; empty over a repository-server connection.
    #[serde(default, rename = "uniqueIDHex")]
    pub unique_id_hex: String,
    #[serde(default, deserialize_with = "null_default")]
    pub client_options: ClientOptions,
    #[serde(default)]
    pub storage: Option<StorageInfo>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientOptions {
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageInfo {
    #[serde(default, rename = "type")]
    pub kind: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSource {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub user_name: String,
    #[serde(default)]
    pub path: String,
}

/// One row of `manifest list --json`. A snapshot's labels carry `type: snapshot`, its source
/// (`username`, `hostname`, `path`) and its tags (`tag:<key>`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ManifestEntry {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub labels: BTreeMap<String, String>,
}

impl ManifestEntry {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// `user@host:path` when it is a snapshot manifest.
    pub fn snapshot_source(&self) -> Option<String> {
        (self.label("type") == Some("snapshot")).then(|| {
            format!(
                "{}@{}:{}",
                self.label("username").unwrap_or_default(),
                self.label("hostname").unwrap_or_default(),
                self.label("path").unwrap_or_default()
            )
        })
    }
}

/// A snapshot manifest, as printed by `snapshot create --json` (one per line) and
/// `snapshot list --json` (an array).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotManifest {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub source: SnapshotSource,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub start_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub end_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub incomplete: Option<String>,
    #[serde(default)]
    pub root_entry: Option<RootEntry>,
    /// Stored with a `tag:` prefix (`"tag:k": "v"`).
    #[serde(default, deserialize_with = "null_default")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_default")]
    pub pins: Vec<String>,
    #[serde(default)]
    pub stats: Option<SnapshotStats>,
    #[serde(default, deserialize_with = "null_default")]
    pub retention_reason: Vec<String>,
}

impl SnapshotManifest {
    /// A user tag without kopia's `tag:` prefix.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.get(&format!("tag:{key}")).map(String::as_str)
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RootEntry {
    #[serde(default)]
    pub name: String,
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub obj: String,
    #[serde(default)]
    pub summ: Option<DirSummary>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DirSummary {
    #[serde(default)]
    pub size: i64,
    #[serde(default)]
    pub files: i64,
    #[serde(default)]
    pub symlinks: i64,
    #[serde(default)]
    pub dirs: i64,
    #[serde(default)]
    pub num_failed: i64,
    #[serde(default, deserialize_with = "null_default")]
    pub errors: Vec<EntryError>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EntryError {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub error: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStats {
    #[serde(default)]
    pub total_size: i64,
    #[serde(default)]
    pub excluded_total_size: i64,
    #[serde(default)]
    pub file_count: i64,
    #[serde(default)]
    pub cached_files: i64,
    #[serde(default)]
    pub non_cached_files: i64,
    #[serde(default)]
    pub dir_count: i64,
    #[serde(default)]
    pub excluded_file_count: i64,
    #[serde(default)]
    pub excluded_dir_count: i64,
    #[serde(default)]
    pub ignored_error_count: i64,
    #[serde(default)]
    pub error_count: i64,
}

/// `maintenance info --json`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceInfo {
    #[serde(default)]
    pub owner: String,
    #[serde(default, deserialize_with = "null_default")]
    pub quick: MaintenanceCycle,
    #[serde(default, deserialize_with = "null_default")]
    pub full: MaintenanceCycle,
    #[serde(default, deserialize_with = "null_default")]
    pub schedule: MaintenanceSchedule,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceCycle {
    #[serde(default)]
    pub enabled: bool,
    /// Nanoseconds.
    #[serde(default)]
    pub interval: i64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSchedule {
    #[serde(default)]
    pub next_full_maintenance: Option<DateTime<Utc>>,
    #[serde(default)]
    pub next_quick_maintenance: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "null_default")]
    pub runs: BTreeMap<String, Vec<MaintenanceRun>>,
}

impl MaintenanceSchedule {
    /// Total recorded runs over all tasks: a run really happened iff this grows.
    pub fn run_count(&self) -> usize {
        self.runs.values().map(Vec::len).sum()
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRun {
    #[serde(default)]
    pub start: Option<DateTime<Utc>>,
    #[serde(default)]
    pub end: Option<DateTime<Utc>>,
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub error: Option<String>,
}

/// Go encodes nil slices and maps as `null`; read that as empty.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// JSON starts at the first `{` or `[` on stdout (kopia may print notes before it).
/// One directory object (`kopia show <dir object>`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DirObject {
    #[serde(default, deserialize_with = "null_default")]
    pub entries: Vec<DirEntry>,
}

/// One entry of a directory object, with the owner and mode recorded at backup time.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DirEntry {
    pub name: String,
    /// `d`, `f`, `s` (symlink), ...
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
    #[serde(default)]
    pub obj: String,
}

/// `manifest show` prints `// key: value` lines before the JSON; they may hold any character.
pub fn strip_comment_lines(stdout: &str) -> String {
    stdout.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn json_start(stdout: &str) -> Option<usize> {
    stdout.find(['{', '['])
}

/// Parses one JSON document from stdout.
pub fn parse<T: DeserializeOwned>(command: &'static str, stdout: &str) -> Result<T, KopiaError> {
    let Some(i) = json_start(stdout) else { return Err(KopiaError::EmptyOutput { command }) };
    let mut de = serde_json::Deserializer::from_str(&stdout[i..]).into_iter::<T>();
    match de.next() {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(KopiaError::BadJson { command, message: e.to_string() }),
        None => Err(KopiaError::EmptyOutput { command }),
    }
}

/// Parses a stream of JSON objects (`snapshot create --json` prints one per source, one per
/// line). No object at all is an empty vector, for the caller to interpret.
pub fn parse_stream<T: DeserializeOwned>(command: &'static str, stdout: &str) -> Result<Vec<T>, KopiaError> {
    let Some(i) = json_start(stdout) else { return Ok(Vec::new()) };
    serde_json::Deserializer::from_str(&stdout[i..])
        .into_iter::<T>()
        .map(|r| r.map_err(|e| KopiaError::BadJson { command, message: e.to_string() }))
        .collect()
}

#[cfg(test)]
mod dir_tests {
    use super::*;

    /// Output of kopia 0.23.1 (`manifest show`, then `show` of the root object) for a tree with
    /// a 0700 directory of uid 999 and a file of uid 1000.
    const MANIFEST: &str = "// id: 034e721297df24ce7e066c3362c6d131\n// label path:/tmp/[src]{x}\n{\n  \"id\": \"\",\n  \"source\": {\"host\": \"vm\", \"userName\": \"root\", \"path\": \"/tmp/src\"},\n  \"rootEntry\": {\"name\": \"src\", \"type\": \"d\", \"mode\": \"0755\", \"obj\": \"ka3a5dae327944fce1a0da39ca11e922d\"}\n}\n";
    const DIR: &str = r#"{"stream":"kopia:directory","entries":[{"name":"db","type":"d","mode":"0700","mtime":"2026-12-02T08:32:11.019295279Z","uid":999,"gid":999,"obj":"k1da9bac166a9c33eedbe60efbe54e80c","summ":{"size":5,"files":1,"symlinks":0,"dirs":1,"maxTime":"2026-12-02T08:32:11.019295279Z","numFailed":0}},{"name":"a.txt","type":"f","mode":"0644","size":3,"mtime":"2026-12-02T08:32:11.019295279Z","uid":1000,"gid":1000,"obj":"5a5ea949af517e911fe93d4c7661cff4"}],"summary":{"size":8,"files":2,"symlinks":0,"dirs":2,"maxTime":"2026-12-02T08:32:11.019295279Z","numFailed":0}}"#;

    #[test]
    fn a_manifest_and_a_directory_object_parse() {
        let m: SnapshotManifest = parse("manifest show", &strip_comment_lines(MANIFEST)).unwrap();
        assert_eq!(m.root_entry.unwrap().obj, "ka3a5dae327944fce1a0da39ca11e922d");
        let d: DirObject = parse("show", DIR).unwrap();
        assert_eq!(d.entries.len(), 2);
        assert_eq!((d.entries[0].name.as_str(), d.entries[0].kind.as_str()), ("db", "d"));
        assert_eq!((d.entries[0].uid, d.entries[0].gid, d.entries[0].mode.as_str()), (Some(999), Some(999), "0700"));
        assert_eq!((d.entries[1].uid, d.entries[1].obj.as_str()), (Some(1000), "5a5ea949af517e911fe93d4c7661cff4"));
    }
}
