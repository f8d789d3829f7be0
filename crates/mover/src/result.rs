//! What the mover reports, and where it goes.
//!
//! Bootstrap and probe write a result document into a ConfigMap the controller created;
//! every other operation merge-patches its CR's status subresource. Results go through the
//! [`ResultSink`] trait so the binary writes to the API in a pod and tests read a file.
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use kopiur_kopia::model::SnapshotManifest;
use kopiur_kopia::{ErrorClass, KopiaError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::workspec::TargetRef;

/// The result ConfigMap's payload stays below this (ConfigMaps cap at 1 MiB).
pub const MAX_RESULT_BYTES: usize = 900 * 1024;
/// `logTail` cap.
pub const MAX_LOG_TAIL_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BootstrapOutcome {
    Connected,
    Created,
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapFailure {
    pub class: String,
    pub not_initialized: bool,
    pub timed_out: bool,
    pub summary: String,
    pub stderr_tail: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

impl BootstrapFailure {
    pub fn from_error(e: &KopiaError) -> BootstrapFailure {
        let c = e.classification();
        BootstrapFailure {
            class: c.class.as_str().into(),
            not_initialized: c.not_initialized,
            timed_out: e.timed_out(),
            summary: e.summary(),
            stderr_tail: e.stderr_tail().to_vec(),
            exit_code: e.exit_code(),
        }
    }
}

/// A slimmed catalog entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    pub id: String,
    pub username: String,
    pub hostname: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<DateTime<Utc>>,
    pub size: i64,
    pub files: i64,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
}

impl CatalogEntry {
    pub fn from_manifest(m: &SnapshotManifest) -> CatalogEntry {
        let summ = m.root_entry.as_ref().and_then(|r| r.summ.as_ref());
        CatalogEntry {
            id: m.id.clone(),
            username: m.source.user_name.clone(),
            hostname: m.source.host.clone(),
            path: m.source.path.clone(),
            start_time: m.start_time,
            end_time: m.end_time,
            size: summ.map(|s| s.size).unwrap_or_default(),
            files: summ.map(|s| s.files).unwrap_or_default(),
            tags: m.tags.iter().map(|(k, v)| (k.strip_prefix("tag:").unwrap_or(k).to_string(), v.clone())).collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapResult {
    pub job_uid: String,
    pub outcome: BootstrapOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_id_hex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<BootstrapFailure>,
    /// The gate that blocked a create the connect result would otherwise have led to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_blocked: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_blob_count: Option<u64>,
    /// Wall time of `kopia repository connect` plus the `repository status` and `index list`
    /// that follow it, in seconds; on a failed connect, the time until it failed. Absent from
    /// an older mover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<CatalogEntry>,
    #[serde(default)]
    pub snapshots_truncated: bool,
    /// How many snapshots the listing found, before any truncation (`storageStats.snapshotCount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_owner: Option<String>,
    /// The answer to the work spec's `verifySnapshotIds`, from the full `snapshot list`
    /// (never truncated). None: not asked, or the listing failed or was empty (absence is
    /// never inferred from a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<VerifyAnswer>,
}

/// Which of the ids the controller asked about are missing from a successful, non-empty
/// `snapshot list`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyAnswer {
    /// How many distinct ids were checked.
    pub checked: u64,
    /// The last id of the request, in request order: the controller's rotation cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
    /// The checked ids the listing does not hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<String>,
}

/// `status.failure` of a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub kopia_error_class: String,
    pub message: String,
    pub stderr_tail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub retry_recommended: bool,
    pub op: String,
}

impl Failure {
    pub fn from_error(op: &str, e: &KopiaError) -> Failure {
        let class = e.class();
        Failure {
            kopia_error_class: class.as_str().into(),
            message: e.summary(),
            stderr_tail: e.stderr_tail().join("\n"),
            exit_code: e.exit_code(),
            retry_recommended: class.retryable(),
            op: op.into(),
        }
    }

    pub fn contract(op: &str, message: String) -> Failure {
        Failure {
            kopia_error_class: ErrorClass::Unknown.as_str().into(),
            message,
            stderr_tail: String::new(),
            exit_code: None,
            retry_recommended: false,
            op: op.into(),
        }
    }
}

/// Per-member outcome of a delete batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberResult {
    pub uid: String,
    pub snapshot_id: String,
    /// `deleted`, `alreadyDeleted`, `refused` (kept: the manifest is not this member's) or
    /// `failed`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A refused member's reason code (`crate::batch_outcome::Refusal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteBatchReport {
    pub members: Vec<MemberResult>,
    pub kopia_connects: u32,
    pub delete_calls: u32,
}

/// One report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "body")]
// One report per Job step, built once and serialized: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Report {
    /// For the result ConfigMap.
    Bootstrap(BootstrapResult),
    /// A merge patch of the target's status subresource (`{"status": {…}}`).
    Status(Value),
    /// Logged only (batch Jobs report through their terminal condition).
    DeleteBatch(DeleteBatchReport),
}

/// Truncates text to `max` bytes, keeping the end (the last lines matter most).
pub fn tail_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    s[cut..].to_string()
}

