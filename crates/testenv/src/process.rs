//! Child process supervision: own process group, parent-death signal, a log file per
//! component, shutdown by recorded PID (SIGTERM, then SIGKILL).
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Every live child PID started through [`spawn`], so an exit hook can end them even when
/// the owning value is never dropped (a shared environment lives in a static).
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
}

/// Starts `cmd` in its own process group with `PR_SET_PDEATHSIG(SIGKILL)`, stdout and
/// stderr appended to `log`.
///
/// The parent-death signal fires when the *thread* that forked the child exits, so
/// long-lived components must be spawned from a long-lived thread.
pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Proc> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let out = File::options().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
    LIVE.lock().unwrap().push(child.id() as i32);
    Ok(Proc { name: name.to_string(), log: log.to_path_buf(), child: Some(child) })
}

impl Proc {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `Some(status)` once the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// SIGTERM to the process group, SIGKILL after `grace`, then reap.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id() as i32;
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() >= deadline {
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Anything left in the group (grandchildren) goes too.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        LIVE.lock().unwrap().retain(|p| *p != pid);
    }

    /// Sends a signal to the process group (e.g. SIGSTOP/SIGCONT).
    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            unsafe { libc::kill(-(pid as i32), sig) };
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Ends every child still recorded (SIGTERM, short grace, SIGKILL). Called at process exit.
pub fn kill_all_recorded() {
    let pids: Vec<i32> = std::mem::take(&mut *LIVE.lock().unwrap());
    for pid in &pids {
        unsafe { libc::kill(-pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && pids.iter().any(|p| unsafe { libc::kill(*p, 0) } == 0) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in &pids {
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

/// Picks a free loopback port by binding port 0 and releasing it.
/// Host processes whose command line contains `marker` (for tests that a process tree ended).
pub fn processes_with(marker: &str) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).contains(marker)
        })
        .collect()
}

/// The process group of `pid`, from `/proc/<pid>/stat`.
pub fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
