//! Container processes: spawn into their own namespaces (mount, UTS, PID; see
//! [`super::pidns`]), signal, reap.
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;

use super::mounts::ExecPlan;
pub use super::pidns::ProcessTree;

pub struct Spawned {
    pub child: tokio::process::Child,
    /// Host pid of the shim (the container ID).
    pub pid: i32,
    /// The shim and the container's PID 1, by pidfd.
    pub tree: Arc<ProcessTree>,
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
    // A program whose host path a volume covers (an emptyDir at /tmp over a state directory
    // under /tmp) is exec'd through a descriptor opened before the mounts.
    let program_fd = if super::mounts::covered_by_mount(plan, Path::new(program)) {
        Some(super::mounts::open_path(Path::new(program))?)
    } else {
        None
    };
    let mut cmd = match &program_fd {
        Some(fd) => {
            let mut c =
                tokio::process::Command::new(std::ffi::OsStr::from_bytes(super::mounts::proc_fd_path(fd)?.as_bytes()));
            c.arg0(program);
            c
        }
        None => tokio::process::Command::new(program),
    };
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
    // ETXTBSY: a program written just before (a test's script, a copied binary) can still be
    // open for writing in a child another thread forked before its close-on-exec took effect.
    // That window closes within milliseconds, so retry briefly.
    let mut attempts = 0;
    let child = loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other?,
        }
    };
    let mut child = child;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    // Not waited for yet, so the shim's pid is still ours.
    match ProcessTree::attach(pid) {
        Ok(tree) => Ok(Spawned { child, pid, tree: Arc::new(tree) }),
        Err(e) => {
            let _ = child.start_kill();
            Err(io::Error::new(e.kind(), format!("pidfd_open({pid}): {e}")))
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
        let argv: Vec<String> =
            ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"].iter().map(|s| s.to_string()).collect();
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

        // SIGTERM reaches a PID 1 that handles it; its exit code is the container's.
        let script = "trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done";
        let argv: Vec<String> = ["/bin/sh", "-c", script].iter().map(|s| s.to_string()).collect();
        let log2 = tmp.path().join("c/1.log");
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let mut s = spawn(&argv, &env, &ExecPlan::default(), &log2).unwrap();
        wait_for_log(&log2, "ready").await;
        s.tree.signal(libc::SIGTERM);
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (9, None));
        assert!(std::fs::read_to_string(&log2).unwrap().contains("got-term"));

        // SIGKILL to PID 1: the shim dies of the same signal.
        let argv: Vec<String> = ["/bin/sh", "-c", "sleep 30"].iter().map(|s| s.to_string()).collect();
        let mut s = spawn(&argv, &env, &ExecPlan::default(), &log).unwrap();
        assert!(s.tree.has_init());
        s.tree.kill();
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (137, Some(9)));
        assert!(s.tree.exited());
    }

    async fn wait_for_log(log: &Path, what: &str) {
        for _ in 0..600 {
            if std::fs::read_to_string(log).unwrap_or_default().contains(what) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("{what:?} never appeared in {}", log.display());
    }

    /// A container that starts a grandchild in a session of its own, then is killed: nothing
    /// of its tree survives the shim.
    #[tokio::test]
    async fn killing_a_container_ends_its_whole_tree() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join(format!("tree-marker-{}", std::process::id()));
        let m = marker.display().to_string();
        // The grandchild creates the marker file once it runs, in a session of its own.
        let script = format!(
            "setsid sh -c 'touch \"$0\"; sleep 1000; :' '{m}' & while [ ! -e '{m}' ]; do sleep 0.05; done; echo pid=$$; wait"
        );
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script];
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let log = tmp.path().join("log/0.log");
        let mut s = spawn(&argv, &env, &ExecPlan::default(), &log).unwrap();
        wait_for_log(&log, "pid=").await;
        assert!(std::fs::read_to_string(&log).unwrap().contains("pid=1\n"), "the container is PID 1 of its namespace");
        // PID 1 (its script names the marker) and the grandchild.
        let tree = crate::process::processes_with(&m);
        assert!(
            tree.iter().any(|p| crate::process::pgid_of(*p).is_some_and(|g| g != s.pid)),
            "the grandchild runs, outside the container's process group: {tree:?}"
        );
        s.tree.kill();
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (137, Some(9)));
        assert_eq!(crate::process::processes_with(&m), Vec::<i32>::new(), "no process of the tree outlives the shim");
    }

    /// PID 1 exiting on its own ends the namespace too, with its exit code; the container
    /// sees its own /proc.
    #[tokio::test]
    async fn pid1_exit_ends_the_namespace() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join(format!("exit-marker-{}", std::process::id()));
        let m = marker.display().to_string();
        let script = format!(
            "setsid sh -c 'touch \"$0\"; sleep 1000; :' '{m}' & while [ ! -e '{m}' ]; do sleep 0.05; done; \
             tr '\\0' ' ' < /proc/1/cmdline | grep -q '{m}' && echo own-proc; exit 4"
        );
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script];
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let log = tmp.path().join("log/0.log");
        let mut s = spawn(&argv, &env, &ExecPlan::default(), &log).unwrap();
        let st = s.child.wait().await.unwrap();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(exit_code(st), (4, None), "log: {text}");
        assert!(text.contains("own-proc"), "/proc/1 is the container's PID 1: {text}");
        assert!(marker.exists(), "the grandchild ran");
        assert_eq!(crate::process::processes_with(&m), Vec::<i32>::new(), "the grandchild ended with PID 1");
    }

    #[tokio::test]
    async fn namespaces_mounts_and_identity() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        use super::super::mounts::{CreatedPaths, MountKind, MountSpec, ensure_targets};
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let rw = tmp.path().join("rw");
        let ro = tmp.path().join("ro");
        std::fs::create_dir_all(&rw).unwrap();
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(ro.join("f"), b"readonly-data").unwrap();
        let term = tmp.path().join("term");
        std::fs::write(&term, b"").unwrap();
        std::fs::set_permissions(&term, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        std::fs::set_permissions(&rw, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let target = tmp.path().join("ctr");
        let plan = ExecPlan {
            mounts: vec![
                MountSpec { source: rw.clone(), target: target.join("data"), read_only: false, kind: MountKind::Bind },
                MountSpec { source: ro.clone(), target: target.join("ro"), read_only: true, kind: MountKind::Bind },
                MountSpec {
                    source: term.clone(),
                    target: target.join("termination-log"),
                    read_only: false,
                    kind: MountKind::Bind,
                },
                MountSpec {
                    source: PathBuf::new(),
                    target: target.join("mem"),
                    read_only: false,
                    kind: MountKind::Tmpfs,
                },
            ],
            hostname: "pod-abc".into(),
            uid: Some(1000),
            gid: Some(0),
            groups: Some(vec![2000]),
            cwd: Some(target.join("data")),
        };
        let created = CreatedPaths::default();
        ensure_targets(&plan.mounts, &created).unwrap();
        let t = target.display();
        let script = format!(
            "set -e; hostname > {t}/data/host; id -u > {t}/data/uid; id -G > {t}/data/groups; pwd > {t}/data/cwd; \
             cat {t}/ro/f > {t}/data/ro-copy; if echo x > {t}/ro/new 2>/dev/null; then echo writable > {t}/data/ro-result; else echo refused > {t}/data/ro-result; fi; \
             echo done > {t}/mem/x; cat {t}/mem/x > {t}/data/mem; echo bye > {t}/termination-log"
        );
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), script];
        let log = tmp.path().join("log/0.log");
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let mut s = spawn(&argv, &env, &plan, &log).unwrap();
        let st = s.child.wait().await.unwrap();
        let logtext = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(exit_code(st), (0, None), "log: {logtext}");
        let read = |n: &str| std::fs::read_to_string(rw.join(n)).unwrap().trim().to_string();
        assert_eq!(read("host"), "pod-abc");
        assert_eq!(read("uid"), "1000");
        assert!(read("groups").split_whitespace().any(|g| g == "2000"), "{}", read("groups"));
        assert_eq!(read("cwd"), format!("{t}/data"));
        assert_eq!(read("ro-copy"), "readonly-data");
        assert_eq!(read("ro-result"), "refused");
        assert_eq!(read("mem"), "done");
        assert_eq!(std::fs::read_to_string(&term).unwrap(), "bye\n");
        // Nothing leaked to the host namespace.
        assert!(std::fs::read_dir(target.join("data")).unwrap().next().is_none());
        assert!(!target.join("mem/x").exists());
        assert_ne!(nix::unistd::gethostname().unwrap().to_string_lossy(), "pod-abc");
        created.cleanup();
        assert!(!target.exists());
    }
    /// A volume mounted over the directory that holds the other volumes' sources and the
    /// program itself (an emptyDir at /tmp over a state directory under /tmp).
    #[tokio::test]
    async fn a_mount_over_the_sources_hides_nothing() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        use super::super::mounts::{CreatedPaths, MountKind, MountSpec, ensure_targets};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let (cover, ro, bin) = (root.join("cover"), root.join("ro"), root.join("bin"));
        for d in [&cover, &ro, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ro.join("f"), b"under-the-cover").unwrap();
        let sh = bin.join("sh");
        std::fs::copy("/bin/sh", &sh).unwrap();
        let plan = ExecPlan {
            mounts: vec![
                MountSpec { source: cover.clone(), target: root.clone(), read_only: false, kind: MountKind::Bind },
                MountSpec { source: ro.clone(), target: root.join("inner/ro"), read_only: true, kind: MountKind::Bind },
            ],
            hostname: "cover".into(),
            ..Default::default()
        };
        ensure_targets(&plan.mounts, &CreatedPaths::default()).unwrap();
        let r = root.display();
        let argv = vec![sh.display().to_string(), "-c".into(), format!("cat {r}/inner/ro/f > {r}/out")];
        let log = root.join("log/0.log");
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let mut s = spawn(&argv, &env, &plan, &log).unwrap();
        let st = s.child.wait().await.unwrap();
        assert_eq!(exit_code(st), (0, None));
        assert_eq!(std::fs::read_to_string(cover.join("out")).unwrap(), "under-the-cover");
    }
}
