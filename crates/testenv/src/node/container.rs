//! Turning one container spec into a launch: image map, env, argv, mounts, identity.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Ctx;
use super::env::{EnvSources, expand, referenced_sources, resolve_env};
use super::imagemap::{ImageMap, effective_argv, resolve_executable};
use super::mounts::{ExecPlan, MountKind, MountSpec};
use super::volumes::{self, ResolvedVolume, SA_MOUNT_PATH, SA_VOLUME};

pub const DEFAULT_TERMINATION_PATH: &str = "/dev/termination-log";

/// Why a container could not be started.
#[derive(Debug, Clone, PartialEq)]
pub enum StartFail {
    /// Stay `waiting` with this reason and retry later (ErrImagePull, CreateContainerConfigError).
    Waiting { reason: String, message: String },
    /// The runtime failed to start it: reported as terminated, exit 128, reason StartError.
    StartError(String),
}

pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub plan: ExecPlan,
}

fn config_error(message: impl Into<String>) -> StartFail {
    StartFail::Waiting { reason: "CreateContainerConfigError".into(), message: message.into() }
}

/// Identity from the pod and container security contexts (NA-11).
/// (uid, gid, supplementary groups, fsGroup). The fsGroup is always a supplementary group,
/// as with a kubelet; which volumes it is applied to is [`volumes::fs_group_targets`].
pub type Identity = (Option<u32>, Option<u32>, Option<Vec<u32>>, Option<u32>);

pub fn identity(pod: &Pod, c: &Container) -> Result<Identity, String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let uid = csc.and_then(|s| s.run_as_user).or(psc.and_then(|s| s.run_as_user));
    let gid = csc.and_then(|s| s.run_as_group).or(psc.and_then(|s| s.run_as_group));
    let non_root = csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root));
    if non_root == Some(true) && uid.unwrap_or(0) == 0 {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    let fs_group = psc.and_then(|s| s.fs_group).map(|g| g as u32);
    let supplemental: Vec<u32> =
        psc.and_then(|s| s.supplemental_groups.clone()).unwrap_or_default().into_iter().map(|g| g as u32).collect();
    let groups = if uid.is_some() || gid.is_some() || fs_group.is_some() || !supplemental.is_empty() {
        let mut g: Vec<u32> = fs_group.into_iter().chain(supplemental).collect();
        g.sort();
        g.dedup();
        Some(g)
    } else {
        None
    };
    // A numeric user without a group runs with group 0, as in an image without /etc/passwd.
    let gid = match (uid, gid) {
        (Some(_), None) => Some(0),
        (_, g) => g.map(|g| g as u32),
    };
    Ok((uid.map(|u| u as u32), gid, groups, fs_group))
}

fn lossy(m: Option<BTreeMap<String, Vec<u8>>>) -> Option<BTreeMap<String, String>> {
    m.map(|m| m.into_iter().map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned())).collect())
}

