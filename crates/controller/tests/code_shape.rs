//! The shape limits of issue #15, held by a source scan (no build, no environment):
//! - no source file of the workspace over 600 lines outside its test module, under
//!   `crates/*/src` (a `tests` folder there, or a file declared by `#[cfg(test)] mod x;`, is test
//!   code);
//! - no function of the controller over 80 lines: free functions, methods and nested functions
//!   alike, outside `#[cfg(test)]` items. A reconcile reads observe → plan → apply → status, a
//!   plan reads as its named sub-decisions, and the steps live in named functions
//!   (docs/design/reconcile-shape.md §1). Data tables are exempt by name ([`TABLES`]).
//!
//! A file's non-test part ends at its test module: a `#[cfg(test)]` at the start of a line whose
//! item (on the same line, or the next line that is not an attribute or a comment) is an inline
//! `mod <name> {`. Any other `#[cfg(test)]` item (a `use`, a helper `fn`, an out-of-line
//! `mod tests;`) is skipped by itself. A function's or an item's length runs from its first line
//! to the closing brace at its own indentation (the code is rustfmt-formatted).
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FUNCTION_LINES: usize = 80;

/// Functions exempt from [`MAX_FUNCTION_LINES`], by file (under `crates/controller/src`) and
/// name: each one is a data table, a literal list whose length is its content, where splitting
/// would scatter the rows rather than name a step. Keep it short; a stale entry fails the test.
const TABLES: &[(&str, &str)] = &[
    // The field-to-rule registry: one row per API field that must have an effect, each a path,
    // the file that reads it and the symbol it reads there.
    ("field_registry.rs", "rules"),
    // The metric families: one `Metrics` struct literal, a name and a help text per family.
    ("metrics/mod.rs", "default"),
];

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

/// The source files under `dir` that are not test code: every `.rs` file but those of a `tests`
/// folder and of a module declared out of line under `#[cfg(test)]` (`#[cfg(test)] mod tests;`).
fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut test_modules = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let lines: Vec<&str> = src.lines().collect();
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let parent = f.parent().expect("a parent");
        let base = if ["mod", "lib", "main"].contains(&stem) { parent.to_path_buf() } else { parent.join(stem) };
        for i in 0..lines.len() {
            let Some((_, head)) = cfg_test_item(&lines, i) else { continue };
            if let Some(name) = strip_visibility(head).strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                test_modules.push(base.join(name));
            }
        }
    }
    files.retain(|f| !test_modules.iter().any(|m| f.starts_with(m) || *f == m.with_extension("rs")));
    files.sort();
    files
}

/// The text after a leading visibility (`pub`, `pub(crate)`, `pub(super)`, `pub(in …)`).
fn strip_visibility(t: &str) -> &str {
    if let Some(rest) = t.strip_prefix("pub ") {
        return rest;
    }
    match t.strip_prefix("pub(").and_then(|r| r.split_once(") ")) {
        Some((_, rest)) => rest,
        None => t,
    }
}

/// The rest of the line after a `#[cfg(test)]` that starts it (indentation aside).
fn after_cfg_test(l: &str) -> Option<&str> {
    l.trim_start().strip_prefix("#[cfg(test)]").map(str::trim)
}

/// The item a `#[cfg(test)]` on line `i` applies to: the line of its head and the head's text
/// (on the same line, or the next line that is not an attribute or a comment).
fn cfg_test_item<'a>(lines: &[&'a str], i: usize) -> Option<(usize, &'a str)> {
    let rest = after_cfg_test(lines[i])?;
    if !rest.is_empty() {
        return Some((i, rest));
    }
    (i + 1..lines.len())
        .find(|&k| {
            let t = lines[k].trim_start();
            !(t.is_empty() || t.starts_with("#[") || t.starts_with("//"))
        })
        .map(|k| (k, lines[k].trim()))
}

/// The last line of the item whose head is on line `k` at indentation `indent`: the head itself
/// when it ends with `;` or `}`, else the first later line at that indentation that closes a
/// bracket and ends with `}` or `;` (`}`, `};`, `);`, `];`).
fn item_end(lines: &[&str], k: usize, indent: &str) -> usize {
    let head = lines[k].trim_end();
    if head.ends_with(';') || head.ends_with('}') {
        return k;
    }
    (k + 1..lines.len())
        .find(|&j| {
            let (l, t) = (lines[j].trim_end(), lines[j].trim());
            l.len() - t.len() == indent.len()
                && l.starts_with(indent)
                && t.starts_with(['}', ')', ']'])
                && (t.ends_with('}') || t.ends_with(';'))
        })
        .unwrap_or(lines.len() - 1)
}

