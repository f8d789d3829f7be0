//! The mover settings of one Job, merged field by field from lowest to highest: the hardened
//! base (`kopiur_mover::job`), the repository's `moverDefaults`, then the recipe's `mover`
//! (spec/api.md §2.6 "Merge order"). Every Job kind takes its settings from here, so a field
//! the API accepts takes effect in every Job, or the run is refused with a message saying why.
//!
//! What this build applies: `resources`, `securityContext`, `podSecurityContext`, `cache`
//! (`Ephemeral` with or without `capacity`, the two cache sizes), `nodeSelector`,
//! `tolerations`, `affinity` and `ttlSecondsAfterFinished`.
//!
//! A mover is privileged when it would run as root, `privileged`, with privilege escalation,
//! an added capability, a `capabilities.drop` without `ALL`, an unconfined seccomp profile, or
//! `privilegedMode`. Backups and restores may be privileged only in a namespace annotated
//! `kopiur.home-operations.com/privileged-movers: "true"`; otherwise, and for every other Job
//! kind, the run waits (`PrivilegedMoverNotPermitted`). `privilegedMode` runs the mover as uid
//! 0 with every capability dropped except what the operation needs: `DAC_READ_SEARCH` for a
//! backup (read every file), `CHOWN`, `FOWNER` and `DAC_OVERRIDE` for a restore (write files
//! with their recorded owners and modes). Refused as not built: `inheritSecurityContextFrom`
//! and the `Persistent` cache mode (`FeatureNotImplemented`).
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Namespace, PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
};
use kopiur_api::names::reason;
use kopiur_api::shared::mover::{CacheMode, CacheSpec, MoverDefaults, MoverSpec};
use kopiur_kopia::cmd::CacheSizes;
use kopiur_mover::job::{CacheVolume, JobInput, MOVER_UID, merge_container_overlays, merge_pod_overlays};

/// What the mover Job does, which decides the capabilities `privilegedMode` grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoverOp {
    /// A backup: may be privileged (reads every file with `DAC_READ_SEARCH`).
    Backup,
    /// A restore: may be privileged (`CHOWN`, `FOWNER`, `DAC_OVERRIDE` to keep owners and modes).
    Restore,
    /// Probe, bootstrap, batch delete, maintenance, replication: never privileged.
    Other,
}

impl MoverOp {
    /// The capabilities a `privilegedMode` mover of this kind gets, and nothing more.
    pub fn privileged_capabilities(self) -> &'static [&'static str] {
        match self {
            MoverOp::Backup => &["DAC_READ_SEARCH"],
            MoverOp::Restore => &["CHOWN", "FOWNER", "DAC_OVERRIDE"],
            MoverOp::Other => &[],
        }
    }
}

/// Whether `namespace` opts in to privileged movers (`kopiur.home-operations.com/privileged-movers: "true"`).
pub fn permits_privileged(ns: &Namespace) -> bool {
    ns.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kopiur_api::names::annotation::PRIVILEGED_MOVERS))
        .map(String::as_str)
        == Some("true")
}

/// Reads the namespace's opt-in; a namespace that cannot be read does not opt in (fail closed).
pub async fn namespace_permits_privileged(client: &kube::Client, ns: &str) -> bool {
    match kube::Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(Some(n)) => permits_privileged(&n),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(namespace = ns, error = %e, "reading the namespace for the privileged-movers annotation failed");
            false
        }
    }
}

/// The `MoverPermitted` condition (spec/api.md §2.6): False while privileged settings wait for
/// the namespace's opt-in, True while a run may start with its settings; `None` leaves the
/// condition as it was (terminal phases, other refusals).
pub fn permitted_condition(refused: Option<(&str, &str)>, may_start: bool) -> Option<crate::health::kstatus::Cond> {
    use crate::health::kstatus::{Cond, CondStatus};
    let type_ = kopiur_api::names::condition::MOVER_PERMITTED;
    match refused {
        Some((r, m)) if r == reason::PRIVILEGED_MOVER_NOT_PERMITTED => {
            Some(Cond { type_, status: CondStatus::False, reason: r.into(), message: m.into() })
        }
        None if may_start => Some(Cond {
            type_,
            status: CondStatus::True,
            reason: "MoverPermitted".into(),
            message: "the mover's settings are permitted in this namespace".into(),
        }),
        _ => None,
    }
}

