//! argv builders, one per kopia command the mover runs. No value built here is ever a
//! secret: passwords and backend keys travel in the environment only.
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::error::KopiaError;

/// A kopia client identity (`username@hostname`), always passed explicitly: in a pod the
/// hostname is the pod name, which changes every run and would break incremental
/// snapshots, `--all` and maintenance ownership.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub username: String,
    pub hostname: String,
}

impl Identity {
    pub fn new(username: impl Into<String>, hostname: impl Into<String>) -> Identity {
        Identity { username: username.into(), hostname: hostname.into() }
    }
    /// `user@host`, kopia's policy target and maintenance owner form.
    pub fn user_at_host(&self) -> String {
        format!("{}@{}", self.username, self.hostname)
    }
    /// `user@host:/path`, a snapshot source.
    pub fn source(&self, path: &str) -> String {
        format!("{}@{}:{}", self.username, self.hostname, path)
    }
}

/// One kopia invocation: the display name (used in timeout messages), argv after the
/// binary, and the deadline it runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KopiaCommand {
    pub name: &'static str,
    pub args: Vec<String>,
    pub timeout: Option<Duration>,
}

impl KopiaCommand {
    fn new(name: &'static str, words: &[&str]) -> KopiaCommand {
        KopiaCommand { name, args: words.iter().map(|s| s.to_string()).collect(), timeout: None }
    }
    fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    fn args(mut self, a: impl IntoIterator<Item = String>) -> Self {
        self.args.extend(a);
        self
    }
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    fn identity(self, id: &Identity) -> Self {
        self.arg(format!("--override-username={}", id.username)).arg(format!("--override-hostname={}", id.hostname))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheSizes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_mb: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_mb: Option<u32>,
}

fn cache_flags(c: &CacheSizes) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(n) = c.content_mb {
        v.push(format!("--content-cache-size-mb={n}"));
    }
    if let Some(n) = c.metadata_mb {
        v.push(format!("--metadata-cache-size-mb={n}"));
    }
    v
}

/// `kopia repository connect <provider> …`.
pub fn connect(
    backend: &Backend,
    id: &Identity,
    readonly: bool,
    cache: &CacheSizes,
) -> Result<KopiaCommand, KopiaError> {
    let mut c = KopiaCommand::new("repository connect", &["repository", "connect"])
        .args(backend.provider_flags()?)
        .identity(id)
        .args(cache_flags(cache));
    if readonly {
        c = c.arg("--readonly");
    }
    Ok(c)
}

/// Format options for `repository create`; `None` leaves kopia's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_splitter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_overhead_percent: Option<u32>,
}

/// `kopia repository create <provider> …`. kopia refuses storage that already holds data,
/// which is the last backstop against re-creating over a repository.
pub fn create(
    backend: &Backend,
    id: &Identity,
    opts: &CreateOptions,
    cache: &CacheSizes,
) -> Result<KopiaCommand, KopiaError> {
    let mut c = KopiaCommand::new("repository create", &["repository", "create"])
        .args(backend.provider_flags()?)
        .identity(id)
        .args(cache_flags(cache));
    if let Some(v) = &opts.encryption {
        c = c.arg(format!("--encryption={v}"));
    }
    if let Some(v) = &opts.block_hash {
        c = c.arg(format!("--block-hash={v}"));
    }
    if let Some(v) = &opts.object_splitter {
        c = c.arg(format!("--object-splitter={v}"));
    }
    if let Some(v) = &opts.ecc {
        c = c.arg(format!("--ecc={v}"));
    }
    if let Some(v) = opts.ecc_overhead_percent {
        c = c.arg(format!("--ecc-overhead-percent={v}"));
    }
    Ok(c)
}

pub fn repository_status() -> KopiaCommand {
    KopiaCommand::new("repository status", &["repository", "status", "--json"])
}

pub fn disconnect() -> KopiaCommand {
    KopiaCommand::new("repository disconnect", &["repository", "disconnect"])
}

pub fn index_list() -> KopiaCommand {
    KopiaCommand::new("index list", &["index", "list", "--json"])
}

/// `snapshot list --json`: every snapshot of every user and host without a source.
pub fn snapshot_list(source: Option<&str>) -> KopiaCommand {
    let c = KopiaCommand::new("snapshot list", &["snapshot", "list", "--json"]);
    match source {
        Some(s) => c.arg(s.to_string()),
        None => c,
    }
}

