//! The mover settings of one Job, merged field by field from lowest to highest: the hardened
//! base (`kopiur_mover::job`), the repository's `moverDefaults`, then the recipe's `mover`
//! (docs/design/api-contract.md §2.6 "Merge order"). Every Job kind takes its settings from here, so a field
//! the API accepts takes effect in every Job, or the run is refused with a message saying why.
//!
//! What this build applies: `resources`, `securityContext`, `podSecurityContext`, `cache`
//! (`Ephemeral` with or without `capacity`, the two cache sizes), `nodeSelector`,
//! `tolerations`, `affinity` (plus `sourceColocation`, see [`crate::mover_pods`]),
//! `ttlSecondsAfterFinished`, and for backups and restores `inheritSecurityContextFrom`
//! (`workloadSelector`, `pvcConsumer`), whose identity sits between `moverDefaults` and the recipe.
//!
//! A mover is privileged when it would run as root, `privileged`, with privilege escalation,
//! an added capability, a `capabilities.drop` without `ALL`, an unconfined seccomp profile, or
//! `privilegedMode`. Backups and restores may be privileged only in a namespace annotated
//! `kopiur.home-operations.com/privileged-movers: "true"`; otherwise, and for every other Job
//! kind, the run waits (`PrivilegedMoverNotPermitted`). `privilegedMode` runs the mover as uid
//! 0 with every capability dropped except what the operation needs: `DAC_READ_SEARCH` for a
//! backup (read every file), `CHOWN`, `FOWNER` and `DAC_OVERRIDE` for a restore (write files
//! with their recorded owners and modes). A `Persistent` cache is a PVC per SnapshotPolicy,
//! reused by its backups. Refused as not built: the `Persistent` cache mode and inheritance on
//! the other Job kinds (`FeatureNotImplemented`).
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Namespace, PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
};
use kopiur_api::names::{annotation, condition, reason};
#[cfg(test)]
use kopiur_api::shared::mover::SourceColocationMode;
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
    ns.metadata.annotations.as_ref().and_then(|a| a.get(annotation::PRIVILEGED_MOVERS)).map(String::as_str)
        == Some("true")
}

/// What a namespace says to a privileged mover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrivilegeVerdict {
    /// Opted in (`privileged-movers: "true"`) and no Pod Security level that refuses it.
    Permitted,
    /// No opt-in (or the namespace could not be read: fail closed).
    NotOptedIn,
    /// The namespace enforces Pod Security `restricted` (label
    /// `pod-security.kubernetes.io/enforce`): Pod Security Admission refuses every privileged
    /// mover pod (root, added capabilities), whatever kopiur's opt-in says.
    PodSecurity(String),
}

/// The Pod Security Admission label that enforces a level.
pub const PSA_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// What `ns` says to a privileged mover (pure: read from the Namespace object).
pub fn privilege_verdict(ns: &Namespace) -> PrivilegeVerdict {
    let level = ns.metadata.labels.as_ref().and_then(|l| l.get(PSA_ENFORCE_LABEL)).map(String::as_str);
    if level == Some("restricted") {
        return PrivilegeVerdict::PodSecurity("restricted".into());
    }
    if permits_privileged(ns) { PrivilegeVerdict::Permitted } else { PrivilegeVerdict::NotOptedIn }
}

/// Reads the namespace's verdict; a namespace that cannot be read does not opt in (fail closed).
pub async fn namespace_privilege(client: &kube::Client, ns: &str) -> PrivilegeVerdict {
    match kube::Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(Some(n)) => privilege_verdict(&n),
        Ok(None) => PrivilegeVerdict::NotOptedIn,
        Err(e) => {
            tracing::warn!(namespace = ns, error = %e, "reading the namespace for the privileged-movers annotation failed");
            PrivilegeVerdict::NotOptedIn
        }
    }
}

/// The refusal of a privileged mover in a namespace whose Pod Security level refuses its pod:
/// no Job is created (its pods would never be admitted), and the message names Pod Security
/// Admission and the label, since the namespace's kopiur opt-in cannot override it.
pub fn pod_security_refusal(ns: &str, level: &str) -> Refusal {
    Refusal {
        reason: reason::PRIVILEGED_MOVER_NOT_PERMITTED,
        message: format!(
            "namespace {ns} enforces the Pod Security Standard \"{level}\" ({PSA_ENFORCE_LABEL}={level}), and Pod \
             Security Admission refuses a privileged mover pod there (root or added capabilities), whatever the \
             namespace's kopiur.home-operations.com/privileged-movers annotation says; so no Job is created. Run \
             the mover as the files' owner instead (mover.securityContext {{runAsUser: <uid>, runAsGroup: <gid>}}, \
             no privilegedMode), or back this volume up from a namespace whose Pod Security level admits it"
        ),
    }
}

