//! The mover is PID 1 of its container, where SIGTERM has no default action: it must handle
//! SIGTERM and SIGINT itself. These tests run the real `kopiur-mover` binary with real kopia
//! connecting to an S3 endpoint that accepts connections and never answers (kopia then waits
//! for a response far longer than the test), send the signal, and check that the mover exits
//! within seconds with 128 + the signal number, logs why, reports no result, and leaves no
//! kopia process behind.
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{CacheSizes, Identity};
use kopiur_mover::workspec::*;

/// A TCP server that accepts every connection and never writes a byte.
fn black_hole() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            match s {
                Ok(s) => held.push(s),
                Err(_) => return,
            }
        }
    });
    (addr, h)
}

fn spec(endpoint: String) -> WorkSpec {
    WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Repository".into(),
            namespace: Some("t".into()),
            name: "r".into(),
            uid: "uid-r".into(),
        },
        repository: RepositoryInfo {
            kind: "Repository".into(),
            namespace: Some("t".into()),
            name: "r".into(),
            uid: "uid-r".into(),
            backend: Backend::S3(S3Backend {
                bucket: "never-answers".into(),
                endpoint: Some(endpoint),
                region: Some("garage".into()),
                disable_tls: true,
                ..Default::default()
            }),
            client_identity: Identity::new("kopiur-ops", "kopiur.t.r"),
            read_only: false,
            cache: CacheSizes::default(),
        },
        // Far beyond the test: only the signal can end this run in time.
        command_timeout_seconds: 3600,
        heartbeat_seconds: 30,
        connect_timeout_seconds: None,
        operation: Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: CreateGate::PinnedOnceReady,
            pinned_unique_id: None,
            probe: false,
            list_snapshots: false,
            catalog_limit: 10,
            verify_snapshot_ids: Vec::new(),
            maintenance_owner: "kopiur@kopiur.t.r".into(),
            create: Default::default(),
        }),
    }
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie (exited, not reaped) counts as gone too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

async fn signal_stops_kopia_and_exits(signal: &str, expected_exit: i32) {
    let tmp = tempfile::Builder::new().prefix("kopiur-mover-signal-").tempdir().unwrap();
    let (addr, _server) = black_hole();
    let kopia = kopiur_testenv::tools::kopia().unwrap();
    // The wrapper records kopia's pid (exec keeps it) so the test can look for it afterwards.
    let pids = tmp.path().join("kopia-pids");
    let wrapper = tmp.path().join("kopia");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\necho $$ >> '{}'\nexec '{}' \"$@\"\n", pids.display(), kopia.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let result = tmp.path().join("result.jsonl");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopiur-mover"))
        .env("KOPIUR_WORK_SPEC", spec(format!("{addr}")).to_json().unwrap())
        .env("KOPIUR_WORKDIR", &work)
        .env("KOPIUR_KOPIA_BINARY", &wrapper)
        .env("KOPIUR_RESULT_FILE", &result)
        .env("KOPIA_PASSWORD", "signal-test-password")
        .env("AWS_ACCESS_KEY_ID", "AKIDSIGNALTEST")
        .env("AWS_SECRET_ACCESS_KEY", "signal-test-secret")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mover_pid = child.id().unwrap();

    // Wait for kopia to start, then give it a moment to be blocked on the black hole.
    let kopia_pid = wait_for_pid(&pids, Duration::from_secs(30));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(alive(kopia_pid), "kopia ({kopia_pid}) should still be waiting on the silent endpoint");
    assert!(child.try_wait().unwrap().is_none(), "the mover should still be running");

    let sent = Instant::now();
    let st = std::process::Command::new("kill").args([&format!("-{signal}"), &mover_pid.to_string()]).status().unwrap();
    assert!(st.success());
    let out = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the mover did not exit within 15 s of {signal}"))
        .unwrap();
    let took = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(expected_exit), "exit code after {signal}; stderr:\n{stderr}");
    assert!(took < Duration::from_secs(8), "the mover took {took:?} to exit after {signal}");
    assert!(
        stderr.contains(&format!("terminated by SIG{signal} before the operation finished")),
        "no clear log line; stderr:\n{stderr}"
    );
    assert!(stderr.contains(&kopia_pid.to_string()), "the log names the stopped kopia pid; stderr:\n{stderr}");
    // Every kopia the mover started is gone (and reaped: no zombie either).
    for pid in read_pids(&pids) {
        assert!(!alive(pid), "kopia process {pid} survived the mover's {signal}");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "kopia process {pid} was not reaped");
    }
    // The interrupted run reported no result.
    let reports = std::fs::read_to_string(&result).unwrap_or_default();
    assert!(!reports.contains("\"bootstrap\""), "an interrupted run must not report a result: {reports}");
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn wait_for_pid(path: &Path, within: Duration) -> u32 {
    let start = Instant::now();
    loop {
        if let Some(p) = read_pids(path).last() {
            return *p;
        }
        assert!(start.elapsed() < within, "kopia was never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn sigterm_stops_kopia_and_exits_143() {
    signal_stops_kopia_and_exits("TERM", 143).await;
}

#[tokio::test]
async fn sigint_stops_kopia_and_exits_130() {
    signal_stops_kopia_and_exits("INT", 130).await;
}
