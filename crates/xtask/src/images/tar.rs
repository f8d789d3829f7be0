//! A deterministic ustar writer (and the small reader the self-check needs).
//!
//! The same entries always give the same bytes: entries are sorted by path, every header has
//! the same mtime, owner names are derived from the numeric ids, and nothing from the build
//! host (umask, user, clock) reaches the archive.
use std::collections::BTreeMap;

use anyhow::{Result, bail, ensure};

const BLOCK: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    /// A symbolic link to the given target (relative or absolute, at most 100 bytes).
    Symlink(String),
}

/// One archive member. `path` is relative (no leading `/`); directories carry no trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub kind: Kind,
}

impl Entry {
    pub fn dir(path: &str, mode: u32) -> Entry {
        Entry { path: path.into(), mode, uid: 0, gid: 0, kind: Kind::Dir }
    }

    pub fn file(path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Entry {
        Entry { path: path.into(), mode, uid: 0, gid: 0, kind: Kind::File(data.into()) }
    }

    /// A symbolic link (mode 0777, as `ln -s` makes them; the mode of a link is never used).
    pub fn symlink(path: &str, target: &str) -> Entry {
        Entry { path: path.into(), mode: 0o777, uid: 0, gid: 0, kind: Kind::Symlink(target.into()) }
    }

    pub fn owned_by(mut self, uid: u32, gid: u32) -> Entry {
        self.uid = uid;
        self.gid = gid;
        self
    }
}

/// The owner name written for a numeric id (the image's `/etc/passwd` has exactly these).
fn owner_name(id: u32) -> &'static str {
    match id {
        0 => "root",
        65532 => "nonroot",
        _ => "",
    }
}

fn normalize(path: &str) -> Result<String> {
    let p = path.trim_start_matches('/').trim_end_matches('/');
    ensure!(!p.is_empty(), "empty archive path {path:?}");
    for c in p.split('/') {
        ensure!(!c.is_empty() && c != "." && c != "..", "archive path {path:?} is not normal");
    }
    Ok(p.to_string())
}

/// Sorted entries with every missing parent directory added (mode 0755, root).
pub fn canonical(entries: Vec<Entry>) -> Result<Vec<Entry>> {
    let mut by_path: BTreeMap<String, Entry> = BTreeMap::new();
    for mut e in entries {
        e.path = normalize(&e.path)?;
        if by_path.contains_key(&e.path) {
            bail!("archive path {} given twice", e.path);
        }
        by_path.insert(e.path.clone(), e);
    }
    let parents: Vec<String> = by_path
        .keys()
        .flat_map(|p| p.match_indices('/').map(|(i, _)| p[..i].to_string()).collect::<Vec<_>>())
        .collect();
    for p in parents {
        match by_path.get(&p) {
            Some(e) if e.kind != Kind::Dir => bail!("{p} is a file and a parent directory"),
            Some(_) => {}
            None => {
                by_path.insert(p.clone(), Entry::dir(&p, 0o755));
            }
        }
    }
    // A parent is a prefix of its children, so it always sorts first.
    Ok(by_path.into_values().collect())
}

fn octal(field: &mut [u8], value: u64) -> Result<()> {
    let digits = field.len() - 1;
    let s = format!("{value:0digits$o}");
    ensure!(s.len() == digits, "{value} does not fit a {digits}-digit tar field");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
    Ok(())
}

fn text(field: &mut [u8], value: &str) -> Result<()> {
    ensure!(value.len() <= field.len(), "{value:?} is longer than its {}-byte tar field", field.len());
    field[..value.len()].copy_from_slice(value.as_bytes());
    Ok(())
}

/// Splits a long name into ustar's `prefix` (155) and `name` (100) at a `/`.
fn split_name(name: &str) -> Result<(&str, &str)> {
    if name.len() <= 100 {
        return Ok(("", name));
    }
    for (i, _) in name.match_indices('/') {
        let (prefix, rest) = (&name[..i], &name[i + 1..]);
        if prefix.len() <= 155 && rest.len() <= 100 && !rest.is_empty() {
            return Ok((prefix, rest));
        }
    }
    bail!("archive path {name} is too long for ustar")
}

