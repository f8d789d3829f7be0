//! One PID namespace per container, so that ending a container ends its whole process tree.
//!
//! A container is started as two processes:
//!
//! - the **shim**, the agent's direct child (its pid is the `proc://<pid>` container ID). It
//!   sets up the mount and UTS namespaces (see [`super::mounts`]), calls
//!   `unshare(CLONE_NEWPID)` and forks once more. It then only waits: it forwards SIGTERM,
//!   SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the container and, once the container has
//!   ended, exits the same way (the same exit code, or the same signal), so the agent reports
//!   what the container did;
//! - the **container process**, PID 1 of the new namespace, which mounts a fresh `/proc`, drops
//!   privileges and execs the program.
//!
//! Everything the container starts stays in its namespace, whatever process group or
//! session it moves to (kopia runs in a process group of its own). When PID 1 ends, the
//! kernel SIGKILLs every other process of the namespace, and PID 1's exit (so the shim's)
//! completes only once they are all gone: when the agent reaps the shim, nothing of the tree
//! is left. SIGKILL sent to PID 1 from the agent is always delivered; other signals reach PID 1
//! only if it handles them, as in a real container. If the shim dies, PID 1 follows through
//! its parent-death signal, and the shim has one towards the agent: a killed agent leaves no
//! process either.
//!
//! The agent addresses both processes through pidfds ([`ProcessTree`]), never by a pid that
//! could have been reused, so it only ever signals processes it started.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// Signals the shim passes on to the container.
const FORWARDED: [libc::c_int; 6] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// The shim's child (a host pid), for the signal handler. Only ever set in a shim process.
static CONTAINER_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CONTAINER_PID.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Forks PID 1 of a new PID namespace. Returns in that child (PID 1), which goes on to drop
/// privileges and exec; the calling process becomes the shim and never returns.
///
/// # Safety
/// Only call between fork and exec, in a single-threaded child, after the mount namespace
/// is ready (the new `/proc` is mounted in it).
pub(super) unsafe fn enter() -> io::Result<()> {
    unsafe {
        check(libc::unshare(libc::CLONE_NEWPID))?;
        // Block the forwarded signals until the shim's handlers know the child's pid.
        let mut fwd: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut fwd);
        for s in FORWARDED {
            libc::sigaddset(&mut fwd, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        check(libc::sigprocmask(libc::SIG_BLOCK, &fwd, &mut old))?;
        // The shim holds the write end for as long as it lives: the child checks that it is
        // still there once its own parent-death signal is armed.
        let mut alive = [-1 as libc::c_int; 2];
        check(libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC))?;
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::close(alive[1]);
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
            let mut pfd = libc::pollfd { fd: alive[0], events: libc::POLLIN, revents: 0 };
            if libc::poll(&mut pfd, 1, 0) != 0 {
                // Hang-up: the shim died before the parent-death signal was armed.
                libc::_exit(137);
            }
            libc::close(alive[0]);
            check(libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()))?;
            // A /proc of this namespace: the container sees its own processes, and
            // /proc/<getpid()> is itself, as in a container.
            check(libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
            return Ok(());
        }
        libc::close(alive[0]);
        shim(pid, alive[1], &fwd)
    }
}