pub fn heartbeat_patch(now: DateTime<Utc>) -> Value {
    json!({"status": {"observedAt": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}})
}

pub fn failure_patch(f: &Failure) -> Value {
    json!({"status": {"failure": f}})
}

/// Where reports go.
pub trait ResultSink: Send + Sync {
    fn write(&self, report: &Report) -> impl std::future::Future<Output = anyhow::Result<()>> + Send;
}

/// Appends one JSON line per report (tests read the file).
pub struct FileSink {
    pub path: PathBuf,
}

impl ResultSink for FileSink {
    async fn write(&self, report: &Report) -> anyhow::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        let line = serde_json::to_string(report)?;
        writeln!(f, "{line}")?;
        Ok(())
    }
}

/// Writes to the Kubernetes API: status merge patches on the target CR, the bootstrap
/// result into the ConfigMap named by `KOPIUR_RESULT_CONFIGMAP`.
pub struct KubeSink {
    pub client: kube::Client,
    pub target: TargetRef,
    pub namespace: String,
    pub result_configmap: Option<String>,
}

/// The plural resource name of a kopiur kind.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

impl KubeSink {
    pub async fn from_env(target: TargetRef) -> anyhow::Result<KubeSink> {
        let client = kube::Client::try_default().await?;
        let namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
            .map(|s| s.trim().to_string())
            .or_else(|| target.namespace.clone())
            .unwrap_or_else(|| "default".into());
        Ok(KubeSink { client, target, namespace, result_configmap: std::env::var("KOPIUR_RESULT_CONFIGMAP").ok() })
    }
}

impl KubeSink {
    /// The target CR through its status subresource (what the mover's Role may read).
    fn target_api(&self) -> kube::Api<kube::api::DynamicObject> {
        use kube::api::{Api, ApiResource};
        let (group, version) = self.target.api_version.split_once('/').unwrap_or(("", &self.target.api_version));
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: self.target.api_version.clone(),
            kind: self.target.kind.clone(),
            plural: plural(&self.target.kind),
        };
        match &self.target.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// The live target's uid, `None` when no object of that name exists.
    pub async fn target_uid(&self) -> anyhow::Result<Option<String>> {
        match self.target_api().get_status(&self.target.name).await {
            Ok(o) => Ok(o.metadata.uid),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// How long a write refused with 403 is retried: the run's Role is created right after its
/// Job, so a mover that reports within its first seconds may come before it.
const FORBIDDEN_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl ResultSink for KubeSink {
    async fn write(&self, report: &Report) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        loop {
            match self.write_once(report).await {
                Err(e) if forbidden(&e) && started.elapsed() < FORBIDDEN_RETRY => {
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
                Err(e) if forbidden(&e) => {
                    return Err(e.context(format!(
                        "this run's Role (named after its Job, created by the controller with it) does not let the \
                         mover's ServiceAccount write its result; see kubectl -n {} get role,rolebinding -l \
                         app.kubernetes.io/managed-by=kopiur",
                        self.namespace
                    )));
                }
                other => return other,
            }
        }
    }
}

fn forbidden(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403)
}

impl KubeSink {
    async fn write_once(&self, report: &Report) -> anyhow::Result<()> {
        use kube::api::{Api, Patch, PatchParams};
        let pp = PatchParams::default();
        match report {
            Report::Bootstrap(r) => {
                let name = self
                    .result_configmap
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("KOPIUR_RESULT_CONFIGMAP is not set"))?;
                let body = serde_json::to_string(r)?;
                anyhow::ensure!(body.len() <= MAX_RESULT_BYTES, "bootstrap result is {} bytes", body.len());
                let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                    Api::namespaced(self.client.clone(), &self.namespace);
                api.patch(name, &pp, &Patch::Merge(json!({"data": {"result.json": body}}))).await?;
            }
            Report::Status(patch) => {
                self.target_api().patch_status(&self.target.name, &pp, &Patch::Merge(patch)).await?;
            }
            Report::DeleteBatch(r) => {
                // Batch Jobs report through their terminal condition; the per-member detail
                // goes to the log for humans.
                println!("{}", serde_json::to_string(r)?);
            }
        }
        Ok(())
    }
}

pub enum Sink {
    File(FileSink),
    Kube(Box<KubeSink>),
}

impl ResultSink for Sink {
    async fn write(&self, report: &Report) -> anyhow::Result<()> {
        match self {
            Sink::File(f) => f.write(report).await,
            Sink::Kube(k) => k.write(report).await,
        }
    }
}
