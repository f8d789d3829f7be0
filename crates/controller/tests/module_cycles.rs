//! No import cycle between the controller crate's top-level modules (issue #15, module layering in
//! docs/design/architecture.md).
//!
//! Every file under `crates/controller/src` belongs to one top-level module (`src/foo.rs` and
//! `src/foo/**` belong to `foo`; `lib.rs` and `main.rs` are the root and are left out). Every path
//! that leaves the module — `crate::foo::…`, `use crate::{foo, bar::x}`, or a `super::` chain that
//! climbs to the crate root — is an edge `module → foo`. Comments, doc comments, strings and char
//! literals are blanked before scanning, so prose that names a path is no edge. The test builds the
//! graph, finds its strongly connected components (Tarjan) and fails on every component of more than
//! one module, naming each edge inside it with one example `file:line`.
//!
//! It is a plain source scan: no environment, no build of the crate under test, a few milliseconds.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges that still close a cycle and are accepted for now, as `(from, to, why it is still there)`.
/// Removing these edges from the graph must leave it acyclic; any other cycle fails the test. An
/// entry whose edge no longer exists fails too, so the list only shrinks.
const ALLOWED: &[(&str, &str, &str)] = &[
    // Empty: the module graph has no cycle. Layering, top to bottom: wiring (controllers,
    // pipeline) → the kinds → the crate-root shared layer (docs/design/architecture.md, module
    // layering). An entry would be an edge pointing upwards, with the reason it is still there.
];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// One example site per edge: `(from, to) → "src/…:line"`.
type Sites = BTreeMap<(String, String), String>;

/// `src` with comments, string literals and char literals replaced by spaces (newlines kept, so
/// line numbers stay right). Lifetimes (`'a`) are kept as code.
fn blank_non_code(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0usize;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if (ch == 'r' || (ch == 'b' && next == Some('r'))) && (i == 0 || !is_ident(c[i - 1])) && {
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // Raw string: r"…", r#"…"#, br#"…"#.
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // opening quote
            while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &x in &c[i..j.min(c.len())] {
                blank(&mut out, x);
            }
            i = j;
        } else if ch == '"' {
            blank(&mut out, ch);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if ch == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // Char literal ('x' or '\n', '\u{…}'); a lifetime has no closing quote right after.
            blank(&mut out, ch);
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// The module path of a file relative to `src`: `foo.rs` → `[foo]`, `foo/mod.rs` → `[foo]`,
/// `foo/bar.rs` → `[foo, bar]`. `None` for the crate root (`lib.rs`, `main.rs`).
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?.to_string();
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem);
    }
    Some(parts)
}

