//! `kopiur-mover`: reads `KOPIUR_WORK_SPEC`, runs one operation, reports, exits
//! 0 (success, Unchanged, yield; bootstrap whenever it wrote its result), 1 (retryable),
//! 2 (contract error) or 3 (non-retryable).
//!
//! Environment: `KOPIUR_WORK_SPEC` (required), `KOPIUR_WORKDIR` (default
//! `/var/cache/kopia`: the private kopia config, cache and logs), `KOPIUR_KOPIA_BINARY`,
//! `KOPIUR_RESULT_FILE` (write reports as JSON lines there instead of the API),
//! `KOPIUR_EXPECTED_TARGET_UID` (optional guard), `KOPIUR_JOB_UID`.
//!
//! Before running, a mover that reports through the API reads its target (through the status
//! subresource) and exits 2 when the live object's uid differs from `targetRef.uid`.
//!
//! Signals: the mover is PID 1 of its container, where the kernel applies no default action
//! for SIGTERM, so it handles SIGTERM and SIGINT itself: it stops the running kopia process
//! group (SIGTERM, 5 s grace, then SIGKILL, and waits for it), reports nothing (the run did
//! not finish) and exits 128 + the signal number (143 for SIGTERM, 130 for SIGINT), which the
//! Job's podFailurePolicy treats like any retryable failure.
use std::path::PathBuf;
use std::time::Duration;

use kopiur_kopia::{KopiaEnv, Runner};
use kopiur_mover::result::{FileSink, KubeSink, Sink};
use kopiur_mover::workspec::WorkSpecError;
use kopiur_mover::{Ctx, Exit, WorkSpec};

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // KOPIUR_LOG_FORMAT=json would need tracing-subscriber's `json` feature; plain text
    // until the workspace enables it.
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
}

/// How long a running kopia gets to exit after SIGTERM before it is killed.
const KOPIA_STOP_GRACE: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    init_logging();
    let (mut term, mut int) = match (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot install the SIGTERM/SIGINT handlers");
            std::process::exit(Exit::Retryable as i32);
        }
    };
    let work = run();
    let mut work = std::pin::pin!(work);
    let (name, signo) = tokio::select! {
        exit = &mut work => std::process::exit(exit as i32),
        _ = term.recv() => ("SIGTERM", 15),
        _ = int.recv() => ("SIGINT", 2),
    };
    // The run future is no longer polled: stop its kopia children, reap them, then exit
    // without reporting (the operation did not finish).
    let running = kopiur_kopia::run::running_children();
    tracing::warn!(signal = name, kopia_pids = ?running, "received {name}; stopping kopia and exiting");
    // Blocking is fine here: nothing else runs any more and the process exits next.
    let stopped = kopiur_kopia::run::terminate_running(KOPIA_STOP_GRACE);
    tracing::error!(
        signal = name,
        stopped_kopia_pids = ?stopped,
        exit = 128 + signo,
        "terminated by {name} before the operation finished; no result was reported"
    );
    std::process::exit(128 + signo);
}

async fn run() -> Exit {
    let raw = match std::env::var("KOPIUR_WORK_SPEC") {
        Ok(s) => s,
        Err(_) => {
            tracing::error!("KOPIUR_WORK_SPEC is not set");
            return Exit::Contract;
        }
    };
    let spec = match WorkSpec::from_json(&raw) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "refusing the work spec");
            return Exit::Contract;
        }
    };
    if let Ok(expected) = std::env::var("KOPIUR_EXPECTED_TARGET_UID")
        && expected != spec.target_ref.uid
    {
        let e = WorkSpecError::UidMismatch { expected, actual: spec.target_ref.uid.clone() };
        tracing::error!(error = %e, "refusing the work spec");
        return Exit::Contract;
    }
    let workdir = PathBuf::from(std::env::var("KOPIUR_WORKDIR").unwrap_or_else(|_| "/var/cache/kopia".into()));
    let mut env = KopiaEnv::new(&workdir, workdir.join("cache"));
    if let Some(dir) = std::env::var_os("KOPIUR_CONFIG_DIR") {
        env = env.with_config_dir(PathBuf::from(dir));
    }
    let runner = Runner::from_env(Duration::from_secs(spec.command_timeout_seconds.max(1)));
    let job_uid = std::env::var("KOPIUR_JOB_UID").unwrap_or_default();
    let sink = match std::env::var_os("KOPIUR_RESULT_FILE") {
        Some(p) => Sink::File(FileSink { path: p.into() }),
        None => match KubeSink::from_env(spec.target_ref.clone()).await {
            Ok(k) => Sink::Kube(Box::new(k)),
            Err(e) => {
                tracing::error!(error = %e, "no Kubernetes client for reporting results");
                return Exit::Retryable;
            }
        },
    };
    // A uid mismatch on targetRef (docs/design/mover.md §1.2): the object of that name was
    // replaced since the controller built this Job, so nothing is run and nothing reported.
    // A target that cannot be read (gone, or the API unreachable) is logged; the run goes on.
    if let Sink::Kube(k) = &sink {
        match k.target_uid().await {
            Ok(Some(live)) if live != spec.target_ref.uid => {
                let e = WorkSpecError::UidMismatch { expected: live, actual: spec.target_ref.uid.clone() };
                tracing::error!(error = %e, kind = %spec.target_ref.kind, name = %spec.target_ref.name, "refusing the work spec: the target was replaced");
                return Exit::Contract;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!(kind = %spec.target_ref.kind, name = %spec.target_ref.name, "the target does not exist; results will not land")
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the target to check its uid; continuing"),
        }
    }
    // The limits the container runs under, as the kernel enforces them (read inside the
    // container: cgroup v2 `memory.max`/`cpu.max`, or the v1 equivalents in the same format).
    let (memory_max, cpu_max) = kopiur_mover::limits::current();
    tracing::info!(
        op = spec.operation.label(),
        target = %spec.target_ref.name,
        uid = kopiur_mover::permission::current_ids().map(|i| i.0).unwrap_or(u32::MAX),
        memory_max = memory_max.as_deref().unwrap_or("unknown"),
        cpu_max = cpu_max.as_deref().unwrap_or("unknown"),
        "starting"
    );
    let ctx = Ctx::new(spec, env, runner, sink, job_uid);
    let exit = ctx.execute().await;
    tracing::info!(exit = exit as i32, "finished");
    exit
}
