//! `BootstrapRepository`: connect (or create, when the gate allows it) and report the
//! repository's identity, index blob count, maintenance owner and snapshot catalog.
use kopiur_kopia::KopiaError;
use kopiur_kopia::classify::{self, ErrorClass};
use kopiur_kopia::cmd;
use kopiur_kopia::model::{self, RepositoryStatus, SnapshotManifest};
use serde_json::Value;

use super::{Ctx, Exit, round_seconds};
use crate::result::{
    BootstrapFailure, BootstrapOutcome, BootstrapResult, CatalogEntry, MAX_RESULT_BYTES, Report, ResultSink,
};
use crate::workspec::{BootstrapRepositoryOp, CreateGate};

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn bootstrap(&self, op: &BootstrapRepositoryOp) -> Exit {
        let mut result = BootstrapResult {
            job_uid: self.job_uid.clone(),
            outcome: BootstrapOutcome::Failed,
            unique_id_hex: None,
            failure: None,
            create_blocked: None,
            index_blob_count: None,
            connect_seconds: None,
            snapshots: Vec::new(),
            snapshots_truncated: false,
            snapshot_count: None,
            maintenance_owner: None,
            verified: None,
        };
        // The connect's wall time is what the controller's adaptive deadline is built from.
        let started = std::time::Instant::now();
        let elapsed = |started: std::time::Instant| Some(round_seconds(started.elapsed()));
        match self.connect_slow_ok().await {
            Ok(_) => result.outcome = BootstrapOutcome::Connected,
            Err(e) => {
                result.connect_seconds = elapsed(started);
                // Only a reachable storage without a repository may lead to a create; any
                // other failure (outage, auth, a missing bucket's create error) is reported.
                let not_found = e.class() == ErrorClass::NotFound;
                let allowed = match &op.create_gate {
                    CreateGate::Allowed { .. } => true,
                    CreateGate::DisabledBySpec { .. } | CreateGate::PinnedOnceReady => false,
                };
                if !not_found || op.probe {
                    result.failure = Some(BootstrapFailure::from_error(&e));
                    self.report(Report::Bootstrap(result)).await;
                    return Exit::Success;
                }
                if !allowed {
                    result.failure = Some(BootstrapFailure::from_error(&e));
                    result.create_blocked = Some(op.create_gate.label().into());
                    self.report(Report::Bootstrap(result)).await;
                    return Exit::Success;
                }
                let r = &self.spec.repository;
                let created = match cmd::create(&r.backend, &r.client_identity, &op.create, &r.cache) {
                    Ok(c) => self.run(c).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = created {
                    result.failure = Some(BootstrapFailure::from_error(&e));
                    self.report(Report::Bootstrap(result)).await;
                    return Exit::Success;
                }
                // The creator became the maintenance owner; hand it to kopiur's stable
                // maintenance identity so no short Job ever runs maintenance implicitly.
                if let Err(e) = self.run(cmd::maintenance_set_owner(&op.maintenance_owner)).await {
                    let text = e.stderr_tail().join("\n");
                    if !classify::is_no_changes_specified(&text) {
                        result.failure = Some(BootstrapFailure::from_error(&e));
                        self.report(Report::Bootstrap(result)).await;
                        return Exit::Success;
                    }
                }
                result.outcome = BootstrapOutcome::Created;
            }
        }
        match self.status().await {
            Ok(st) if !st.unique_id_hex.is_empty() => result.unique_id_hex = Some(st.unique_id_hex),
            Ok(_) => {
                result.outcome = BootstrapOutcome::Failed;
                result.failure = Some(BootstrapFailure {
                    class: ErrorClass::Unknown.as_str().into(),
                    summary:
                        "the connection reports no uniqueIDHex (a repository server is not supported for bootstrap)"
                            .into(),
                    ..Default::default()
                });
                self.report(Report::Bootstrap(result)).await;
                return Exit::Success;
            }
            Err(e) => {
                result.outcome = BootstrapOutcome::Failed;
                result.failure = Some(BootstrapFailure::from_error(&e));
                self.report(Report::Bootstrap(result)).await;
                return Exit::Success;
            }
        }
        // Both are informational: a failure leaves the value unknown.
        match self.run(cmd::index_list()).await.and_then(|o| model::parse::<Vec<Value>>("index list", &o.stdout)) {
            Ok(v) => result.index_blob_count = Some(v.len() as u64),
            Err(e) => tracing::warn!(error = %e, "index list failed; the index blob count is unknown"),
        }
        // A created repository's time is a create's, not a connect's: only a connect is measured.
        if result.outcome == BootstrapOutcome::Connected {
            result.connect_seconds = elapsed(started);
        }
        match self.maintenance_info().await {
            Ok(info) => result.maintenance_owner = Some(info.owner),
            Err(e) => tracing::warn!(error = %e, "maintenance info failed; the owner is unknown"),
        }
        if op.list_snapshots {
            match self
                .run(cmd::snapshot_list(None))
                .await
                .and_then(|o| model::parse::<Vec<SnapshotManifest>>("snapshot list", &o.stdout))
            {
                Ok(list) => {
                    result.snapshot_count = Some(list.len() as u64);
                    result.verified = verify_absent(&list, &op.verify_snapshot_ids);
                    let (entries, truncated) = catalog(list, op.catalog_limit, MAX_RESULT_BYTES / 2);
                    result.snapshots = entries;
                    result.snapshots_truncated = truncated;
                }
                Err(e) => tracing::warn!(error = %e, "snapshot listing failed; the catalog is left unknown"),
            }
        }
        self.report(Report::Bootstrap(result)).await;
        Exit::Success
    }

    async fn status(&self) -> Result<RepositoryStatus, KopiaError> {
        let out = self.run(cmd::repository_status()).await?;
        model::parse("repository status", &out.stdout)
    }
}

