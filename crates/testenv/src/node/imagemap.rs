//! NA-6: image reference -> local executable, standing in for ENTRYPOINT and CMD.
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ImageMap {
    #[serde(default)]
    pub images: Vec<ImageEntry>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ImageEntry {
    /// Glob over the full image reference; `*` also matches `/` and `:`.
    pub pattern: String,
    /// Replaces the image ENTRYPOINT.
    #[serde(default)]
    pub command: Vec<String>,
    /// Replaces the image CMD.
    #[serde(default)]
    pub args: Vec<String>,
}

impl ImageMap {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading image map {}: {e}", path.display()))?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let map: ImageMap = serde_json::from_str(text)?;
        for e in &map.images {
            glob::Pattern::new(&e.pattern)
                .map_err(|err| anyhow::anyhow!("bad image pattern {:?}: {err}", e.pattern))?;
        }
        Ok(map)
    }

    /// First matching entry wins.
    pub fn lookup(&self, image: &str) -> Option<&ImageEntry> {
        self.images.iter().find(|e| glob::Pattern::new(&e.pattern).map(|p| p.matches(image)).unwrap_or(false))
    }
}

/// Combines the image defaults with the container's `command`/`args` the way a container
/// runtime does: `command` replaces ENTRYPOINT and drops CMD; `args` replaces CMD.
pub fn effective_argv(entry: &ImageEntry, command: &[String], args: Option<&[String]>) -> Vec<String> {
    let mut argv: Vec<String> = if command.is_empty() { entry.command.clone() } else { command.to_vec() };
    match args {
        Some(a) if !a.is_empty() => argv.extend(a.iter().cloned()),
        _ if command.is_empty() => argv.extend(entry.args.iter().cloned()),
        _ => {}
    }
    argv
}

/// Resolves `argv[0]` on the given PATH unless it already names a path.
pub fn resolve_executable(program: &str, path_var: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(program);
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    None
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ImageMap {
        ImageMap::parse(
            r#"{"images":[
                {"pattern":"mirror/kopiur*","command":["/abs/kopiur-mover"],"args":["serve"]},
                {"pattern":"*busybox*","command":["/bin/sh"],"args":[]},
                {"pattern":"*","command":["/bin/false"]}
            ]}"#,
        )
        .unwrap()
    }

    #[test]
    fn first_match_wins() {
        let m = map();
        assert_eq!(m.lookup("mirror/kopiur-mover:v1.2").unwrap().command, vec!["/abs/kopiur-mover"]);
        assert_eq!(m.lookup("mirror/library/busybox:1.36").unwrap().command, vec!["/bin/sh"]);
        assert_eq!(m.lookup("busybox").unwrap().command, vec!["/bin/sh"]);
        assert_eq!(m.lookup("nginx").unwrap().command, vec!["/bin/false"]);
    }

    #[test]
    fn unmapped_is_none() {
        let m = ImageMap::parse(r#"{"images":[{"pattern":"*busybox*","command":["/bin/sh"]}]}"#).unwrap();
        assert!(m.lookup("mirror/foo/bar:1").is_none());
    }

    #[test]
    fn bad_pattern_rejected() {
        assert!(ImageMap::parse(r#"{"images":[{"pattern":"[","command":[]}]}"#).is_err());
    }

    #[test]
    fn argv_combination() {
        let e = ImageEntry { pattern: "*".into(), command: vec!["ep".into()], args: vec!["cmd".into()] };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // Neither: ENTRYPOINT + CMD.
        assert_eq!(effective_argv(&e, &[], None), s(&["ep", "cmd"]));
        // Only args: ENTRYPOINT + args.
        assert_eq!(effective_argv(&e, &[], Some(&s(&["a"]))), s(&["ep", "a"]));
        // Only command: CMD dropped.
        assert_eq!(effective_argv(&e, &s(&["c"]), None), s(&["c"]));
        // Both.
        assert_eq!(effective_argv(&e, &s(&["c"]), Some(&s(&["a", "b"]))), s(&["c", "a", "b"]));
    }

    #[test]
    fn path_resolution() {
        assert_eq!(resolve_executable("/x/y", ""), Some(PathBuf::from("/x/y")));
        let sh = resolve_executable("sh", "/nonexistent:/usr/bin:/bin").unwrap();
        assert!(sh.ends_with("sh"));
        assert!(resolve_executable("definitely-not-a-binary-xyz", "/usr/bin:/bin").is_none());
    }
}