/// `manifest list --json`: every manifest of the repository (snapshots of every source,
/// incomplete ones too, policies, maintenance) with its id and labels, in one call.
pub fn manifest_list() -> KopiaCommand {
    KopiaCommand::new("manifest list", &["manifest", "list", "--json"])
}

/// `manifest show <id>`: a snapshot manifest (JSON after `//` comment lines; see
/// `model::strip_comment_lines`), for its root directory object.
pub fn manifest_show(id: &str) -> KopiaCommand {
    KopiaCommand::new("manifest show", &["manifest", "show"]).arg(id.to_string())
}

/// `show <object>`: a directory object's JSON, whose entries carry the recorded uid, gid and mode.
pub fn show_object(obj: &str) -> KopiaCommand {
    KopiaCommand::new("show", &["show"]).arg(obj.to_string())
}

/// kopia's own retention runs right after every create; kopiur owns retention, so the
/// identity scope keeps effectively everything.
pub const KEEP_LATEST_FOREVER: u64 = 1_000_000_000;

pub fn policy_keep_forever(id: &Identity) -> KopiaCommand {
    KopiaCommand::new("policy set", &["policy", "set"])
        .arg(id.user_at_host())
        .arg(format!("--keep-latest={KEEP_LATEST_FOREVER}"))
        .arg("--keep-hourly=0")
        .arg("--keep-daily=0")
        .arg("--keep-weekly=0")
        .arg("--keep-monthly=0")
        .arg("--keep-annual=0")
}

/// Per-path policy knobs the backup sets (never any `keep-*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathPolicy {
    pub ignore_identical_snapshots: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_ignore: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_file_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_dir_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_unknown_types: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_cache_dirs: Option<bool>,
    /// `--add-never-compress` patterns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub never_compress: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_snapshots: Option<u32>,
}

pub fn policy_set_path(source: &str, p: &PathPolicy) -> KopiaCommand {
    let mut c = KopiaCommand::new("policy set", &["policy", "set"])
        .arg(source.to_string())
        .arg(format!("--ignore-identical-snapshots={}", p.ignore_identical_snapshots));
    if let Some(v) = &p.compression {
        c = c.arg(format!("--compression={v}"));
    }
    for g in &p.add_ignore {
        c = c.arg(format!("--add-ignore={g}"));
    }
    if let Some(b) = p.ignore_file_errors {
        c = c.arg(format!("--ignore-file-errors={b}"));
    }
    if let Some(b) = p.ignore_dir_errors {
        c = c.arg(format!("--ignore-dir-errors={b}"));
    }
    if let Some(b) = p.ignore_unknown_types {
        c = c.arg(format!("--ignore-unknown-types={b}"));
    }
    if let Some(b) = p.ignore_cache_dirs {
        c = c.arg(format!("--ignore-cache-dirs={b}"));
    }
    for g in &p.never_compress {
        c = c.arg(format!("--add-never-compress={g}"));
    }
    if let Some(n) = p.max_parallel_snapshots {
        c = c.arg(format!("--max-parallel-snapshots={n}"));
    }
    c
}

pub fn policy_show(target: &str) -> KopiaCommand {
    KopiaCommand::new("policy show", &["policy", "show", "--json"]).arg(target.to_string())
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotCreateOptions {
    /// `user@host:/path` the snapshot is recorded under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_source: Option<String>,
    /// `(key, value)` pairs; kopia stores them as `tag:key`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub fail_fast: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_limit_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
}

pub fn snapshot_create(path: &str, o: &SnapshotCreateOptions) -> KopiaCommand {
    // `--json-verbose` adds `stats` to the manifest, which the status reports.
    let mut c = KopiaCommand::new("snapshot create", &["snapshot", "create"])
        .arg(path.to_string())
        .arg("--json")
        .arg("--json-verbose")
        .arg("--no-progress");
    if let Some(s) = &o.override_source {
        c = c.arg(format!("--override-source={s}"));
    }
    for (k, v) in &o.tags {
        c = c.arg(format!("--tags={k}:{v}"));
    }
    if let Some(d) = &o.description {
        c = c.arg(format!("--description={d}"));
    }
    if o.fail_fast {
        c = c.arg("--fail-fast");
    }
    if let Some(n) = o.upload_limit_mb {
        c = c.arg(format!("--upload-limit-mb={n}"));
    }
    if let Some(n) = o.parallel {
        c = c.arg(format!("--parallel={n}"));
    }
    c
}

/// `snapshot delete <id>… --delete` (without `--delete` kopia only does a dry run).
pub fn snapshot_delete(ids: &[String]) -> KopiaCommand {
    KopiaCommand::new("snapshot delete", &["snapshot", "delete"]).args(ids.iter().cloned()).arg("--delete")
}

/// Restore switches: `Some(true)` renders `--x`, `Some(false)` `--no-x`, `None` nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_permission_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_files_atomically: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_files: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_directories: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_existing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_extra: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_sparse_files: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_owners: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_permissions: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_times: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_errors: Option<bool>,
}