/// The `MoverPermitted` condition (docs/design/api-contract.md §2.6): False while privileged settings wait for
/// the namespace's opt-in, True while a run may start with its settings; `None` leaves the
/// condition as it was (terminal phases, other refusals).
pub fn permitted_condition(refused: Option<(&str, &str)>, may_start: bool) -> Option<crate::conditions::Cond> {
    use crate::conditions::{Cond, CondStatus};
    let type_ = condition::MOVER_PERMITTED;
    match refused {
        Some((r, m)) if r == reason::PRIVILEGED_MOVER_NOT_PERMITTED => {
            Some(Cond { type_, status: CondStatus::False, reason: r.into(), message: m.into() })
        }
        None if may_start => Some(Cond {
            type_,
            status: CondStatus::True,
            reason: reason::MOVER_PERMITTED.into(),
            message: "the mover's settings are permitted in this namespace".into(),
        }),
        // Another refusal, or a run that may not start yet: the condition stays as it was.
        Some(_) | None => None,
    }
}

/// The `SecurityContextInherited` condition: True naming what was inherited while a run may
/// start with it, False while nothing could be inherited (the run waits); `None` when the
/// recipe does not inherit.
pub fn inherited_condition(
    refused: Option<(&str, &str)>,
    inherited_from: Option<&str>,
    may_start: bool,
) -> Option<crate::conditions::Cond> {
    use crate::conditions::{Cond, CondStatus};
    let type_ = condition::SECURITY_CONTEXT_INHERITED;
    match (refused, inherited_from) {
        (Some((r, m)), _) if r == reason::SECURITY_CONTEXT_NOT_INHERITED => {
            Some(Cond { type_, status: CondStatus::False, reason: r.into(), message: m.into() })
        }
        (None, Some(from)) if may_start => Some(Cond {
            type_,
            status: CondStatus::True,
            reason: reason::SECURITY_CONTEXT_INHERITED.into(),
            message: format!("the mover runs as {from}"),
        }),
        // Another refusal, a recipe that does not inherit, or a run that may not start yet.
        (Some(_), _) | (None, None) | (None, Some(_)) => None,
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
    /// What `inheritSecurityContextFrom` gave (`uid 999, gid 999 from pod db-0, container db`).
    pub inherited_from: Option<String>,
    /// The PVC of a `Persistent` cache, to be applied before the Job is created.
    pub cache_claim: Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
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
    resolve_with(defaults, recipe, op, &MoverFacts { privileged_permitted, ..Default::default() })
}

/// What the cluster says about one run, read before its Job is built (see [`crate::mover_pods`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MoverFacts {
    /// The namespace opts in to privileged movers (`permits_privileged`).
    pub privileged_permitted: bool,
    /// The outcome of the recipe's `inheritSecurityContextFrom`; `None` when it was not
    /// resolved (the recipe does not ask, or this Job kind does not inherit).
    pub inherited: Option<Result<crate::mover_pods::Inherited, String>>,
    /// The node where the run's ReadWriteOnce volume is in use (`sourceColocation`).
    pub colocate_node: Option<String>,
    /// Where a `cache.mode: Persistent` cache lives for this Job kind; `None` refuses the mode.
    pub cache_claim: Option<CacheClaim>,
}