fn header(e: &Entry, mtime: u64) -> Result<[u8; BLOCK]> {
    let mut h = [0u8; BLOCK];
    let (name, size, flag, link) = match &e.kind {
        Kind::Dir => (format!("{}/", e.path), 0, b'5', ""),
        Kind::File(d) => (e.path.clone(), d.len() as u64, b'0', ""),
        Kind::Symlink(target) => (e.path.clone(), 0, b'2', target.as_str()),
    };
    ensure!(!link.contains('\0'), "link target of {} has a NUL byte", e.path);
    if flag == b'2' {
        ensure!(!link.is_empty(), "symbolic link {} has an empty target", e.path);
    }
    let (prefix, name) = split_name(&name)?;
    text(&mut h[0..100], name)?;
    octal(&mut h[100..108], u64::from(e.mode & 0o7777))?;
    octal(&mut h[108..116], u64::from(e.uid))?;
    octal(&mut h[116..124], u64::from(e.gid))?;
    octal(&mut h[124..136], size)?;
    octal(&mut h[136..148], mtime)?;
    h[148..156].fill(b' ');
    h[156] = flag;
    text(&mut h[157..257], link)?;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    text(&mut h[265..297], owner_name(e.uid))?;
    text(&mut h[297..329], owner_name(e.gid))?;
    octal(&mut h[329..337], 0)?;
    octal(&mut h[337..345], 0)?;
    text(&mut h[345..500], prefix)?;
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    Ok(h)
}

/// The archive of `entries` (parents added, sorted), every mtime set to `mtime`.
pub fn write(entries: Vec<Entry>, mtime: u64) -> Result<Vec<u8>> {
    let entries = canonical(entries)?;
    let total: usize = entries
        .iter()
        .map(|e| BLOCK + if let Kind::File(d) = &e.kind { d.len().div_ceil(BLOCK) * BLOCK } else { 0 })
        .sum();
    let mut out = Vec::with_capacity(total + 2 * BLOCK);
    for e in &entries {
        out.extend_from_slice(&header(e, mtime)?);
        if let Kind::File(d) = &e.kind {
            out.extend_from_slice(d);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
    }
    // End of archive: two zero blocks.
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

/// A member as read back: path (directories keep their trailing `/`), header fields, data.
/// The self-check reads paths, types and data; the tests read the rest.
#[derive(Clone, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Member {
    pub path: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub uname: String,
    pub mtime: u64,
    pub typeflag: u8,
    /// A symbolic link's target (empty for other members).
    pub linkname: String,
    pub data: Vec<u8>,
}

fn parse_octal(field: &[u8]) -> Result<u64> {
    let s: String = field.iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
    let s = s.trim();
    if s.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(s, 8).map_err(|e| anyhow::anyhow!("bad octal tar field {s:?}: {e}"))
}

fn parse_text(field: &[u8]) -> String {
    String::from_utf8_lossy(&field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())]).into_owned()
}

/// Reads a ustar archive (what [`write`] produces), checking every header checksum.
pub fn read(bytes: &[u8]) -> Result<Vec<Member>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + BLOCK <= bytes.len() {
        let h = &bytes[off..off + BLOCK];
        if h.iter().all(|&b| b == 0) {
            return Ok(out);
        }
        let want = parse_octal(&h[148..156])?;
        let sum: u64 =
            h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) }).sum();
        ensure!(want == sum, "tar header checksum mismatch at offset {off}");
        ensure!(&h[257..263] == b"ustar\0", "not a ustar header at offset {off}");
        let size = usize::try_from(parse_octal(&h[124..136])?)?;
        let prefix = parse_text(&h[345..500]);
        let name = parse_text(&h[0..100]);
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let start = off + BLOCK;
        ensure!(start + size <= bytes.len(), "tar member {path} runs past the end");
        out.push(Member {
            path,
            mode: u32::try_from(parse_octal(&h[100..108])?)?,
            uid: u32::try_from(parse_octal(&h[108..116])?)?,
            gid: u32::try_from(parse_octal(&h[116..124])?)?,
            uname: parse_text(&h[265..297]),
            mtime: parse_octal(&h[136..148])?,
            typeflag: h[156],
            linkname: parse_text(&h[157..257]),
            data: bytes[start..start + size].to_vec(),
        });
        off = start + size.div_ceil(BLOCK) * BLOCK;
    }
    bail!("tar archive has no end-of-archive marker")
}

/// gzip with a fixed header: no file name, mtime 0, OS "unknown".
pub fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::with_capacity(data.len() / 2), flate2::Compression::default());
    enc.write_all(data)?;
    Ok(enc.finish()?)
}

