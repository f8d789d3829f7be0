//! NA-8/NA-9: pod volumes resolved to host paths, and their files written once at start.
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::env::{field_value, resource_value};
use super::mounts::MountKind;

/// Where the API credentials appear for pods that declare no token volume.
pub const SA_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Name of the volume synthesised for [`SA_MOUNT_PATH`].
pub const SA_VOLUME: &str = "kopiur-testnode-api-access";

#[derive(Debug, Clone)]
pub struct ResolvedVolume {
    pub host_path: PathBuf,
    pub kind: MountKind,
    /// Forced read-only (PVC `readOnly`, secret-like volumes are still writable by root).
    pub read_only: bool,
    pub source: VolumeSource,
}

/// Where a volume's content comes from: this decides whether the fsGroup applies (NA-11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeSource {
    /// A disk-backed emptyDir the agent made for this pod.
    EmptyDir,
    /// `medium: Memory`: a tmpfs (mode 1777) mounted in each container's namespace.
    MemoryEmptyDir,
    /// secret, configMap, downwardAPI, projected and the synthesised token volume: files
    /// the agent writes for this pod.
    Generated,
    /// A PVC whose PV is a `hostPath` PV (what the provisioner makes): the user's data.
    HostPathPv,
    /// A PVC whose PV is a `local` PV: the user's data.
    LocalPv,
    /// A `hostPath` volume: the node's data.
    HostPath,
}

/// How the fsGroup is applied to one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsGroupTarget {
    pub volume: String,
    pub path: PathBuf,
    /// Group read-write (emptyDir, local PV) or group read (generated files).
    pub writable: bool,
}

/// Whether any container of the pod (init, regular or ephemeral) mounts `volume` read-only.
pub fn mounted_read_only(pod: &Pod, volume: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let mounts = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .chain(spec.ephemeral_containers.iter().flatten().flat_map(|c| c.volume_mounts.iter().flatten()));
    mounts.into_iter().any(|m| m.name == volume && m.read_only == Some(true))
}

/// NA-11: the volumes the pod's fsGroup is applied to, in name order.
///
/// As the kubelet's volume plugins do: emptyDir (group rwX, setgid) and the agent-written
/// secret/configMap/downwardAPI/projected volumes (group r) always; hostPath volumes and PVCs
/// on hostPath PVs never. A PVC on a `local` PV (which the kubelet does manage) only when
/// neither the pod volume nor any container's mount is read-only: stricter than the kubelet
/// (which looks at the pod volume's `readOnly` only), so that the agent never rewrites data a
/// container only reads. Memory emptyDirs are fresh tmpfs mounts per container and are left
/// alone.
pub fn fs_group_targets(pod: &Pod, vols: &HashMap<String, ResolvedVolume>) -> Vec<FsGroupTarget> {
    let fs_group = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|s| s.fs_group);
    if fs_group.is_none() {
        return vec![];
    }
    let mut names: Vec<&String> = vols.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let v = &vols[name];
            let writable = match v.source {
                VolumeSource::EmptyDir => true,
                VolumeSource::Generated => false,
                VolumeSource::LocalPv if !v.read_only && !mounted_read_only(pod, name) => true,
                VolumeSource::LocalPv | VolumeSource::HostPathPv | VolumeSource::HostPath => return None,
                VolumeSource::MemoryEmptyDir => return None,
            };
            Some(FsGroupTarget { volume: name.clone(), path: v.host_path.clone(), writable })
        })
        .collect()
}

/// `<state>/pods/<uid>`: per-pod scratch (volumes, termination files); removed at deletion.
pub fn pod_dir(state_dir: &Path, uid: &str) -> PathBuf {
    state_dir.join("pods").join(uid)
}

fn volume_dir(state_dir: &Path, uid: &str, name: &str) -> PathBuf {
    pod_dir(state_dir, uid).join("volumes").join(name)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub struct VolumeCtx<'a> {
    pub client: &'a Client,
    pub state_dir: &'a Path,
    pub ca_pem: Option<&'a str>,
    /// Keep the pod pending while the ServiceAccount token cannot be issued.
    pub wait_for_service_account: bool,
}