/// Why a mover Job is not created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The condition reason (`PrivilegedMoverNotPermitted` or `FeatureNotImplemented`).
    pub reason: &'static str,
    pub message: String,
}

/// Everything the settings change in a Job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MoverSettings {
    pub resources: Option<ResourceRequirements>,
    /// The merged container overlay (applied on the hardened base by the Job builder).
    pub security_context: Option<SecurityContext>,
    /// The merged pod overlay, starting from the mover's own uid/gid.
    pub pod_security_context: Option<PodSecurityContext>,
    pub cache: Option<CacheSpec>,
    pub node_selector: Option<std::collections::BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub affinity: Option<Affinity>,
    pub ttl_seconds_after_finished: Option<i64>,
}

/// The mover's own uid/gid, named so `runAsNonRoot` is verifiable without image metadata.
fn mover_identity() -> PodSecurityContext {
    PodSecurityContext { run_as_user: Some(MOVER_UID), run_as_group: Some(MOVER_UID), ..Default::default() }
}

/// Overlays `upper` onto `lower` field by field (a cache block is merged field by field too).
fn merge_cache(lower: Option<&CacheSpec>, upper: Option<&CacheSpec>) -> Option<CacheSpec> {
    match (lower, upper) {
        (None, None) => None,
        (Some(c), None) | (None, Some(c)) => Some(c.clone()),
        (Some(l), Some(u)) => Some(CacheSpec {
            capacity: u.capacity.clone().or_else(|| l.capacity.clone()),
            storage_class_name: u.storage_class_name.clone().or_else(|| l.storage_class_name.clone()),
            metadata_cache_size_mb: u.metadata_cache_size_mb.or(l.metadata_cache_size_mb),
            content_cache_size_mb: u.content_cache_size_mb.or(l.content_cache_size_mb),
            mode: u.mode.or(l.mode),
        }),
    }
}

/// Resolves the settings of one Job. `recipe` is `None` for Jobs that only the repository
/// configures (probe, bootstrap, batch delete).
/// `privileged_permitted` is the namespace's opt-in (`permits_privileged`); it matters only for
/// [`MoverOp::Backup`] and [`MoverOp::Restore`].
pub fn resolve(
    defaults: Option<&MoverDefaults>,
    recipe: Option<&MoverSpec>,
    op: MoverOp,
    privileged_permitted: bool,
) -> Result<MoverSettings, Refusal> {
    let identity = mover_identity();
    let mut s = MoverSettings {
        resources: recipe.and_then(|r| r.resources.clone()).or_else(|| defaults.and_then(|d| d.resources.clone())),
        security_context: merge_container_overlays([
            defaults.and_then(|d| d.security_context.as_ref()),
            recipe.and_then(|r| r.security_context.as_ref()),
        ]),
        pod_security_context: merge_pod_overlays([
            Some(&identity),
            defaults.and_then(|d| d.pod_security_context.as_ref()),
            recipe.and_then(|r| r.pod_security_context.as_ref()),
        ]),
        cache: merge_cache(defaults.and_then(|d| d.cache.as_ref()), recipe.and_then(|r| r.cache.as_ref())),
        node_selector: defaults.and_then(|d| d.node_selector.clone()),
        tolerations: defaults.and_then(|d| d.tolerations.clone()),
        affinity: defaults.and_then(|d| d.affinity.clone()),
        ttl_seconds_after_finished: recipe
            .and_then(|r| r.ttl_seconds_after_finished)
            .or_else(|| defaults.and_then(|d| d.ttl_seconds_after_finished)),
    };
    let privileged_mode = recipe.and_then(|r| r.privileged_mode).unwrap_or(false);
    let why = privileged_reasons(&s, privileged_mode);
    if !why.is_empty() {
        let message = match op {
            MoverOp::Other => format!(
                "the mover would be privileged ({}); only backup and restore movers may be privileged, so no Job \
                 is created: remove the setting",
                why.join(", ")
            ),
            MoverOp::Backup | MoverOp::Restore if !privileged_permitted => format!(
                "the mover would be privileged ({}), and this namespace does not allow privileged movers, so no Job \
                 is created: annotate the namespace (kubectl annotate namespace <namespace> \
                 kopiur.home-operations.com/privileged-movers=true), or run the mover as the files' owner instead: \
                 mover.securityContext {{runAsUser: <uid>, runAsGroup: <gid>}}",
                why.join(", ")
            ),
            MoverOp::Backup | MoverOp::Restore => String::new(),
        };
        if !message.is_empty() {
            return Err(Refusal { reason: reason::PRIVILEGED_MOVER_NOT_PERMITTED, message });
        }
    }
    if privileged_mode {
        // Root, with every capability dropped except what this operation needs.
        let sc = s.security_context.get_or_insert_with(Default::default);
        sc.run_as_user = Some(0);
        sc.run_as_non_root = Some(false);
        sc.capabilities = Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: Some(op.privileged_capabilities().iter().map(|c| c.to_string()).collect()),
        });
    }
    if recipe.is_some_and(|r| r.inherit_security_context_from.is_some()) {
        return Err(Refusal {
            reason: reason::FEATURE_NOT_IMPLEMENTED,
            message: "mover.inheritSecurityContextFrom is not implemented in this version, so no Job is created; set \
                      mover.securityContext {runAsUser, runAsGroup} to the workload's uid and gid instead"
                .into(),
        });
    }
    if s.cache.as_ref().is_some_and(|c| c.mode == Some(CacheMode::Persistent)) {
        return Err(Refusal {
            reason: reason::FEATURE_NOT_IMPLEMENTED,
            message: "cache.mode Persistent is not supported by this version, so no Job is created; remove it to \
                      use an emptyDir cache, or set cache.capacity for an ephemeral volume of that size"
                .into(),
        });
    }
    Ok(s)
}