pub fn snapshot_restore(id: &str, target: &str, o: &RestoreOptions) -> KopiaCommand {
    let mut c = KopiaCommand::new("snapshot restore", &["snapshot", "restore"])
        .arg(id.to_string())
        .arg(target.to_string())
        .arg("--no-progress");
    if let Some(n) = o.parallel {
        c = c.arg(format!("--parallel={n}"));
    }
    let switches: [(&str, Option<bool>); 12] = [
        ("ignore-permission-errors", o.ignore_permission_errors),
        ("write-files-atomically", o.write_files_atomically),
        ("overwrite-files", o.overwrite_files),
        ("overwrite-directories", o.overwrite_directories),
        ("overwrite-symlinks", o.overwrite_symlinks),
        ("skip-existing", o.skip_existing),
        ("delete-extra", o.delete_extra),
        ("write-sparse-files", o.write_sparse_files),
        ("skip-owners", o.skip_owners),
        ("skip-permissions", o.skip_permissions),
        ("skip-times", o.skip_times),
        ("ignore-errors", o.ignore_errors),
    ];
    for (name, v) in switches {
        match v {
            Some(true) => c = c.arg(format!("--{name}")),
            Some(false) => c = c.arg(format!("--no-{name}")),
            None => {}
        }
    }
    c
}

pub fn maintenance_info() -> KopiaCommand {
    KopiaCommand::new("maintenance info", &["maintenance", "info", "--json"])
}

/// `maintenance set --owner=<user@host|me>`.
pub fn maintenance_set_owner(owner: &str) -> KopiaCommand {
    KopiaCommand::new("maintenance set", &["maintenance", "set"]).arg(format!("--owner={owner}"))
}

pub fn maintenance_run(full: bool) -> KopiaCommand {
    KopiaCommand::new("maintenance run", &["maintenance", "run"]).arg(if full { "--full" } else { "--no-full" })
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOptions {
    #[serde(default)]
    pub delete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
    #[serde(default)]
    pub must_exist: bool,
    /// `--times`: synchronize blob times where the storage supports it.
    #[serde(default)]
    pub times: bool,
    /// `--[no-]update`; None keeps kopia's default (update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_download_speed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_upload_speed: Option<u64>,
}

/// `repository sync-to <provider> <dest flags>`; the destination's credentials come from
/// the child's environment, remapped by the caller.
pub fn sync_to(dest: &Backend, o: &SyncOptions) -> Result<KopiaCommand, KopiaError> {
    let mut c = KopiaCommand::new("repository sync-to", &["repository", "sync-to"])
        .args(dest.provider_flags()?)
        .arg("--no-progress");
    if o.delete {
        c = c.arg("--delete");
    }
    if let Some(n) = o.parallel {
        c = c.arg(format!("--parallel={n}"));
    }
    if o.must_exist {
        c = c.arg("--must-exist");
    }
    if o.times {
        c = c.arg("--times");
    }
    match o.update {
        Some(true) => c = c.arg("--update"),
        Some(false) => c = c.arg("--no-update"),
        None => {}
    }
    if let Some(n) = o.max_download_speed {
        c = c.arg(format!("--max-download-speed={n}"));
    }
    if let Some(n) = o.max_upload_speed {
        c = c.arg(format!("--max-upload-speed={n}"));
    }
    Ok(c)
}
