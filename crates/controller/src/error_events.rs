//! Reconcile-error Warning Events (docs/design/reconcile-shape.md §1.5, docs/design/observability.md §10.2 last row): every `error_policy` publishes
//! a Warning Event on the object with reason `KubeApiError`, `WorkSpecTooLarge` or `InvalidSpec`
//! (by error variant; the note carries the requeue class label), on transitions only.
//!
//! One process-wide map remembers, per object (kind, namespace, name), the reason last warned. A
//! repeat of the same reason emits nothing; a different reason emits; a successful reconcile
//! clears the entry (the controllers' result streams run through [`settle`]), so the same error
//! after a success warns again. The map is bounded: entries not refreshed for [`TTL`] are
//! dropped (every error class requeues well within it, so a persisting error keeps its entry),
//! and past [`CAP`] entries the least recently seen is evicted.
//!
//! A Snapshot's `WorkSpecTooLarge` found by the planner is a status verdict with its own Warning
//! (snapshot::plan), not an error, so it never reaches `error_policy` and is not doubled here.
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use kopiur_api::names::event;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::error::Error;
use crate::metrics::labels::ErrorLabels;

/// Entries not refreshed for this long are dropped (the longest requeue is 1800 s).
pub const TTL: Duration = Duration::from_secs(3600);
/// At most this many objects are remembered.
pub const CAP: usize = 4096;

/// The Event reason of a reconcile error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorReason {
    KubeApiError,
    /// A 403: the controller's RBAC lacks the verb the message names.
    KubeApiForbidden,
    /// A 400 or 422: the API server refuses the request itself.
    KubeApiRejected,
    WorkSpecTooLarge,
    /// A Job could not be built for another reason (the message says which).
    WorkSpecInvalid,
    InvalidSpec,
    /// A refused mover: the refusal's own reason (`PrivilegedMoverNotPermitted`,
    /// `FeatureNotImplemented`, `RepositoryVolumeNotInNamespace`, ...).
    MoverRefused(&'static str),
}

impl ErrorReason {
    pub fn of(err: &Error) -> ErrorReason {
        match err {
            Error::Api { source, .. } => match crate::error::ApiAnswer::of(source) {
                crate::error::ApiAnswer::Transient => ErrorReason::KubeApiError,
                crate::error::ApiAnswer::Forbidden => ErrorReason::KubeApiForbidden,
                crate::error::ApiAnswer::Rejected => ErrorReason::KubeApiRejected,
            },
            Error::WorkSpecTooLarge(_) => ErrorReason::WorkSpecTooLarge,
            Error::WorkSpec(_) => ErrorReason::WorkSpecInvalid,
            Error::InvalidSpec(_) => ErrorReason::InvalidSpec,
            Error::MoverRefused(r) => ErrorReason::MoverRefused(r.reason),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::KubeApiError => event::KUBE_API_ERROR,
            ErrorReason::KubeApiForbidden => event::KUBE_API_FORBIDDEN,
            ErrorReason::KubeApiRejected => event::KUBE_API_REJECTED,
            ErrorReason::WorkSpecTooLarge => event::WORK_SPEC_TOO_LARGE,
            ErrorReason::WorkSpecInvalid => event::WORK_SPEC_INVALID,
            ErrorReason::InvalidSpec => event::INVALID_SPEC,
            ErrorReason::MoverRefused(r) => r,
        }
    }
}

/// Which object an error belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn of<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectKey {
        ObjectKey {
            kind: K::kind(&()).into_owned(),
            namespace: obj.meta().namespace.clone(),
            name: obj.meta().name.clone().unwrap_or_default(),
        }
    }

    pub fn of_ref<K: Resource<DynamicType = ()>>(r: &ObjectRef<K>) -> ObjectKey {
        ObjectKey { kind: K::kind(&()).into_owned(), namespace: r.namespace.clone(), name: r.name.clone() }
    }
}

/// The last warned reason per object. Pure: the caller passes the clock.
#[derive(Debug)]
pub struct Tracker {
    entries: HashMap<ObjectKey, (ErrorReason, Instant)>,
    ttl: Duration,
    cap: usize,
}

impl Tracker {
    pub fn new(ttl: Duration, cap: usize) -> Tracker {
        Tracker { entries: HashMap::new(), ttl, cap: cap.max(1) }
    }

