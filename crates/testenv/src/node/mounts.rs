//! NA-10/NA-11: per-container mount, UTS and PID namespaces, set up in `pre_exec`.
//! The PID namespace and the shim process in front of the container are in [`super::pidns`].
//!
//! Everything the child needs is turned into C strings before the fork; after it, the
//! child only makes raw syscalls (async-signal-safe) and touches no allocator or lock.
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    Bind,
    Tmpfs,
}

#[derive(Debug, Clone)]
pub struct MountSpec {
    /// Host path (ignored for tmpfs).
    pub source: PathBuf,
    /// Path as the container sees it.
    pub target: PathBuf,
    pub read_only: bool,
    pub kind: MountKind,
}

/// What the child does between fork and exec, besides the process group and the PID
/// namespace.
#[derive(Debug, Clone, Default)]
pub struct ExecPlan {
    pub mounts: Vec<MountSpec>,
    pub hostname: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Supplementary groups; `None` keeps the agent's.
    pub groups: Option<Vec<u32>>,
    pub cwd: Option<PathBuf>,
}

struct PreparedMount {
    /// Host path of a bind source. The child opens every source (`O_PATH`) before the first
    /// mount and mounts from `/proc/self/fd/<n>`, so a source stays reachable when an earlier
    /// mount covers its host path (an emptyDir at `/tmp` over a state directory under `/tmp`).
    source: CString,
    target: CString,
    read_only: bool,
    tmpfs: bool,
}

/// An [`ExecPlan`] in fork-safe form.
pub struct Prepared {
    mounts: Vec<PreparedMount>,
    hostname: Vec<u8>,
    uid: Option<libc::uid_t>,
    gid: Option<libc::gid_t>,
    groups: Option<Vec<libc::gid_t>>,
    cwd: Option<CString>,
    parent: libc::pid_t,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl ExecPlan {
    /// Orders mounts parent-first, so a nested mountPath lands on top of its parent.
    pub fn sorted_mounts(&self) -> Vec<MountSpec> {
        let mut m = self.mounts.clone();
        m.sort_by_key(|s| s.target.components().count());
        m
    }

    pub fn prepare(&self) -> io::Result<Prepared> {
        let mut mounts = Vec::new();
        for m in self.sorted_mounts() {
            mounts.push(PreparedMount {
                source: if m.kind == MountKind::Tmpfs { CString::new("tmpfs")? } else { cstr(&m.source)? },
                target: cstr(&m.target)?,
                read_only: m.read_only,
                tmpfs: m.kind == MountKind::Tmpfs,
            });
        }
        if mounts.len() > MAX_MOUNTS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("more than {MAX_MOUNTS} mounts")));
        }
        Ok(Prepared {
            mounts,
            hostname: self.hostname.as_bytes().to_vec(),
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            cwd: self.cwd.as_deref().map(cstr).transpose()?,
            parent: std::process::id() as libc::pid_t,
        })
    }
}

