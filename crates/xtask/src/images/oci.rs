//! OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/*`) plus a Docker-style
//! `manifest.json`, written as one tar archive that `docker load`, `podman load`,
//! `skopeo copy oci-archive:…` and `ctr images import` all accept.
//!
//! Everything is content-addressed and built from sorted, fixed-metadata inputs, so the same
//! inputs give the same digests on every run.
use std::collections::BTreeMap;

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::tar::{self, Entry};

pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The tag or full reference of an index entry (OCI image-spec annotation).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The full image name containerd gives an imported manifest (`ctr images import`).
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub variant: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub platform: Option<Platform>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn of(media_type: &str, data: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: sha256(data),
            size: data.len() as u64,
            platform: None,
            annotations: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

/// The runtime part of the image configuration (Docker's capitalised keys, as the spec has them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    pub user: String,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct History {
    pub created: String,
    pub created_by: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    pub created: String,
    pub architecture: String,
    pub os: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub variant: Option<String>,
    pub config: RunConfig,
    pub rootfs: RootFs,
    pub history: Vec<History>,
}

/// Docker's `manifest.json` entry (`docker save` format), for engines without OCI support.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DockerManifest {
    pub config: String,
    pub repo_tags: Vec<String>,
    pub layers: Vec<String>,
}

pub struct Layer {
    /// What the layer holds, for the image history.
    pub comment: String,
    pub entries: Vec<Entry>,
}

/// Everything an image is made of.
pub struct Image {
    /// Full reference, e.g. `kopiur-controller:0.1.0` or `registry.example/team/kopiur-controller:0.1.0`.
    pub reference: String,
    pub platform: Platform,
    pub run: RunConfig,
    pub layers: Vec<Layer>,
    /// Seconds since the epoch for every mtime and `created` (`SOURCE_DATE_EPOCH`, else 0).
    pub epoch: u64,
}

/// A built image: its blobs and the top-level files of the layout.
pub struct Layout {
    pub reference: String,
    pub manifest: Descriptor,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    blobs: BTreeMap<String, Vec<u8>>,
    index_json: Vec<u8>,
    docker_manifest_json: Vec<u8>,
}