/// [`resolve`] with the facts read from the cluster: the inherited identity sits between
/// `moverDefaults` and the recipe (docs/design/api-contract.md §2.6 "Merge order"), and `sourceColocation`
/// adds the volume's node to the affinity.
pub fn resolve_with(
    defaults: Option<&MoverDefaults>,
    recipe: Option<&MoverSpec>,
    op: MoverOp,
    facts: &MoverFacts,
) -> Result<MoverSettings, Refusal> {
    let inherited = inherited_identity(recipe, op, facts)?;
    let mut s = merged(defaults, recipe, facts, inherited.as_ref());
    let privileged_mode = recipe.and_then(|r| r.privileged_mode).unwrap_or(false);
    if let Some(refusal) = privileged_refusal(&s, privileged_mode, op, facts.privileged_permitted) {
        return Err(refusal);
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
    persistent_cache(&mut s, recipe, facts)?;
    Ok(s)
}

/// The identity `inheritSecurityContextFrom` gave, when the recipe asks for it; refused when it
/// could not be read, or for a Job kind that does not inherit.
fn inherited_identity(
    recipe: Option<&MoverSpec>,
    op: MoverOp,
    facts: &MoverFacts,
) -> Result<Option<crate::mover_pods::Inherited>, Refusal> {
    let inherits = recipe.is_some_and(|r| r.inherit_security_context_from.is_some());
    match (&facts.inherited, inherits) {
        (_, false) => Ok(None),
        (Some(Ok(i)), true) => Ok(Some(i.clone())),
        (Some(Err(why)), true) => Err(Refusal { reason: reason::SECURITY_CONTEXT_NOT_INHERITED, message: why.clone() }),
        // Backups and restores look only when they may launch; a built Job that is not launched
        // carries no inherited identity.
        (None, true) if op != MoverOp::Other => Ok(None),
        (None, true) => Err(Refusal {
            reason: reason::FEATURE_NOT_IMPLEMENTED,
            message: "mover.inheritSecurityContextFrom is applied to backups and restores only in this version,                           so no Job is created; set mover.securityContext {runAsUser, runAsGroup} instead"
                .into(),
        }),
    }
}

/// The settings in merge order: `moverDefaults` < the inherited identity < the recipe
/// (docs/design/api-contract.md §2.6 "Merge order"), with `sourceColocation`'s node in the affinity.
fn merged(
    defaults: Option<&MoverDefaults>,
    recipe: Option<&MoverSpec>,
    facts: &MoverFacts,
    inherited: Option<&crate::mover_pods::Inherited>,
) -> MoverSettings {
    let inherited_container = inherited.map(|i| SecurityContext {
        run_as_user: Some(i.run_as_user),
        run_as_group: i.run_as_group,
        ..Default::default()
    });
    let inherited_pod = inherited.map(|i| PodSecurityContext {
        fs_group: i.fs_group,
        supplemental_groups: i.supplemental_groups.clone(),
        ..Default::default()
    });
    let identity = mover_identity();
    MoverSettings {
        resources: recipe.and_then(|r| r.resources.clone()).or_else(|| defaults.and_then(|d| d.resources.clone())),
        security_context: merge_container_overlays([
            defaults.and_then(|d| d.security_context.as_ref()),
            inherited_container.as_ref(),
            recipe.and_then(|r| r.security_context.as_ref()),
        ]),
        pod_security_context: merge_pod_overlays([
            Some(&identity),
            defaults.and_then(|d| d.pod_security_context.as_ref()),
            inherited_pod.as_ref(),
            recipe.and_then(|r| r.pod_security_context.as_ref()),
        ]),
        cache: merge_cache(defaults.and_then(|d| d.cache.as_ref()), recipe.and_then(|r| r.cache.as_ref())),
        node_selector: defaults.and_then(|d| d.node_selector.clone()),
        tolerations: defaults.and_then(|d| d.tolerations.clone()),
        affinity: match &facts.colocate_node {
            Some(node) => crate::mover_pods::colocate(
                defaults.and_then(|d| d.affinity.clone()),
                node,
                defaults.and_then(|d| d.source_colocation.as_ref()).map(|c| c.mode).unwrap_or_default(),
            ),
            None => defaults.and_then(|d| d.affinity.clone()),
        },
        inherited_from: inherited.map(crate::mover_pods::Inherited::describe),
        cache_claim: None,
        ttl_seconds_after_finished: recipe
            .and_then(|r| r.ttl_seconds_after_finished)
            .or_else(|| defaults.and_then(|d| d.ttl_seconds_after_finished)),
    }
}

/// Why a privileged mover is refused: never for other Job kinds, and for backups and restores
/// only in a namespace that opts in.
fn privileged_refusal(
    s: &MoverSettings,
    privileged_mode: bool,
    op: MoverOp,
    privileged_permitted: bool,
) -> Option<Refusal> {
    let why = privileged_reasons(s, privileged_mode);
    if why.is_empty() {
        return None;
    }
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
    (!message.is_empty()).then_some(Refusal { reason: reason::PRIVILEGED_MOVER_NOT_PERMITTED, message })
}

/// A `Persistent` cache: only where this Job kind keeps one (its claim); a default the
/// repository gives falls back to an ephemeral cache elsewhere, a recipe's own is refused.
fn persistent_cache(s: &mut MoverSettings, recipe: Option<&MoverSpec>, facts: &MoverFacts) -> Result<(), Refusal> {
    let recipe_persistent = recipe.and_then(|r| r.cache.as_ref()).and_then(|c| c.mode) == Some(CacheMode::Persistent);
    if facts.cache_claim.is_none()
        && !recipe_persistent
        && let Some(c) = s.cache.as_mut()
        && c.mode == Some(CacheMode::Persistent)
    {
        // The repository's default reaches every Job it spawns; Job kinds without a kept cache
        // (probe, bootstrap, batch delete, maintenance, replication, restore) use an emptyDir
        // (or the ephemeral volume of `capacity`), as documented.
        c.mode = Some(CacheMode::Ephemeral);
    }
    if let Some(c) = s.cache.as_ref().filter(|c| c.mode == Some(CacheMode::Persistent)) {
        let Some(claim) = &facts.cache_claim else {
            return Err(Refusal {
                reason: reason::FEATURE_NOT_IMPLEMENTED,
                message: "cache.mode Persistent is built for backups only in this version (one cache PVC per \
                          SnapshotPolicy), so no Job is created; remove it here to use an emptyDir cache, or set \
                          cache.capacity for an ephemeral volume of that size"
                    .into(),
            });
        };
        s.cache_claim = Some(persistent_cache_claim(claim, c));
    }
    Ok(())
}

/// Where a `Persistent` cache lives: the PVC's name and the object that owns it (it is
/// deleted with that object, and reused by each of its runs).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheClaim {
    pub name: String,
    pub owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
}

