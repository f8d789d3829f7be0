//! Consumer gating: `RepositoryReady(R)` and the ClusterRepository tenancy gate, read from
//! reflector stores by every consumer reconciler.
use kopiur_api::names::{condition, reason};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kopiur_api::cluster_repository::AllowedNamespaces;
use kopiur_api::repository::RepositoryPhase;
use kopiur_api::shared::{RepositoryKind, RepositoryRef};
use kopiur_api::{ClusterRepository, Repository};
use kube::runtime::reflector::{ObjectRef, Store};

/// Why a consumer may or may not launch against a repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Park Pending with Ready=False/RepositoryNotReady; the message names the phase.
    NotReady {
        repository: String,
        phase: String,
    },
    /// Stalled with NamespaceNotAllowed (ClusterRepository tenancy).
    NamespaceNotAllowed {
        repository: String,
    },
}

/// The `phase` a [`Gate::NotReady`] carries when the referenced repository does not exist.
pub const ABSENT: &str = "absent";

/// The readiness gate's three states (docs/design/repository-breaker.md §4; docs/design/api-contract.md §9): none is terminal for the consumer,
/// and each resumes by itself through the repository watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// The repository is Ready (a ReadOnly one included).
    Go,
    /// Pending, Initializing or Degraded: the repository heals by itself (Reconciling).
    Wait,
    /// Failed or absent, or the namespace is not admitted: a human is needed (Stalled), with
    /// this Ready reason.
    Blocked { reason: &'static str },
}

impl Gate {
    /// Go, Wait or Blocked, from the gate's verdict.
    pub fn readiness(&self) -> Readiness {
        use kopiur_api::names::reason;
        match self {
            Gate::Open => Readiness::Go,
            Gate::NotReady { phase, .. } if phase == ABSENT => {
                Readiness::Blocked { reason: reason::REPOSITORY_NOT_FOUND }
            }
            Gate::NotReady { phase, .. } if phase == RepositoryPhase::Failed.as_str() => {
                Readiness::Blocked { reason: reason::REPOSITORY_NOT_READY }
            }
            Gate::NotReady { .. } => Readiness::Wait,
            Gate::NamespaceNotAllowed { .. } => Readiness::Blocked { reason: reason::NAMESPACE_NOT_ALLOWED },
        }
    }

    pub fn message(&self) -> String {
        match self {
            Gate::Open => String::new(),
            Gate::NotReady { repository, phase } if phase == ABSENT => format!(
                "repository {repository} does not exist; create it (or reference an existing one): this resumes by itself once it is Ready"
            ),
            Gate::NotReady { repository, phase } if phase == RepositoryPhase::Failed.as_str() => format!(
                "repository {repository} is Failed and needs a human (see its Ready condition); this resumes by itself once it is Ready"
            ),
            Gate::NotReady { repository, phase } => {
                format!("repository {repository} is {phase}; waiting for it to become Ready")
            }
            // A namespaced Repository displays as `namespace/name`.
            Gate::NamespaceNotAllowed { repository } => match repository.split_once('/') {
                Some((ns, name)) => format!(
                    "Repository {repository} belongs to namespace {ns}, which does not list this namespace in its \
                     spec.allowedNamespaces; its owner can add it (kubectl edit repository.kopiur.home-operations.com \
                     {name} -n {ns}), or use a Repository of this namespace"
                ),
                None => format!("this namespace is not in allowedNamespaces of ClusterRepository {repository}"),
            },
        }
    }
}

fn phase_gate(display: String, phase: Option<&RepositoryPhase>) -> Gate {
    match phase {
        Some(p) if p.admits_consumers() => Gate::Open,
        Some(p) => Gate::NotReady { repository: display, phase: p.as_str().to_string() },
        None => Gate::NotReady { repository: display, phase: "Pending".into() },
    }
}