fn rfc3339(epoch: u64) -> Result<String> {
    let t = chrono::DateTime::from_timestamp(i64::try_from(epoch)?, 0).context("epoch out of range")?;
    Ok(t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// Checks a reference has a name and a tag (`name:tag`, name possibly with a registry/path).
pub fn check_reference(r: &str) -> Result<()> {
    let (name, tag) = r.rsplit_once(':').with_context(|| format!("image reference {r:?} has no tag"))?;
    ensure!(!name.is_empty() && !name.ends_with('/') && !tag.contains('/'), "image reference {r:?} has no tag");
    ensure!(
        !tag.is_empty() && tag.len() <= 128 && tag.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "tag of {r:?} must be [A-Za-z0-9._-], at most 128 characters"
    );
    ensure!(
        name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:".contains(c)),
        "image name of {r:?} must be lower case"
    );
    Ok(())
}

pub fn build(image: &Image) -> Result<Layout> {
    check_reference(&image.reference)?;
    let created = rfc3339(image.epoch)?;
    let mut blobs = BTreeMap::new();
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    let mut history = Vec::new();
    for l in &image.layers {
        let raw = tar::write(l.entries.clone(), image.epoch)?;
        diff_ids.push(sha256(&raw));
        let gz = tar::gzip(&raw)?;
        let d = Descriptor::of(MEDIA_LAYER, &gz);
        blobs.insert(d.digest.clone(), gz);
        layers.push(d);
        history.push(History { created: created.clone(), created_by: l.comment.clone() });
    }
    let config = Config {
        created,
        architecture: image.platform.architecture.clone(),
        os: image.platform.os.clone(),
        variant: image.platform.variant.clone(),
        config: image.run.clone(),
        rootfs: RootFs { kind: "layers".into(), diff_ids },
        history,
    };
    let config_json = serde_json::to_vec(&config)?;
    let config_desc = Descriptor::of(MEDIA_CONFIG, &config_json);
    blobs.insert(config_desc.digest.clone(), config_json);

    let manifest = Manifest {
        schema_version: 2,
        media_type: MEDIA_MANIFEST.into(),
        config: config_desc.clone(),
        layers: layers.clone(),
    };
    let manifest_json = serde_json::to_vec(&manifest)?;
    let mut manifest_desc = Descriptor::of(MEDIA_MANIFEST, &manifest_json);
    blobs.insert(manifest_desc.digest.clone(), manifest_json);

    let mut index_entry = manifest_desc.clone();
    index_entry.platform = Some(image.platform.clone());
    index_entry.annotations = BTreeMap::from([
        (ANNOTATION_REF_NAME.to_string(), image.reference.clone()),
        (ANNOTATION_CONTAINERD_NAME.to_string(), image.reference.clone()),
    ]);
    let index = Index { schema_version: 2, media_type: MEDIA_INDEX.into(), manifests: vec![index_entry] };
    let index_json = serde_json::to_vec_pretty(&index)?;

    let blob_path = |d: &Descriptor| format!("blobs/sha256/{}", d.digest.trim_start_matches("sha256:"));
    let docker = vec![DockerManifest {
        config: blob_path(&config_desc),
        repo_tags: vec![image.reference.clone()],
        layers: layers.iter().map(blob_path).collect(),
    }];
    let docker_manifest_json = serde_json::to_vec_pretty(&docker)?;
    manifest_desc.platform = Some(image.platform.clone());
    Ok(Layout {
        reference: image.reference.clone(),
        manifest: manifest_desc,
        config: config_desc,
        layers,
        blobs,
        index_json,
        docker_manifest_json,
    })
}

impl Layout {
    /// The `.oci.tar` archive: the layout's files in a deterministic tar.
    pub fn archive(&self, epoch: u64) -> Result<Vec<u8>> {
        let mut es = vec![
            Entry::file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            Entry::file("index.json", 0o644, self.index_json.clone()),
            Entry::file("manifest.json", 0o644, self.docker_manifest_json.clone()),
        ];
        for (digest, data) in &self.blobs {
            es.push(Entry::file(
                &format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")),
                0o644,
                data.clone(),
            ));
        }
        tar::write(es, epoch)
    }
}

/// What [`verify`] found in an archive.
#[derive(Debug)]
pub struct Verified {
    pub reference: String,
    pub manifest_digest: String,
    pub platform: Platform,
    pub config: Config,
    /// The members of every layer, in order.
    pub layers: Vec<Vec<tar::Member>>,
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, data: &[u8]) -> Result<T> {
    serde_json::from_slice(data).with_context(|| format!("parsing {what}"))
}

/// Reads an archive back and checks the whole chain: `oci-layout`, `index.json` -> manifest ->
/// config and layers, each descriptor's digest and size against its blob, the config's
/// `diff_ids` against the uncompressed layers, and `manifest.json` against the same blobs.
pub fn verify(archive: &[u8]) -> Result<Verified> {
    let files: BTreeMap<String, Vec<u8>> =
        tar::read(archive)?.into_iter().filter(|m| m.typeflag == b'0').map(|m| (m.path, m.data)).collect();
    let file = |p: &str| files.get(p).with_context(|| format!("{p} missing from the archive"));
    let layout: serde_json::Value = parse("oci-layout", file("oci-layout")?)?;
    ensure!(layout["imageLayoutVersion"] == "1.0.0", "oci-layout: {layout}");
    let blob = |d: &Descriptor| -> Result<&Vec<u8>> {
        let hex = d.digest.strip_prefix("sha256:").with_context(|| format!("digest {} is not sha256", d.digest))?;
        let data = file(&format!("blobs/sha256/{hex}"))?;
        ensure!(sha256(data) == d.digest, "blob {} does not hash to its name", d.digest);
        ensure!(
            data.len() as u64 == d.size,
            "descriptor of {} says {} bytes, blob has {}",
            d.digest,
            d.size,
            data.len()
        );
        Ok(data)
    };
    for (p, data) in &files {
        if let Some(hex) = p.strip_prefix("blobs/sha256/") {
            ensure!(sha256(data) == format!("sha256:{hex}"), "{p} does not hash to its name");
        }
    }
    let index: Index = parse("index.json", file("index.json")?)?;
    ensure!(index.schema_version == 2 && index.media_type == MEDIA_INDEX, "index.json is not an OCI index");
    let [entry] = index.manifests.as_slice() else { bail!("index.json must list exactly one manifest") };
    ensure!(entry.media_type == MEDIA_MANIFEST, "index entry is {}", entry.media_type);
    let reference = entry.annotations.get(ANNOTATION_REF_NAME).context("index entry has no ref.name")?.clone();
    ensure!(
        entry.annotations.get(ANNOTATION_CONTAINERD_NAME) == Some(&reference),
        "io.containerd.image.name differs from ref.name"
    );
    let platform = entry.platform.clone().context("index entry has no platform")?;
    let manifest: Manifest = parse("manifest", blob(entry)?)?;
    ensure!(manifest.schema_version == 2 && manifest.media_type == MEDIA_MANIFEST, "not an OCI manifest");
    ensure!(manifest.config.media_type == MEDIA_CONFIG, "config is {}", manifest.config.media_type);
    let config: Config = parse("config", blob(&manifest.config)?)?;
    ensure!(
        (config.os.as_str(), config.architecture.as_str(), &config.variant)
            == (platform.os.as_str(), platform.architecture.as_str(), &platform.variant),
        "config platform differs from the index entry"
    );
    ensure!(config.rootfs.kind == "layers", "rootfs type {}", config.rootfs.kind);
    ensure!(config.rootfs.diff_ids.len() == manifest.layers.len(), "diff_ids and layers differ in number");
    let mut layers = Vec::new();
    for (l, diff_id) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        ensure!(l.media_type == MEDIA_LAYER, "layer is {}", l.media_type);
        let raw = tar::gunzip(blob(l)?)?;
        ensure!(sha256(&raw) == *diff_id, "layer {} does not match its diff_id {diff_id}", l.digest);
        layers.push(tar::read(&raw)?);
    }
    let docker: Vec<DockerManifest> = parse("manifest.json", file("manifest.json")?)?;
    let [d] = docker.as_slice() else { bail!("manifest.json must list exactly one image") };
    let path = |x: &Descriptor| format!("blobs/sha256/{}", x.digest.trim_start_matches("sha256:"));
    ensure!(d.config == path(&manifest.config), "manifest.json names another config");
    ensure!(d.layers == manifest.layers.iter().map(path).collect::<Vec<_>>(), "manifest.json names other layers");
    ensure!(d.repo_tags == [reference.clone()], "manifest.json tags {:?}, index says {reference}", d.repo_tags);
    Ok(Verified { reference, manifest_digest: entry.digest.clone(), platform, config, layers })
}