/// Top-level modules the code of one file refers to, each with the first line it does so on.
/// `path` is the file's module path; inline `mod x { … }` blocks extend it while open.
fn references(code: &str, path: &[String]) -> Vec<(String, usize)> {
    let c: Vec<char> = code.chars().collect();
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let ident_at = |i: usize| -> String { c[i..].iter().take_while(|&&x| is_ident(x)).collect() };
    let skip_ws = |mut i: usize| {
        while i < c.len() && c[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let line_of = |i: usize| c[..i].iter().filter(|&&x| x == '\n').count() + 1;

    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new(); // (name, brace depth inside it)
    let mut pending_mod: Option<String> = None;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '{' {
            depth += 1;
            if let Some(name) = pending_mod.take() {
                inline.push((name, depth));
            }
            i += 1;
            continue;
        }
        if ch == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if ch == ';' {
            pending_mod = None;
        }
        if !is_ident(ch) || (i > 0 && (is_ident(c[i - 1]) || c[i - 1] == '$')) {
            i += 1;
            continue;
        }
        let word = ident_at(i);
        let start = i;
        i += word.len();
        if word == "mod" {
            let j = skip_ws(i);
            let name = ident_at(j);
            if !name.is_empty() {
                pending_mod = Some(name);
            }
            continue;
        }
        if word != "crate" && word != "super" {
            continue;
        }
        if c[..start].ends_with(&[':', ':']) {
            continue; // `foo::super` is not a path start we resolve
        }
        // Resolve the prefix: `crate::` → root; each `super::` climbs one module.
        let mut here: Vec<String> = path.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        let mut j = start;
        let mut w = word.clone();
        loop {
            let k = skip_ws(j + w.len());
            if !(c.get(k) == Some(&':') && c.get(k + 1) == Some(&':')) {
                j = usize::MAX;
                break;
            }
            match w.as_str() {
                "crate" => here.clear(),
                "super" => {
                    here.pop();
                }
                _ => unreachable!(),
            }
            j = skip_ws(k + 2);
            let nw = ident_at(j);
            if w == "super" && nw == "super" {
                w = nw;
                continue;
            }
            break;
        }
        if j == usize::MAX || !here.is_empty() {
            continue; // not a path, or it stays inside a module below the root
        }
        // At the crate root: the next segment names a top-level module, or a `{…}` group does.
        if c.get(j) == Some(&'{') {
            let mut d = 0;
            let mut at_start = true;
            let mut k = j;
            while k < c.len() {
                match c[k] {
                    '{' => {
                        d += 1;
                        at_start = d == 1;
                    }
                    '}' => {
                        d -= 1;
                        if d == 0 {
                            break;
                        }
                    }
                    ',' if d == 1 => at_start = true,
                    x if is_ident(x) && at_start && d == 1 => {
                        let name = ident_at(k);
                        out.push((name.clone(), line_of(k)));
                        k += name.len();
                        at_start = false;
                        continue;
                    }
                    x if !x.is_whitespace() => at_start = false,
                    _ => {}
                }
                k += 1;
            }
        } else {
            let name = ident_at(j);
            if !name.is_empty() {
                out.push((name, line_of(j)));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module graph of the crate at `src`, with one example site per edge.
fn crate_graph(src: &Path) -> (Graph, Sites) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut modules = BTreeSet::new();
    let mut parsed = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap().to_path_buf();
        if let Some(path) = module_path(&rel) {
            modules.insert(path[0].clone());
            parsed.push((rel, path));
        }
    }
    let mut graph: Graph = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    let mut sites = Sites::new();
    for (rel, path) in parsed {
        let text = std::fs::read_to_string(src.join(&rel)).unwrap();
        let from = path[0].clone();
        for (to, line) in references(&blank_non_code(&text), &path) {
            if to == from || !modules.contains(&to) {
                continue;
            }
            graph.get_mut(&from).unwrap().insert(to.clone());
            sites.entry((from.clone(), to)).or_insert_with(|| format!("src/{}:{line}", rel.display()));
        }
    }
    (graph, sites)
}

/// Strongly connected components of more than one node (Tarjan), each sorted, in a stable order.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t =
        T { g: graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    // Nodes that only appear as targets are visited too.
    let nodes: BTreeSet<&str> =
        graph.iter().flat_map(|(k, vs)| std::iter::once(k.as_str()).chain(vs.iter().map(String::as_str))).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

/// Whether `to` is reachable from `from` along the graph's edges.
fn reaches(graph: &Graph, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(v) = todo.pop() {
        if v == to {
            return true;
        }
        if seen.insert(v.clone()) {
            todo.extend(graph.get(&v).into_iter().flatten().cloned());
        }
    }
    false
}

/// Every cycle with each edge inside it and its example site, one line per edge.
fn describe(cycles: &[Vec<String>], graph: &Graph, sites: &Sites) -> String {
    let mut s = String::new();
    for comp in cycles {
        s.push_str(&format!("cycle [{}]:\n", comp.join(", ")));
        for from in comp {
            for to in graph.get(from).into_iter().flatten().filter(|t| comp.contains(t)) {
                let site = sites.get(&(from.clone(), to.clone())).map_or("?", String::as_str);
                s.push_str(&format!("  {from} -> {to}  ({site})\n"));
            }
        }
    }
    s
}

fn graph_of(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
        g.entry(b.to_string()).or_default();
    }
    g
}

#[test]
fn cycle_finder_on_a_hand_made_graph() {
    // a→b→c→a is one cycle; d↔e another; f→a, c→g and the self-free chain g→h are none.
    let g = graph_of(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d"), ("f", "a"), ("c", "g"), ("g", "h")]);
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"], vec!["d", "e"]]);
    // A DAG has none.
    let dag = graph_of(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]);
    assert!(cycles(&dag).is_empty());
    // Two cycles joined by one edge stay two; joined both ways they become one.
    let two = graph_of(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"), ("b", "c")]);
    assert_eq!(cycles(&two).len(), 2);
    let one = graph_of(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"), ("b", "c"), ("d", "a")]);
    assert_eq!(cycles(&one), vec![vec!["a", "b", "c", "d"]]);
}

#[test]
fn reference_scanner_on_hand_made_sources() {
    let foo = vec!["foo".to_string()];
    let foo_bar = vec!["foo".to_string(), "bar".to_string()];
    let refs = |src: &str, path: &[String]| -> Vec<String> {
        references(&blank_non_code(src), path).into_iter().map(|(m, _)| m).collect()
    };
    // `use` lines, groups, paths in code; comments, doc comments, strings and chars are no edges.
    let src = r##"
//! see crate::docs_only
/// crate::doc_comment
use crate::a::X;
use crate::{b, c::{D, E}, d::F};
/* crate::block_comment */
fn f<'a>(x: &'a str) -> crate::e::Y { let _ = "crate::in_string"; let _ = r#"crate::raw"#; let _ = '"'; crate::g::h() }
"##;
    assert_eq!(refs(src, &foo), vec!["a", "b", "c", "d", "e", "g"]);
    // `super::` from `foo/mod.rs` reaches the root; from `foo/bar.rs` it stays inside `foo`.
    assert_eq!(refs("use super::x::Y;", &foo), vec!["x"]);
    assert_eq!(refs("use super::x::Y;", &foo_bar), Vec::<String>::new());
    assert_eq!(refs("use super::super::x::Y;", &foo_bar), vec!["x"]);
    // Inside an inline `mod tests { … }`, `super::` climbs back to the file's own module.
    assert_eq!(refs("mod tests { use super::x; }\nuse super::y;", &foo), vec!["y"]);
    // Line numbers point at the referenced segment.
    assert_eq!(references(&blank_non_code("\n\nuse crate::z;"), &foo), vec![("z".to_string(), 3)]);
}

#[test]
fn no_cycle_between_top_level_modules() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, sites) = crate_graph(&src);
    assert!(graph.len() > 10, "found only {} top-level modules under {}", graph.len(), src.display());

    let all = cycles(&graph);
    let mut mutual = Vec::new();
    for (a, bs) in &graph {
        for b in bs.iter().filter(|b| a < *b && graph[*b].contains(a)) {
            mutual.push(format!("{a}<->{b}"));
        }
    }
    println!("{} mutual import pair(s): {}", mutual.len(), mutual.join(", "));
    println!(
        "{} cycle(s) between top-level modules before the allow-list:\n{}",
        all.len(),
        describe(&all, &graph, &sites)
    );

    let mut rest = graph.clone();
    let mut stale = Vec::new();
    for (from, to, _why) in ALLOWED {
        if !rest.get_mut(*from).is_some_and(|s| s.remove(*to)) {
            stale.push(format!("{from} -> {to}"));
        }
    }
    assert!(stale.is_empty(), "allow-listed edges that no longer exist (remove them from ALLOWED): {stale:?}");
    // An allow-listed edge that no longer closes a cycle (its target does not reach back to its
    // source without the allow-list) is no longer needed: the list only shrinks.
    let needless: Vec<String> = ALLOWED
        .iter()
        .filter(|(from, to, _)| !reaches(&rest, to, from))
        .map(|(from, to, _)| format!("{from} -> {to}"))
        .collect();
    assert!(
        needless.is_empty(),
        "allow-listed edges that close no cycle any more (remove them from ALLOWED): {needless:?}"
    );
    let left = cycles(&rest);
    assert!(
        left.is_empty(),
        "{} import cycle(s) between top-level modules of the controller crate (move the shared item to a \
         crate-root module both sides can use; see docs/design/architecture.md, module layering):\n{}",
        left.len(),
        describe(&left, &rest, &sites)
    );
}

/// The kind folders: one reconciler each (docs/design/architecture.md, module layering).
const KINDS: &[&str] = &[
    "snapshot",
    "restore",
    "snapshot_schedule",
    "snapshot_policy",
    "maintenance",
    "replication",
    "repository",
    "snapshot_replication",
];

/// The wiring: the only modules that may name a kind (they start its controller).
const WIRING: &[&str] = &["controllers", "pipeline"];

/// Every edge into a kind from anything but the wiring: a kind importing another kind, or the
/// shared layer climbing back up into one.
fn upward_edges(graph: &Graph, sites: &Sites) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in graph {
        if WIRING.contains(&from.as_str()) {
            continue;
        }
        for to in tos.iter().filter(|t| KINDS.contains(&t.as_str()) && *t != from) {
            let site = sites.get(&(from.clone(), to.clone())).map(String::as_str).unwrap_or("?");
            out.push(format!("{from} -> {to} ({site})"));
        }
    }
    out
}

#[test]
fn upward_edges_on_a_hand_made_graph() {
    let g = graph_of(&[
        ("pipeline", "snapshot"),
        ("restore", "snapshot"),
        ("conditions", "repository"),
        ("snapshot", "conditions"),
    ]);
    let found = upward_edges(&g, &Sites::new());
    assert_eq!(found, vec!["conditions -> repository (?)", "restore -> snapshot (?)"]);
}

#[test]
fn kinds_are_leaves_and_the_shared_layer_never_climbs() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, sites) = crate_graph(&src);
    // The scan sees the wiring's edges, or it proves nothing.
    for kind in ["snapshot", "restore", "repository"] {
        assert!(
            WIRING.iter().any(|w| graph.get(*w).is_some_and(|s| s.contains(kind))),
            "the scan found no wiring edge into {kind}"
        );
    }
    for kind in KINDS {
        assert!(graph.contains_key(*kind), "kind folder {kind} not found: update KINDS");
    }
    let up = upward_edges(&graph, &sites);
    assert!(
        up.is_empty(),
        "imports into a kind from outside the wiring: move what kinds share into the shared layer \
         (docs/design/architecture.md, module layering):\n{}",
        up.join("\n")
    );
}