/// Resolves every volume of the pod. `Err` is a message for a pod that must stay
/// Pending (unbound PVC, missing non-optional Secret/ConfigMap, API errors).
pub async fn prepare(ctx: &VolumeCtx<'_>, pod: &Pod) -> Result<HashMap<String, ResolvedVolume>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
    let mut out = HashMap::new();
    for v in spec.volumes.iter().flatten() {
        let dir = volume_dir(ctx.state_dir, &uid, &v.name);
        let resolved = if let Some(pvc) = &v.persistent_volume_claim {
            let (host, source) = pvc_host_path(ctx.client, &ns, &pvc.claim_name).await?;
            ResolvedVolume { host_path: host, kind: MountKind::Bind, read_only: pvc.read_only.unwrap_or(false), source }
        } else if let Some(ed) = &v.empty_dir {
            mkdir(&dir, 0o777)?;
            let (kind, source) = if ed.medium.as_deref() == Some("Memory") {
                (MountKind::Tmpfs, VolumeSource::MemoryEmptyDir)
            } else {
                (MountKind::Bind, VolumeSource::EmptyDir)
            };
            ResolvedVolume { host_path: dir, kind, read_only: false, source }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = fetch_secret(ctx.client, &ns, &name).await?;
            fresh_dir(&dir)?;
            match data {
                Some(d) => write_keys(&dir, &d, s.items.as_deref(), s.default_mode, "Secret", &ns, &name, s.optional)?,
                None if s.optional.unwrap_or(false) => {}
                None => return Err(format!("secret \"{name}\" not found")),
            }
            ResolvedVolume { host_path: dir, kind: MountKind::Bind, read_only: false, source: VolumeSource::Generated }
        } else if let Some(c) = &v.config_map {
            let data = fetch_config_map(ctx.client, &ns, &c.name).await?;
            fresh_dir(&dir)?;
            match data {
                Some(d) => {
                    write_keys(&dir, &d, c.items.as_deref(), c.default_mode, "ConfigMap", &ns, &c.name, c.optional)?
                }
                None if c.optional.unwrap_or(false) => {}
                None => return Err(format!("configmap \"{}\" not found", c.name)),
            }
            ResolvedVolume { host_path: dir, kind: MountKind::Bind, read_only: false, source: VolumeSource::Generated }
        } else if let Some(d) = &v.downward_api {
            fresh_dir(&dir)?;
            write_downward(&dir, pod, d.items.as_deref().unwrap_or_default(), d.default_mode)?;
            ResolvedVolume { host_path: dir, kind: MountKind::Bind, read_only: false, source: VolumeSource::Generated }
        } else if let Some(p) = &v.projected {
            fresh_dir(&dir)?;
            for src in p.sources.iter().flatten() {
                if let Some(s) = &src.secret {
                    match fetch_secret(ctx.client, &ns, &s.name).await? {
                        Some(d) => write_keys(
                            &dir,
                            &d,
                            s.items.as_deref(),
                            p.default_mode,
                            "Secret",
                            &ns,
                            &s.name,
                            s.optional,
                        )?,
                        None if s.optional.unwrap_or(false) => {}
                        None => return Err(format!("secret \"{}\" not found", s.name)),
                    }
                }
                if let Some(c) = &src.config_map {
                    match fetch_config_map(ctx.client, &ns, &c.name).await? {
                        Some(d) => write_keys(
                            &dir,
                            &d,
                            c.items.as_deref(),
                            p.default_mode,
                            "ConfigMap",
                            &ns,
                            &c.name,
                            c.optional,
                        )?,
                        None if c.optional.unwrap_or(false) => {}
                        None => return Err(format!("configmap \"{}\" not found", c.name)),
                    }
                }
                if let Some(d) = &src.downward_api {
                    write_downward(&dir, pod, d.items.as_deref().unwrap_or_default(), p.default_mode)?;
                }
                if let Some(t) = &src.service_account_token {
                    let token = request_token(
                        ctx.client,
                        pod,
                        t.audience.iter().cloned().collect(),
                        t.expiration_seconds.unwrap_or(3600),
                    )
                    .await?;
                    write_file(&dir, &t.path, token.as_bytes(), p.default_mode.unwrap_or(0o644))?;
                }
            }
            ResolvedVolume { host_path: dir, kind: MountKind::Bind, read_only: false, source: VolumeSource::Generated }
        } else if let Some(h) = &v.host_path {
            let path = PathBuf::from(&h.path);
            match h.type_.as_deref() {
                Some("DirectoryOrCreate") => mkdir(&path, 0o755)?,
                Some("FileOrCreate") if !path.exists() => {
                    if let Some(p) = path.parent() {
                        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
                    }
                    std::fs::File::create(&path).map_err(|e| e.to_string())?;
                }
                Some("Directory") if !path.is_dir() => {
                    return Err(format!("hostPath type check failed: {} is not a directory", h.path));
                }
                _ => {}
            }
            ResolvedVolume { host_path: path, kind: MountKind::Bind, read_only: false, source: VolumeSource::HostPath }
        } else {
            return Err(format!("volume {:?}: unsupported volume type", v.name));
        };
        out.insert(v.name.clone(), resolved);
    }

    if wants_default_token(pod) {
        let dir = volume_dir(ctx.state_dir, &uid, SA_VOLUME);
        fresh_dir(&dir)?;
        // Without a ServiceAccount there is no token; the pod still runs, as an
        // unauthenticated client would.
        match request_token(ctx.client, pod, vec![], 3600).await {
            Ok(token) => {
                write_file(&dir, "token", token.as_bytes(), 0o644)?;
                write_file(&dir, "namespace", ns.as_bytes(), 0o644)?;
                if let Some(ca) = ctx.ca_pem {
                    write_file(&dir, "ca.crt", ca.as_bytes(), 0o644)?;
                }
                out.insert(
                    SA_VOLUME.into(),
                    ResolvedVolume {
                        host_path: dir,
                        kind: MountKind::Bind,
                        read_only: true,
                        source: VolumeSource::Generated,
                    },
                );
            }
            // A new namespace gets its `default` ServiceAccount from the kcm a moment later:
            // wait for it for a while, as admission would have.
            Err(e) if ctx.wait_for_service_account => return Err(e),
            Err(e) => tracing::info!(pod = ?pod.metadata.name, "running without an API token: {e}"),
        }
    }
    Ok(out)
}