/// An `O_PATH | O_CLOEXEC` descriptor: survives the fork, closed by the exec.
pub fn open_path(p: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let c = cstr(p)?;
    // SAFETY: plain syscall on a valid C string; the descriptor is owned from here on.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display())));
    }
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/<n>`: the magic link the child resolves to the file behind the descriptor.
pub fn proc_fd_path(fd: &std::os::fd::OwnedFd) -> io::Result<CString> {
    use std::os::fd::AsRawFd;
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Whether a mount of the plan covers `path` (the host file would be hidden in the child).
pub fn covered_by_mount(plan: &ExecPlan, path: &Path) -> bool {
    plan.mounts.iter().any(|m| path.starts_with(&m.target))
}

/// Mounts per container (the child keeps their source descriptors in a fixed array).
const MAX_MOUNTS: usize = 128;

/// Writes `/proc/self/fd/<fd>\0` into `buf` without allocating (fork-safe).
fn fd_path(buf: &mut [u8; 40], fd: libc::c_int) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let (mut n, mut len) = (fd.max(0) as u32, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl Prepared {
    /// Runs in the forked child, before exec.
    ///
    /// # Safety
    /// Only call between fork and exec; it makes raw syscalls on pre-built data.
    pub unsafe fn apply(&self) -> io::Result<()> {
        unsafe {
            // PDEATHSIG follows the forking thread; the tokio worker threads live as long as
            // the agent, which is what we want.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
            if libc::getppid() != self.parent {
                // The agent died before prctl took effect.
                libc::_exit(137);
            }
            check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            // Open every bind source first, in this namespace: a mount below may cover the
            // host path of a later source. The descriptors close on exec.
            let mut fds = [-1 as libc::c_int; MAX_MOUNTS];
            for (i, m) in self.mounts.iter().enumerate() {
                if !m.tmpfs {
                    fds[i] = libc::open(m.source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                    if fds[i] < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            for (i, m) in self.mounts.iter().enumerate() {
                let mut buf = [0u8; 40];
                if m.tmpfs {
                    check(libc::mount(
                        m.source.as_ptr(),
                        m.target.as_ptr(),
                        c"tmpfs".as_ptr(),
                        0,
                        c"mode=1777".as_ptr().cast(),
                    ))?;
                } else {
                    check(libc::mount(
                        fd_path(&mut buf, fds[i]),
                        m.target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                }
                if m.read_only {
                    check(libc::mount(
                        m.source.as_ptr(),
                        m.target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                        std::ptr::null(),
                    ))?;
                }
            }
            if !self.hostname.is_empty() {
                check(libc::sethostname(self.hostname.as_ptr().cast(), self.hostname.len()))?;
            }
            // This process becomes the shim; what follows runs in PID 1 of a new PID
            // namespace, which mounts its own /proc first.
            super::pidns::enter()?;
            // Drop privileges last: mounts need root.
            if let Some(groups) = &self.groups {
                check(libc::setgroups(groups.len(), groups.as_ptr()))?;
            }
            if let Some(gid) = self.gid {
                check(libc::setgid(gid))?;
            }
            if let Some(uid) = self.uid {
                check(libc::setuid(uid))?;
            }
            // After the mounts, so a workingDir inside a volume sees the volume.
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
        }
        Ok(())
    }
}

/// Host paths the agent created as mount targets; removed at teardown when still empty.
/// With a journal file, the record survives an agent that was killed, so its successor
/// removes them too.
///
/// Agents running side by side share host paths: the first to mount at `/restore/data`
/// creates it, the next finds it there. Removing a directory that is a mount point in another
/// mount namespace detaches that mount (Linux 3.18 on), so an agent that removed "its" empty
/// target at teardown pulled the volume out from under a container of another agent (CI: a
/// Restore's kopia found no `/restore` and failed on `mkdir /restore`). With a [`SharedTargets`]
/// registry, an agent that is not the last one alive hands its paths to the registry, and
/// the last agent to clean up removes them all.
#[derive(Debug, Default)]
pub struct CreatedPaths {
    paths: Mutex<Vec<PathBuf>>,
    journal: Option<PathBuf>,
    shared: Option<SharedTargets>,
}

/// A host-wide registry of the agents alive and of the mount targets whose removal waits
/// for the last of them. Each agent holds an exclusive `flock` on its own file under
/// `agents/` for as long as it lives (a killed agent's lock goes with it, whatever its pid
/// became); `pending` lists deferred paths; the directory's own `flock` serializes teardown
/// decisions with registrations. The last agent out removes the directory too.
#[derive(Debug)]
pub struct SharedTargets {
    dir: PathBuf,
    /// This agent's registration, its lock held while open; `None` once deregistered.
    me: Mutex<Option<(PathBuf, std::fs::File)>>,
}

fn flock(f: &std::fs::File, op: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on an open descriptor.
    check(unsafe { libc::flock(f.as_raw_fd(), op) })
}

impl SharedTargets {
    /// Registers this agent in the registry at `dir` (created when missing).
    pub fn register(dir: &Path) -> io::Result<SharedTargets> {
        let shared = SharedTargets { dir: dir.to_path_buf(), me: Mutex::new(None) };
        let _guard = shared.lock()?;
        let agents = dir.join("agents");
        std::fs::create_dir_all(&agents)?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let path = agents.join(format!("{}-{nanos}", std::process::id()));
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        flock(&f, libc::LOCK_EX | libc::LOCK_NB)?;
        *shared.me.lock().unwrap() = Some((path, f));
        Ok(shared)
    }

    /// The registry's own lock: the directory, opened and locked, and still the one at its
    /// path (the last agent out removes it while holding the lock; a waiter then retries).
    fn lock(&self) -> io::Result<std::fs::File> {
        use std::os::unix::fs::MetadataExt;
        loop {
            std::fs::create_dir_all(&self.dir)?;
            let f = match std::fs::File::open(&self.dir) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            flock(&f, libc::LOCK_EX)?;
            let held = f.metadata()?;
            match std::fs::metadata(&self.dir) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => return Ok(f),
                _ => continue,
            }
        }
    }

    /// Whether an agent other than this one is alive (holds its registration lock).
    fn others_alive(&self) -> io::Result<bool> {
        let mine = self.me.lock().unwrap().as_ref().map(|(p, _)| p.clone());
        let Ok(entries) = std::fs::read_dir(self.dir.join("agents")) else { return Ok(false) };
        let mut alive = false;
        for e in entries.flatten() {
            let p = e.path();
            if Some(&p) == mine.as_ref() {
                continue;
            }
            let Ok(f) = std::fs::OpenOptions::new().write(true).open(&p) else { continue };
            if flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
                // Its agent is gone (killed): the registration is stale.
                let _ = std::fs::remove_file(&p);
            } else {
                alive = true;
            }
        }
        Ok(alive)
    }

    /// This agent is done: with other agents alive, `mine` joins the pending list and
    /// nothing is removed (returns `None`); as the last one, returns every path to remove
    /// (the pending ones and `mine`) and removes the registry.
    fn finish(&self, mine: &[PathBuf]) -> io::Result<Option<Vec<PathBuf>>> {
        let _guard = self.lock()?;
        if let Some((p, f)) = self.me.lock().unwrap().take() {
            let _ = std::fs::remove_file(&p);
            drop(f);
        }
        let pending_file = self.dir.join("pending");
        if self.others_alive()? {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&pending_file)?;
            for p in mine {
                writeln!(f, "{}", p.display())?;
            }
            return Ok(None);
        }
        let mut all: Vec<PathBuf> = std::fs::read_to_string(&pending_file)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect();
        all.extend(mine.iter().cloned());
        let _ = std::fs::remove_file(&pending_file);
        let _ = std::fs::remove_dir(self.dir.join("agents"));
        let _ = std::fs::remove_dir(&self.dir);
        Ok(Some(all))
    }
}

impl CreatedPaths {
    /// A registry backed by `journal` (one path a line), preloaded from it.
    pub fn with_journal(journal: PathBuf) -> Self {
        let paths = std::fs::read_to_string(&journal)
            .map(|s| s.lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect())
            .unwrap_or_default();
        CreatedPaths { paths: Mutex::new(paths), journal: Some(journal), shared: None }
    }

    /// Coordinates teardown with the other agents through `shared` (see [`SharedTargets`]).
    pub fn sharing(mut self, shared: SharedTargets) -> Self {
        self.shared = Some(shared);
        self
    }

    fn record(&self, p: PathBuf) {
        let mut v = self.paths.lock().unwrap();
        if !v.contains(&p) {
            if let Some(j) = &self.journal {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(j) {
                    let _ = writeln!(f, "{}", p.display());
                }
            }
            v.push(p);
        }
    }

    /// `mkdir -p` that records each directory it creates.
    pub fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut cur = PathBuf::new();
        for comp in dir.components() {
            cur.push(comp);
            if matches!(comp, Component::RootDir | Component::Prefix(_)) {
                continue;
            }
            match std::fs::symlink_metadata(&cur) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir(&cur)
                        .or_else(|e| if e.kind() == io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })?;
                    self.record(cur.clone());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Creates an empty file (and its parents), recording what it created.
    pub fn create_file(&self, file: &Path) -> io::Result<()> {
        if std::fs::symlink_metadata(file).is_ok() {
            return Ok(());
        }
        if let Some(parent) = file.parent() {
            self.create_dir_all(parent)?;
        }
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(file)?;
        self.record(file.to_path_buf());
        Ok(())
    }

    /// Removes recorded paths, deepest first: empty files and empty directories only. With
    /// a shared registry and another agent alive, hands them to the registry instead (the
    /// other agent's containers may have mounts on them), and the last agent removes them.
    pub fn cleanup(&self) {
        let mine = std::mem::take(&mut *self.paths.lock().unwrap());
        let mut paths = match &self.shared {
            None => mine,
            Some(shared) => match shared.finish(&mine) {
                Ok(Some(all)) => all,
                Ok(None) => Vec::new(),
                Err(e) => {
                    // Fail safe: keep the (empty) directories rather than detach a mount.
                    tracing::warn!(
                        "mount-target registry {}: {e}; leaving {} path(s)",
                        shared.dir.display(),
                        mine.len()
                    );
                    Vec::new()
                }
            },
        };
        paths.sort_by(|a, b| (a.components().count(), a).cmp(&(b.components().count(), b)));
        paths.dedup();
        for p in paths.iter().rev() {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => {
                    let _ = std::fs::remove_dir(p);
                }
                Ok(m) if m.len() == 0 => {
                    let _ = std::fs::remove_file(p);
                }
                _ => {}
            }
        }
        if let Some(j) = &self.journal {
            let _ = std::fs::remove_file(j);
        }
    }

    pub fn len(&self) -> usize {
        self.paths.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes sure every mount target exists. A target nested under another mount is created
/// inside that mount's source (the namespace would otherwise hide the host directory);
/// others are created on the host and recorded.
pub fn ensure_targets(mounts: &[MountSpec], created: &CreatedPaths) -> io::Result<()> {
    let mut sorted = mounts.to_vec();
    sorted.sort_by_key(|s| s.target.components().count());
    for (i, m) in sorted.iter().enumerate() {
        let is_file = m.kind == MountKind::Bind && std::fs::metadata(&m.source).map(|md| !md.is_dir()).unwrap_or(false);
        let parent = sorted[..i]
            .iter()
            .filter(|p| p.kind == MountKind::Bind && m.target.starts_with(&p.target) && m.target != p.target)
            .max_by_key(|p| p.target.components().count());
        match parent {
            Some(p) => {
                let rel = m.target.strip_prefix(&p.target).unwrap();
                let inside = p.source.join(rel);
                if is_file {
                    if std::fs::symlink_metadata(&inside).is_err() {
                        if let Some(par) = inside.parent() {
                            std::fs::create_dir_all(par)?;
                        }
                        std::fs::File::create(&inside)?;
                    }
                } else {
                    std::fs::create_dir_all(&inside)?;
                }
            }
            None if is_file => created.create_file(&m.target)?,
            None => created.create_dir_all(&m.target)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_paths_cleanup_keeps_nonempty() {
        let tmp = tempfile::tempdir().unwrap();
        let created = CreatedPaths::default();
        let deep = tmp.path().join("a/b/c");
        created.create_dir_all(&deep).unwrap();
        created.create_file(&tmp.path().join("a/f/term")).unwrap();
        assert_eq!(created.len(), 5);
        std::fs::write(tmp.path().join("a/b/keep"), b"x").unwrap();
        created.cleanup();
        assert!(!deep.exists());
        assert!(!tmp.path().join("a/f").exists());
        assert!(tmp.path().join("a/b/keep").exists());
        assert!(created.is_empty());
    }

    #[test]
    fn a_shared_target_outlives_the_agent_that_created_it_until_the_last_agent_is_done() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = tmp.path().join("registry");
        let target = tmp.path().join("restore/data");
        let a = CreatedPaths::default().sharing(SharedTargets::register(&registry).unwrap());
        let b = CreatedPaths::default().sharing(SharedTargets::register(&registry).unwrap());
        a.create_dir_all(&target).unwrap();
        // b's container mounts at the same target: it exists, so b records nothing.
        b.create_dir_all(&target).unwrap();
        assert_eq!((a.len(), b.len()), (2, 0));
        a.cleanup();
        assert!(target.is_dir(), "a removed a target b's containers may still have a mount on");
        assert!(registry.join("pending").is_file());
        b.cleanup();
        assert!(!tmp.path().join("restore").exists(), "the last agent removes what the first created");
        assert!(!registry.exists(), "the last agent removes the registry");
        // cleanup runs twice at agent shutdown: the second one finds nothing and leaves nothing.
        a.cleanup();
        b.cleanup();
        assert!(!registry.exists());
    }

    #[test]
    fn a_killed_agent_does_not_hold_shared_targets_forever() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = tmp.path().join("registry");
        let target = tmp.path().join("t/x");
        let a = CreatedPaths::default().sharing(SharedTargets::register(&registry).unwrap());
        {
            // Registered, then gone without a cleanup: its lock goes with it.
            let _killed = SharedTargets::register(&registry).unwrap();
        }
        a.create_dir_all(&target).unwrap();
        a.cleanup();
        assert!(!tmp.path().join("t").exists(), "a dead agent's stale registration counted as alive");
        assert!(!registry.exists());
    }

    #[test]
    fn a_nonempty_shared_target_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = tmp.path().join("registry");
        let a = CreatedPaths::default().sharing(SharedTargets::register(&registry).unwrap());
        a.create_dir_all(&tmp.path().join("k/d")).unwrap();
        std::fs::write(tmp.path().join("k/d/data"), b"x").unwrap();
        a.cleanup();
        assert!(tmp.path().join("k/d/data").exists());
    }

    #[test]
    fn journal_survives_a_lost_registry() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = tmp.path().join("journal");
        let target = tmp.path().join("t/x");
        {
            let first = CreatedPaths::with_journal(journal.clone());
            first.create_dir_all(&target).unwrap();
            // Dropped without cleanup, as a killed agent would.
        }
        let second = CreatedPaths::with_journal(journal.clone());
        assert_eq!(second.len(), 2);
        second.cleanup();
        assert!(!tmp.path().join("t").exists());
        assert!(!journal.exists());
    }

    #[test]
    fn nested_targets_go_into_parent_source() {
        let tmp = tempfile::tempdir().unwrap();
        let src_a = tmp.path().join("srcA");
        let src_b = tmp.path().join("srcB");
        std::fs::create_dir_all(&src_a).unwrap();
        std::fs::create_dir_all(&src_b).unwrap();
        let file_src = tmp.path().join("msg");
        std::fs::write(&file_src, b"").unwrap();
        let root = tmp.path().join("ctr");
        let mounts = vec![
            MountSpec { source: src_b.clone(), target: root.join("data/sub"), read_only: false, kind: MountKind::Bind },
            MountSpec { source: src_a.clone(), target: root.join("data"), read_only: false, kind: MountKind::Bind },
            MountSpec {
                source: file_src,
                target: root.join("etc/termination-log"),
                read_only: false,
                kind: MountKind::Bind,
            },
        ];
        let created = CreatedPaths::default();
        ensure_targets(&mounts, &created).unwrap();
        assert!(root.join("data").is_dir());
        assert!(!root.join("data/sub").exists(), "nested target must not be made on the host");
        assert!(src_a.join("sub").is_dir());
        assert!(root.join("etc/termination-log").is_file());
        created.cleanup();
        assert!(!root.exists());
    }

    #[test]
    fn prepare_orders_parent_first() {
        let tmp = tempfile::tempdir().unwrap();
        let (s1, s2) = (tmp.path().join("s1"), tmp.path().join("s2"));
        std::fs::create_dir_all(&s1).unwrap();
        std::fs::create_dir_all(&s2).unwrap();
        let plan = ExecPlan {
            mounts: vec![
                MountSpec { source: s2, target: "/a/b".into(), read_only: true, kind: MountKind::Bind },
                MountSpec { source: s1, target: "/a".into(), read_only: false, kind: MountKind::Bind },
            ],
            hostname: "p".into(),
            ..Default::default()
        };
        let p = plan.prepare().unwrap();
        assert_eq!(p.mounts[0].target.as_bytes(), b"/a");
        assert!(p.mounts[1].read_only);
        let mut buf = [0u8; 40];
        let path = unsafe { std::ffi::CStr::from_ptr(fd_path(&mut buf, 1023)) };
        assert_eq!(path.to_str().unwrap(), "/proc/self/fd/1023");
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(fd_path(&mut buf, 7)) }.to_str().unwrap(), "/proc/self/fd/7");
        assert!(covered_by_mount(&plan, Path::new("/a/b/c")));
        assert!(!covered_by_mount(&plan, Path::new("/ab")));
    }
}