/// Lines that give a thing a second name: `pub use` of another top-level module or crate, and
/// `pub type X = <path>` naming one. A module's facade over its own submodules (`pub use plan::…`)
/// is not an alias.
fn alias_lines(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_to: Option<String> = None;
    let lines: Vec<&str> = code.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        if let Some(close) = &skip_to {
            if l.trim_end() == close {
                skip_to = None;
            }
            continue;
        }
        // A `#[cfg(test)]` module is test code: skipped to its closing brace.
        if t.starts_with("#[cfg(test)]") {
            let next = lines.get(i + 1).map(|n| n.trim_start()).unwrap_or_default();
            if next.starts_with("mod ") || next.starts_with("pub mod ") || next.starts_with("pub(crate) mod ") {
                skip_to = Some(format!("{indent}}}"));
            }
            continue;
        }
        let body = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| t.strip_prefix(p));
        let Some(body) = body else { continue };
        let reexport = body
            .strip_prefix("use ")
            .is_some_and(|p| p.starts_with("crate::") || p.starts_with("kopiur_") || p.starts_with("super::"));
        let renamed = body.strip_prefix("type ").and_then(|r| r.split_once(" = ")).is_some_and(|(_, rhs)| {
            rhs.starts_with("crate::") || rhs.starts_with("super::") || rhs.starts_with("kopiur_")
        });
        if reexport || renamed {
            out.push((i + 1, t.to_string()));
        }
    }
    out
}

#[test]
fn alias_scanner_on_hand_made_sources() {
    let src = "pub use crate::a::B;\npub use plan::{x, y};\npub type Ctx = crate::context::Context;\n\
               pub type Time = DateTime<Utc>;\npub(crate) use kopiur_api::X;\n#[cfg(test)]\nmod tests {\n    pub use crate::z;\n}\n";
    let found: Vec<usize> = alias_lines(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, vec![1, 3, 5]);
}

#[test]
fn no_alias_keeps_an_old_name_alive() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, l) in alias_lines(&text) {
            found.push(format!("src/{}:{line}: {l}", f.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(files.len() > 100, "the scan found only {} files", files.len());
    assert!(
        found.is_empty(),
        "a second name for one thing: import it from its one home instead:\n{}",
        found.join("\n")
    );
}
