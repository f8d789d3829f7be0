//! What the real node changes on the host, each change recorded so teardown undoes exactly
//! it: the one-node lock, the bridge and its address, a blackhole route for the Service
//! range, the sysctls kubelet, kube-proxy and the bridge plugin write, the cgroup kubelet
//! runs pods in, iptables chains and nft tables created while the node ran, and mounts left
//! under the node's directory.
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::config::{BRIDGE, NODE_IP, POD_SUBNET, SERVICE_CIDR};

/// Runs a host command, failing with its output.
pub fn sh(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One real node per machine: kube-proxy owns the host's KUBE-* chains, and two would fight.
/// The lock is a flock on a file under /run, released when the process ends.
pub struct NodeLock(#[allow(dead_code)] File);

pub fn lock(timeout: std::time::Duration) -> Result<NodeLock> {
    let path = Path::new("/run/kopiur-testenv-realnode.lock");
    let f = File::options().create(true).truncate(false).write(true).open(path)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(NodeLock(f));
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "another real test node runs on this machine (lock {} held for {timeout:?}); one at a time",
                path.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Sysctls the node's components may write, with their values before it started.
pub const SYSCTLS: &[&str] = &[
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

pub fn read_sysctls() -> BTreeMap<String, String> {
    SYSCTLS
        .iter()
        .filter_map(|k| {
            std::fs::read_to_string(Path::new("/proc/sys").join(k)).ok().map(|v| (k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Writes back every value that changed; returns the keys it restored.
pub fn restore_sysctls(before: &BTreeMap<String, String>) -> Vec<String> {
    let now = read_sysctls();
    let mut restored = Vec::new();
    for (k, v) in before {
        if now.get(k) != Some(v) && std::fs::write(Path::new("/proc/sys").join(k), v).is_ok() {
            restored.push(format!("{}={v}", k.replace('/', ".")));
        }
    }
    restored
}

/// The bridge the pods attach to, with the node's address, and the Service-range blackhole.
pub fn create_network() -> Result<()> {
    // Called under the lock, so no live node uses them: leftovers of a run that was killed
    // before its teardown are stale, and removed.
    let stale_route = sh("ip", &["route", "show", "table", "all"]).is_ok_and(|r| r.contains(SERVICE_CIDR));
    if Path::new("/sys/class/net").join(BRIDGE).exists() || stale_route {
        tracing::warn!(
            "removing the bridge {BRIDGE} / the {SERVICE_CIDR} route left by a real node that was not torn down"
        );
        for e in remove_network() {
            tracing::warn!("{e}");
        }
    }
    sh("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    let cidr = format!("{NODE_IP}/{}", POD_SUBNET.rsplit('/').next().unwrap_or("24"));
    sh("ip", &["addr", "add", &cidr, "dev", BRIDGE])?;
    // No IPv6 on the bridge: the environment hands out none.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6"), "1");
    sh("ip", &["link", "set", BRIDGE, "up"])?;
    // A Service IP that no rule has translated yet must not follow the default route out.
    sh("ip", &["route", "add", "blackhole", SERVICE_CIDR])?;
    Ok(())
}

pub fn remove_network() -> Vec<String> {
    let mut errs = Vec::new();
    if let Err(e) = sh("ip", &["route", "del", "blackhole", SERVICE_CIDR]) {
        errs.push(format!("{e:#}"));
    }
    if Path::new("/sys/class/net").join(BRIDGE).exists()
        && let Err(e) = sh("ip", &["link", "del", BRIDGE])
    {
        errs.push(format!("{e:#}"));
    }
    errs
}

/// The iptables chains of every table, for both families: `(binary, table, chain)`.
pub fn iptables_chains() -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for bin in ["iptables-save", "ip6tables-save"] {
        let Ok(text) = sh(bin, &[]) else { continue };
        let mut table = String::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if let Some(c) = line.strip_prefix(':') {
                let chain = c.split_whitespace().next().unwrap_or("").to_string();
                out.insert((bin.trim_end_matches("-save").to_string(), table.clone(), chain));
            }
        }
    }
    out
}

/// Deletes every chain that did not exist before the node started, after removing the rules
/// (in any chain) that jump to one of them.
pub fn remove_new_chains(before: &BTreeSet<(String, String, String)>) -> Vec<String> {
    let now = iptables_chains();
    let new: Vec<&(String, String, String)> = now.iter().filter(|c| !before.contains(*c)).collect();
    let mut removed = Vec::new();
    for bin in ["iptables", "ip6tables"] {
        let tables: BTreeSet<&str> = new.iter().filter(|c| c.0 == bin).map(|c| c.1.as_str()).collect();
        for table in tables {
            let chains: BTreeSet<&str> =
                new.iter().filter(|c| c.0 == bin && c.1 == table).map(|c| c.2.as_str()).collect();
            // Rules jumping into a new chain, wherever they are: `-A CHAIN ... -j NEW`.
            let Ok(text) = sh(&format!("{bin}-save"), &["-t", table]) else { continue };
            for line in text.lines().filter(|l| l.starts_with("-A ")) {
                let words: Vec<&str> = line.split_whitespace().collect();
                let target = words.iter().position(|w| *w == "-j" || *w == "-g").and_then(|i| words.get(i + 1));
                if let Some(t) = target
                    && chains.contains(t)
                    && !chains.contains(words[1])
                {
                    let mut args = vec!["-t", table, "-D"];
                    args.extend(&words[1..]);
                    let _ = sh(bin, &args);
                }
            }
            for c in &chains {
                let _ = sh(bin, &["-t", table, "-F", c]);
            }
            for c in &chains {
                if sh(bin, &["-t", table, "-X", c]).is_ok() {
                    removed.push(format!("{bin} -t {table} {c}"));
                }
            }
        }
    }
    removed
}

/// nft tables (family, name) — iptables-nft creates `ip nat` and friends on first use.
pub fn nft_tables() -> BTreeSet<String> {
    sh("nft", &["list", "tables"])
        .map(|t| t.lines().filter_map(|l| l.strip_prefix("table ")).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Deletes the nft tables that appeared while the node ran and hold no rule any more.
pub fn remove_new_empty_tables(before: &BTreeSet<String>) -> Vec<String> {
    let mut removed = Vec::new();
    for t in nft_tables().difference(before) {
        let args: Vec<&str> = t.split_whitespace().collect();
        let mut list = vec!["list", "table"];
        list.extend(&args);
        let empty = sh("nft", &list).is_ok_and(|body| {
            !body.lines().map(str::trim).any(|l| {
                !l.is_empty()
                    && !l.starts_with("table ")
                    && !l.starts_with("chain ")
                    && !l.starts_with("type ")
                    && l != "}"
            })
        });
        if empty {
            let mut del = vec!["delete", "table"];
            del.extend(&args);
            if sh("nft", &del).is_ok() {
                removed.push(t.clone());
            }
        }
    }
    removed
}

/// Directories containerd, the CNI plugins and kubelet create at fixed host paths.
pub const FIXED_DIRS: &[&str] =
    &["/var/lib/cni", "/run/netns", "/run/containerd", "/var/log/containers", "/var/log/pods"];

/// Removes `dir` if it holds nothing but empty directories; returns whether it did.
pub fn remove_empty_tree(dir: &Path) -> bool {
    fn empty(d: &Path) -> bool {
        std::fs::read_dir(d)
            .is_ok_and(|rd| rd.flatten().all(|e| e.file_type().is_ok_and(|t| t.is_dir()) && empty(&e.path())))
    }
    dir.is_dir() && !mounts_under(dir).iter().any(|m| m == dir) && empty(dir) && std::fs::remove_dir_all(dir).is_ok()
}

/// Every mount point at or below `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    v.dedup();
    v
}

/// Lazily unmounts everything below `dir` (pod volumes, kubelet's own bind, overlay roots).
pub fn unmount_all(dir: &Path) -> usize {
    let mut n = 0;
    // A path can be mounted on more than once (kubelet's rshared bind over itself).
    for _ in 0..4 {
        let ms = mounts_under(dir);
        if ms.is_empty() {
            break;
        }
        for m in ms {
            if nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).is_ok() {
                n += 1;
            }
        }
    }
    n
}

/// The cgroup kubelet runs pods under: a child of the memory cgroup this process runs in,
/// created in every hierarchy kubelet checks (cpuset values copied down each new level).
pub struct Cgroups {
    /// The path inside each hierarchy (e.g. `/process_api/<hash>/kopiur-node-1234`).
    pub root: String,
    created: Vec<PathBuf>,
}

const HIERARCHIES: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "hugetlb", "blkio"];

impl Cgroups {
    pub fn create(name: &str) -> Result<Cgroups> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let base = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
                ctrl.split(',').any(|c| c == "memory").then(|| path.to_string())
            })
            .context("no memory cgroup in /proc/self/cgroup (the real node needs cgroup v1 here)")?;
        let root = format!("{}/{name}", base.trim_end_matches('/'));
        let mut created = Vec::new();
        for h in HIERARCHIES {
            let mount = Path::new("/sys/fs/cgroup").join(h);
            if !mount.is_dir() {
                continue;
            }
            let mut cur = mount.clone();
            for part in root.trim_start_matches('/').split('/') {
                let parent = cur.clone();
                cur = cur.join(part);
                if !cur.exists() {
                    std::fs::create_dir(&cur).with_context(|| format!("creating cgroup {}", cur.display()))?;
                    created.push(cur.clone());
                    if *h == "cpuset" {
                        for f in ["cpuset.cpus", "cpuset.mems"] {
                            let v = std::fs::read_to_string(parent.join(f)).unwrap_or_default();
                            std::fs::write(cur.join(f), v.trim())
                                .with_context(|| format!("copying {f} into {}", cur.display()))?;
                        }
                    }
                }
            }
        }
        Ok(Cgroups { root, created })
    }

    /// Removes what kubelet created below the root, then what [`Cgroups::create`] made.
    pub fn remove(&mut self) -> Vec<String> {
        let mut errs = Vec::new();
        for h in HIERARCHIES {
            let top = Path::new("/sys/fs/cgroup").join(h).join(self.root.trim_start_matches('/'));
            if top.is_dir() {
                remove_tree(&top, &mut errs);
            }
        }
        for dir in self.created.drain(..).rev() {
            if dir.exists()
                && let Err(e) = std::fs::remove_dir(&dir)
            {
                errs.push(format!("rmdir {}: {e}", dir.display()));
            }
        }
        errs
    }
}

/// rmdir children first (cgroup directories hold only pseudo-files, which rmdir ignores).
fn remove_tree(dir: &Path, errs: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path(), errs);
            if let Err(err) = std::fs::remove_dir(e.path()) {
                errs.push(format!("rmdir {}: {err}", e.path().display()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_under_lists_only_the_subtree_deepest_first() {
        let all = mounts_under(Path::new("/"));
        assert!(all.iter().any(|m| m == Path::new("/")), "the root is a mount point");
        let depth: Vec<usize> = all.iter().map(|m| m.components().count()).collect();
        assert!(depth.windows(2).all(|w| w[0] >= w[1]), "deepest first: {all:?}");
        assert!(mounts_under(Path::new("/nonexistent-kopiur")).is_empty());
    }

    #[test]
    fn sysctl_snapshot_reads_the_known_keys() {
        let s = read_sysctls();
        assert!(s.contains_key("net/ipv4/ip_forward"), "{s:?}");
        assert!(restore_sysctls(&s).is_empty(), "nothing changed, nothing restored");
    }
}
