//! Every section reference in the sources points into this repository's documentation.
//!
//! A line under `crates/` that contains the section sign must name at least one Markdown file
//! under `docs/` that exists, and every section number on that line must be a numbered heading
//! of one of the files it names (`## 3.10 Index-blob health`, `## 1. A repository`). So a
//! reference into a document a clone does not have, a misspelt path, or a section that was
//! renumbered fails here. How references work: `docs/design/README.md`.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const SECTION: char = '\u{a7}';

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The `docs/….md` paths named on a line.
fn doc_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("docs/") {
        // `docs/` must start a repository-relative path: not the end of a longer word
        // (`mydocs/`) nor of another path (`../shared/docs/`).
        let boundary =
            rest[..i].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || matches!(c, '_' | '/' | '.' | '-')));
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_')))
            .unwrap_or(tail.len());
        let cand = tail[..end].trim_end_matches('.');
        if boundary && cand.ends_with(".md") {
            out.push(cand.to_string());
        }
        rest = &tail[end.max(5)..];
    }
    out
}

/// The section numbers cited on a line: the digits and dots after each section sign (`None`
/// for a sign followed by no number).
fn section_numbers(line: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for (i, c) in line.char_indices() {
        if c != SECTION {
            continue;
        }
        let tail = line[i + c.len_utf8()..].trim_start_matches(' ');
        let end = tail.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(tail.len());
        let num = tail[..end].trim_end_matches('.');
        out.push((!num.is_empty() && !num.starts_with('.')).then(|| num.to_string()));
    }
    out
}

/// The numbered headings of a Markdown text: `## 3.10 Title`, `### 3.7.4 Title`, `## 1. Title`.
fn headings(md: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let rest = line.trim_start_matches('#');
        let Some(rest) = rest.strip_prefix(' ') else { continue };
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let num = rest[..end].trim_end_matches('.');
        if !num.is_empty() {
            out.insert(num.to_string());
        }
    }
    out
}

/// The problems of one source line, given a reader of documentation files (repository-relative
/// path → its text, `None` when the file does not exist).
fn check_line(line: &str, read: &mut dyn FnMut(&str) -> Option<BTreeSet<String>>) -> Vec<String> {
    if !line.contains(SECTION) {
        return Vec::new();
    }
    let paths = doc_paths(line);
    if paths.is_empty() {
        return vec!["names no docs/ file of this repository".to_string()];
    }
    let mut problems = Vec::new();
    let mut known = BTreeSet::new();
    for p in &paths {
        match read(p) {
            Some(h) => known.extend(h),
            None => problems.push(format!("`{p}` does not exist")),
        }
    }
    for num in section_numbers(line) {
        match num {
            None => problems.push("a section sign without a section number".to_string()),
            Some(n) if !known.contains(&n) => {
                problems.push(format!("section {n} is not a numbered heading of {}", paths.join(", ")))
            }
            Some(_) => {}
        }
    }
    problems
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_section_reference_in_crates_points_into_docs() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    assert!(files.len() > 100, "the scan found only {} Rust files", files.len());
    let mut cache: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut read = |p: &str| -> Option<BTreeSet<String>> {
        cache
            .entry(p.to_string())
            .or_insert_with(|| fs::read_to_string(root.join(p)).ok().map(|t| headings(&t)))
            .clone()
    };
    let mut failures = Vec::new();
    let mut references = 0;
    for file in &files {
        let text = fs::read_to_string(file).expect("read source");
        for (i, line) in text.lines().enumerate() {
            if line.contains(SECTION) {
                references += 1;
            }
            for p in check_line(line, &mut read) {
                let rel = file.strip_prefix(&root).unwrap_or(file).display();
                failures.push(format!("{rel}:{}: {p}\n    {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {references} section references do not point into docs/ of this repository \
         (see docs/design/README.md):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_checker_rejects_what_it_must() {
    let doc =
        "# T\n\n## 3 Top\n\n### 3.10 Index\n\n#### 3.7.4 Holdoff\n\n## 1. A repository\n\n```\n## 9 fenced\n```\n";
    let mut read = |p: &str| (p == "docs/design/x.md").then(|| headings(doc));
    let s = SECTION;
    // Accepted: a path and sections of it, several on a line, a dotted heading.
    for ok in [
        format!("// docs/design/x.md {s}3.10"),
        format!("//! (`docs/design/x.md` {s}3.7.4, {s}3) text"),
        format!("\"create one (docs/design/x.md {s}1)\""),
        "// no section sign at all: spec/behavior.md".to_string(),
    ] {
        assert_eq!(check_line(&ok, &mut read), Vec::<String>::new(), "{ok}");
    }
    // Rejected: a document outside the repository, a missing file, an unknown or fenced
    // section, a bare sign.
    for bad in [
        format!("// spec/behavior.md {s}3.10"),
        format!("// (behavior {s}3.10)"),
        format!("// docs/design/missing.md {s}3.10"),
        format!("// docs/design/x.md {s}3.11"),
        format!("// docs/design/x.md {s}9"),
        format!("// docs/design/x.md {s} and more"),
        format!("// ../shared/docs/design/x.md {s}3.10"),
        format!("// mydocs/design/x.md {s}3.10"),
    ] {
        assert!(!check_line(&bad, &mut read).is_empty(), "{bad} must be rejected");
    }
}
