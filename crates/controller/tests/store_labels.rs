//! A tripwire for `heap::slim_snapshot`, which keeps only the `origin` label on the Snapshots
//! in the controller's store (the others cost about 900 bytes a row at 50,000 rows). A label
//! read anywhere in the controller must be one of the reads listed here, each with the object
//! it is read from. A new read fails this test: if it reads a stored Snapshot, keep that label
//! in `slim_snapshot` (or read it from the API server); otherwise add it below with its object.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `(file under crates/controller/src, label constant)`: every label read, and from what.
const KNOWN_READS: &[(&str, &str, &str)] = &[
    ("catalog/mod.rs", "ORIGIN", "Snapshots from a paged LIST, not the store"),
    ("catalog/mod.rs", "REPOSITORY_UID", "Snapshots from a paged LIST, not the store"),
    ("catalog/mod.rs", "SNAPSHOT_ID", "Snapshot metadata from a paged LIST, not the store"),
    ("labels.rs", "ORIGIN", "a stored Snapshot (labels::origin): kept by slim_snapshot"),
    ("deletion/observe.rs", "ORIGIN", "a stored Snapshot: kept by slim_snapshot"),
    ("snapshot/dispatch.rs", "DELETE_REPO", "a batch-delete Job"),
    ("maintenance/reconcile.rs", "MAINTENANCE", "a maintenance Job"),
    ("replication/reconcile.rs", "REPLICATION", "a replication Job"),
    ("maintenance/projection.rs", "MANAGED_BY", "a Maintenance"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `(file, NAME)` where the code outside tests calls `.get(label::NAME)`.
fn label_reads(src_root: &Path) -> BTreeSet<(String, String)> {
    let mut files = Vec::new();
    rust_files(src_root, &mut files);
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(src_root).unwrap().to_string_lossy().replace('\\', "/");
        for l in text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")) {
            for (i, _) in l.match_indices(".get(label::") {
                let name: String =
                    l[i + ".get(label::".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.insert((rel.clone(), name));
            }
        }
    }
    out
}

#[test]
fn every_label_read_is_known_and_only_origin_is_read_from_stored_snapshots() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = label_reads(&root);
    let known: BTreeSet<(String, String)> =
        KNOWN_READS.iter().map(|(f, l, _)| (f.to_string(), l.to_string())).collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "label reads not listed in tests/store_labels.rs: {new:?}. If one reads a Snapshot from the \
         controller's store, heap::slim_snapshot has dropped that label: keep it there, or read the \
         object from the API server"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(gone.is_empty(), "listed label reads no longer in the code (remove them from the list): {gone:?}");
    for (f, l, from) in KNOWN_READS {
        if from.starts_with("a stored Snapshot") {
            assert_eq!(format!("label::{l}"), "label::ORIGIN", "{f}: slim_snapshot keeps only the origin label");
        }
    }
}

#[test]
fn the_scan_sees_a_label_read() {
    let dir = std::env::temp_dir().join(format!("kopiur-store-labels-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("x")).unwrap();
    std::fs::write(
        dir.join("x/a.rs"),
        "fn f() { s.labels().get(label::SCHEDULE); }\n#[cfg(test)]\nmod t { fn g() { s.labels().get(label::OP); } }\n",
    )
    .unwrap();
    let found = label_reads(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(found, BTreeSet::from([("x/a.rs".to_string(), "SCHEDULE".to_string())]));
}
