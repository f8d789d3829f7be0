//! The shape limits of issue #15, held by a source scan (no build, no environment):
//! - no source file of the workspace over 600 lines outside its test module (the lines before
//!   the first `#[cfg(test)]`), under `crates/*/src` (a `tests` folder there is test code);
//! - no reconcile function of the controller over 80 lines (`reconcile`, `reconcile_*`,
//!   `run_path`): a reconcile reads observe → plan → apply → status, and the steps live in
//!   named functions (docs/design/reconcile-shape.md §1).
//!
//! A function's length runs from its `fn` line to the closing brace at the `fn`'s own
//! indentation (the code is rustfmt-formatted).
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_RECONCILE_LINES: usize = 80;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let p = e.path();
        // A `tests` folder under `src` holds test modules (declared `#[cfg(test)]` by its parent).
        if p.is_dir() && p.file_name().is_some_and(|n| n != "tests") {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines before the first `#[cfg(test)]` at the start of a line.
fn non_test_lines(src: &str) -> Vec<&str> {
    src.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).collect()
}

/// `(name, first line (1-based), length)` of every fn whose name `wanted` accepts.
fn functions(lines: &[&str], wanted: impl Fn(&str) -> bool) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let rest = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| t.strip_prefix(p)).unwrap_or(t);
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        let Some(sig) = rest.strip_prefix("fn ") else { continue };
        let name: String = sig.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !wanted(&name) {
            continue;
        }
        let close = format!("{indent}}}");
        let end = lines[i..].iter().position(|x| x.trim_end() == close).map(|k| i + k);
        if let Some(end) = end {
            out.push((name, i + 1, end - i + 1));
        }
    }
    out
}

#[test]
fn no_source_file_is_over_600_lines_outside_its_tests() {
    let root = workspace();
    let mut files = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        let src = c.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "the scan found only {} files: wrong root?", files.len());
    let mut over: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let src = std::fs::read_to_string(f).ok()?;
            let n = non_test_lines(&src).len();
            (n > MAX_FILE_LINES).then(|| format!("{} ({n} lines)", f.strip_prefix(&root).unwrap_or(f).display()))
        })
        .collect();
    over.sort();
    assert!(
        over.is_empty(),
        "files over {MAX_FILE_LINES} lines outside their tests: split them along a seam:\n{}",
        over.join("\n")
    );
}

#[test]
fn no_reconcile_function_is_over_80_lines() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root.join("crates/controller/src"), &mut files);
    let is_reconcile = |n: &str| n == "reconcile" || n.starts_with("reconcile_") || n == "run_path";
    let mut seen = 0;
    let mut over = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read");
        for (name, line, len) in functions(&non_test_lines(&src), is_reconcile) {
            seen += 1;
            if len > MAX_RECONCILE_LINES {
                over.push(format!("{}:{line} {name} ({len} lines)", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    // Every kind has one: the scan must see them all, or it proves nothing.
    assert!(seen >= 10, "the scan found only {seen} reconcile functions");
    assert!(
        over.is_empty(),
        "reconcile functions over {MAX_RECONCILE_LINES} lines: move observation, conditions and writes into named \
         steps (docs/design/reconcile-shape.md §1):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_function_scan_measures_to_the_closing_brace() {
    let src = "fn a() {\n    x;\n}\n\npub async fn reconcile(x: u8) -> u8 {\n    if x {\n    }\n    y\n}\n";
    let lines: Vec<&str> = src.lines().collect();
    assert_eq!(functions(&lines, |n| n == "reconcile"), vec![("reconcile".to_string(), 5, 5)]);
    assert_eq!(non_test_lines("a\n#[cfg(test)]\nmod tests {}\n").len(), 1);
}
