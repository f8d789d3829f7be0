//! An actionable message for a backup that kopia could not read because of file permissions.
//!
//! kopia says which entries it could not read (`Error when processing "db": ... open
//! /source/db: permission denied`). The mover names those paths, stats them for their owner
//! and mode, and says which setting makes the mover able to read them. It never changes a
//! file: the source stays exactly as the workload left it.
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// At most this many paths are named in a message (the rest are counted).
const MAX_NAMED: usize = 3;

/// The entries kopia reported as unreadable, relative to the source root, in order of first
/// appearance and without duplicates.
pub fn denied_paths(stderr: &str, mount_path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let root = mount_path.trim_end_matches('/');
    for line in stderr.lines() {
        let lower = line.to_ascii_lowercase();
        if !(lower.contains("permission denied") || lower.contains("operation not permitted")) {
            continue;
        }
        let path = quoted_after(line, "Error when processing \"")
            .or_else(|| absolute_before_colon(line, &format!("{root}/")).map(|p| p[root.len() + 1..].to_string()))
            .or_else(|| (absolute_before_colon(line, &format!("{root}:")).is_some()).then(|| ".".to_string()));
        if let Some(p) = path
            && seen.insert(p.clone())
        {
            out.push(p);
        }
    }
    out
}

/// The text between `prefix` and the next `"`.
fn quoted_after(line: &str, prefix: &str) -> Option<String> {
    let start = line.find(prefix)? + prefix.len();
    let rest = &line[start..];
    let end = rest.find('"')?;
    Some(rest[..end].to_string()).filter(|s| !s.is_empty())
}

/// An absolute path starting with `prefix`, up to the next `:`.
fn absolute_before_colon<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let start = line.find(prefix)?;
    let rest = &line[start..];
    let end = rest[1..].find(':').map(|i| i + 1).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Owner and permission bits of one path, when it can be stat'ed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

pub fn owner_of(path: &Path) -> Option<Owner> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some(Owner { uid: m.uid(), gid: m.gid(), mode: m.mode() & 0o7777 })
}

/// The uid and gid this process runs as (the owner of `/proc/self`).
pub fn current_ids() -> Option<(u32, u32)> {
    let m = std::fs::metadata("/proc/self").ok()?;
    Some((m.uid(), m.gid()))
}

/// The message for the condition and the Event. `owners` is aligned with `paths`.
pub fn message(paths: &[String], owners: &[Option<Owner>], me: Option<(u32, u32)>) -> String {
    let named: Vec<String> = paths
        .iter()
        .zip(owners.iter().chain(std::iter::repeat(&None)))
        .take(MAX_NAMED)
        .map(|(p, o)| match o {
            Some(o) => format!("\"{p}\" (owner {}:{}, mode {:04o})", o.uid, o.gid, o.mode),
            None => format!("\"{p}\""),
        })
        .collect();
    let more = paths.len().saturating_sub(MAX_NAMED);
    let what = if named.is_empty() {
        "some files of the source volume".to_string()
    } else if more > 0 {
        format!("{} and {more} more", named.join(", "))
    } else {
        named.join(", ")
    };
    let who = match me {
        Some((uid, gid)) => format!("uid {uid} (gid {gid})"),
        None => "its uid".to_string(),
    };
    // One owner for every named path: say exactly which values to set.
    let distinct: BTreeSet<(u32, u32)> = owners.iter().flatten().map(|o| (o.uid, o.gid)).collect();
    let fix = match (distinct.len(), distinct.iter().next()) {
        (1, Some((uid, gid))) => format!(
            "run the mover as the files' owner: set mover.securityContext {{runAsUser: {uid}, runAsGroup: {gid}}} on \
             the SnapshotPolicy, or moverDefaults.securityContext on the Repository"
        ),
        _ => "run the mover as the files' owner: set mover.securityContext runAsUser and runAsGroup on the \
              SnapshotPolicy, or moverDefaults.securityContext on the Repository"
            .to_string(),
    };
    format!(
        "permission denied: the mover runs as {who} without capabilities and cannot read {what}; nothing was changed \
         in the source; {fix}; or set mover.privilegedMode: true and annotate the namespace \
         kopiur.home-operations.com/privileged-movers=true (the mover then reads every file as root with only \
         DAC_READ_SEARCH)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KOPIA: &str = "Snapshotting data@h:/pvc/data ...\n\
        Error when processing \"db\": cannot create iterator: unable to read directory: open /source/db: permission denied\n\
        Error when processing \"db\": again the same entry: permission denied\n\
        Error when processing \"logs/app.log\": unable to open file: open /source/logs/app.log: permission denied\n\
        Found 2 fatal error(s) while snapshotting data@h:/pvc/data.";

    #[test]
    fn names_each_denied_entry_once_in_order() {
        assert_eq!(denied_paths(KOPIA, "/source"), vec!["db".to_string(), "logs/app.log".to_string()]);
    }

    #[test]
    fn falls_back_to_the_absolute_path_and_to_the_root() {
        let s = "error: open /source/a/b: permission denied\nlstat /source: operation not permitted";
        assert_eq!(denied_paths(s, "/source/"), vec!["a/b".to_string(), ".".to_string()]);
        assert!(denied_paths("upload error: connection reset", "/source").is_empty());
    }

    #[test]
    fn one_owner_gives_the_exact_settings() {
        let o = Some(Owner { uid: 999, gid: 999, mode: 0o700 });
        let m = message(&["db".into()], &[o], Some((65532, 65532)));
        assert!(m.contains("cannot read \"db\" (owner 999:999, mode 0700)"), "{m}");
        assert!(m.contains("runs as uid 65532 (gid 65532) without capabilities"), "{m}");
        assert!(m.contains("mover.securityContext {runAsUser: 999, runAsGroup: 999}"), "{m}");
        assert!(m.contains("moverDefaults.securityContext"), "{m}");
        assert!(m.contains("nothing was changed in the source"), "{m}");
        assert!(m.contains("mover.privilegedMode: true") && m.contains("privileged-movers=true"), "{m}");
    }

    #[test]
    fn several_owners_and_many_paths_are_summarized() {
        let paths: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
        let owners: Vec<Option<Owner>> =
            (0..5).map(|i| Some(Owner { uid: 1000 + i, gid: 1000, mode: 0o600 })).collect();
        let m = message(&paths, &owners, None);
        assert!(m.contains("\"f2\" (owner 1002:1000, mode 0600) and 2 more"), "{m}");
        assert!(!m.contains("\"f3\""), "{m}");
        assert!(m.contains("runAsUser and runAsGroup"), "{m}");
        let unknown = message(&[], &[], None);
        assert!(unknown.contains("cannot read some files of the source volume"), "{unknown}");
    }

    #[test]
    fn owner_of_reads_a_real_file() {
        let dir = std::env::temp_dir().join(format!("kopiur-perm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
        let o = owner_of(&f).unwrap();
        assert_eq!(o.mode, 0o640);
        assert_eq!(Some((o.uid, o.gid)), current_ids().map(|(u, _)| (u, o.gid)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
