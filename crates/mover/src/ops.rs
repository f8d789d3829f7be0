//! The mover's operations. Each connects first with the work spec's identity, runs its
//! kopia sequence with every command under a deadline, and reports through the sink.
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use kopiur_kopia::classify::{self, ErrorClass};
use kopiur_kopia::cmd::{self, Identity, SnapshotCreateOptions};
use kopiur_kopia::model::{self, MaintenanceInfo, RepositoryStatus, SnapshotManifest};
use kopiur_kopia::{KopiaEnv, KopiaError, Output, Runner};
use serde_json::{Value, json};

pub mod pin;

use crate::permission;
use crate::result::{
    BootstrapFailure, BootstrapOutcome, BootstrapResult, CatalogEntry, DeleteBatchReport, Failure, MAX_LOG_TAIL_BYTES,
    MAX_RESULT_BYTES, MemberResult, Report, ResultSink, failure_patch, heartbeat_patch, tail_bytes,
};
use crate::workspec::{
    BootstrapRepositoryOp, CreateGate, MaintenanceMode, MaintenanceOp, Operation, ReplicateOp, RestoreOp,
    SnapshotDeleteBatchOp, SnapshotOp, TakeoverPolicy, WorkSpec,
};

/// The mover's exit codes (the Job's podFailurePolicy keys on 2 and 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    Retryable = 1,
    Contract = 2,
    Terminal = 3,
}

impl Exit {
    pub fn for_class(c: ErrorClass) -> Exit {
        if c.retryable() { Exit::Retryable } else { Exit::Terminal }
    }
}

/// Long commands (snapshot create, restore, sync-to, maintenance run) are bounded by the
/// Job deadline; this is only a backstop for a mover run outside a Job.
pub const LONG_COMMAND_TIMEOUT: Duration = Duration::from_secs(48 * 3600);

pub struct Ctx<S: ResultSink> {
    pub spec: WorkSpec,
    pub env: KopiaEnv,
    pub runner: Runner,
    pub sink: S,
    pub job_uid: String,
}

impl<S: ResultSink> Ctx<S> {
    pub fn new(spec: WorkSpec, env: KopiaEnv, runner: Runner, sink: S, job_uid: String) -> Ctx<S> {
        let runner = runner.envs(env.vars());
        Ctx { spec, env, runner, sink, job_uid }
    }

    fn short(&self) -> Duration {
        Duration::from_secs(self.spec.command_timeout_seconds.max(1))
    }

    async fn run(&self, c: cmd::KopiaCommand) -> Result<Output, KopiaError> {
        let c = if c.timeout.is_none() { c.with_timeout(self.short()) } else { c };
        self.runner.run_ok(&c).await
    }

    async fn connect(&self, readonly: bool) -> Result<Output, KopiaError> {
        let r = &self.spec.repository;
        self.run(cmd::connect(&r.backend, &r.client_identity, readonly || r.read_only, &r.cache)?).await
    }

    /// A connect bounded by the Job's own deadline (`connectTimeoutSeconds`, which the
    /// controller sets to it) instead of the short command timeout. A repository with thousands
    /// of index blobs connects slowly (minutes), and two connects must still finish then: the
    /// bootstrap/probe connect (its Job deadline adapts to the measured connect time) and
    /// maintenance's, which is what compacts the index blobs. Without that field (a run outside
    /// a Job) the short timeout applies, so a blackholed backend still gets a verdict.
    async fn connect_slow_ok(&self) -> Result<Output, KopiaError> {
        let r = &self.spec.repository;
        let c = cmd::connect(&r.backend, &r.client_identity, r.read_only, &r.cache)?;
        let bound = match self.spec.connect_timeout_seconds {
            Some(s) => Duration::from_secs(s.max(1)).min(LONG_COMMAND_TIMEOUT),
            None => self.short(),
        };
        self.run(c.with_timeout(bound)).await
    }

    async fn report(&self, r: Report) {
        if let Err(e) = self.sink.write(&r).await {
            tracing::error!(error = %e, "failed to write the result");
        }
    }

    async fn fail(&self, e: &KopiaError) -> Exit {
        let f = Failure::from_error(self.spec.operation.label(), e);
        tracing::warn!(class = %f.kopia_error_class, message = %f.message, "operation failed");
        self.report(Report::Status(failure_patch(&f))).await;
        Exit::for_class(e.class())
    }

    /// Removes the private config: kopia stores the S3 secret in it in plain text.
    fn cleanup(&self) {
        let cfg = self.env.config_path();
        for p in [cfg.clone(), cfg.with_extension("config.mlock"), cfg.with_extension("config.kopia-password")] {
            let _ = std::fs::remove_file(p);
        }
    }