/// A token is mounted unless disabled or some container already mounts that path.
fn wants_default_token(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    if spec.automount_service_account_token == Some(false) {
        return false;
    }
    let mounts_it = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| Path::new(&m.mount_path) == Path::new(SA_MOUNT_PATH));
    !mounts_it
}

async fn pvc_host_path(client: &Client, ns: &str, claim: &str) -> Result<(PathBuf, VolumeSource), String> {
    let pvc = match Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).get_opt(claim).await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(format!("persistentvolumeclaim \"{claim}\" not found")),
        Err(e) => return Err(format!("getting persistentvolumeclaim \"{claim}\": {e}")),
    };
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(pv_name) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|_| bound) else {
        return Err(format!("persistentvolumeclaim \"{claim}\" is not bound"));
    };
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .map_err(|e| format!("getting persistentvolume {pv_name:?}: {e}"))?;
    let spec = pv.spec.unwrap_or_default();
    let (path, source) = match (spec.host_path, spec.local) {
        (Some(h), _) => (h.path, VolumeSource::HostPathPv),
        (None, Some(l)) => (l.path, VolumeSource::LocalPv),
        (None, None) => return Err(format!("persistentvolume {pv_name:?} has no hostPath")),
    };
    Ok((PathBuf::from(path), source))
}

