//! The mover's operations. Each connects first with the work spec's identity, runs its
//! kopia sequence with every command under a deadline, and reports through the sink.
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use kopiur_kopia::classify::{self, ErrorClass};
use kopiur_kopia::cmd;
use kopiur_kopia::{KopiaEnv, KopiaError, Output, Runner};

mod bootstrap;
mod delete_batch;
mod maintenance;
pub mod pin;
mod replicate;
mod restore;
mod snapshot;

pub use bootstrap::{catalog, verify_absent};
pub use replicate::dest_env;
pub use restore::resolve;

use crate::result::{Failure, Report, ResultSink, failure_patch, heartbeat_patch};
use crate::workspec::{Operation, WorkSpec};

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
}

/// Seconds with millisecond precision (the result document stays short and stable).
pub fn round_seconds(d: std::time::Duration) -> f64 {
    (d.as_millis() as f64) / 1000.0
}

fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{BootstrapOutcome, FileSink};
    use crate::workspec::{BootstrapRepositoryOp, CreateGate, RepositoryInfo, SCHEMA_VERSION, TargetRef};
    use kopiur_kopia::backend::{Backend, FilesystemBackend};
    use kopiur_kopia::cmd::{CacheSizes, Identity};

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
