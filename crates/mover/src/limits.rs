//! The memory and CPU limits the mover's container runs under, read from its cgroup, so its
//! log says what the kernel enforces (`mover.resources` taking effect, not just being set).

/// `(memory.max, cpu.max)` in cgroup v2 format (`536870912`, `50000 100000`; `max` means no
/// limit). cgroup v1 values are converted to the same format.
pub fn current() -> (Option<String>, Option<String>) {
    from_root(std::path::Path::new("/sys/fs/cgroup"))
}

/// [`current`] under another cgroup mount (tests).
pub fn from_root(root: &std::path::Path) -> (Option<String>, Option<String>) {
    let read = |f: &str| std::fs::read_to_string(root.join(f)).ok().map(|v| v.trim().to_string());
    let memory = read("memory.max").or_else(|| {
        // v1: a huge value (page-rounded i64::MAX) means unlimited.
        read("memory/memory.limit_in_bytes").map(|v| match v.parse::<u64>() {
            Ok(n) if n >= (1 << 62) => "max".to_string(),
            _ => v,
        })
    });
    let cpu = read("cpu.max").or_else(|| {
        let quota = read("cpu/cpu.cfs_quota_us").or_else(|| read("cpu,cpuacct/cpu.cfs_quota_us"))?;
        let period = read("cpu/cpu.cfs_period_us").or_else(|| read("cpu,cpuacct/cpu.cfs_period_us"))?;
        Some(format!("{} {period}", if quota == "-1" { "max".to_string() } else { quota }))
    });
    (memory, cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v1_read_the_same() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("memory.max"), "536870912\n").unwrap();
        std::fs::write(v2.path().join("cpu.max"), "50000 100000\n").unwrap();
        assert_eq!(from_root(v2.path()), (Some("536870912".into()), Some("50000 100000".into())));
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v1.path().join("memory")).unwrap();
        std::fs::create_dir_all(v1.path().join("cpu")).unwrap();
        std::fs::write(v1.path().join("memory/memory.limit_in_bytes"), "536870912\n").unwrap();
        std::fs::write(v1.path().join("cpu/cpu.cfs_quota_us"), "50000\n").unwrap();
        std::fs::write(v1.path().join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(from_root(v1.path()), (Some("536870912".into()), Some("50000 100000".into())));
        std::fs::write(v1.path().join("memory/memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(v1.path().join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
        assert_eq!(from_root(v1.path()), (Some("max".into()), Some("max 100000".into())));
        assert_eq!(from_root(std::path::Path::new("/nonexistent")), (None, None));
    }
}