/// `RepositoryReady(R)`: R exists and its phase is Ready (Alert mode with an unreachable
/// backend is Ready). For a ClusterRepository the consumer's namespace must be allowed;
/// `namespace_labels` is None when the Namespace cannot be read (fail closed).
pub fn repository_ready(
    repos: &Store<Repository>,
    crepos: &Store<ClusterRepository>,
    consumer_ns: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    r: &RepositoryRef,
) -> Gate {
    match r.kind {
        RepositoryKind::Repository => {
            let ns = r.namespace.clone().unwrap_or_else(|| consumer_ns.to_string());
            let display = format!("{ns}/{}", r.name);
            let obj = repos.get(&ObjectRef::new(&r.name).within(&ns));
            match obj {
                // Another namespace's Repository admits only the namespaces it lists (audit 2.9).
                Some(o) if !o.spec.admits(&ns, consumer_ns) => Gate::NamespaceNotAllowed { repository: display },
                Some(o) => phase_gate(display, o.status.as_ref().and_then(|s| s.phase.as_ref())),
                None => Gate::NotReady { repository: display, phase: ABSENT.into() },
            }
        }
        RepositoryKind::ClusterRepository => {
            let display = r.name.clone();
            match crepos.get(&ObjectRef::new(&r.name)) {
                None => Gate::NotReady { repository: display, phase: ABSENT.into() },
                Some(o) => {
                    if !namespace_allowed(&o.spec.allowed_namespaces, consumer_ns, namespace_labels) {
                        return Gate::NamespaceNotAllowed { repository: display };
                    }
                    phase_gate(display, o.status.as_ref().and_then(|s| s.common.phase.as_ref()))
                }
            }
        }
    }
}

/// Maintenance and a Degraded repository (issue 19, "slow is not down"): while the repository
/// is Degraded because its connects time out on a backend that answers (Ready reason
/// `TimedOut`), Maintenance is not gated, because compacting the index blobs that slow the
/// connect is the cure. Degraded for any other reason (an unreachable backend) it stays parked
/// like every other consumer. Snapshots and Restores do not read this: they park either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceGate {
    /// Whatever [`repository_ready`] says.
    AsGated,
    /// Degraded for `TimedOut`: maintenance runs (quick first).
    Cure,
}

/// [`MaintenanceGate`] from a repository's stored status: `Cure` only for phase Degraded with
/// `Ready=False` reason `TimedOut`.
pub fn maintenance_gate(status: Option<&kopiur_api::repository::RepositoryStatus>) -> MaintenanceGate {
    let timed_out = status.is_some_and(|s| {
        s.phase == Some(RepositoryPhase::Degraded)
            && s.conditions
                .iter()
                .any(|c| c.type_ == condition::READY && c.status == "False" && c.reason == reason::TIMED_OUT)
    });
    if timed_out { MaintenanceGate::Cure } else { MaintenanceGate::AsGated }
}

/// The repository acting for itself (its batch-delete dispatcher, whose Jobs run in the
/// repository's home namespace, the operator namespace for a ClusterRepository): the phase
/// alone. Tenancy is never a question about the repository itself; it is asked of each
/// consumer (`consumer_allowed`), per deleting Snapshot.
pub fn own_phase_ready(phase: Option<&RepositoryPhase>) -> bool {
    phase.is_some_and(RepositoryPhase::admits_consumers)
}

/// ClusterRepository tenancy for one consumer namespace (a namespaced Repository has none).
pub fn consumer_allowed(
    cluster: Option<&ClusterRepository>,
    consumer_ns: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    cluster.is_none_or(|c| namespace_allowed(&c.spec.allowed_namespaces, consumer_ns, namespace_labels))
}

/// Whether an annotation value (a comma-separated list of namespaces, or `*`) grants
/// `reader`: the grant annotations `restore-allowed-namespaces` and
/// `identity-allowed-namespaces` share this form.
pub fn annotation_grants(value: Option<&str>, reader: &str) -> bool {
    value.is_some_and(|v| v.split(',').map(str::trim).any(|x| x == "*" || x == reader))
}

/// Whether `allowed` admits namespaces by label: only then does a namespace's relabelling
/// change a tenancy verdict.
pub fn label_dependent(allowed: &AllowedNamespaces) -> bool {
    matches!(allowed, AllowedNamespaces::Selector(_))
}

