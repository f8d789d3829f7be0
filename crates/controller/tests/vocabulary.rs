//! `crates/api/src/names.rs` is the vocabulary (issue #32), held by a source scan (no build of
//! the code under test, no environment):
//! - no string literal of the controller, mover or cli crates outside their tests spells the
//!   value of a distinctive constant of names.rs: the code names the constant (see
//!   [`distinctive`] for the rule and [`EXEMPT`] for the listed exceptions);
//! - every constant of names.rs is used somewhere in the workspace (code or tests), as
//!   `module::NAME`, as `NAME` after a `use` that imports it, or through a glob import.
//!
//! Test code is a `#[cfg(test)]` item (its module, `fn` or `use`), the files of a
//! `#[cfg(test)] mod name;`, and any `tests` folder under `src`. Comments are not code.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Distinctive values that may still be spelled as a literal, with the other meaning they have.
const EXEMPT: &[(&str, &str)] = &[
    ("Unknown", "also the `Unknown` status of every condition and kopia's `ErrorClass::Unknown`"),
    ("PermissionDenied", "also a gRPC status code of CSI errors (staging)"),
    ("NotFound", "also a gRPC status code of CSI errors (staging)"),
    ("KOPIA_PASSWORD", "also the environment variable kopia reads its password from (the mover's Job)"),
];

/// Whether a value is distinctive enough that a literal spelling it is the vocabulary's word:
/// a key or compound value (it has a `/`, `.`, `-` or `_`), or an UpperCamelCase word of at
/// least 6 characters (a condition type, a reason, an Event reason). Short words (`Ready`,
/// `Found`) and lowercase ones (`backup`, `manual`, `restore`) also mean unrelated things
/// (phases, kopia commands, Job names) and are not checked.
fn distinctive(value: &str) -> bool {
    let compound = value.contains(['/', '.', '-', '_']);
    let camel = value.len() >= 6
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric())
        && value.chars().any(|c| c.is_ascii_lowercase());
    compound || camel
}

/// A constant of names.rs: its module (`""` at the root), name and value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Const {
    module: String,
    name: String,
    value: String,
}

impl Const {
    fn path(&self) -> String {
        if self.module.is_empty() { format!("names::{}", self.name) } else { format!("{}::{}", self.module, self.name) }
    }
}