/// Default size of a `Persistent` cache PVC without `cache.capacity`.
pub const DEFAULT_PERSISTENT_CACHE_CAPACITY: &str = "2Gi";

/// The cache PVC name for a recipe object (`<name>-kopia-cache`, shortened with a hash when the
/// name would exceed 253 characters).
pub fn cache_claim_name(recipe_name: &str) -> String {
    let full = format!("{recipe_name}-kopia-cache");
    if full.len() <= 253 {
        return full;
    }
    // FNV-1a: stable across builds, so the same policy always finds its cache.
    let h =
        recipe_name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{}-{h:016x}-kopia-cache", &recipe_name[..200])
}

/// The PVC a `Persistent` cache uses (namespace set by the Job's builder): ReadWriteOnce,
/// `capacity` (default [`DEFAULT_PERSISTENT_CACHE_CAPACITY`]) of `storageClassName`, owned by
/// the recipe object so it goes with it.
fn persistent_cache_claim(claim: &CacheClaim, c: &CacheSpec) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let capacity = c.capacity.clone().unwrap_or_else(|| DEFAULT_PERSISTENT_CACHE_CAPACITY.into());
    PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta {
            name: Some(claim.name.clone()),
            owner_references: Some(vec![claim.owner.clone()]),
            labels: Some(crate::labels::managed_labels()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: c.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(capacity))].into()),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// What makes the merged settings privileged (docs/design/api-contract.md §2.6 "Privileged movers"), plus
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
    // A Localhost profile can allow anything; only RuntimeDefault is taken without the opt-in.
    for (level, sp) in [("container", c.seccomp_profile.as_ref()), ("pod", p.seccomp_profile.as_ref())] {
        if let Some(t) = sp.map(|sp| sp.type_.as_str()).filter(|t| matches!(*t, "Unconfined" | "Localhost")) {
            why.push(format!("{level} seccompProfile {t}"));
        }
    }
    // The rest of the PSS baseline (audit finding 2.3): SELinux types other than the container
    // ones and any user or role, AppArmor Unconfined, an unmasked /proc, sysctls, Windows host
    // processes.
    for (level, se) in [("container", c.se_linux_options.as_ref()), ("pod", p.se_linux_options.as_ref())] {
        let Some(o) = se else { continue };
        if let Some(t) = o.type_.as_deref().filter(|t| !t.is_empty() && !SELINUX_TYPES.contains(t)) {
            why.push(format!("{level} seLinuxOptions.type {t}"));
        }
        for (field, v) in [("user", &o.user), ("role", &o.role)] {
            if v.as_deref().is_some_and(|v| !v.is_empty()) {
                why.push(format!("{level} seLinuxOptions.{field}"));
            }
        }
    }
    for (level, aa) in [("container", c.app_armor_profile.as_ref()), ("pod", p.app_armor_profile.as_ref())] {
        if aa.is_some_and(|a| a.type_ == "Unconfined") {
            why.push(format!("{level} appArmorProfile Unconfined"));
        }
    }
    if c.proc_mount.as_deref() == Some("Unmasked") {
        why.push("procMount: Unmasked".into());
    }
    if let Some(sysctls) = p.sysctls.as_ref().filter(|x| !x.is_empty()) {
        let names: Vec<&str> = sysctls.iter().map(|x| x.name.as_str()).collect();
        why.push(format!("sysctls: {}", names.join(",")));
    }
    for (level, w) in [("container", c.windows_options.as_ref()), ("pod", p.windows_options.as_ref())] {
        if w.and_then(|w| w.host_process) == Some(true) {
            why.push(format!("{level} windowsOptions.hostProcess: true"));
        }
    }
    why
}

