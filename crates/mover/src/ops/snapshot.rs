//! `Snapshot`: `snapshot create` under kopiur's retention policy, and the status it reports
//! (phase, timing, stats, a partial manifest or the unreadable entries on failure).
use chrono::Utc;
use kopiur_kopia::KopiaError;
use kopiur_kopia::classify::{self, ErrorClass};
use kopiur_kopia::cmd::{self, SnapshotCreateOptions};
use kopiur_kopia::model::{self, SnapshotManifest};
use serde_json::{Value, json};

use super::{Ctx, Exit, LONG_COMMAND_TIMEOUT, rfc3339};
use crate::permission;
use crate::result::{Failure, MAX_LOG_TAIL_BYTES, Report, ResultSink, tail_bytes};
use crate::workspec::SnapshotOp;

impl<S: ResultSink> Ctx<S> {
    pub(super) async fn snapshot(&self, op: &SnapshotOp) -> Exit {
        let id = self.spec.repository.client_identity.clone();
        if let Err(e) = self.connect(false).await {
            return self.fail(&e).await;
        }
        // kopia applies its own retention right after each create; kopiur owns retention.
        if let Err(e) = self.policy(cmd::policy_keep_forever(&id)).await {
            return self.fail(&e).await;
        }
        let source = id.source(&op.source_path);
        if let Err(e) = self.policy(cmd::policy_set_path(&source, &op.policy)).await {
            return self.fail(&e).await;
        }
        let mut tags = vec![
            ("kopiur-snapshot".to_string(), op.snapshot.clone()),
            ("kopiur-uid".to_string(), op.snapshot_uid.clone()),
        ];
        tags.extend(op.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        let create = cmd::snapshot_create(
            &op.mount_path,
            &SnapshotCreateOptions {
                override_source: Some(source),
                tags,
                description: op.description.clone(),
                fail_fast: op.fail_fast,
                upload_limit_mb: op.upload_limit_mb,
                parallel: op.parallel,
            },
        )
        .with_timeout(LONG_COMMAND_TIMEOUT);
        let start = Utc::now();
        let out = match self.with_heartbeat(self.runner.run(&create)).await {
            Ok(o) => o,
            Err(e) => return self.fail(&e).await,
        };
        let end = Utc::now();
        let manifests = match model::parse_stream::<SnapshotManifest>("snapshot create", &out.stdout) {
            Ok(m) => m,
            Err(e) => return self.fail(&e).await,
        };
        let log_tail = tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES);
        let timing = json!({"startTime": rfc3339(start), "endTime": rfc3339(end)});
        let identity = json!({"username": id.username, "hostname": id.hostname, "sourcePath": op.source_path});
        match (out.success(), manifests.first()) {
            (true, None) if classify::is_unchanged(&out.stderr) => {
                self.report(Report::Status(json!({"status": {
                    "phase": "Unchanged", "timing": timing, "logTail": log_tail,
                    "snapshot": {"identity": identity}
                }})))
                .await;
                Exit::Success
            }
            (true, None) => self.fail(&KopiaError::EmptyOutput { command: "snapshot create" }).await,
            (true, Some(m)) => {
                self.report(Report::Status(json!({"status": {
                    "phase": "Succeeded",
                    "snapshot": {"kopiaSnapshotID": m.id, "identity": identity},
                    "timing": timing,
                    "stats": manifest_stats(m),
                    "logTail": log_tail,
                }})))
                .await;
                Exit::Success
            }
            (false, manifest) => {
                // Fatal file errors: exit 1 but the manifest was saved; record its id so
                // deleting the CR removes it.
                let e = out.to_error();
                let mut f = Failure::from_error(self.spec.operation.label(), &e);
                let denied = ErrorClass::from_label(&f.kopia_error_class) == ErrorClass::PermissionDenied;
                if denied {
                    // Its own class (never retried, never the backend's fault) with a message
                    // naming the unreadable entries and the setting that fixes it.
                    let paths = permission::denied_paths(&f.stderr_tail, &op.mount_path);
                    let owners: Vec<_> = paths
                        .iter()
                        .map(|p| permission::owner_of(&std::path::Path::new(&op.mount_path).join(p)))
                        .collect();
                    f.message = format!(
                        "kopia snapshot create: {}",
                        permission::message(&paths, &owners, permission::current_ids())
                    );
                }
                let mut status = json!({"failure": f});
                if let Some(m) = manifest {
                    // A partial snapshot was saved: record its id so deleting the CR removes it.
                    if !denied {
                        f.kopia_error_class = ErrorClass::SourceError.as_str().into();
                        f.retry_recommended = ErrorClass::SourceError.retryable();
                    }
                    status = json!({"failure": f, "snapshot": {"kopiaSnapshotID": m.id, "identity": identity}});
                }
                self.report(Report::Status(json!({"status": status}))).await;
                Exit::for_class(ErrorClass::from_label(&f.kopia_error_class))
            }
        }
    }
}

/// `status.stats` in the API's field names (`SnapshotStats`: sizeBytes, filesNew,
/// filesUnchanged, filesFailed). kopia's upload stats count hashed (new or modified) files as
/// non-cached and reused ones as cached; without upload stats the root summary gives the size.
fn manifest_stats(m: &SnapshotManifest) -> Value {
    let summ = m.root_entry.as_ref().and_then(|r| r.summ.as_ref());
    let mut o = serde_json::Map::new();
    match (m.stats.as_ref(), summ) {
        (Some(st), _) => {
            o.insert("sizeBytes".into(), json!(st.total_size));
            o.insert("filesNew".into(), json!(st.non_cached_files));
            o.insert("filesUnchanged".into(), json!(st.cached_files));
            o.insert("filesFailed".into(), json!(st.error_count + st.ignored_error_count));
        }
        (None, Some(s)) => {
            o.insert("sizeBytes".into(), json!(s.size));
            o.insert("filesFailed".into(), json!(s.num_failed));
        }
        (None, None) => return Value::Null,
    }
    if let (Some(s), false) = (summ, o.contains_key("filesNew")) {
        o.insert("filesUnchanged".into(), json!(s.files));
    }
    Value::Object(o)
}