    /// Records an error; true when it is a transition (an Event is due).
    pub fn on_error(&mut self, key: ObjectKey, reason: ErrorReason, now: Instant) -> bool {
        self.entries.retain(|_, (_, seen)| now.saturating_duration_since(*seen) < self.ttl);
        let emit = self.entries.get(&key).is_none_or(|(last, _)| *last != reason);
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            let oldest = self.entries.iter().min_by_key(|(_, (_, seen))| *seen).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key, (reason, now));
        emit
    }

    /// A successful reconcile: the next error of this object is a transition again.
    pub fn on_success(&mut self, key: &ObjectKey) {
        self.entries.remove(key);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

static TRACKER: LazyLock<Mutex<Tracker>> = LazyLock::new(|| Mutex::new(Tracker::new(TTL, CAP)));

/// Called from every `error_policy`: publishes the Warning Event on a transition. Synchronous
/// (the publish is spawned onto the runtime the controller runs on).
pub fn report<K: Resource<DynamicType = ()>>(recorder: &Recorder, obj: &K, err: &Error) {
    let reason = ErrorReason::of(err);
    let emit = match TRACKER.lock() {
        Ok(mut t) => t.on_error(ObjectKey::of(obj), reason, Instant::now()),
        Err(_) => false,
    };
    if !emit {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let ev = Event {
        type_: EventType::Warning,
        reason: reason.as_str().to_string(),
        note: Some(crate::text::truncate(&format!("{}: {err}", err.class().label()), 1024)),
        action: err.step().unwrap_or("Reconcile").into(),
        secondary: None,
    };
    let (recorder, reference) = (recorder.clone(), obj.object_ref(&()));
    rt.spawn(async move {
        if let Err(e) = recorder.publish(&ev, &reference).await {
            tracing::warn!(err = %e, reason = ev.reason, "publishing a reconcile-error Event failed");
        }
    });
}

/// Every controller's error policy: the error as an Event on the object (`report`), counted by
/// kind and class (`kopiur_controller_reconcile_errors_total`), logged, the object marked
/// Stalled when a retry cannot heal it ([`stall`]), and requeued after its class's delay.
pub fn error_policy<K>(obj: std::sync::Arc<K>, err: &Error, ctx: std::sync::Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    report(&ctx.recorder, obj.as_ref(), err);
    if err.stalls() {
        stall(&ctx.client, obj.as_ref(), err);
    }
    let class = err.class();
    let kind = K::kind(&());
    ctx.metrics.reconcile_errors.inc(ErrorLabels { kind: kind.to_string(), class: class.label().into() });
    tracing::warn!(%kind, error = %err, class = class.label(), step = err.step(), "reconcile failed");
    Action::requeue(class.requeue())
}

/// The conditions of a Stalled object: Ready=False and Stalled=True with the error's reason and
/// message, Reconciling=False; every other condition kept. Pure.
pub fn stalled_conditions(
    existing: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    err: &Error,
    generation: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let message = crate::text::truncate(&err.to_string(), 1024);
    let desired = crate::conditions::trio(crate::conditions::Standing::Stalled, ErrorReason::of(err).as_str(), message);
    crate::conditions::merge_conditions(existing, &desired, generation, now)
}

/// Writes the Stalled conditions onto `obj`'s status (spawned; the error policy is synchronous).
/// Guarded by the resourceVersion the failed reconcile read: a newer object is reconciled again
/// anyway. A failure to write (the status verb itself forbidden) leaves the Warning Event.
fn stall<K>(client: &kube::Client, obj: &K, err: &Error)
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let Ok(value) = serde_json::to_value(obj) else { return };
    let existing: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> =
        serde_json::from_value(value["status"]["conditions"].clone()).unwrap_or_default();
    let meta = obj.meta();
    let generation = meta.generation.unwrap_or_default();
    let next = stalled_conditions(&existing, err, generation, chrono::Utc::now());
    let (Some(name), rv) = (meta.name.clone(), meta.resource_version.clone()) else { return };
    let ar = kube::api::ApiResource::erase::<K>(&());
    let api: kube::Api<kube::api::DynamicObject> = match meta.namespace.as_deref() {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    };
    let current = serde_json::json!({ "conditions": existing });
    let next = serde_json::json!({ "conditions": next });
    rt.spawn(async move {
        if let Err(e) = crate::status::write_status_value(&api, &name, rv.as_deref(), &current, &next).await {
            tracing::warn!(err = %e, name, "marking the object Stalled failed");
        }
    });
}

/// The controllers' result streams end here: a successful reconcile clears the object's entry.
pub fn settle<K: Resource<DynamicType = ()>, E>(res: Result<(ObjectRef<K>, Action), E>) -> std::future::Ready<()> {
    if let Ok((r, _)) = res
        && let Ok(mut t) = TRACKER.lock()
    {
        t.on_success(&ObjectKey::of_ref(&r));
    }
    std::future::ready(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey { kind: "Snapshot".into(), namespace: Some("ns".into()), name: name.into() }
    }

    fn tracker() -> Tracker {
        Tracker::new(Duration::from_secs(3600), 100)
    }

    #[test]
    fn reasons_follow_the_error_variant() {
        assert_eq!(ErrorReason::of(&Error::WorkSpecTooLarge("x".into())).as_str(), "WorkSpecTooLarge");
        // Not every work-spec error is about its size (a restore without a pinned snapshot id).
        assert_eq!(ErrorReason::of(&Error::WorkSpec("no pinned snapshot id".into())).as_str(), "WorkSpecInvalid");
        let too_large =
            kopiur_mover::job::JobError::WorkSpec(kopiur_mover::workspec::WorkSpecError::TooLarge { size: 1 });
        assert_eq!(ErrorReason::of(&Error::from(too_large)).as_str(), "WorkSpecTooLarge");
        let refused =
            |r: &'static str| Error::MoverRefused(crate::mover_settings::Refusal { reason: r, message: String::new() });
        assert_eq!(
            ErrorReason::of(&refused("RepositoryVolumeNotInNamespace")).as_str(),
            "RepositoryVolumeNotInNamespace"
        );
        assert_eq!(ErrorReason::of(&refused("PrivilegedMoverNotPermitted")).as_str(), "PrivilegedMoverNotPermitted");
        let refused = |reason| {
            Error::MoverRefused(crate::mover_settings::Refusal {
                reason,
                message: "the mover would be privileged".into(),
            })
        };
        assert_eq!(ErrorReason::of(&refused("PrivilegedMoverNotPermitted")).as_str(), "PrivilegedMoverNotPermitted");
        assert_eq!(ErrorReason::of(&refused("FeatureNotImplemented")).as_str(), "FeatureNotImplemented");
        assert_eq!(ErrorReason::of(&Error::InvalidSpec("x".into())).as_str(), "InvalidSpec");
        let kube = Error::Api { step: "list Jobs", source: kube::Error::LinesCodecMaxLineLengthExceeded };
        assert_eq!(ErrorReason::of(&kube).as_str(), "KubeApiError");
    }

    fn forbidden() -> Error {
        let status = kube::core::Status::failure(
            "jobs.batch is forbidden: User \"u\" cannot create resource \"jobs\" in API group \"batch\" in the namespace \"a\"",
            "Forbidden",
        )
        .with_code(403);
        Error::api("create mover Job", kube::Error::Api(status.boxed()))
    }

    #[test]
    fn a_forbidden_step_stalls_the_object_and_keeps_its_other_conditions() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let now = chrono::Utc::now();
        let c = |t: &str, s: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: crate::conditions::ktime(now - chrono::Duration::hours(1)),
        };
        let existing = vec![c("Ready", "True"), c("Staging", "True"), c("Stalled", "False")];
        let err = forbidden();
        assert_eq!(ErrorReason::of(&err).as_str(), "KubeApiForbidden");
        assert!(err.stalls());
        let next = stalled_conditions(&existing, &err, 2, now);
        let get = |t: &str| next.iter().find(|x| x.type_ == t).cloned().unwrap();
        assert_eq!((get("Ready").status.as_str(), get("Ready").reason.as_str()), ("False", "KubeApiForbidden"));
        assert_eq!(get("Stalled").status, "True");
        assert!(
            get("Stalled")
                .message
                .starts_with("create mover Job: RBAC: the controller may not create jobs.batch in namespace a;")
        );
        assert_eq!(get("Reconciling").status, "False");
        assert_eq!(get("Staging"), existing[1], "a condition the error does not decide is kept");
        // Transient errors never stall.
        assert!(!Error::api("list Jobs", kube::Error::LinesCodecMaxLineLengthExceeded).stalls());
    }

    #[test]
    fn same_reason_twice_emits_once() {
        let (mut t, now) = (tracker(), Instant::now());
        assert!(t.on_error(key("a"), ErrorReason::KubeApiError, now));
        assert!(!t.on_error(key("a"), ErrorReason::KubeApiError, now + Duration::from_secs(30)));
        assert!(!t.on_error(key("a"), ErrorReason::KubeApiError, now + Duration::from_secs(60)));
    }

    #[test]
    fn a_reason_change_emits() {
        let (mut t, now) = (tracker(), Instant::now());
        assert!(t.on_error(key("a"), ErrorReason::KubeApiError, now));
        assert!(t.on_error(key("a"), ErrorReason::InvalidSpec, now));
        assert!(!t.on_error(key("a"), ErrorReason::InvalidSpec, now));
        assert!(t.on_error(key("a"), ErrorReason::KubeApiError, now));
    }

    #[test]
    fn success_then_the_same_error_emits_again() {
        let (mut t, now) = (tracker(), Instant::now());
        assert!(t.on_error(key("a"), ErrorReason::WorkSpecTooLarge, now));
        t.on_success(&key("a"));
        assert!(t.is_empty());
        assert!(t.on_error(key("a"), ErrorReason::WorkSpecTooLarge, now));
    }

    #[test]
    fn objects_are_tracked_independently() {
        let (mut t, now) = (tracker(), Instant::now());
        assert!(t.on_error(key("a"), ErrorReason::KubeApiError, now));
        assert!(t.on_error(key("b"), ErrorReason::KubeApiError, now));
        let other_kind = ObjectKey { kind: "Restore".into(), ..key("a") };
        assert!(t.on_error(other_kind, ErrorReason::KubeApiError, now));
        t.on_success(&key("b"));
        assert!(!t.on_error(key("a"), ErrorReason::KubeApiError, now), "a's success was not b's");
    }

    #[test]
    fn entries_expire_after_the_ttl_but_not_while_refreshed() {
        let (mut t, now) = (tracker(), Instant::now());
        assert!(t.on_error(key("a"), ErrorReason::InvalidSpec, now));
        // A terminal error requeues every 1800 s: refreshed within the TTL, it stays quiet.
        assert!(!t.on_error(key("a"), ErrorReason::InvalidSpec, now + Duration::from_secs(1800)));
        assert!(!t.on_error(key("a"), ErrorReason::InvalidSpec, now + Duration::from_secs(3600)));
        assert!(t.on_error(key("b"), ErrorReason::InvalidSpec, now + Duration::from_secs(3600)));
        // Unseen for over an hour: b's entry is dropped when someone else's error prunes.
        assert!(t.on_error(key("c"), ErrorReason::InvalidSpec, now + Duration::from_secs(7201)));
        assert_eq!(t.len(), 1, "a and b expired");
        assert!(t.on_error(key("a"), ErrorReason::InvalidSpec, now + Duration::from_secs(7201)));
    }

    #[test]
    fn the_map_is_capped_by_evicting_the_least_recently_seen() {
        let mut t = Tracker::new(Duration::from_secs(3600), 3);
        let now = Instant::now();
        for (i, n) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
            assert!(t.on_error(key(n), ErrorReason::KubeApiError, now + Duration::from_secs(i as u64)));
            assert!(t.len() <= 3);
        }
        assert_eq!(t.len(), 3);
        // c, d, e remain; a was evicted, so it warns again.
        assert!(!t.on_error(key("e"), ErrorReason::KubeApiError, now + Duration::from_secs(10)));
        assert!(t.on_error(key("a"), ErrorReason::KubeApiError, now + Duration::from_secs(11)));
    }

    #[test]
    fn settle_clears_only_on_success() {
        use kopiur_api::Restore;
        let k = ObjectKey { kind: "Restore".into(), namespace: Some("settle-test".into()), name: "r".into() };
        let r = ObjectRef::<Restore>::new("r").within("settle-test");
        assert_eq!(ObjectKey::of_ref(&r), k);
        let now = Instant::now();
        TRACKER.lock().unwrap().on_error(k.clone(), ErrorReason::KubeApiError, now);
        let () = settle::<Restore, ()>(Err(())).into_inner();
        assert!(!TRACKER.lock().unwrap().on_error(k.clone(), ErrorReason::KubeApiError, now), "an error keeps it");
        let () = settle::<Restore, ()>(Ok((r, Action::await_change()))).into_inner();
        assert!(TRACKER.lock().unwrap().on_error(k, ErrorReason::KubeApiError, now), "a success cleared it");
    }
}