/// Every `pub const NAME: &str = "value";` of names.rs with its `pub mod` (one level).
fn parse_names(src: &str) -> Vec<Const> {
    let s = scan(src);
    let code = s.code.as_bytes();
    let mut out = Vec::new();
    let mut module: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < code.len() {
        match code[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if module.last().is_some_and(|(_, d)| *d == depth) {
                    module.pop();
                }
            }
            _ if word_at(code, i, "mod") => {
                let (name, end) = ident(code, skip_ws(code, i + 3));
                if code.get(skip_ws(code, end)) == Some(&b'{') {
                    module.push((name, depth));
                }
                i = end;
                continue;
            }
            _ if word_at(code, i, "const") => {
                let (name, end) = ident(code, skip_ws(code, i + 5));
                let semi = end + s.code[end..].find(';').expect("a const ends with ;");
                let ty = s.code[end..semi].split('=').next().unwrap_or("").replace(' ', "");
                if ty == ":&str" {
                    let value = s.strings.iter().find(|l| (end..semi).contains(&l.at)).map(|l| l.text.clone());
                    let module = module.last().map(|(m, _)| m.clone()).unwrap_or_default();
                    out.push(Const { module, name, value: value.expect("a &str const has a literal") });
                }
                i = semi;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// A string literal: the byte offset of its opening quote and its text (escapes kept).
#[derive(Debug)]
struct Lit {
    at: usize,
    text: String,
}

/// `src` with comments and the insides of string and char literals blanked (same byte length,
/// newlines kept), and its string literals.
struct Scanned {
    code: String,
    strings: Vec<Lit>,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn scan(src: &str) -> Scanned {
    let b = src.as_bytes();
    let mut code = b.to_vec();
    let mut strings = Vec::new();
    let blank = |code: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut code[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let next = b.get(i + 1).copied();
        if b[i] == b'/' && next == Some(b'/') {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |k| i + k);
            blank(&mut code, i, end);
            i = end;
        } else if b[i] == b'/' && next == Some(b'*') {
            let (mut j, mut depth) = (i, 0);
            while j < b.len() {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut code, i, j);
            i = j;
        } else if (i == 0 || !is_ident(b[i - 1])) && raw_open(b, i).is_some() {
            let (open, hashes) = raw_open(b, i).unwrap_or_default();
            let close = format!("\"{}", "#".repeat(hashes));
            let end = src[open + 1..].find(&close).map_or(b.len(), |k| open + 1 + k);
            strings.push(Lit { at: open, text: src[open + 1..end].to_string() });
            blank(&mut code, open + 1, end);
            i = end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            strings.push(Lit { at: i, text: src[i + 1..j.min(b.len())].to_string() });
            blank(&mut code, i + 1, j);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '"', 'é'), or a lifetime / label ('a), which is code.
            let end = if next == Some(b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|k| i + 2 + k)
            } else {
                src[i + 1..].chars().next().map(|c| i + 1 + c.len_utf8()).filter(|&k| b.get(k) == Some(&b'\''))
            };
            match end {
                Some(end) => {
                    blank(&mut code, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    Scanned { code: String::from_utf8(code).expect("blanking keeps UTF-8"), strings }
}

/// At `i`, a raw string opening (`r"`, `r#"`, `br##"`…): the offset of its `"` and the hashes.
fn raw_open(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    (b.get(j + hashes) == Some(&b'"')).then_some((j + hashes, hashes))
}

fn word_at(code: &[u8], i: usize, word: &str) -> bool {
    code[i..].starts_with(word.as_bytes())
        && (i == 0 || !is_ident(code[i - 1]))
        && !code.get(i + word.len()).is_some_and(|&c| is_ident(c))
}

fn skip_ws(code: &[u8], mut i: usize) -> usize {
    while code.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

fn ident(code: &[u8], i: usize) -> (String, usize) {
    let n = code[i..].iter().take_while(|&&c| is_ident(c)).count();
    (String::from_utf8_lossy(&code[i..i + n]).into_owned(), i + n)
}

/// The byte ranges of the `#[cfg(test)]` items of scanned code, and the names of the
/// out-of-line test modules (`#[cfg(test)] mod name;`).
fn test_items(code: &str) -> (Vec<std::ops::Range<usize>>, Vec<String>) {
    let b = code.as_bytes();
    let (mut ranges, mut modules) = (Vec::new(), Vec::new());
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(test)]").map(|k| from + k) {
        let start = k + "#[cfg(test)]".len();
        let (mut j, mut depth) = (start, 0i32);
        while j < b.len() {
            match b[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth <= 0 {
                        break;
                    }
                }
                b';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let item = code[start..j.min(b.len())].split_whitespace().collect::<Vec<_>>().join(" ");
        let item = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| item.strip_prefix(p)).unwrap_or(&item);
        if let Some(name) = item.strip_prefix("mod ").filter(|n| n.bytes().all(is_ident)) {
            modules.push(name.to_string());
        }
        ranges.push(k..j + 1);
        from = j + 1;
    }
    (ranges, modules)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn rust_files(dir: &Path, skip_tests_dirs: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !(skip_tests_dirs && name == "tests") && name != "target" && !name.starts_with('.') {
                rust_files(&p, skip_tests_dirs, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The non-test files of a crate's `src` and, per file, its string literals outside test items.
fn non_test_literals(src_dir: &Path) -> Vec<(PathBuf, String, Vec<Lit>)> {
    let mut files = Vec::new();
    rust_files(src_dir, true, &mut files);
    files.sort();
    let mut test_paths: BTreeSet<PathBuf> = BTreeSet::new();
    let mut out = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read");
        let s = scan(&src);
        let (ranges, modules) = test_items(&s.code);
        // `foo.rs` declares its modules in `foo/`; `mod.rs`, `lib.rs` and `main.rs` beside them.
        let stem = f.file_stem().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = f.parent().expect("a file has a folder");
        let dir = if ["mod", "lib", "main"].contains(&stem) { parent.to_path_buf() } else { parent.join(stem) };
        for m in modules {
            test_paths.insert(dir.join(format!("{m}.rs")));
            test_paths.insert(dir.join(m));
        }
        let lits = s.strings.into_iter().filter(|l| !ranges.iter().any(|r| r.contains(&l.at))).collect();
        out.push((f.clone(), src, lits));
    }
    out.retain(|(f, _, _)| !test_paths.iter().any(|t| f.starts_with(t)));
    out
}

/// The literals of `crates/{controller,mover,cli}/src` (outside tests) that spell a distinctive
/// value of names.rs, as `file:line "value" (module::NAME)`.
fn vocabulary_literals(root: &Path, consts: &[Const]) -> Vec<String> {
    let mut by_value: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in consts.iter().filter(|c| distinctive(&c.value) && !EXEMPT.iter().any(|(v, _)| *v == c.value)) {
        by_value.entry(&c.value).or_default().push(c.path());
    }
    let mut found = Vec::new();
    for krate in ["controller", "mover", "cli"] {
        for (f, src, lits) in non_test_literals(&root.join("crates").join(krate).join("src")) {
            for l in lits {
                if let Some(paths) = by_value.get(l.text.as_str()) {
                    let line = src[..l.at].matches('\n').count() + 1;
                    let file = f.strip_prefix(root).unwrap_or(&f).display().to_string();
                    found.push(format!("{file}:{line} \"{}\" ({})", l.text, paths.join(" or ")));
                }
            }
        }
    }
    found
}

/// Every `use` of scanned code flattened to its paths, each with the name it binds
/// (`use a::{b::C, d as e, f::*};` → `a::b::C` as `C`, `a::d` as `e`, `a::f::*` as `*`), and
/// the code with the `use` declarations blanked.
fn uses(code: &str) -> (Vec<(Vec<String>, String)>, String) {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut rest = code.as_bytes().to_vec();
    let mut i = 0;
    while i < b.len() {
        if word_at(b, i, "use") {
            let end = code[i..].find(';').map_or(b.len(), |k| i + k);
            flatten(&code[i + 3..end], &mut Vec::new(), &mut out);
            for c in &mut rest[i..end] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
            i = end;
        }
        i += 1;
    }
    (out, String::from_utf8(rest).expect("ASCII blanks"))
}

/// Flattens a use tree (`a::{b, c::{d as e}}`) under `prefix`.
fn flatten(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> =
            tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let n = prefix.len();
        prefix.extend(head);
        let mut depth = 0;
        let mut from = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    flatten(&inner[from..k], prefix, out);
                    from = k + 1;
                }
                _ => {}
            }
        }
        flatten(&inner[from..], prefix, out);
        prefix.truncate(n);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut full = prefix.clone();
    full.extend(path.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    if full.last().is_some_and(|l| l == "self") {
        full.pop();
    }
    let bound = alias.or_else(|| full.last().cloned()).unwrap_or_default();
    out.push((full, bound));
}

/// The constants of `consts` that a file uses: `module::NAME` (`names::NAME` at the root, a
/// module alias from a `use` counts), `NAME` imported by a `use`, or any `NAME` of a module
/// imported with `module::*`.
fn used_in(src: &str, consts: &[Const]) -> BTreeSet<(String, String)> {
    let s = scan(src);
    let (paths, code) = uses(&s.code);
    let modules: BTreeSet<&str> = consts.iter().map(|c| c.module.as_str()).filter(|m| !m.is_empty()).collect();
    // What a path segment before `::NAME` stands for: each module by its own name, the root as
    // `names`, and any alias a `use` gives them.
    let mut alias: BTreeMap<String, String> = modules.iter().map(|m| (m.to_string(), m.to_string())).collect();
    alias.insert("names".into(), String::new());
    // Names a `use` brings into scope: bound name → (module, NAME); `*` → every NAME of module.
    let mut imported: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut globs: BTreeSet<String> = BTreeSet::new();
    for (path, bound) in &paths {
        let Some(at) = path.iter().position(|s| s == "names") else { continue };
        match &path[at + 1..] {
            [] => {
                alias.insert(bound.clone(), String::new());
            }
            [m] if m == "*" => {
                globs.insert(String::new());
            }
            [m] if modules.contains(m.as_str()) => {
                alias.insert(bound.clone(), m.clone());
            }
            [name] => {
                imported.insert(bound.clone(), (String::new(), name.clone()));
            }
            [m, star] if star == "*" => {
                globs.insert(m.clone());
            }
            [m, name] => {
                imported.insert(bound.clone(), (m.clone(), name.clone()));
            }
            _ => {}
        }
    }
    let known: BTreeSet<(String, String)> = consts.iter().map(|c| (c.module.clone(), c.name.clone())).collect();
    let b = code.as_bytes();
    let mut used = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) || (i > 0 && is_ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let (word, end) = ident(b, i);
        let qualifier = code[..i].strip_suffix("::").map(|before| {
            let start = before.bytes().rposition(|c| !is_ident(c)).map_or(0, |k| k + 1);
            &before[start..]
        });
        let hit = match qualifier {
            Some(q) => alias.get(q).map(|m| (m.clone(), word.clone())),
            None => imported
                .get(&word)
                .cloned()
                .or_else(|| globs.iter().map(|m| (m.clone(), word.clone())).find(|k| known.contains(k))),
        };
        if let Some(k) = hit.filter(|k| known.contains(k)) {
            used.insert(k);
        }
        i = end;
    }
    used
}

fn names_rs(root: &Path) -> Vec<Const> {
    let consts = parse_names(&std::fs::read_to_string(root.join("crates/api/src/names.rs")).expect("names.rs"));
    assert!(consts.len() > 100, "names.rs gave only {} constants: parser broken?", consts.len());
    consts
}

#[test]
fn no_literal_spells_a_name_of_the_vocabulary() {
    let root = workspace();
    let consts = names_rs(&root);
    for (value, why) in EXEMPT {
        assert!(consts.iter().any(|c| c.value == *value), "exemption {value:?} ({why}) names no constant");
        assert!(distinctive(value), "exemption {value:?} is not distinctive anyway: drop it");
    }
    let found = vocabulary_literals(&root, &consts);
    assert!(
        found.is_empty(),
        "literals that spell a name of crates/api/src/names.rs: use the constant (or list an exemption with \
         its reason in tests/vocabulary.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_name_of_the_vocabulary_is_used() {
    let root = workspace();
    let consts = names_rs(&root);
    let names = root.join("crates/api/src/names.rs");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), false, &mut files);
    assert!(files.len() > 200, "the scan found only {} files: wrong root?", files.len());
    let mut used = BTreeSet::new();
    for f in files.iter().filter(|f| **f != names) {
        used.extend(used_in(&std::fs::read_to_string(f).expect("read"), &consts));
    }
    let unused: Vec<String> = consts
        .iter()
        .filter(|c| !used.contains(&(c.module.clone(), c.name.clone())))
        .map(|c| format!("{} = {:?}", c.path(), c.value))
        .collect();
    assert!(
        unused.is_empty(),
        "constants of crates/api/src/names.rs that nothing uses: use them where the value is written or read, \
         or delete them:\n{}",
        unused.join("\n")
    );
}

/// kopia's error classes reach `Ready`, `Bootstrapped` and `BackendReachable` as reasons
/// (`ErrorClass::as_str`): each is a reason of the vocabulary.
#[test]
fn every_kopia_error_class_is_a_reason_of_the_vocabulary() {
    use kopiur_api::names::reason;
    use kopiur_kopia::ErrorClass;
    let vocabulary = |c: ErrorClass| match c {
        ErrorClass::AuthFailure => reason::AUTH_FAILURE,
        ErrorClass::AccessDenied => reason::ACCESS_DENIED,
        ErrorClass::PermissionDenied => reason::PERMISSION_DENIED,
        ErrorClass::Locked => reason::LOCKED,
        ErrorClass::CertificateError => reason::CERTIFICATE_ERROR,
        ErrorClass::NotFound => reason::NOT_FOUND,
        ErrorClass::RepositoryUnavailable => reason::REPOSITORY_UNAVAILABLE,
        ErrorClass::SourceError => reason::SOURCE_ERROR,
        ErrorClass::Unknown => reason::UNKNOWN,
    };
    for c in ErrorClass::ALL {
        assert_eq!(c.as_str(), vocabulary(c));
    }
}

#[test]
fn the_names_parser_reads_modules_and_values() {
    let src = r#"//! pub const NOT: &str = "comment";
pub const GROUP: &str = "g.example";
pub mod reason {
    /// A doc "quoted".
    pub const READY: &str = "Ready";
    pub const LONG: &str =
        "Wrapped";
}
pub mod constants {
    pub const ID: i64 = 1;
}
pub const LAST: &str = "last";
"#;
    let got: Vec<(String, String, String)> =
        parse_names(src).into_iter().map(|c| (c.module, c.name, c.value)).collect();
    let want =
        [("", "GROUP", "g.example"), ("reason", "READY", "Ready"), ("reason", "LONG", "Wrapped"), ("", "LAST", "last")];
    assert_eq!(got, want.map(|(m, n, v)| (m.to_string(), n.to_string(), v.to_string())));
}

#[test]
fn the_scanner_skips_comments_chars_and_test_items() {
    let src = r##"// "InComment"
fn a<'a>(x: &'a str) -> char { let _ = r#"Raw "q" text"#; let _ = "esc\"aped"; if x == "Kept" { '"' } else { '{' } }
/* "Block /* nested */ comment" */
#[cfg(test)]
fn only_in_tests() { let _ = "TestFn"; }
#[cfg(test)]
mod tests {
    fn t() { let _ = "TestMod"; { "Inner" }; }
}
#[cfg(test)]
mod outside;
const AFTER: &str = "After";
"##;
    let s = scan(src);
    assert_eq!(s.code.len(), src.len());
    let (ranges, modules) = test_items(&s.code);
    assert_eq!(modules, ["outside"]);
    let kept: Vec<&str> =
        s.strings.iter().filter(|l| !ranges.iter().any(|r| r.contains(&l.at))).map(|l| l.text.as_str()).collect();
    assert_eq!(kept, [r#"Raw "q" text"#, r#"esc\"aped"#, "Kept", "After"]);
}

#[test]
fn the_distinctive_rule_spares_plain_words() {
    for v in ["RepositoryBreakerOpened", "Stalled", "Pinned", "kopiur.home-operations.com/op", "snapshot-delete-batch"]
    {
        assert!(distinctive(v), "{v}");
    }
    for v in ["Ready", "Found", "True", "backup", "restore", "kopiur"] {
        assert!(!distinctive(v), "{v}");
    }
}

#[test]
fn the_use_scan_follows_paths_imports_aliases_and_globs() {
    let consts: Vec<Const> = [("", "GROUP"), ("label", "GROUP"), ("reason", "READY"), ("condition", "READY")]
        .iter()
        .chain(&[("pruned_by", "RETENTION"), ("event", "A"), ("event", "B"), ("annotation", "X")])
        .map(|(m, n)| Const { module: m.to_string(), name: n.to_string(), value: String::new() })
        .collect();
    let used = |src: &str| -> Vec<String> {
        used_in(src, &consts).into_iter().map(|(m, n)| if m.is_empty() { n } else { format!("{m}::{n}") }).collect()
    };
    assert_eq!(used("use kopiur_api::names; fn f() { names::GROUP }"), ["GROUP"]);
    assert_eq!(used("fn f() { kopiur_api::names::label::GROUP }"), ["label::GROUP"]);
    assert_eq!(used("use kopiur_api::names::{condition, reason::READY}; fn f() { READY }"), ["reason::READY"]);
    assert_eq!(
        used("use kopiur_api::names::{pruned_by as value}; fn f() { value::RETENTION }"),
        ["pruned_by::RETENTION"]
    );
    assert_eq!(used("use kopiur_api::names::event::*; fn f() { (B, READY) }"), ["event::B"]);
    assert_eq!(used("use kopiur_api::names::annotation::X; // X\nfn f() { \"X\" }"), Vec::<String>::new());
    assert_eq!(used("use crate::names::{self, annotation::{X as Y}}; fn f() { Y }"), ["annotation::X"]);
}
