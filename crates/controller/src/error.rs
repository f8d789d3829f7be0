//! The controller's error type and its requeue classes, shared by every kind (crate root, so
//! no kind imports another for it).
//!
//! Every API call a reconcile makes names its step (`.step("create mover Job")`, the [`ApiStep`]
//! trait): there is no `From<kube::Error>`, so a bare `?` on an API call does not compile. The
//! requeue class follows the API server's answer (docs/design/reconcile-shape.md §1.5):
//! 403 is RBAC (the message names the verb and the resource, and the object goes Stalled),
//! 400 and 422 are terminal (the same request is refused again), 409, 429, 5xx and transport
//! failures are transient. A refusal by an admission policy (a ValidatingAdmissionPolicy or a
//! webhook, whatever its status code) is retried on the transient delay: whoever owns the policy
//! can lift it with no change to the object, and the run must then go on by itself.

use std::time::Duration as StdDuration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed; `step` names what the reconcile was doing.
    #[error("{}", api_message(step, source))]
    Api { step: &'static str, source: kube::Error },
    #[error("the work spec could not be built: {0}")]
    WorkSpec(String),
    /// Above the 100 KiB work-spec limit (too large for one environment variable).
    #[error("{0}")]
    WorkSpecTooLarge(String),
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The merged mover settings are refused (`crate::mover_settings`); no Job is created.
    #[error("{0}")]
    MoverRefused(crate::mover_settings::Refusal),
}

/// Names the step of an API call's failure: `api.create(..).await.step("create mover Job")?`.
pub trait ApiStep<T> {
    fn step(self, step: &'static str) -> Result<T, Error>;
}

impl<T> ApiStep<T> for Result<T, kube::Error> {
    fn step(self, step: &'static str) -> Result<T, Error> {
        self.map_err(|source| Error::Api { step, source })
    }
}

impl Error {
    /// A failed API call of `step`.
    pub fn api(step: &'static str, source: kube::Error) -> Error {
        Error::Api { step, source }
    }
}

impl From<kopiur_mover::job::JobError> for Error {
    fn from(e: kopiur_mover::job::JobError) -> Error {
        match e {
            kopiur_mover::job::JobError::WorkSpec(w @ kopiur_mover::workspec::WorkSpecError::TooLarge { .. }) => {
                Error::WorkSpecTooLarge(w.to_string())
            }
            other => Error::WorkSpec(other.to_string()),
        }
    }
}

/// What the API server answered, by HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiAnswer {
    /// 403: the controller's RBAC lacks a verb.
    Forbidden,
    /// 400, 422 (and other 4xx but 404, 408, 409, 429): the request itself is refused.
    Rejected,
    /// 404, 408, 409, 429, 5xx, and no answer at all (transport, decoding): retry.
    Transient,
}

impl ApiAnswer {
    pub fn of(e: &kube::Error) -> ApiAnswer {
        match e {
            kube::Error::Api(s) if admission_denial(&s.message) => ApiAnswer::Transient,
            kube::Error::Api(s) => match s.code {
                403 => ApiAnswer::Forbidden,
                404 | 408 | 409 | 429 => ApiAnswer::Transient,
                400..=499 => ApiAnswer::Rejected,
                _ => ApiAnswer::Transient,
            },
            _ => ApiAnswer::Transient,
        }
    }
}

/// A refusal by an admission policy rather than by the API server's own checks.
pub fn admission_denial(message: &str) -> bool {
    (message.contains("ValidatingAdmissionPolicy '") && message.contains(" denied request"))
        || (message.contains("admission webhook \"") && message.contains(" denied the request"))
}

/// What a 403 from the API server's RBAC says: the verb and resource (`create jobs.batch`), the
/// namespace and the user, from `User "u" cannot create resource "jobs" in API group "batch" in
/// the namespace "a"`; `None` when the message is not that text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub access: String,
    pub namespace: Option<String>,
    pub user: Option<String>,
}

fn quoted_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &text[text.find(marker)? + marker.len()..];
    rest.split_once('"').map(|(v, _)| v)
}