/// Secret data as strings; `None` when the Secret does not exist.
pub async fn fetch_secret(client: &Client, ns: &str, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    match Api::<Secret>::namespaced(client.clone(), ns).get_opt(name).await {
        Ok(Some(s)) => {
            let mut m: BTreeMap<String, Vec<u8>> =
                s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                m.insert(k, v.into_bytes());
            }
            Ok(Some(m))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(format!("getting secret {name:?}: {e}")),
    }
}

pub async fn fetch_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    match Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(name).await {
        Ok(Some(c)) => {
            let mut m: BTreeMap<String, Vec<u8>> =
                c.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
            for (k, v) in c.binary_data.unwrap_or_default() {
                m.insert(k, v.0);
            }
            Ok(Some(m))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(format!("getting configmap {name:?}: {e}")),
    }
}

/// TokenRequest for the pod's ServiceAccount, bound to the pod.
async fn request_token(client: &Client, pod: &Pod, audiences: Vec<String>, expiration: i64) -> Result<String, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let named = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).filter(|s| !s.is_empty());
    let sa = named.clone().unwrap_or_else(|| "default".into());
    // The apiserver binds a token to a pod only if the pod names that ServiceAccount, which
    // needs the ServiceAccount admission plugin (disabled here) to fill in `default`.
    let bound_object_ref = named.map(|_| BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
    });
    let req = TokenRequest {
        spec: TokenRequestSpec { audiences, expiration_seconds: Some(expiration.max(600)), bound_object_ref },
        ..Default::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let resp: TokenRequest = api.create_subresource("token", &sa, &PostParams::default(), &req).await.map_err(|e| {
        if is_not_found(&e) { format!("serviceaccount \"{sa}\" not found") } else { format!("token request: {e}") }
    })?;
    resp.status.map(|s| s.token).ok_or_else(|| "token request returned no token".into())
}

fn mkdir(dir: &Path, mode: u32) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())
}

/// Secret-like volumes are rewritten from scratch on each (re)start.
fn fresh_dir(dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    mkdir(dir, 0o755)
}

#[allow(clippy::too_many_arguments)]
fn write_keys(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    kind: &str,
    ns: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<(), String> {
    let mode = default_mode.unwrap_or(0o644) as u32;
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => write_file(dir, &it.path, v, it.mode.map(|m| m as u32).unwrap_or(mode) as i32)?,
                    None if optional.unwrap_or(false) => {}
                    None => {
                        return Err(format!("couldn't find key {} in {kind} {ns}/{name}", it.key));
                    }
                }
            }
        }
        _ => {
            for (k, v) in data {
                write_file(dir, k, v, mode as i32)?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    dir: &Path,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
) -> Result<(), String> {
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            field_value(pod, &f.field_path).ok_or_else(|| format!("unsupported fieldRef {:?}", f.field_path))?
        } else if let Some(r) = &it.resource_field_ref {
            let c = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| Some(&c.name) == r.container_name.as_ref()))
                .cloned()
                .unwrap_or_default();
            resource_value(&c, &r.resource, r.divisor.as_ref().map(|q| q.0.as_str()))
                .ok_or_else(|| format!("unsupported resourceFieldRef {:?}", r.resource))?
        } else {
            continue;
        };
        write_file(dir, &it.path, value.as_bytes(), it.mode.or(default_mode).unwrap_or(0o644))?;
    }
    Ok(())
}