/// The SELinux types the PSS baseline profile allows.
const SELINUX_TYPES: &[&str] = &["container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

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
            if let Some(claim) = &self.cache_claim {
                input.cache = CacheVolume::Persistent { claim_name: claim.metadata.name.clone().unwrap_or_default() };
            } else if let Some(capacity) = &c.capacity {
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

pub mod io;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        AppArmorProfile, Capabilities, SELinuxOptions, SeccompProfile, Sysctl, WindowsSecurityContextOptions,
    };

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
        // Audit finding 2.3: every other setting outside the PSS baseline, at either level.
        let pod = |f: fn(&mut PodSecurityContext)| {
            let mut p = PodSecurityContext::default();
            f(&mut p);
            MoverSpec { pod_security_context: Some(p), ..Default::default() }
        };
        let container = |f: fn(&mut SecurityContext)| MoverSpec { security_context: sc(f), ..Default::default() };
        let mut cases = cases;
        cases.extend([
            (
                container(|s| {
                    s.se_linux_options = Some(SELinuxOptions { type_: Some("spc_t".into()), ..Default::default() })
                }),
                "container seLinuxOptions.type spc_t",
            ),
            (
                pod(|p| {
                    p.se_linux_options = Some(SELinuxOptions { user: Some("system_u".into()), ..Default::default() })
                }),
                "pod seLinuxOptions.user",
            ),
            (
                container(|s| {
                    s.se_linux_options = Some(SELinuxOptions { role: Some("sysadm_r".into()), ..Default::default() })
                }),
                "container seLinuxOptions.role",
            ),
            (
                container(|s| {
                    s.app_armor_profile = Some(AppArmorProfile { type_: "Unconfined".into(), localhost_profile: None })
                }),
                "container appArmorProfile Unconfined",
            ),
            (
                pod(|p| {
                    p.app_armor_profile = Some(AppArmorProfile { type_: "Unconfined".into(), localhost_profile: None })
                }),
                "pod appArmorProfile Unconfined",
            ),
            (container(|s| s.proc_mount = Some("Unmasked".into())), "procMount: Unmasked"),
            (
                pod(|p| p.sysctls = Some(vec![Sysctl { name: "kernel.msgmax".into(), value: "65536".into() }])),
                "sysctls: kernel.msgmax",
            ),
            (
                pod(|p| {
                    p.seccomp_profile =
                        Some(SeccompProfile { type_: "Localhost".into(), localhost_profile: Some("x.json".into()) })
                }),
                "pod seccompProfile Localhost",
            ),
            (
                container(|s| {
                    s.windows_options =
                        Some(WindowsSecurityContextOptions { host_process: Some(true), ..Default::default() })
                }),
                "container windowsOptions.hostProcess: true",
            ),
        ]);
        // The baseline's own SELinux types, RuntimeDefault and a masked /proc stay unprivileged.
        let fine = MoverSpec {
            security_context: sc(|s| {
                s.se_linux_options = Some(SELinuxOptions { type_: Some("container_t".into()), ..Default::default() });
                s.seccomp_profile = Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None });
                s.proc_mount = Some("Default".into());
            }),
            ..Default::default()
        };
        assert!(resolve(None, Some(&fine), MoverOp::Other, false).is_ok());
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

    fn inheriting(i: Result<crate::mover_pods::Inherited, String>) -> MoverFacts {
        MoverFacts { inherited: Some(i), ..Default::default() }
    }

    fn db999() -> crate::mover_pods::Inherited {
        crate::mover_pods::Inherited {
            from: "pod db-0, container db".into(),
            run_as_user: 999,
            run_as_group: Some(999),
            fs_group: Some(999),
            supplemental_groups: None,
        }
    }

    #[test]
    fn inherited_identity_sits_between_defaults_and_the_recipe() {
        let inherit = MoverSpec {
            inherit_security_context_from: Some(kopiur_api::shared::mover::InheritSecurityContextFrom::Snapshot(
                Default::default(),
            )),
            ..Default::default()
        };
        // Defaults say 1234; the inherited 999 wins over them.
        let d = MoverDefaults { security_context: sc(|s| s.run_as_user = Some(1234)), ..Default::default() };
        let s = resolve_with(Some(&d), Some(&inherit), MoverOp::Backup, &inheriting(Ok(db999()))).unwrap();
        let c = s.security_context.clone().unwrap();
        assert_eq!((c.run_as_user, c.run_as_group), (Some(999), Some(999)));
        assert_eq!(s.pod_security_context.clone().unwrap().fs_group, Some(999));
        assert_eq!(s.inherited_from.as_deref(), Some("uid 999, gid 999, fsGroup 999 from pod db-0, container db"));
        // The recipe's own runAsGroup wins over the inherited one.
        let mut r = inherit.clone();
        r.security_context = sc(|s| s.run_as_group = Some(5));
        let c = resolve_with(Some(&d), Some(&r), MoverOp::Restore, &inheriting(Ok(db999()))).unwrap().security_context;
        assert_eq!(c.map(|c| (c.run_as_user, c.run_as_group)), Some((Some(999), Some(5))));
        // A workload running as root makes the mover privileged: the namespace must opt in.
        let mut root = db999();
        root.run_as_user = 0;
        let e = resolve_with(None, Some(&inherit), MoverOp::Backup, &inheriting(Ok(root.clone()))).unwrap_err();
        assert_eq!(e.reason, "PrivilegedMoverNotPermitted");
        let f = MoverFacts { privileged_permitted: true, ..inheriting(Ok(root)) };
        assert!(resolve_with(None, Some(&inherit), MoverOp::Backup, &f).is_ok());
        // Nothing to inherit: the run waits with the resolver's reason.
        let e =
            resolve_with(None, Some(&inherit), MoverOp::Backup, &inheriting(Err("scaled to zero".into()))).unwrap_err();
        assert_eq!((e.reason, e.message.as_str()), ("SecurityContextNotInherited", "scaled to zero"));
        // Not looked up (no launch possible): nothing inherited, nothing refused.
        let s = resolve_with(None, Some(&inherit), MoverOp::Backup, &MoverFacts::default()).unwrap();
        assert_eq!(s.inherited_from, None);
        // Job kinds that do not inherit refuse it instead of ignoring it.
        let e = resolve(None, Some(&inherit), MoverOp::Other, false).unwrap_err();
        assert_eq!(e.reason, "FeatureNotImplemented");
        assert!(e.message.contains("inheritSecurityContextFrom") && e.message.contains("runAsUser"), "{}", e.message);
        // Without inheritance in the recipe the facts are ignored.
        let s = resolve_with(None, None, MoverOp::Backup, &inheriting(Ok(db999()))).unwrap();
        assert_eq!(s.inherited_from, None);
        assert_eq!(s.security_context, None);
    }

    #[test]
    fn the_inherited_condition_names_the_source_or_why_not() {
        let c = inherited_condition(None, Some("uid 999 from pod db-0, container db"), true).unwrap();
        assert_eq!((c.type_, c.reason.as_str()), ("SecurityContextInherited", "SecurityContextInherited"));
        assert!(c.message.contains("uid 999 from pod db-0"));
        let c = inherited_condition(Some(("SecurityContextNotInherited", "scaled to zero")), None, false).unwrap();
        assert_eq!((c.reason.as_str(), c.message.as_str()), ("SecurityContextNotInherited", "scaled to zero"));
        assert_eq!(inherited_condition(None, None, true), None);
        assert_eq!(inherited_condition(Some(("PrivilegedMoverNotPermitted", "x")), Some("uid 0"), true), None);
    }

    #[test]
    fn source_colocation_follows_the_mode() {
        let f = MoverFacts { colocate_node: Some("node-a".into()), ..Default::default() };
        let s = resolve_with(None, None, MoverOp::Backup, &f).unwrap();
        let na = s.affinity.unwrap().node_affinity.unwrap();
        assert!(na.preferred_during_scheduling_ignored_during_execution.is_some(), "Auto prefers the node");
        let d = |mode| MoverDefaults {
            source_colocation: Some(kopiur_api::shared::mover::SourceColocation { mode }),
            ..Default::default()
        };
        let s = resolve_with(Some(&d(SourceColocationMode::Required)), None, MoverOp::Backup, &f).unwrap();
        assert!(
            s.affinity.unwrap().node_affinity.unwrap().required_during_scheduling_ignored_during_execution.is_some()
        );
        let s = resolve_with(Some(&d(SourceColocationMode::Disabled)), None, MoverOp::Backup, &f).unwrap();
        assert_eq!(s.affinity, None);
    }

    /// Issue 31: a namespace enforcing Pod Security `restricted` refuses a privileged mover
    /// whatever kopiur's opt-in says, with a message naming Pod Security Admission and the label;
    /// `baseline` or no label leaves the opt-in to decide.
    #[test]
    fn a_restricted_namespace_refuses_privileged_movers_naming_pod_security() {
        let ns = |label: Option<&str>, opt_in: bool| -> Namespace {
            let mut n = Namespace::default();
            n.metadata.name = Some("apps".into());
            n.metadata.labels = label.map(|l| [(PSA_ENFORCE_LABEL.to_string(), l.to_string())].into());
            n.metadata.annotations = opt_in
                .then(|| [("kopiur.home-operations.com/privileged-movers".to_string(), "true".to_string())].into());
            n
        };
        let restricted = PrivilegeVerdict::PodSecurity("restricted".into());
        assert_eq!(privilege_verdict(&ns(Some("restricted"), true)), restricted);
        assert_eq!(privilege_verdict(&ns(Some("restricted"), false)), restricted);
        assert_eq!(privilege_verdict(&ns(Some("baseline"), true)), PrivilegeVerdict::Permitted);
        assert_eq!(privilege_verdict(&ns(None, true)), PrivilegeVerdict::Permitted);
        assert_eq!(privilege_verdict(&ns(None, false)), PrivilegeVerdict::NotOptedIn);
        let r = pod_security_refusal("apps", "restricted");
        assert_eq!(r.reason, "PrivilegedMoverNotPermitted");
        for part in ["Pod Security Admission", "pod-security.kubernetes.io/enforce=restricted", "namespace apps"] {
            assert!(r.message.contains(part), "{part}: {}", r.message);
        }
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
    fn a_persistent_cache_is_a_pvc_owned_by_the_recipe_or_refused() {
        let d = MoverDefaults {
            cache: Some(CacheSpec {
                mode: Some(CacheMode::Persistent),
                storage_class_name: Some("fast".into()),
                content_cache_size_mb: Some(64),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Where no claim is named (this Job kind does not keep one), a recipe's Persistent is
        // refused; the repository's default falls back to an ephemeral cache for that Job.
        let r = MoverSpec { cache: d.cache.clone(), ..Default::default() };
        let e = resolve(None, Some(&r), MoverOp::Other, false).unwrap_err();
        assert_eq!(e.reason, "FeatureNotImplemented");
        assert!(e.message.contains("cache.mode Persistent"), "{}", e.message);
        let probe = resolve(Some(&d), None, MoverOp::Other, false).unwrap();
        assert_eq!(probe.cache_claim, None);
        assert_eq!(probe.cache.unwrap().mode, Some(CacheMode::Ephemeral));
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "SnapshotPolicy".into(),
            name: "p".into(),
            uid: "u-p".into(),
            ..Default::default()
        };
        let f = MoverFacts {
            cache_claim: Some(CacheClaim { name: cache_claim_name("p"), owner: owner.clone() }),
            ..Default::default()
        };
        let s = resolve_with(Some(&d), None, MoverOp::Backup, &f).unwrap();
        let pvc = s.cache_claim.clone().expect("a cache PVC");
        assert_eq!(pvc.metadata.name.as_deref(), Some("p-kopia-cache"));
        assert_eq!(pvc.metadata.owner_references, Some(vec![owner]));
        let spec = pvc.spec.clone().unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(spec.resources.unwrap().requests.unwrap()["storage"].0, "2Gi");
        assert!(cache_claim_name(&"x".repeat(253)).len() <= 253);
    }
}