/// Remembers each namespace's labels as the Namespace watch last delivered them, so a mapper
/// fans out to a namespace's consumers only when its labels changed (or it is seen for the
/// first time: a consumer created before its namespace reached the store failed closed and
/// must be re-evaluated). Status-only updates of a namespace fan out nothing.
#[derive(Debug, Default)]
pub struct NamespaceLabels {
    seen: std::collections::HashMap<String, BTreeMap<String, String>>,
}

impl NamespaceLabels {
    /// Records `labels` for `ns`; true when they differ from the last ones recorded.
    pub fn changed(&mut self, ns: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        let now = labels.cloned().unwrap_or_default();
        match self.seen.get(ns) {
            Some(prev) if *prev == now => false,
            Some(_) | None => {
                self.seen.insert(ns.to_string(), now);
                true
            }
        }
    }

    pub fn forget(&mut self, ns: &str) {
        self.seen.remove(ns);
    }
}

/// Whether any ClusterRepository admits namespaces by label (else a relabelling changes no
/// tenancy verdict and the Namespace mappers fan out nothing).
pub fn any_label_dependent(crepos: &Store<ClusterRepository>) -> bool {
    crepos.state().iter().any(|c| label_dependent(&c.spec.allowed_namespaces))
}

/// The tenancy gate with full LabelSelector semantics; fails closed for selectors when the
/// namespace's labels are unknown.
pub fn namespace_allowed(allowed: &AllowedNamespaces, ns: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
    match allowed {
        AllowedNamespaces::All(_) => true,
        AllowedNamespaces::List(list) => list.iter().any(|n| n == ns),
        AllowedNamespaces::Selector(sel) => labels.is_some_and(|l| selector_matches(sel, l)),
    }
}

/// The operators of a `LabelSelectorRequirement`. Parsed once, then matched exhaustively: a
/// new operator is a new variant the matcher must decide, never a silent catch-all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// An operator this version does not know (it admits nothing: fail closed).
    Unknown,
}

impl SelectorOperator {
    pub const KNOWN: [SelectorOperator; 4] = [Self::In, Self::NotIn, Self::Exists, Self::DoesNotExist];

    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Self::In => Some("In"),
            Self::NotIn => Some("NotIn"),
            Self::Exists => Some("Exists"),
            Self::DoesNotExist => Some("DoesNotExist"),
            Self::Unknown => None,
        }
    }

    /// Exact, case-sensitive (as the apiserver compares them).
    pub fn parse(s: &str) -> Self {
        Self::KNOWN.into_iter().find(|k| k.as_str() == Some(s)).unwrap_or(Self::Unknown)
    }
}

pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel.match_labels.as_ref().is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let exprs_ok = sel.match_expressions.as_ref().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let vals = e.values.clone().unwrap_or_default();
            match SelectorOperator::parse(&e.operator) {
                SelectorOperator::In => labels.get(&e.key).is_some_and(|v| vals.contains(v)),
                SelectorOperator::NotIn => labels.get(&e.key).is_none_or(|v| !vals.contains(v)),
                SelectorOperator::Exists => labels.contains_key(&e.key),
                SelectorOperator::DoesNotExist => !labels.contains_key(&e.key),
                // An operator this version does not know admits nothing (fail closed).
                SelectorOperator::Unknown => false,
            }
        })
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use kube::runtime::reflector;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn namespace_labels_fan_out_only_on_a_change() {
        let mut t = NamespaceLabels::default();
        assert!(t.changed("a", Some(&labels(&[("team", "media")]))), "first sight re-evaluates");
        assert!(!t.changed("a", Some(&labels(&[("team", "media")]))), "a status-only update is quiet");
        assert!(t.changed("a", Some(&labels(&[("team", "other")]))), "a relabelling re-evaluates");
        assert!(t.changed("a", None), "labels removed");
        assert!(!t.changed("a", Some(&labels(&[]))), "no labels and empty labels are the same");
        assert!(t.changed("b", None), "another namespace is tracked on its own");
        t.forget("a");
        assert!(t.changed("a", None));
    }

    #[test]
    fn the_dispatcher_reads_the_phase_and_members_carry_tenancy() {
        assert!(own_phase_ready(Some(&RepositoryPhase::Ready)));
        assert!(!own_phase_ready(Some(&RepositoryPhase::Degraded)));
        assert!(!own_phase_ready(None));
        let c: ClusterRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "shared"},
            "spec": {
                "backend": {"s3": {"bucket": "b", "endpoint": "http://s3.invalid", "region": "garage"}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "allowedNamespaces": {"list": ["tenant"]}
            }
        }))
        .unwrap();
        // The repository's own home (the operator namespace) is not a tenant: a gate asked
        // there, as the dispatcher once did with namespace "", fails closed.
        assert!(!consumer_allowed(Some(&c), "", None));
        assert!(consumer_allowed(Some(&c), "tenant", None));
        assert!(!consumer_allowed(Some(&c), "other", None));
        assert!(consumer_allowed(None, "anything", None), "a namespaced Repository has no tenancy");
        assert!(!label_dependent(&c.spec.allowed_namespaces));
    }

    #[test]
    fn selector_operators_parse_exactly_and_unknown_fails_closed() {
        for op in SelectorOperator::KNOWN {
            assert_eq!(SelectorOperator::parse(op.as_str().unwrap()), op);
        }
        assert_eq!(SelectorOperator::parse("in"), SelectorOperator::Unknown, "case-sensitive");
        assert_eq!(SelectorOperator::parse("Gt"), SelectorOperator::Unknown);
        let sel = |op: &str| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: op.into(),
                values: Some(vec!["media".into()]),
            }]),
        };
        let l = labels(&[("team", "media")]);
        assert!(selector_matches(&sel("In"), &l));
        assert!(selector_matches(&sel("Exists"), &l));
        assert!(!selector_matches(&sel("NotIn"), &l));
        assert!(!selector_matches(&sel("DoesNotExist"), &l));
        assert!(!selector_matches(&sel("Gt"), &l), "an unknown operator admits nothing");
    }

    #[test]
    fn maintenance_is_the_cure_only_while_degraded_for_timed_out() {
        use kopiur_api::repository::RepositoryStatus;
        let st = |phase: RepositoryPhase, reason: &str| {
            let mut s = RepositoryStatus { phase: Some(phase), ..Default::default() };
            s.conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: reason.into(),
                message: "m".into(),
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            });
            s
        };
        assert_eq!(maintenance_gate(Some(&st(RepositoryPhase::Degraded, "TimedOut"))), MaintenanceGate::Cure);
        assert_eq!(
            maintenance_gate(Some(&st(RepositoryPhase::Degraded, "BreakerOpen"))),
            MaintenanceGate::AsGated,
            "an unreachable backend keeps maintenance parked"
        );
        assert_eq!(maintenance_gate(Some(&st(RepositoryPhase::Failed, "TimedOut"))), MaintenanceGate::AsGated);
        assert_eq!(maintenance_gate(Some(&st(RepositoryPhase::Ready, "TimedOut"))), MaintenanceGate::AsGated);
        assert_eq!(maintenance_gate(None), MaintenanceGate::AsGated);
        let mut ready_true = st(RepositoryPhase::Degraded, "TimedOut");
        ready_true.conditions[0].status = "True".into();
        assert_eq!(maintenance_gate(Some(&ready_true)), MaintenanceGate::AsGated);
    }

    #[test]
    fn readiness_is_go_wait_or_blocked() {
        use kopiur_api::names::reason;
        let nr = |phase: &str| Gate::NotReady { repository: "t/r".into(), phase: phase.into() };
        assert_eq!(Gate::Open.readiness(), Readiness::Go);
        for p in [RepositoryPhase::Pending, RepositoryPhase::Initializing, RepositoryPhase::Degraded] {
            assert_eq!(nr(p.as_str()).readiness(), Readiness::Wait, "{p:?} heals by itself");
        }
        assert_eq!(nr("Failed").readiness(), Readiness::Blocked { reason: reason::REPOSITORY_NOT_READY });
        assert_eq!(nr(ABSENT).readiness(), Readiness::Blocked { reason: reason::REPOSITORY_NOT_FOUND });
        // A phase from a newer operator is never read as terminal: Wait.
        assert_eq!(nr("Hibernating").readiness(), Readiness::Wait);
        assert_eq!(
            Gate::NamespaceNotAllowed { repository: "shared".into() }.readiness(),
            Readiness::Blocked { reason: reason::NAMESPACE_NOT_ALLOWED }
        );
        assert!(nr(ABSENT).message().contains("t/r does not exist"), "{}", nr(ABSENT).message());
        assert!(nr("Failed").message().contains("needs a human"));
    }

    #[test]
    fn an_absent_repository_gates_not_found() {
        let repos: Store<Repository> = reflector::store().0;
        let crepos: Store<ClusterRepository> = reflector::store().0;
        let r = RepositoryRef { name: "gone".into(), kind: RepositoryKind::Repository, namespace: None };
        let g = repository_ready(&repos, &crepos, "t", None, &r);
        assert_eq!(g, Gate::NotReady { repository: "t/gone".into(), phase: ABSENT.into() });
        let c = RepositoryRef { name: "gone".into(), kind: RepositoryKind::ClusterRepository, namespace: None };
        assert_eq!(
            repository_ready(&repos, &crepos, "t", None, &c).readiness(),
            Readiness::Blocked { reason: reason::REPOSITORY_NOT_FOUND }
        );
    }

    /// Audit 2.9: another namespace's Repository admits only the namespaces it lists; its own
    /// namespace always. The refusal says whose list and how to change it.
    #[test]
    fn a_repository_of_another_namespace_admits_only_its_list() {
        let (reader, mut writer) = reflector::store::<Repository>();
        let crepos: Store<ClusterRepository> = reflector::store().0;
        let repo: Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "t1"},
            "spec": {"backend": {"filesystem": {"path": "/x"}}, "encryption": {"passwordSecretRef": {"name": "p"}},
                     "allowedNamespaces": ["t3"]},
            "status": {"phase": "Ready"}
        }))
        .unwrap();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(repo));
        let r = RepositoryRef { name: "r".into(), kind: RepositoryKind::Repository, namespace: Some("t1".into()) };
        assert_eq!(repository_ready(&reader, &crepos, "t1", None, &r), Gate::Open, "its own namespace");
        assert_eq!(repository_ready(&reader, &crepos, "t3", None, &r), Gate::Open, "a listed namespace");
        let g = repository_ready(&reader, &crepos, "t2", None, &r);
        assert_eq!(g, Gate::NamespaceNotAllowed { repository: "t1/r".into() });
        assert!(g.message().contains("spec.allowedNamespaces") && g.message().contains("-n t1"), "{}", g.message());
    }

    #[test]
    fn list_and_all() {
        assert!(namespace_allowed(&AllowedNamespaces::All(kopiur_api::shared::marker::True), "x", None));
        let l = AllowedNamespaces::List(vec!["a".into(), "b".into()]);
        assert!(namespace_allowed(&l, "b", None));
        assert!(!namespace_allowed(&l, "c", None));
    }

    #[test]
    fn selector_with_expressions_and_fail_closed() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("team", "media")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "NotIn".into(),
                values: Some(vec!["dev".into()]),
            }]),
        };
        let a = AllowedNamespaces::Selector(sel);
        assert!(namespace_allowed(&a, "n", Some(&labels(&[("team", "media"), ("env", "prod")]))));
        assert!(namespace_allowed(&a, "n", Some(&labels(&[("team", "media")]))));
        assert!(!namespace_allowed(&a, "n", Some(&labels(&[("team", "media"), ("env", "dev")]))));
        assert!(!namespace_allowed(&a, "n", Some(&labels(&[("team", "other")]))));
        assert!(!namespace_allowed(&a, "n", None), "unknown labels fail closed");
    }
}