/// Writes `rel` under `dir`; refuses paths that escape it.
fn write_file(dir: &Path, rel: &str, data: &[u8], mode: i32) -> Result<(), String> {
    let rel_path = Path::new(rel);
    if rel_path.is_absolute() || rel_path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("invalid volume file path {rel:?}"));
    }
    let path = dir.join(rel_path);
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
    }
    std::fs::write(&path, data).map_err(|e| format!("writing {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode as u32 & 0o7777)).map_err(|e| e.to_string())
}

/// `fsGroupChangePolicy: OnRootMismatch`: the walk is skipped when the volume's root already
/// has the group, the setgid bit and the group permissions the walk would give it.
pub fn root_matches(root: &Path, gid: u32, writable: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(root) else { return false };
    let need = if writable { 0o070 } else { 0o050 };
    md.gid() == gid && md.mode() & 0o2000 != 0 && md.mode() & need == need
}

/// NA-11: gives a volume to the fsGroup: group-owned, setgid directories, and group
/// read (plus write for `writable` volumes such as emptyDir) wherever the owner has it.
/// Only for the volumes [`fs_group_targets`] picks.
pub fn apply_fs_group(root: &Path, gid: u32, writable: bool) {
    fn walk(p: &Path, gid: u32, writable: bool) {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return;
        };
        if md.file_type().is_symlink() {
            return;
        }
        let _ = std::os::unix::fs::lchown(p, None, Some(gid));
        let mut mode = md.permissions().mode() & 0o7777;
        let owner = (mode >> 6) & 0o7;
        let mut group = owner & if writable { 0o7 } else { 0o5 };
        if md.is_dir() {
            group |= if writable { 0o7 } else { 0o5 };
            mode |= 0o2000;
        }
        mode |= group << 3;
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        if md.is_dir()
            && let Ok(rd) = std::fs::read_dir(p)
        {
            for e in rd.flatten() {
                walk(&e.path(), gid, writable);
            }
        }
    }
    walk(root, gid, writable);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_items_and_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let data: BTreeMap<String, Vec<u8>> =
            [("a".to_string(), b"1".to_vec()), ("b".to_string(), b"2".to_vec())].into();
        write_keys(tmp.path(), &data, None, Some(0o400), "Secret", "ns", "s", None).unwrap();
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"1");
        let mode = std::fs::metadata(tmp.path().join("b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o400);

        let sub = tmp.path().join("items");
        std::fs::create_dir(&sub).unwrap();
        let items = vec![KeyToPath { key: "b".into(), path: "dir/bee".into(), mode: Some(0o600) }];
        write_keys(&sub, &data, Some(&items), None, "Secret", "ns", "s", None).unwrap();
        assert!(!sub.join("a").exists());
        assert_eq!(std::fs::read(sub.join("dir/bee")).unwrap(), b"2");
        let missing = vec![KeyToPath { key: "zz".into(), path: "z".into(), mode: None }];
        let err = write_keys(&sub, &data, Some(&missing), None, "Secret", "ns", "s", None).unwrap_err();
        assert!(err.contains("couldn't find key zz"));
        write_keys(&sub, &data, Some(&missing), None, "Secret", "ns", "s", Some(true)).unwrap();
        assert!(write_file(&sub, "../escape", b"x", 0o644).is_err());
    }

    fn vol(path: &str, source: VolumeSource, read_only: bool) -> ResolvedVolume {
        let kind = if source == VolumeSource::MemoryEmptyDir { MountKind::Tmpfs } else { MountKind::Bind };
        ResolvedVolume { host_path: PathBuf::from(path), kind, read_only, source }
    }

    fn pod_with(fs_group: Option<i64>, mounts: serde_json::Value, init_mounts: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "securityContext": {"fsGroup": fs_group},
                "initContainers": [{"name": "i", "volumeMounts": init_mounts}],
                "containers": [{"name": "c", "volumeMounts": mounts}],
            },
        }))
        .unwrap()
    }

    fn targets(pod: &Pod, vols: &HashMap<String, ResolvedVolume>) -> Vec<(String, bool)> {
        fs_group_targets(pod, vols).into_iter().map(|t| (t.volume, t.writable)).collect()
    }

    #[test]
    fn fs_group_only_where_a_kubelet_manages_ownership() {
        use VolumeSource::*;
        let vols: HashMap<String, ResolvedVolume> = [
            ("empty", vol("/s/empty", EmptyDir, false)),
            ("mem", vol("", MemoryEmptyDir, false)),
            ("creds", vol("/s/creds", Generated, false)),
            ("hostpv", vol("/s/pv/a", HostPathPv, false)),
            ("hostpv-ro", vol("/s/pv/b", HostPathPv, true)),
            ("local", vol("/mnt/local", LocalPv, false)),
            ("local-ro-pod", vol("/mnt/local2", LocalPv, true)),
            ("local-ro-mount", vol("/mnt/local3", LocalPv, false)),
            ("local-ro-init", vol("/mnt/local4", LocalPv, false)),
            ("host", vol("/var/lib/x", HostPath, false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mounts = serde_json::json!([
            {"name": "empty", "mountPath": "/e"},
            {"name": "creds", "mountPath": "/c", "readOnly": true},
            {"name": "hostpv", "mountPath": "/d"},
            {"name": "local", "mountPath": "/l"},
            {"name": "local-ro-mount", "mountPath": "/l3", "readOnly": true},
            {"name": "local-ro-init", "mountPath": "/l4"},
            {"name": "host", "mountPath": "/h"},
        ]);
        let init = serde_json::json!([{"name": "local-ro-init", "mountPath": "/l4", "readOnly": true}]);
        let pod = pod_with(Some(2000), mounts.clone(), init.clone());
        assert_eq!(
            targets(&pod, &vols),
            vec![("creds".to_string(), false), ("empty".to_string(), true), ("local".to_string(), true)],
            "never hostPath, hostPath PVs, memory emptyDirs or anything mounted read-only"
        );
        let t = fs_group_targets(&pod, &vols);
        assert_eq!(t[1].path, PathBuf::from("/s/empty"));
        // No fsGroup, nothing at all.
        assert!(fs_group_targets(&pod_with(None, mounts, init), &vols).is_empty());
    }

    #[test]
    fn read_only_mounts_by_any_container() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "volumeMounts": [{"name": "v", "mountPath": "/v"}, {"name": "w", "mountPath": "/w", "readOnly": false}]},
                    {"name": "b", "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true}]},
                ],
                "ephemeralContainers": [{"name": "dbg", "volumeMounts": [{"name": "x", "mountPath": "/x", "readOnly": true}]}],
            },
        }))
        .unwrap();
        assert!(mounted_read_only(&pod, "v"), "read-only in one container is enough");
        assert!(!mounted_read_only(&pod, "w"));
        assert!(mounted_read_only(&pod, "x"));
        assert!(!mounted_read_only(&pod, "missing"));
    }

    #[test]
    fn on_root_mismatch_check() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("v");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        use std::os::unix::fs::MetadataExt;
        let gid = std::fs::metadata(&d).unwrap().gid();
        assert!(!root_matches(&d, gid, false), "no setgid bit yet");
        apply_fs_group(&d, gid, true);
        assert!(root_matches(&d, gid, true));
        assert!(!root_matches(&d, gid + 1, true), "another group");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2755)).unwrap();
        assert!(root_matches(&d, gid, false));
        assert!(!root_matches(&d, gid, true), "group cannot write");
        assert!(!root_matches(&tmp.path().join("missing"), gid, false));
    }

    #[test]
    fn fs_group_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let ro = tmp.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        write_file(&ro, "secret", b"x", 0o400).unwrap();
        apply_fs_group(&ro, 4242, false);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&ro.join("secret")), 0o440);
        assert_eq!(mode(&ro) & 0o2070, 0o2050);
        let rw = tmp.path().join("rw");
        std::fs::create_dir(&rw).unwrap();
        write_file(&rw, "f", b"x", 0o644).unwrap();
        apply_fs_group(&rw, 4242, true);
        assert_eq!(mode(&rw.join("f")), 0o664);
        assert_eq!(mode(&rw) & 0o2070, 0o2070);
        use std::os::unix::fs::MetadataExt;
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(std::fs::metadata(rw.join("f")).unwrap().gid(), 4242);
        }
    }
}