/// Everything needed to start `c`, or why not.
pub async fn prepare_launch(
    ctx: &Ctx,
    pod: &Pod,
    c: &Container,
    vols: &HashMap<String, ResolvedVolume>,
    termination_file: &Path,
) -> Result<Launch, StartFail> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let image = c.image.clone().unwrap_or_default();

    let map = ImageMap::load(&ctx.cfg.image_map).map_err(|e| StartFail::Waiting {
        reason: "ErrImagePull".into(),
        message: format!("Failed to pull image \"{image}\": {e}"),
    })?;
    let Some(entry) = map.lookup(&image) else {
        return Err(StartFail::Waiting {
            reason: "ErrImagePull".into(),
            message: format!("Failed to pull image \"{image}\": no local executable is mapped for this image"),
        });
    };

    let (uid, gid, groups, _fs_group) = identity(pod, c).map_err(config_error)?;

    let (secret_names, cm_names) = referenced_sources(c);
    let mut sources = EnvSources::default();
    for s in secret_names {
        let data = volumes::fetch_secret(&ctx.client, &ns, &s).await.map_err(config_error)?;
        sources.secrets.insert(s, lossy(data));
    }
    for m in cm_names {
        let data = volumes::fetch_config_map(&ctx.client, &ns, &m).await.map_err(config_error)?;
        sources.config_maps.insert(m, lossy(data));
    }
    let env = resolve_env(pod, c, &sources, ctx.cfg.apiserver_port, &ctx.host_path).map_err(config_error)?;
    let lookup = |n: &str| env.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());

    let command: Vec<String> = c.command.clone().unwrap_or_default();
    let mut argv: Vec<String> =
        effective_argv(entry, &command, c.args.as_deref()).iter().map(|a| expand(a, lookup)).collect();
    if argv.is_empty() {
        return Err(StartFail::StartError(format!("no command for image \"{image}\"")));
    }
    let path_var = lookup("PATH").unwrap_or_else(|| ctx.host_path.clone());
    match resolve_executable(&argv[0], &path_var) {
        Some(p) => argv[0] = p.to_string_lossy().into_owned(),
        None => {
            return Err(StartFail::StartError(format!("exec: \"{}\": executable file not found in $PATH", argv[0])));
        }
    }

    let mut mounts = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        let Some(vol) = vols.get(&vm.name) else {
            return Err(config_error(format!(
                "cannot find volume \"{}\" to mount into container \"{}\"",
                vm.name, c.name
            )));
        };
        // The process node shares the host's root filesystem, and the binaries it runs (and
        // test wrappers such as a kopia audit script) may live under the host's /tmp: a disk
        // emptyDir over /tmp would hide them, so the container writes to the host's /tmp
        // instead (docs/testenv.md, "What the process node does differently").
        if vol.source == volumes::VolumeSource::EmptyDir && Path::new(&vm.mount_path) == Path::new("/tmp") {
            continue;
        }
        let sub = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => Some(s.clone()),
            (_, Some(e)) if !e.is_empty() => Some(expand(e, lookup)),
            _ => None,
        };
        let mut source = vol.host_path.clone();
        if let Some(sub) = sub.filter(|_| vol.kind == MountKind::Bind) {
            let rel = Path::new(&sub);
            if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return Err(config_error(format!("invalid subPath {sub:?}")));
            }
            source = source.join(rel);
            if !source.exists() {
                std::fs::create_dir_all(&source).map_err(|e| StartFail::StartError(format!("subPath: {e}")))?;
            }
        }
        mounts.push(MountSpec {
            source,
            target: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only.unwrap_or(false) || vol.read_only,
            kind: vol.kind,
        });
    }
    if let Some(sa) = vols.get(SA_VOLUME) {
        mounts.push(MountSpec {
            source: sa.host_path.clone(),
            target: SA_MOUNT_PATH.into(),
            read_only: true,
            kind: MountKind::Bind,
        });
    }
    let term_target =
        c.termination_message_path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_TERMINATION_PATH.into());
    mounts.push(MountSpec {
        source: termination_file.to_path_buf(),
        target: PathBuf::from(term_target),
        read_only: false,
        kind: MountKind::Bind,
    });

    let plan = ExecPlan {
        mounts,
        hostname: pod_name,
        uid,
        gid,
        groups,
        cwd: c.working_dir.clone().filter(|w| !w.is_empty()).map(PathBuf::from),
    };
    Ok(Launch { argv, env, plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};

    fn pod(psc: Option<PodSecurityContext>) -> Pod {
        Pod { spec: Some(PodSpec { security_context: psc, ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn identity_rules() {
        let c = Container::default();
        assert_eq!(identity(&pod(None), &c).unwrap(), (None, None, None, None));
        let p = pod(Some(PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            supplemental_groups: Some(vec![3000]),
            ..Default::default()
        }));
        assert_eq!(identity(&p, &c).unwrap(), (Some(1000), Some(0), Some(vec![2000, 3000]), Some(2000)));
        let c2 = Container {
            security_context: Some(SecurityContext {
                run_as_user: Some(7),
                run_as_group: Some(8),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(identity(&p, &c2).unwrap().0, Some(7));
        assert_eq!(identity(&p, &c2).unwrap().1, Some(8));
        let nonroot = pod(Some(PodSecurityContext { run_as_non_root: Some(true), ..Default::default() }));
        assert!(identity(&nonroot, &c).is_err());
        let nonroot_ok =
            pod(Some(PodSecurityContext { run_as_non_root: Some(true), run_as_user: Some(5), ..Default::default() }));
        assert!(identity(&nonroot_ok, &c).is_ok());
    }
}
