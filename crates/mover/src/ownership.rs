//! Which restored entries did not get the owner recorded in the snapshot.
//!
//! kopia restores owners only when the process may chown (root with `CAP_CHOWN`); otherwise it
//! writes every entry as the mover's own uid and says nothing (its permission errors are
//! ignored by default). After a restore by a mover that cannot chown, the mover walks the
//! snapshot's directory objects (`kopia show`), compares each entry's recorded uid and gid with
//! what the restored entry has, and reports the difference on the Restore, so a user learns
//! before the application refuses to start on the data.
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use kopiur_kopia::model::DirEntry;

/// At most this many directory objects are read (one `kopia show` each); a larger tree is
/// reported as checked in part.
pub const MAX_DIRECTORIES: usize = 500;
/// The message fits `status.ownership.message` (4096 characters at most).
const MAX_MESSAGE_CHARS: usize = 4000;
/// At most this many entries are named; the rest are counted.
pub const MAX_EXAMPLES: usize = 10;

/// Whether this process can give files another owner: effective uid 0 with `CAP_CHOWN` in its
/// effective set (read from `/proc/self/status`; unreadable means it cannot).
pub fn can_chown() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    can_chown_from(&status)
}

/// [`can_chown`] over the text of `/proc/self/status`.
pub fn can_chown_from(status: &str) -> bool {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let euid = field("Uid:").and_then(|v| v.split_whitespace().nth(1)).and_then(|v| v.parse::<u32>().ok());
    let cap_eff = field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok());
    // CAP_CHOWN is capability 0.
    euid == Some(0) && cap_eff.is_some_and(|c| c & 1 == 1)
}

/// One entry whose restored owner differs from the recorded one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub path: String,
    pub recorded: (u32, u32),
    pub restored: (u32, u32),
}

/// What the walk found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub not_preserved: u64,
    pub examples: Vec<Mismatch>,
    pub directories_checked: usize,
    /// Every directory of the snapshot was read.
    pub complete: bool,
}

/// Compares the entries of one directory (relative path `rel` under `target`) with the
/// restored tree; an entry missing from the target is not counted (it was not restored).
pub fn compare(target: &Path, rel: &str, entries: &[DirEntry], report: &mut Report) {
    for e in entries {
        // kopia omits a zero uid or gid (`omitempty`): absent means root.
        let (uid, gid) = (e.uid.unwrap_or(0), e.gid.unwrap_or(0));
        let path = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
        let Ok(meta) = std::fs::symlink_metadata(target.join(&path)) else { continue };
        let restored = (meta.uid(), meta.gid());
        if restored != (uid, gid) {
            report.not_preserved += 1;
            if report.examples.len() < MAX_EXAMPLES {
                report.examples.push(Mismatch { path, recorded: (uid, gid), restored });
            }
        }
    }
}

impl Report {
    /// The Restore's `status.ownership`.
    pub fn status(&self, mover_uid: u32) -> serde_json::Value {
        let preserved = self.not_preserved == 0;
        let mut message = if preserved {
            format!(
                "every entry checked has its recorded owner ({} directories{})",
                self.directories_checked,
                if self.complete { "" } else { ", not the whole tree" }
            )
        } else {
            let named: Vec<String> = self
                .examples
                .iter()
                .map(|m| {
                    format!(
                        "{} (recorded {}:{}, restored {}:{})",
                        m.path, m.recorded.0, m.recorded.1, m.restored.0, m.restored.1
                    )
                })
                .collect();
            let more = self.not_preserved.saturating_sub(self.examples.len() as u64);
            format!(
                "{} restored entr{} could not be given the owner recorded in the snapshot, because the mover ran as \
                 uid {mover_uid} without CAP_CHOWN: {}{}. Restore again with mover.privilegedMode: true in a \
                 namespace annotated kopiur.home-operations.com/privileged-movers=true to keep every owner, or run \
                 the application as the restored owner",
                self.not_preserved,
                if self.not_preserved == 1 { "y" } else { "ies" },
                named.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            )
        };
        if !self.complete {
            message.push_str(&format!(" (checked the first {} directories only)", self.directories_checked));
        }
        if message.chars().count() > MAX_MESSAGE_CHARS {
            message = message.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…";
        }
        serde_json::json!({
            "preserved": preserved,
            "notPreservedCount": self.not_preserved,
            "directoriesChecked": self.directories_checked,
            "complete": self.complete,
            "message": message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chown_needs_root_and_cap_chown() {
        let s = |uid: &str, cap: &str| format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{cap}\n");
        assert!(can_chown_from(&s("0", "0000000000000001")));
        assert!(can_chown_from(&s("0", "000001ffffffffff")));
        assert!(!can_chown_from(&s("0", "0000000000000004")), "DAC_READ_SEARCH only");
        assert!(!can_chown_from(&s("65532", "0000000000000001")));
        assert!(!can_chown_from(""));
    }

    #[test]
    fn mismatched_owners_are_counted_and_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("db")).unwrap();
        std::fs::write(dir.path().join("db/pg"), b"x").unwrap();
        let me = std::fs::metadata(dir.path().join("db")).unwrap();
        let (uid, gid) = (me.uid(), me.gid());
        let e = |name: &str, u: u32, g: u32| DirEntry {
            name: name.into(),
            kind: "f".into(),
            mode: "0600".into(),
            uid: Some(u),
            gid: Some(g),
            obj: String::new(),
        };
        let mut r = Report::default();
        compare(dir.path(), "", &[e("db", uid, gid)], &mut r);
        compare(dir.path(), "db", &[e("pg", uid + 999, gid), e("absent", 1, 1)], &mut r);
        r.directories_checked = 2;
        r.complete = true;
        assert_eq!(r.not_preserved, 1);
        // A root-owned entry is recorded without uid and gid (kopia omits zeros).
        let mut root = Report::default();
        let rooted = DirEntry { uid: None, gid: None, ..e("db", 0, 0) };
        compare(dir.path(), "", &[rooted], &mut root);
        assert_eq!(root.not_preserved, u64::from((uid, gid) != (0, 0)));
        assert_eq!(r.examples[0], Mismatch { path: "db/pg".into(), recorded: (uid + 999, gid), restored: (uid, gid) });
        let s = r.status(65532);
        assert_eq!(s["preserved"], false);
        assert_eq!(s["notPreservedCount"], 1);
        let m = s["message"].as_str().unwrap();
        assert!(m.starts_with("1 restored entry could not be given the owner"), "{m}");
        assert!(m.contains(&format!("db/pg (recorded {}:{gid}, restored {uid}:{gid})", uid + 999)), "{m}");
        assert!(m.contains("uid 65532") && m.contains("privilegedMode: true"), "{m}");
        let ok = Report { directories_checked: 3, complete: false, ..Default::default() }.status(0);
        assert_eq!(ok["preserved"], true);
        assert!(ok["message"].as_str().unwrap().contains("first 3 directories"), "{ok}");
    }
}
