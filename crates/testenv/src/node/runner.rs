//! Container processes: spawn into their own process group and namespaces, signal, reap.
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use super::mounts::ExecPlan;

pub struct Spawned {
    pub child: tokio::process::Child,
    pub pid: i32,
}

/// Spawns `argv` with exactly `env`, stdout and stderr appended to `log`.
pub fn spawn(argv: &[String], env: &[(String, String)], plan: &ExecPlan, log: &Path) -> io::Result<Spawned> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    let prepared = plan.prepare()?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    // SAFETY: `apply` only makes raw syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || prepared.apply());
    }
    let child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    Ok(Spawned { child, pid })
}

/// Signals a container's whole process group.
pub fn signal_group(pgid: i32, sig: libc::c_int) {
    if pgid > 0 {
        // SAFETY: plain syscall; a negative pid addresses the group.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Exit code as Kubernetes reports it: the code, or 128+signal.
pub fn exit_code(status: ExitStatus) -> (i32, Option<i32>) {
    match (status.code(), status.signal()) {
        (Some(c), _) => (c, None),
        (None, Some(s)) => (128 + s, Some(s)),
        _ => (255, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spawn_logs_and_exit_codes() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("c/0.log");
        let argv: Vec<String> = ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"].iter().map(|s| s.to_string()).collect();
        // No mounts and no hostname: only process-group and PDEATHSIG handling, plus the
        // namespaces, which need root; skip when not root.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let mut s = spawn(&argv, &[("PATH".into(), "/usr/bin:/bin".into())], &ExecPlan::default(), &log).unwrap();
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (3, None));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("out") && text.contains("err"));

        let argv: Vec<String> = ["/bin/sh", "-c", "sleep 30"].iter().map(|s| s.to_string()).collect();
        let mut s = spawn(&argv, &[], &ExecPlan::default(), &log).unwrap();
        signal_group(s.pid, libc::SIGTERM);
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (143, Some(15)));
    }
}