/// Newest first, capped at `limit` entries and `max_bytes` of JSON.
pub fn catalog(mut list: Vec<SnapshotManifest>, limit: usize, max_bytes: usize) -> (Vec<CatalogEntry>, bool) {
    list.sort_by(|a, b| b.end_time.cmp(&a.end_time).then_with(|| a.id.cmp(&b.id)));
    let total = list.len();
    let mut out = Vec::new();
    let mut bytes = 2usize;
    for m in list.iter().take(limit) {
        let e = CatalogEntry::from_manifest(m);
        let n = serde_json::to_string(&e).map(|s| s.len() + 1).unwrap_or(0);
        if bytes + n > max_bytes {
            break;
        }
        bytes += n;
        out.push(e);
    }
    let truncated = out.len() < total;
    (out, truncated)
}

/// Which of `wanted` (at most [`crate::workspec::MAX_VERIFY_SNAPSHOT_IDS`] are checked) the
/// full listing does not hold. None when nothing was asked or the listing is empty: an empty
/// listing is indistinguishable from a wrong prefix or a glitch, so it proves no absence (the
/// caller only calls this for a `snapshot list` that succeeded).
pub fn verify_absent(list: &[SnapshotManifest], wanted: &[String]) -> Option<crate::result::VerifyAnswer> {
    if list.is_empty() || wanted.is_empty() {
        return None;
    }
    let listed: std::collections::HashSet<&str> = list.iter().map(|m| m.id.as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    let mut answer = crate::result::VerifyAnswer::default();
    for id in wanted.iter().take(crate::workspec::MAX_VERIFY_SNAPSHOT_IDS) {
        answer.through = Some(id.clone());
        if id.is_empty() || !seen.insert(id.as_str()) {
            continue;
        }
        answer.checked += 1;
        if !listed.contains(id.as_str()) {
            answer.absent.push(id.clone());
        }
    }
    Some(answer)
}