/// What makes the merged settings privileged (spec/api.md §2.6 "Privileged movers"), plus
/// relaxing the seccomp profile, which only a privileged mover may do.
pub fn privileged_reasons(s: &MoverSettings, privileged_mode: bool) -> Vec<String> {
    let mut why = Vec::new();
    if privileged_mode {
        why.push("privilegedMode: true".to_string());
    }
    let c = s.security_context.clone().unwrap_or_default();
    let p = s.pod_security_context.clone().unwrap_or_default();
    if c.run_as_user == Some(0) || (c.run_as_user.is_none() && p.run_as_user == Some(0)) {
        why.push("runAsUser: 0".into());
    }
    if c.run_as_non_root == Some(false) || p.run_as_non_root == Some(false) {
        why.push("runAsNonRoot: false".into());
    }
    if c.privileged == Some(true) {
        why.push("privileged: true".into());
    }
    if c.allow_privilege_escalation == Some(true) {
        why.push("allowPrivilegeEscalation: true".into());
    }
    if let Some(caps) = &c.capabilities {
        if caps.add.as_ref().is_some_and(|a| !a.is_empty()) {
            why.push(format!("capabilities.add: {}", caps.add.clone().unwrap_or_default().join(",")));
        }
        if !caps.drop.as_ref().is_some_and(|d| d.iter().any(|x| x.eq_ignore_ascii_case("ALL"))) {
            why.push("capabilities.drop without ALL".into());
        }
    }
    for (level, sp) in [("container", c.seccomp_profile.as_ref()), ("pod", p.seccomp_profile.as_ref())] {
        if sp.is_some_and(|sp| sp.type_ == "Unconfined") {
            why.push(format!("{level} seccompProfile Unconfined"));
        }
    }
    why
}