/// The indentation of a line.
fn indentation(l: &str) -> &str {
    &l[..l.len() - l.trim_start().len()]
}

/// The lines of a file before its test module (a top-level `#[cfg(test)]` whose item is an inline
/// `mod <name> {`); a `#[cfg(test)]` on any other item does not end them.
fn non_test_lines(src: &str) -> Vec<&str> {
    let lines: Vec<&str> = src.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].starts_with("#[cfg(test)]")
                && cfg_test_item(&lines, i).is_some_and(|(_, head)| {
                    strip_visibility(head).strip_prefix("mod ").is_some_and(|m| {
                        m.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_').trim_start().starts_with('{')
                    })
                })
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// The name of the function a line declares, if it does (`pub`, `const`, `async`, `unsafe` and
/// `extern "…"` qualifiers aside).
fn fn_name(l: &str) -> Option<String> {
    let mut t = strip_visibility(l.trim_start());
    loop {
        let before = t;
        for q in ["const ", "async ", "unsafe ", "default "] {
            t = t.strip_prefix(q).unwrap_or(t);
        }
        if let Some(r) = t.strip_prefix("extern \"").and_then(|r| r.split_once("\" ")) {
            t = r.1;
        }
        if t == before {
            break;
        }
    }
    let name: String = t.strip_prefix("fn ")?.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

/// `(name, first line (1-based), length)` of every `fn` in `lines` (free, method or nested),
/// skipping `#[cfg(test)]` items whole (a test helper, a test module nested in a module).
fn functions(lines: &[&str]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some((k, _)) = cfg_test_item(lines, i) {
            i = item_end(lines, k, indentation(lines[i])) + 1;
            continue;
        }
        if let Some(name) = fn_name(lines[i]) {
            let end = item_end(lines, i, indentation(lines[i]));
            out.push((name, i + 1, end - i + 1));
        }
        i += 1;
    }
    out
}

/// The functions of a file over [`MAX_FUNCTION_LINES`], as `(name, first line, length)`.
fn long_functions(src: &str) -> Vec<(String, usize, usize)> {
    functions(&non_test_lines(src)).into_iter().filter(|(_, _, len)| *len > MAX_FUNCTION_LINES).collect()
}

#[test]
fn no_source_file_is_over_600_lines_outside_its_tests() {
    let root = workspace();
    let mut files = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        let src = c.path().join("src");
        if src.is_dir() {
            files.extend(source_files(&src));
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
fn no_controller_function_is_over_80_lines() {
    let root = workspace();
    let src_root = root.join("crates/controller/src");
    let files = source_files(&src_root);
    let mut seen = 0;
    let mut over = Vec::new();
    let mut tables_seen = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read");
        let rel = f.strip_prefix(&src_root).unwrap_or(f).to_string_lossy().into_owned();
        seen += functions(&non_test_lines(&src)).len();
        for (name, line, len) in long_functions(&src) {
            if let Some(t) = TABLES.iter().find(|(file, n)| *file == rel && *n == name) {
                tables_seen.push(*t);
                continue;
            }
            over.push(format!("crates/controller/src/{rel}:{line} {name} ({len} lines)"));
        }
    }
    // The controller has over a thousand functions: a scan that sees few proves nothing.
    assert!(seen >= 800, "the scan found only {seen} functions");
    let stale: Vec<_> = TABLES.iter().filter(|t| !tables_seen.contains(t)).collect();
    assert!(stale.is_empty(), "exempt tables that are no longer over {MAX_FUNCTION_LINES} lines: drop them: {stale:?}");
    assert!(
        over.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: split them into named steps and sub-decisions \
         (docs/design/reconcile-shape.md §1):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_function_scan_measures_to_the_closing_brace() {
    let src = "fn a() {\n    x;\n}\n\npub async fn reconcile(x: u8) -> u8 {\n    if x {\n    }\n    y\n}\n";
    let lines: Vec<&str> = src.lines().collect();
    assert_eq!(functions(&lines), vec![("a".to_string(), 1, 3), ("reconcile".to_string(), 5, 5)]);
    assert_eq!(non_test_lines("a\n#[cfg(test)]\nmod tests {}\n").len(), 1);
}

/// A function of `body` lines between its `fn` line and its closing brace, at `indent`.
fn planted(name: &str, indent: &str, body: usize) -> String {
    let mut s = format!("{indent}pub(crate) fn {name}(x: u8) -> u8 {{\n");
    for k in 0..body {
        s += &format!("{indent}    let _ = x + {k};\n");
    }
    s + &format!("{indent}}}\n")
}

#[test]
fn a_planted_81_line_function_is_reported_and_an_80_line_one_is_not() {
    let src = format!("use a::b;\n\n{}\n{}", planted("long", "", 79), planted("short", "", 78));
    assert_eq!(long_functions(&src), vec![("long".to_string(), 3, 81)]);
}

#[test]
fn a_cfg_test_use_does_not_end_the_non_test_part() {
    let src = format!(
        "use a::b;\n#[cfg(test)]\nuse c::d;\n#[cfg(test)] use e::f;\n#[cfg(test)]\nmod helpers;\n\n{}\n#[cfg(test)]\nmod tests {{\n}}\n",
        planted("long", "", 90)
    );
    let non_test = non_test_lines(&src);
    assert_eq!(non_test.len(), 7 + 92 + 1, "{non_test:#?}");
    assert_eq!(long_functions(&src), vec![("long".to_string(), 8, 92)]);
    // The same on one line, and after attributes.
    assert_eq!(non_test_lines("a\n#[cfg(test)] mod tests {\n}\n").len(), 1);
    assert_eq!(non_test_lines("a\n#[cfg(test)]\n#[allow(unused)]\npub(crate) mod tests {\n}\n").len(), 1);
}

#[test]
fn a_method_in_an_impl_and_a_nested_function_are_counted() {
    let src = format!(
        "impl Foo {{\n    /// Doc.\n{}}}\n\nmod inner {{\n    fn outer() {{\n{}    }}\n}}\n",
        planted("method", "    ", 85),
        planted("nested", "        ", 82)
    );
    assert_eq!(
        long_functions(&src),
        vec![("method".to_string(), 3, 87), ("outer".to_string(), 93, 86), ("nested".to_string(), 94, 84)]
    );
}

#[test]
fn functions_in_test_modules_and_cfg_test_items_are_not_counted() {
    let src = format!(
        "fn a() {{\n}}\n\n#[cfg(test)]\n{}\nmod inner {{\n    #[cfg(test)]\n    mod tests {{\n{}    }}\n}}\n\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        planted("helper", "", 90),
        planted("nested_test", "        ", 90),
        planted("test", "    ", 90)
    );
    assert_eq!(long_functions(&src), vec![]);
    let all: Vec<_> = functions(&non_test_lines(&src)).into_iter().map(|(n, _, _)| n).collect();
    assert_eq!(all, vec!["a".to_string()]);
}

#[test]
fn a_declaration_without_a_body_is_one_line() {
    let src = "trait T {\n    fn f(&self) -> u8;\n    fn g(\n        &self,\n    ) -> u8;\n    fn h(&self) -> u8 {\n        1\n    }\n}\n";
    let lines: Vec<&str> = src.lines().collect();
    assert_eq!(functions(&lines), vec![("f".to_string(), 2, 1), ("g".to_string(), 3, 3), ("h".to_string(), 6, 3)]);
}

#[test]
fn a_module_declared_under_cfg_test_is_test_code() {
    let dir = std::env::temp_dir().join(format!("code_shape_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in [
        ("lib.rs", "pub mod a;\n#[cfg(test)]\npub mod rows;\n#[cfg(test)] mod helpers;\n"),
        ("rows.rs", "fn long() {}\n"),
        ("helpers/mod.rs", "fn h() {}\n"),
        ("a.rs", "fn f() {}\n#[cfg(test)]\nmod tests;\n"),
        ("a/tests.rs", "fn t() {}\n"),
        ("a/b.rs", "fn g() {}\n"),
    ] {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let files: Vec<String> =
        source_files(&dir).iter().map(|f| f.strip_prefix(&dir).unwrap().display().to_string()).collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(files, vec!["a/b.rs", "a.rs", "lib.rs"]);
}