/// The shim's life: forward signals, wait for the container, exit as it did.
unsafe fn shim(child: libc::pid_t, keep: libc::c_int, fwd: &libc::sigset_t) -> ! {
    unsafe {
        CONTAINER_PID.store(child, Ordering::Relaxed);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = forward as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        for s in FORWARDED {
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
        // The agent's own handlers (tokio's) are still installed in this forked copy.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // Close everything the agent handed down, the spawner's exec-status pipe included:
        // the agent's spawn returns once the container has exec'd, not when the shim exits.
        close_from(3, keep);
        libc::sigprocmask(libc::SIG_UNBLOCK, fwd, std::ptr::null_mut());
        let mut status = 0;
        loop {
            let r = libc::waitpid(child, &mut status, 0);
            if r == child {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(255);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // Die of the same signal, without a core dump of the shim.
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(255)
    }
}

/// Closes every descriptor from `first` up, except `keep`.
unsafe fn close_from(first: libc::c_int, keep: libc::c_int) {
    unsafe {
        let range = |lo: libc::c_int, hi: libc::c_uint| {
            libc::syscall(libc::SYS_close_range, lo as libc::c_uint, hi, 0 as libc::c_uint) == 0
        };
        let below = keep <= first || range(first, (keep - 1) as libc::c_uint);
        let above = range(keep + 1, libc::c_uint::MAX);
        if !(below && above) {
            // No close_range (Linux < 5.9).
            for fd in first..4096 {
                if fd != keep {
                    libc::close(fd);
                }
            }
        }
    }
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is owned from here on.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) -> bool {
    // SAFETY: plain syscall on a descriptor we own.
    unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0) == 0
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The children of `pid` (all of them live in `pid`'s single thread's list).
fn children_of(pid: i32) -> Vec<i32> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        return s.split_whitespace().filter_map(|p| p.parse().ok()).collect();
    }
    // Kernels without CONFIG_PROC_CHILDREN: scan.
    let Ok(rd) = std::fs::read_dir("/proc") else { return vec![] };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

/// One container's processes, as the agent holds them: the shim (its child) and, once
/// found, PID 1 of the container's namespace.
#[derive(Debug)]
pub struct ProcessTree {
    /// Host pid of the shim: the container ID.
    pub pid: i32,
    shim: OwnedFd,
    init: Option<OwnedFd>,
}

impl ProcessTree {
    /// Takes hold of a freshly spawned, not yet reaped shim `pid` and of its child. The shim
    /// cannot be reaped (so its pid cannot be reused) before the caller waits for it; its
    /// child is accepted only if it is still the shim's child once the pidfd is open.
    pub fn attach(pid: i32) -> io::Result<Self> {
        let shim = pidfd_open(pid)?;
        let init = children_of(pid).into_iter().next().and_then(|c| {
            let fd = pidfd_open(c).ok()?;
            (parent_of(c) == Some(pid)).then_some(fd)
        });
        Ok(ProcessTree { pid, shim, init })
    }

    /// Whether PID 1 of the namespace was found (it may have ended before [`Self::attach`]).
    pub fn has_init(&self) -> bool {
        self.init.is_some()
    }

    /// A polite signal (SIGTERM) to the container's PID 1. Like a container runtime, it
    /// arrives only if PID 1 handles it.
    pub fn signal(&self, sig: libc::c_int) {
        match &self.init {
            Some(fd) => {
                pidfd_signal(fd, sig);
            }
            // The shim forwards it.
            None => {
                pidfd_signal(&self.shim, sig);
            }
        }
    }

    /// Kills the whole tree: SIGKILL to PID 1 ends every process of the namespace, then the
    /// shim exits with 137 (a PID 1 already gone leaves the shim to exit as PID 1 did).
    /// Without a known PID 1, the shim is killed and PID 1 follows through its parent-death
    /// signal.
    pub fn kill(&self) {
        match &self.init {
            Some(fd) => {
                pidfd_signal(fd, libc::SIGKILL);
            }
            None => self.kill_shim(),
        }
    }

    /// Last resort: SIGKILL to the shim.
    pub fn kill_shim(&self) {
        pidfd_signal(&self.shim, libc::SIGKILL);
    }

    /// Whether the shim has ended (it ends only after the whole tree).
    pub fn exited(&self) -> bool {
        let mut pfd = libc::pollfd { fd: self.shim.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll on a descriptor we own, without waiting.
        unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_self() {
        let me = std::process::id() as i32;
        let parent = unsafe { libc::getppid() };
        assert_eq!(parent_of(me), Some(parent));
        assert_eq!(parent_of(-1), None);
    }
}