    pub async fn execute(&self) -> Exit {
        std::fs::create_dir_all(self.env.workdir.join("logs")).ok();
        let exit = match &self.spec.operation {
            Operation::BootstrapRepository(op) => self.bootstrap(op).await,
            Operation::Snapshot(op) => self.snapshot(op).await,
            Operation::Restore(op) => self.restore(op).await,
            Operation::SnapshotDeleteBatch(op) => self.delete_batch(op).await,
            Operation::Maintenance(op) => self.maintenance(op).await,
            Operation::Replicate(op) => self.replicate(op).await,
            Operation::SnapshotPin(op) => self.pin(op).await,
        };
        self.cleanup();
        exit
    }

    // BootstrapRepository -------------------------------------------------------------

    async fn bootstrap(&self, op: &BootstrapRepositoryOp) -> Exit {
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

    // Snapshot ------------------------------------------------------------------------

    async fn snapshot(&self, op: &SnapshotOp) -> Exit {
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

    /// `policy set`; `no changes specified` is success.
    async fn policy(&self, c: cmd::KopiaCommand) -> Result<(), KopiaError> {
        match self.run(c).await {
            Ok(_) => Ok(()),
            Err(e) if classify::is_no_changes_specified(&e.stderr_tail().join("\n")) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs a long future while patching `status.observedAt` every heartbeat interval.
    async fn with_heartbeat<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        let every = Duration::from_secs(self.spec.heartbeat_seconds.max(1));
        tokio::pin!(fut);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                r = &mut fut => return r,
                _ = tick.tick() => self.report(Report::Status(heartbeat_patch(Utc::now()))).await,
            }
        }
    }

    // Restore -------------------------------------------------------------------------

    async fn restore(&self, op: &RestoreOp) -> Exit {
        if let Err(e) = self.connect(true).await {
            return self.fail(&e).await;
        }
        let id = match (&op.snapshot_id, &op.resolve) {
            (Some(id), _) => id.clone(),
            (None, Some(r)) => {
                let out = match self.run(cmd::snapshot_list(Some(&r.identity.source(&r.source_path)))).await {
                    Ok(o) => o,
                    Err(e) => return self.fail(&e).await,
                };
                let list: Vec<SnapshotManifest> = match model::parse("snapshot list", &out.stdout) {
                    Ok(l) => l,
                    Err(e) => return self.fail(&e).await,
                };
                match resolve(list, r) {
                    Some(m) => m.id,
                    None => {
                        self.report(Report::Status(json!({"status": {"resolved": {"resolution": "NoSnapshot"}}})))
                            .await;
                        let f = Failure {
                            kopia_error_class: ErrorClass::NotFound.as_str().into(),
                            message: format!("no snapshot of {} matches", r.identity.source(&r.source_path)),
                            stderr_tail: String::new(),
                            exit_code: None,
                            retry_recommended: false,
                            op: "restore".into(),
                        };
                        self.report(Report::Status(failure_patch(&f))).await;
                        return Exit::Terminal;
                    }
                }
            }
            (None, None) => {
                let f = Failure::contract("restore", "the restore names neither a snapshot id nor an identity".into());
                self.report(Report::Status(failure_patch(&f))).await;
                return Exit::Contract;
            }
        };
        let start = Utc::now();
        let c = cmd::snapshot_restore(&id, &op.target_path, &op.options).with_timeout(LONG_COMMAND_TIMEOUT);
        match self.with_heartbeat(self.runner.run(&c)).await.and_then(Output::ok) {
            Ok(out) => {
                // A mover that cannot chown wrote every entry as itself: say which owners were lost.
                let ownership = if op.options.skip_owners != Some(true) && !crate::ownership::can_chown() {
                    self.ownership_check(&id, &op.target_path).await
                } else {
                    None
                };
                let mut status = json!({
                    "phase": "Completed",
                    "resolved": {"resolution": "Snapshot", "kopiaSnapshotID": id},
                    "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
                    "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
                });
                if let Some(o) = ownership {
                    status["ownership"] = o;
                }
                self.report(Report::Status(json!({ "status": status }))).await;
                Exit::Success
            }
            Err(e) => self.fail(&e).await,
        }
    }

    /// Walks the snapshot's directory objects (at most `MAX_DIRECTORIES`) and compares each
    /// recorded owner with the restored entry's. `None` when the walk could not start (the
    /// restore itself succeeded; a failed check is logged, never a failed restore).
    async fn ownership_check(&self, id: &str, target: &str) -> Option<serde_json::Value> {
        use crate::ownership::{MAX_DIRECTORIES, Report as OwnershipReport, compare};
        let manifest = match self.run(cmd::manifest_show(id)).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "reading the snapshot manifest for the ownership check failed");
                return None;
            }
        };
        let root =
            match model::parse::<SnapshotManifest>("manifest show", &model::strip_comment_lines(&manifest.stdout)) {
                Ok(m) => m.root_entry.map(|r| r.obj).filter(|o| !o.is_empty())?,
                Err(e) => {
                    tracing::warn!(error = %e, "the snapshot manifest has no root object; ownership not checked");
                    return None;
                }
            };
        let mut report = OwnershipReport::default();
        let mut queue = std::collections::VecDeque::from([(String::new(), root)]);
        let target = std::path::Path::new(target);
        while let Some((rel, obj)) = queue.pop_front() {
            if report.directories_checked >= MAX_DIRECTORIES {
                break;
            }
            let dir = match self
                .run(cmd::show_object(&obj))
                .await
                .and_then(|o| model::parse::<model::DirObject>("show", &o.stdout))
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, dir = %rel, "reading a directory object failed; ownership checked in part");
                    queue.clear();
                    report.directories_checked += 1;
                    report.complete = false;
                    return Some(report.status(crate::permission::current_ids().map(|i| i.0).unwrap_or(0)));
                }
            };
            report.directories_checked += 1;
            compare(target, &rel, &dir.entries, &mut report);
            for e in dir.entries.iter().filter(|e| e.kind == "d" && !e.obj.is_empty()) {
                let child = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
                queue.push_back((child, e.obj.clone()));
            }
        }
        report.complete = queue.is_empty();
        let uid = crate::permission::current_ids().map(|i| i.0).unwrap_or(0);
        if report.not_preserved > 0 {
            tracing::warn!(not_preserved = report.not_preserved, "restored entries without their recorded owner");
        }
        Some(report.status(uid))
    }

    // SnapshotDeleteBatch -------------------------------------------------------------

    async fn delete_batch(&self, op: &SnapshotDeleteBatchOp) -> Exit {
        let mut report = DeleteBatchReport { members: Vec::new(), kopia_connects: 1, delete_calls: 0 };
        if let Err(e) = self.connect(false).await {
            tracing::warn!(error = %e, "connect failed; no member was deleted");
            return Exit::for_class(e.class());
        }
        let timeout = Duration::from_secs(op.chunk_timeout_seconds.max(1));
        let mut worst = Exit::Success;
        for chunk in op.members.chunks(op.chunk_size.max(1)) {
            let ids: Vec<String> = chunk.iter().map(|m| m.snapshot_id.clone()).collect();
            report.delete_calls += 1;
            match self.runner.run_ok(&cmd::snapshot_delete(&ids).with_timeout(timeout)).await {
                Ok(_) => report.members.extend(chunk.iter().map(|m| member(m, "deleted", None))),
                Err(e) if classify::is_no_snapshots_matched(&e.stderr_tail().join("\n")) => {
                    // Some ids are already gone: re-issue one by one so each member gets
                    // its own answer.
                    for m in chunk {
                        report.delete_calls += 1;
                        let single = cmd::snapshot_delete(std::slice::from_ref(&m.snapshot_id)).with_timeout(timeout);
                        match self.runner.run_ok(&single).await {
                            Ok(_) => report.members.push(member(m, "deleted", None)),
                            Err(e) if classify::is_no_snapshots_matched(&e.stderr_tail().join("\n")) => {
                                report.members.push(member(m, "alreadyDeleted", None))
                            }
                            Err(e) => {
                                worst = worse(worst, Exit::for_class(e.class()));
                                report.members.push(member(m, "failed", Some(e.summary())));
                            }
                        }
                    }
                }
                Err(e) => {
                    worst = worse(worst, Exit::for_class(e.class()));
                    report.members.extend(chunk.iter().map(|m| member(m, "failed", Some(e.summary()))));
                }
            }
        }
        self.report(Report::DeleteBatch(report)).await;
        worst
    }

    // Maintenance ---------------------------------------------------------------------

    async fn maintenance(&self, op: &MaintenanceOp) -> Exit {
        if let Err(e) = self.connect_slow_ok().await {
            return self.fail(&e).await;
        }
        let before = match self.maintenance_info().await {
            Ok(i) => i,
            Err(e) => return self.fail(&e).await,
        };
        let owner = before.owner.clone();
        let ours = owner == op.lease_owner;
        let alias = op.owner_aliases.contains(&owner);
        let take_over = match (ours, alias, op.takeover_policy) {
            (true, _, _) => false,
            (false, true, _) | (false, false, TakeoverPolicy::Force) => true,
            (false, false, TakeoverPolicy::Never) => return self.yielded(&owner, "LeaseHeldByOther").await,
            (false, false, TakeoverPolicy::PromptCondition) => {
                return self.yielded(&owner, "LeaseTakeoverPrompt").await;
            }
        };
        if take_over && let Err(e) = self.policy(cmd::maintenance_set_owner("me")).await {
            return self.fail(&e).await;
        }
        let full = match op.mode {
            MaintenanceMode::Full => true,
            MaintenanceMode::Quick => false,
        };
        let start = Utc::now();
        let run =
            self.with_heartbeat(self.runner.run(&cmd::maintenance_run(full).with_timeout(LONG_COMMAND_TIMEOUT))).await;
        let out = match run.and_then(Output::ok) {
            Ok(o) => o,
            Err(e) => {
                if let Some(o) = classify::maintenance_owner_mismatch(&e.stderr_tail().join("\n")) {
                    return self.yielded(&o, "LeaseHeldByOther").await;
                }
                return self.fail(&e).await;
            }
        };
        let after = self.maintenance_info().await.ok();
        // A held local lock skips maintenance silently with exit 0: only a grown run
        // history proves it ran.
        let ran = after.as_ref().map(|a| a.schedule.run_count() > before.schedule.run_count());
        self.report(Report::Status(json!({"status": {
            "phase": "Succeeded",
            "outcome": if ran == Some(false) { "Skipped" } else { "Ran" },
            "mode": if full { "full" } else { "quick" },
            "owner": after.as_ref().map(|a| a.owner.clone()).unwrap_or(op.lease_owner.clone()),
            "leaseOwned": true,
            // The schema keeps only `ownership`: the controller reads the outcome from it.
            "ownership": {"owner": after.map(|a| a.owner).unwrap_or(op.lease_owner.clone())},
            "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
            "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
        }})))
        .await;
        Exit::Success
    }

    async fn maintenance_info(&self) -> Result<MaintenanceInfo, KopiaError> {
        let out = self.run(cmd::maintenance_info()).await?;
        model::parse("maintenance info", &out.stdout)
    }

    async fn yielded(&self, owner: &str, reason: &str) -> Exit {
        self.report(Report::Status(json!({"status": {
            "phase": "Yielded", "outcome": "Yielded", "owner": owner, "leaseOwned": false, "reason": reason,
            "ownership": {"owner": owner},
        }})))
        .await;
        Exit::Success
    }

    // Replicate -----------------------------------------------------------------------

    async fn replicate(&self, op: &ReplicateOp) -> Exit {
        if let Err(e) = self.connect(true).await {
            return self.fail(&e).await;
        }
        let c = match cmd::sync_to(&op.destination, &op.sync) {
            Ok(c) => c.with_timeout(LONG_COMMAND_TIMEOUT),
            Err(e) => return self.fail(&e).await,
        };
        // The destination's credentials arrive as KOPIUR_DEST_<X>; only the sync-to child
        // sees them as <X>, overriding the source's.
        let runner = self.runner.clone().envs(dest_env(std::env::vars()));
        let start = Utc::now();
        match self.with_heartbeat(runner.run(&c)).await.and_then(Output::ok) {
            Ok(out) => {
                self.report(Report::Status(json!({"status": {
                    "phase": "Succeeded",
                    "timing": {"startTime": rfc3339(start), "endTime": rfc3339(Utc::now())},
                    "logTail": tail_bytes(&out.stderr_tail.join("\n"), MAX_LOG_TAIL_BYTES),
                }})))
                .await;
                Exit::Success
            }
            Err(e) => self.fail(&e).await,
        }
    }
}