impl MoverSettings {
    /// Writes the settings into a Job input. `ttl` is false for Jobs that never get a TTL
    /// (batch deletes, reaped by their dispatcher).
    pub fn apply(&self, input: &mut JobInput, ttl: bool) {
        if self.resources.is_some() {
            input.resources = self.resources.clone();
        }
        input.security_context =
            merge_container_overlays([input.security_context.as_ref(), self.security_context.as_ref()]);
        input.pod_security_context =
            merge_pod_overlays([input.pod_security_context.as_ref(), self.pod_security_context.as_ref()]);
        if let Some(c) = &self.cache {
            if let Some(capacity) = &c.capacity {
                input.cache = CacheVolume::Ephemeral {
                    capacity: capacity.clone(),
                    storage_class_name: c.storage_class_name.clone(),
                };
            }
            input.work_spec.repository.cache = CacheSizes {
                content_mb: c.content_cache_size_mb.map(|v| v.max(0) as u32),
                metadata_mb: c.metadata_cache_size_mb.map(|v| v.max(0) as u32),
            };
        }
        if self.node_selector.is_some() {
            input.node_selector = self.node_selector.clone();
        }
        if self.tolerations.is_some() {
            input.tolerations = self.tolerations.clone();
        }
        if self.affinity.is_some() {
            input.affinity = self.affinity.clone();
        }
        input.ttl_seconds_after_finished = if ttl {
            Some(
                self.ttl_seconds_after_finished
                    .map(|t| t.clamp(0, i32::MAX as i64) as i32)
                    .unwrap_or(kopiur_mover::job::DEFAULT_TTL_SECONDS),
            )
        } else {
            None
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile};

    fn sc(f: impl FnOnce(&mut SecurityContext)) -> Option<SecurityContext> {
        let mut s = SecurityContext::default();
        f(&mut s);
        Some(s)
    }

    #[test]
    fn recipe_overrides_defaults_field_by_field() {
        let d = MoverDefaults {
            security_context: sc(|s| {
                s.run_as_user = Some(999);
                s.run_as_group = Some(999);
            }),
            cache: Some(CacheSpec {
                capacity: Some("2Gi".into()),
                content_cache_size_mb: Some(100),
                ..Default::default()
            }),
            node_selector: Some([("disk".to_string(), "ssd".to_string())].into()),
            ttl_seconds_after_finished: Some(60),
            ..Default::default()
        };
        let r = MoverSpec {
            security_context: sc(|s| s.run_as_user = Some(1000)),
            cache: Some(CacheSpec { metadata_cache_size_mb: Some(50), ..Default::default() }),
            ttl_seconds_after_finished: Some(30),
            ..Default::default()
        };
        let s = resolve(Some(&d), Some(&r), MoverOp::Backup, false).unwrap();
        let c = s.security_context.clone().unwrap();
        assert_eq!((c.run_as_user, c.run_as_group), (Some(1000), Some(999)));
        let cache = s.cache.clone().unwrap();
        assert_eq!(cache.capacity.as_deref(), Some("2Gi"));
        assert_eq!((cache.content_cache_size_mb, cache.metadata_cache_size_mb), (Some(100), Some(50)));
        assert_eq!(s.ttl_seconds_after_finished, Some(30));
        let p = s.pod_security_context.clone().unwrap();
        assert_eq!(p.run_as_user, Some(MOVER_UID), "the pod keeps the mover's identity; the container overrides it");
        assert_eq!(s.node_selector.unwrap()["disk"], "ssd");
    }

    #[test]
    fn privileged_movers_are_refused_naming_why() {
        let cases: Vec<(MoverSpec, &str)> = vec![
            (MoverSpec { privileged_mode: Some(true), ..Default::default() }, "privilegedMode: true"),
            (MoverSpec { security_context: sc(|s| s.run_as_user = Some(0)), ..Default::default() }, "runAsUser: 0"),
            (
                MoverSpec {
                    pod_security_context: Some(PodSecurityContext { run_as_user: Some(0), ..Default::default() }),
                    ..Default::default()
                },
                "runAsUser: 0",
            ),
            (
                MoverSpec { security_context: sc(|s| s.privileged = Some(true)), ..Default::default() },
                "privileged: true",
            ),
            (
                MoverSpec { security_context: sc(|s| s.allow_privilege_escalation = Some(true)), ..Default::default() },
                "allowPrivilegeEscalation: true",
            ),
            (
                MoverSpec {
                    security_context: sc(|s| {
                        s.capabilities = Some(Capabilities {
                            add: Some(vec!["DAC_READ_SEARCH".into()]),
                            drop: Some(vec!["ALL".into()]),
                        })
                    }),
                    ..Default::default()
                },
                "capabilities.add: DAC_READ_SEARCH",
            ),
            (
                MoverSpec {
                    security_context: sc(|s| s.capabilities = Some(Capabilities { add: None, drop: Some(vec![]) })),
                    ..Default::default()
                },
                "capabilities.drop without ALL",
            ),
            (
                MoverSpec {
                    security_context: sc(|s| {
                        s.seccomp_profile = Some(SeccompProfile { type_: "Unconfined".into(), localhost_profile: None })
                    }),
                    ..Default::default()
                },
                "container seccompProfile Unconfined",
            ),
        ];
        for (spec, want) in cases {
            let e = resolve(None, Some(&spec), MoverOp::Backup, false).unwrap_err();
            assert_eq!(e.reason, "PrivilegedMoverNotPermitted");
            assert!(e.message.contains(want), "{want}: {}", e.message);
            assert!(e.message.contains("runAsUser: <uid>"), "{}", e.message);
            assert!(e.message.contains("kopiur.home-operations.com/privileged-movers=true"), "{}", e.message);
            // The namespace's opt-in lets a backup or restore run it; other Jobs never.
            assert!(resolve(None, Some(&spec), MoverOp::Restore, true).is_ok(), "{want}");
            let other = resolve(None, Some(&spec), MoverOp::Other, true).unwrap_err();
            assert!(other.message.contains("only backup and restore movers"), "{}", other.message);
        }
        // A non-root uid of the workload is not privileged.
        assert!(
            resolve(
                None,
                Some(&MoverSpec { security_context: sc(|s| s.run_as_user = Some(999)), ..Default::default() }),
                MoverOp::Other,
                false
            )
            .is_ok()
        );
    }

    #[test]
    fn inherited_identity_is_refused_until_built() {
        let r = MoverSpec {
            inherit_security_context_from: Some(kopiur_api::shared::mover::InheritSecurityContextFrom::Snapshot(
                Default::default(),
            )),
            ..Default::default()
        };
        let e = resolve(None, Some(&r), MoverOp::Backup, true).unwrap_err();
        assert_eq!(e.reason, "FeatureNotImplemented");
        assert!(e.message.contains("inheritSecurityContextFrom") && e.message.contains("runAsUser"), "{}", e.message);
    }

    #[test]
    fn privileged_mode_grants_root_with_only_the_operation_capabilities() {
        let r = MoverSpec { privileged_mode: Some(true), ..Default::default() };
        for (op, caps) in
            [(MoverOp::Backup, vec!["DAC_READ_SEARCH"]), (MoverOp::Restore, vec!["CHOWN", "FOWNER", "DAC_OVERRIDE"])]
        {
            let s = resolve(None, Some(&r), op, true).unwrap();
            let c = s.security_context.unwrap();
            assert_eq!((c.run_as_user, c.run_as_non_root), (Some(0), Some(false)));
            let cap = c.capabilities.unwrap();
            assert_eq!(cap.drop.unwrap(), vec!["ALL".to_string()]);
            assert_eq!(cap.add.unwrap(), caps);
            assert_eq!(c.privileged, None, "never privileged: true");
        }
        let ns = |ann: Option<&str>| Namespace {
            metadata: kube::api::ObjectMeta {
                annotations: ann
                    .map(|v| [("kopiur.home-operations.com/privileged-movers".to_string(), v.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(permits_privileged(&ns(Some("true"))));
        assert!(!permits_privileged(&ns(Some("yes"))));
        assert!(!permits_privileged(&ns(None)));
    }

    #[test]
    fn persistent_cache_is_refused() {
        let d = MoverDefaults {
            cache: Some(CacheSpec { mode: Some(CacheMode::Persistent), ..Default::default() }),
            ..Default::default()
        };
        let e = resolve(Some(&d), None, MoverOp::Other, false).unwrap_err();
        assert_eq!(e.reason, "FeatureNotImplemented");
        assert!(e.message.contains("cache.mode Persistent"), "{}", e.message);
    }
}