pub fn forbidden_access(message: &str) -> Option<Denied> {
    let rest = &message[message.find("cannot ")? + "cannot ".len()..];
    let (verb, rest) = rest.split_once(" resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let group = rest.strip_prefix(" in API group \"").and_then(|g| g.split_once('"')).map(|(g, _)| g);
    let verb = verb.trim();
    if verb.is_empty() || verb.contains(' ') || resource.is_empty() {
        return None;
    }
    let access = match group.filter(|g| !g.is_empty()) {
        Some(g) => format!("{verb} {resource}.{g}"),
        None => format!("{verb} {resource}"),
    };
    Some(Denied {
        access,
        namespace: quoted_after(rest, "in the namespace \"").map(str::to_string),
        user: quoted_after(message, "User \"").map(str::to_string),
    })
}

fn api_message(step: &str, source: &kube::Error) -> String {
    match (ApiAnswer::of(source), source) {
        (ApiAnswer::Forbidden, kube::Error::Api(s)) => match forbidden_access(&s.message) {
            Some(d) => {
                let (where_, ns_flag) = match &d.namespace {
                    Some(ns) => (format!(" in namespace {ns}"), format!(" -n {ns}")),
                    None => (" cluster-wide".to_string(), String::new()),
                };
                let as_flag = d.user.as_ref().map(|u| format!(" --as={u}")).unwrap_or_default();
                format!(
                    "{step}: RBAC: the controller may not {}{where_}; grant it in the controller's Role or \
                     ClusterRole (check: kubectl auth can-i {}{ns_flag}{as_flag}): {}",
                    d.access, d.access, s.message
                )
            }
            None => format!("{step}: the API server forbade the call (403 {}): {}", s.reason, s.message),
        },
        (ApiAnswer::Rejected, kube::Error::Api(s)) => {
            format!("{step}: the API server refused the request ({} {}): {}", s.code, s.reason, s.message)
        }
        _ => format!("{step}: Kubernetes API call failed: {source}"),
    }
}

/// Requeue classes: only the class decides timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueClass {
    Transient,
    Structural,
    Terminal,
}

impl RequeueClass {
    pub fn label(self) -> &'static str {
        match self {
            RequeueClass::Transient => "transient",
            RequeueClass::Structural => "structural",
            RequeueClass::Terminal => "terminal",
        }
    }
    pub fn requeue(self) -> StdDuration {
        match self {
            RequeueClass::Transient => StdDuration::from_secs(30),
            RequeueClass::Structural => StdDuration::from_secs(300),
            RequeueClass::Terminal => StdDuration::from_secs(1800),
        }
    }
}

impl Error {
    pub fn class(&self) -> RequeueClass {
        match self {
            Error::Api { source, .. } => match ApiAnswer::of(source) {
                ApiAnswer::Transient => RequeueClass::Transient,
                // A human grants the verb; no watch event says so, so re-checked every 5 minutes.
                ApiAnswer::Forbidden => RequeueClass::Structural,
                ApiAnswer::Rejected => RequeueClass::Terminal,
            },
            Error::WorkSpec(_) | Error::WorkSpecTooLarge(_) => RequeueClass::Structural,
            Error::InvalidSpec(_) => RequeueClass::Terminal,
            // A human changes the settings; re-checked every 5 minutes.
            Error::MoverRefused(_) => RequeueClass::Structural,
        }
    }