/// `KOPIUR_DEST_X=v` -> `X=v`.
pub fn dest_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    vars.filter_map(|(k, v)| k.strip_prefix("KOPIUR_DEST_").filter(|s| !s.is_empty()).map(|s| (s.to_string(), v)))
        .collect()
}

fn member(m: &crate::workspec::DeleteMember, outcome: &str, error: Option<String>) -> MemberResult {
    MemberResult { uid: m.uid.clone(), snapshot_id: m.snapshot_id.clone(), outcome: outcome.into(), error }
}

/// Seconds with millisecond precision (the result document stays short and stable).
pub fn round_seconds(d: std::time::Duration) -> f64 {
    (d.as_millis() as f64) / 1000.0
}

fn worse(a: Exit, b: Exit) -> Exit {
    if (b as i32) > (a as i32) { b } else { a }
}

fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
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

/// The newest snapshot ending at or before `as_of`, after skipping `offset` newer ones.
pub fn resolve(mut list: Vec<SnapshotManifest>, r: &crate::workspec::ResolveIdentity) -> Option<SnapshotManifest> {
    let want = Identity::new(r.identity.username.clone(), r.identity.hostname.clone());
    list.retain(|m| {
        m.source.user_name == want.username
            && m.source.host == want.hostname
            && m.source.path == r.source_path
            && m.incomplete.is_none()
            && match (r.as_of, m.end_time) {
                (Some(asof), Some(end)) => end <= asof,
                (Some(_), None) => false,
                (None, _) => true,
            }
    });
    list.sort_by_key(|m| std::cmp::Reverse(m.end_time));
    list.into_iter().nth(r.offset as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::FileSink;
    use crate::workspec::{RepositoryInfo, SCHEMA_VERSION, TargetRef};
    use kopiur_kopia::backend::{Backend, FilesystemBackend};
    use kopiur_kopia::cmd::CacheSizes;

    /// A stand-in kopia: `repository connect` takes 1.5 s, then the repository answers.
    const FAKE_KOPIA: &str = r#"#!/bin/sh
case "$1 $2" in
  "repository connect") sleep 1.5; exit 0 ;;
  "repository status") echo '{"uniqueIDHex":"abcd"}' ;;
  "index list") echo '[{"id":"xn0_a"},{"id":"xn0_b"}]' ;;
  "maintenance info") echo '{"owner":"kopiur@kopiur.t.r"}' ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"#;

    /// The bootstrap connect reports its wall time (`connectSeconds`, next to the index blob
    /// count), and it is bounded by the Job deadline (`connectTimeoutSeconds`), not by the
    /// per-command timeout: a 1 s command timeout does not kill a 1.5 s connect.
    #[tokio::test]
    async fn bootstrap_reports_the_connect_time_and_outlives_the_command_timeout() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("kopia");
        std::fs::write(&bin, FAKE_KOPIA).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = WorkSpec {
            schema_version: SCHEMA_VERSION,
            target_ref: TargetRef {
                api_version: "kopiur.home-operations.com/v1alpha1".into(),
                kind: "Repository".into(),
                namespace: Some("t".into()),
                name: "r".into(),
                uid: "u".into(),
            },
            repository: RepositoryInfo {
                kind: "Repository".into(),
                namespace: Some("t".into()),
                name: "r".into(),
                uid: "u".into(),
                backend: Backend::Filesystem(FilesystemBackend { path: "/nonexistent".into() }),
                client_identity: Identity::new("kopiur-ops", "kopiur.t.r"),
                read_only: false,
                cache: CacheSizes::default(),
            },
            command_timeout_seconds: 1,
            heartbeat_seconds: 30,
            connect_timeout_seconds: Some(30),
            operation: Operation::BootstrapRepository(BootstrapRepositoryOp {
                create_gate: CreateGate::PinnedOnceReady,
                pinned_unique_id: Some("abcd".into()),
                probe: true,
                list_snapshots: false,
                catalog_limit: 10,
                verify_snapshot_ids: vec![],
                maintenance_owner: "kopiur@kopiur.t.r".into(),
                create: Default::default(),
            }),
        };
        let out = dir.path().join("result.jsonl");
        let env = KopiaEnv::new(dir.path().join("work"), dir.path().join("cache"));
        let runner = Runner::new(&bin, Duration::from_secs(1));
        let ctx = Ctx::new(spec, env, runner, FileSink { path: out.clone() }, "job-1".into());
        assert_eq!(ctx.execute().await, Exit::Success);
        let line = std::fs::read_to_string(&out).unwrap();
        let report: Report = serde_json::from_str(line.lines().next().unwrap()).unwrap();
        let Report::Bootstrap(r) = report else { panic!("not a bootstrap report: {line}") };
        assert_eq!(r.outcome, BootstrapOutcome::Connected, "{r:?}");
        assert_eq!(r.index_blob_count, Some(2));
        let secs = r.connect_seconds.expect("the connect time is reported");
        assert!((1.5..10.0).contains(&secs), "connect + status + index list took {secs}s");
        assert!(line.contains("\"connectSeconds\":"), "{line}");
    }

    #[test]
    fn seconds_keep_millisecond_precision() {
        assert_eq!(round_seconds(Duration::from_micros(1_234_567)), 1.234);
        assert_eq!(round_seconds(Duration::ZERO), 0.0);
    }
}
