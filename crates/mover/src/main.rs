//! `kopiur-mover`: reads `KOPIUR_WORK_SPEC`, runs one operation, reports, exits
//! 0 (success, Unchanged, yield; bootstrap whenever it wrote its result), 1 (retryable),
//! 2 (contract error) or 3 (non-retryable).
//!
//! Environment: `KOPIUR_WORK_SPEC` (required), `KOPIUR_WORKDIR` (default
//! `/var/cache/kopia`: the private kopia config, cache and logs), `KOPIUR_KOPIA_BINARY`,
//! `KOPIUR_RESULT_FILE` (write reports as JSON lines there instead of the API),
//! `KOPIUR_EXPECTED_TARGET_UID` (optional guard), `KOPIUR_JOB_UID`.
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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    init_logging();
    std::process::exit(run().await as i32);
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
    let env = KopiaEnv::new(&workdir, workdir.join("cache"));
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
    tracing::info!(op = spec.operation.label(), target = %spec.target_ref.name, "starting");
    let ctx = Ctx::new(spec, env, runner, sink, job_uid);
    let exit = ctx.execute().await;
    tracing::info!(exit = exit as i32, "finished");
    exit
}