    /// The step of a failed API call.
    pub fn step(&self) -> Option<&'static str> {
        match self {
            Error::Api { step, .. } => Some(step),
            Error::WorkSpec(_) | Error::WorkSpecTooLarge(_) | Error::InvalidSpec(_) | Error::MoverRefused(_) => None,
        }
    }

    /// An error a retry cannot heal: the object goes Stalled with this message (the API server
    /// refused the controller's RBAC or the request itself).
    pub fn stalls(&self) -> bool {
        match self {
            Error::Api { source, .. } => ApiAnswer::of(source) != ApiAnswer::Transient,
            Error::WorkSpec(_) | Error::WorkSpecTooLarge(_) | Error::InvalidSpec(_) | Error::MoverRefused(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure(message, reason).with_code(code).boxed())
    }

    const FORBIDDEN: &str = "jobs.batch is forbidden: User \"system:serviceaccount:kopiur-system:kopiur\" \
                             cannot create resource \"jobs\" in API group \"batch\" in the namespace \"apps\"";

    #[test]
    fn a_403_names_the_verb_the_resource_and_the_step_and_is_not_retried_as_transient() {
        let e = Result::<(), _>::Err(api(403, "Forbidden", FORBIDDEN)).step("create mover Job").unwrap_err();
        assert_eq!(e.class(), RequeueClass::Structural);
        assert!(e.stalls());
        assert_eq!(e.step(), Some("create mover Job"));
        let m = e.to_string();
        assert!(
            m.starts_with(
                "create mover Job: RBAC: the controller may not create jobs.batch in namespace apps; grant it in \
                 the controller's Role or ClusterRole (check: kubectl auth can-i create jobs.batch -n apps \
                 --as=system:serviceaccount:kopiur-system:kopiur): "
            ),
            "{m}"
        );
        assert!(m.ends_with(FORBIDDEN), "{m}");
    }

    #[test]
    fn the_requeue_class_follows_the_http_status() {
        let class = |code, reason| Error::Api { step: "s", source: api(code, reason, "m") }.class();
        assert_eq!(class(400, "BadRequest"), RequeueClass::Terminal);
        assert_eq!(class(422, "Invalid"), RequeueClass::Terminal);
        assert_eq!(class(403, "Forbidden"), RequeueClass::Structural);
        for code in [404, 408, 409, 429, 500, 503, 504] {
            assert_eq!(class(code, "x"), RequeueClass::Transient, "{code}");
        }
        // As the API server words it (captured from policy_e2e).
        let vap = "snapshots.kopiur.home-operations.com \"old\" is forbidden: ValidatingAdmissionPolicy 'p' \
                   with binding 'p' denied request: no stamps here";
        assert_eq!(Error::Api { step: "s", source: api(422, "Invalid", vap) }.class(), RequeueClass::Transient);
        assert_eq!(Error::Api { step: "s", source: api(403, "Forbidden", vap) }.class(), RequeueClass::Transient);
        let hook = "admission webhook \"v.example.com\" denied the request: no";
        assert!(admission_denial(vap) && admission_denial(hook));
        assert!(!admission_denial(FORBIDDEN));
        assert_eq!(Error::Api { step: "s", source: api(400, "BadRequest", hook) }.class(), RequeueClass::Transient);
        let transport = Error::Api { step: "s", source: kube::Error::LinesCodecMaxLineLengthExceeded };
        assert_eq!(transport.class(), RequeueClass::Transient);
        assert!(!transport.stalls());
        let rejected = Error::Api { step: "patch Snapshot status", source: api(422, "Invalid", "spec.x: Invalid") };
        assert!(rejected.stalls());
        assert_eq!(
            rejected.to_string(),
            "patch Snapshot status: the API server refused the request (422 Invalid): spec.x: Invalid"
        );
    }

    #[test]
    fn forbidden_access_reads_core_and_grouped_resources_and_nothing_else() {
        let access = |m: &str| forbidden_access(m).map(|d| d.access);
        assert_eq!(access(FORBIDDEN).as_deref(), Some("create jobs.batch"));
        let d = forbidden_access(FORBIDDEN).unwrap();
        assert_eq!(d.namespace.as_deref(), Some("apps"));
        assert_eq!(d.user.as_deref(), Some("system:serviceaccount:kopiur-system:kopiur"));
        let core = "secrets \"s\" is forbidden: User \"u\" cannot get resource \"secrets\" in API group \"\" in the namespace \"a\"";
        assert_eq!(access(core).as_deref(), Some("get secrets"));
        let sub =
            "User \"u\" cannot patch resource \"snapshots/status\" in API group \"kopiur.dev\" in the namespace \"a\"";
        assert_eq!(access(sub).as_deref(), Some("patch snapshots/status.kopiur.dev"));
        let cluster = "User \"u\" cannot list resource \"nodes\" in API group \"\" at the cluster scope";
        assert_eq!(forbidden_access(cluster).map(|d| (d.access, d.namespace)), Some(("list nodes".into(), None)));
        assert_eq!(access("admission webhook denied the request"), None);
        assert_eq!(access("cannot  resource \"\""), None);
    }
}