pub fn gunzip(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_added_and_entries_sorted() {
        let es = canonical(vec![
            Entry::file("/usr/local/bin/x", 0o755, "x"),
            Entry::dir("tmp", 0o1777),
            Entry::file("etc/passwd", 0o644, "p"),
        ])
        .unwrap();
        let paths: Vec<&str> = es.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["etc", "etc/passwd", "tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/x"]);
    }

    #[test]
    fn duplicate_and_unnormal_paths_are_refused() {
        assert!(write(vec![Entry::dir("a", 0o755), Entry::dir("a/", 0o755)], 0).is_err());
        assert!(write(vec![Entry::file("a/../b", 0o644, "")], 0).is_err());
        assert!(write(vec![Entry::file("a", 0o644, ""), Entry::file("a/b", 0o644, "")], 0).is_err());
    }

    #[test]
    fn round_trip_keeps_modes_owners_and_the_fixed_mtime() {
        let bytes = write(
            vec![
                Entry::dir("tmp", 0o1777),
                Entry::dir("home/nonroot", 0o755).owned_by(65532, 65532),
                Entry::file("etc/group", 0o644, "root:x:0:\n"),
            ],
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);
        let ms = read(&bytes).unwrap();
        let paths: Vec<&str> = ms.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["etc/", "etc/group", "home/", "home/nonroot/", "tmp/"]);
        let tmp = ms.iter().find(|m| m.path == "tmp/").unwrap();
        assert_eq!((tmp.mode, tmp.typeflag), (0o1777, b'5'));
        let home = ms.iter().find(|m| m.path == "home/nonroot/").unwrap();
        assert_eq!((home.uid, home.gid, home.uname.as_str()), (65532, 65532, "nonroot"));
        assert_eq!(ms.iter().find(|m| m.path == "etc/group").unwrap().data, b"root:x:0:\n");
        assert!(ms.iter().all(|m| m.mtime == 1_700_000_000));
    }

    #[test]
    fn symbolic_links_round_trip() {
        let bytes =
            write(vec![Entry::file("bin/busybox", 0o755, "elf"), Entry::symlink("bin/sh", "busybox")], 0).unwrap();
        let ms = read(&bytes).unwrap();
        let paths: Vec<&str> = ms.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["bin/", "bin/busybox", "bin/sh"]);
        let sh = &ms[2];
        assert_eq!((sh.typeflag, sh.linkname.as_str(), sh.mode, sh.data.len()), (b'2', "busybox", 0o777, 0));
        assert_eq!(ms[1].linkname, "", "a regular file has no link target");
        // Headers: bin/, bin/busybox, its data block, bin/sh. Name, mode, size and link name as GNU
        // tar writes them for `ln -s busybox bin/sh`.
        let h = &bytes[3 * BLOCK..4 * BLOCK];
        assert_eq!(&h[..7], b"bin/sh\0");
        assert_eq!(&h[100..108], b"0000777\0");
        assert_eq!(&h[124..136], b"00000000000\0", "size 0");
        assert_eq!(&h[157..165], b"busybox\0");
    }

    #[test]
    fn bad_symbolic_links_are_refused() {
        assert!(write(vec![Entry::symlink("a", "")], 0).is_err(), "empty target");
        assert!(write(vec![Entry::symlink("a", &"t".repeat(101))], 0).is_err(), "target too long for ustar");
        assert!(write(vec![Entry::symlink("a", "b"), Entry::file("a/c", 0o644, "")], 0).is_err(), "a link as a parent");
    }

    #[test]
    fn long_names_use_the_ustar_prefix() {
        let long = format!("{}/{}/{}", "d".repeat(60), "e".repeat(60), "f".repeat(90));
        let ms = read(&write(vec![Entry::file(&long, 0o644, "x")], 0).unwrap()).unwrap();
        assert_eq!(ms.last().unwrap().path, long);
    }

    #[test]
    fn gzip_header_is_fixed_and_output_repeats() {
        let a = gzip(b"hello hello hello").unwrap();
        assert_eq!(a, gzip(b"hello hello hello").unwrap());
        assert_eq!(&a[..4], &[0x1f, 0x8b, 8, 0], "deflate, no FNAME/FEXTRA/FCOMMENT flags");
        assert_eq!(&a[4..8], &[0, 0, 0, 0], "mtime 0");
        assert_eq!(a[9], 255, "OS unknown");
        assert_eq!(gunzip(&a).unwrap(), b"hello hello hello");
    }
}
