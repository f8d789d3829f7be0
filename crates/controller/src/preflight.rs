//! The SnapshotPolicy preflight CEL environment (docs/design/api-contract.md §6.3, docs/design/pipeline.md §8.3), pure: `compile`
//! turns `spec.preflight.checks` into programs (or the `InvalidPreflight` message), `evaluate`
//! runs them over the variables the Snapshot reconcile gathered from its stores.
//!
//! CEL itself only notices an unknown variable when it evaluates one, so `compile` walks each
//! parsed expression and rejects any identifier other than the declared roots `repository` and
//! `maintenance` (and variables bound by a macro such as `all`), and any field of those roots
//! that is not declared.
use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Program, Value};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::maintenance::MaintenanceStatus;
use kopiur_api::names::{condition, reason};
use kopiur_api::repository::{RepositoryPhase, RepositoryStatus};
use kopiur_api::snapshot_policy::{Preflight, PreflightCheck};

use crate::conditions::{Cond, CondStatus};

/// The root holding the repository's variables.
pub const REPOSITORY: &str = "repository";
/// The root holding the repository's Maintenance variables.
pub const MAINTENANCE: &str = "maintenance";

/// The declared fields of `repository`.
pub const REPOSITORY_FIELDS: &[&str] = &[
    "phase",
    "ready",
    "backendReachable",
    "snapshotCount",
    "snapshotCountKnown",
    "indexBlobCount",
    "indexBlobCountKnown",
    "sizeBytes",
    "sizeBytesKnown",
    "lastHealthyAgeSeconds",
    "lastHealthyAgeSecondsKnown",
    "lastReverifyAgeSeconds",
    "lastReverifyAgeSecondsKnown",
];

/// The declared fields of `maintenance`.
pub const MAINTENANCE_FIELDS: &[&str] = &["hasRun", "lastSuccessAgeSeconds"];

/// What an unknown number reads as (pair it with its `*Known` flag).
pub const UNKNOWN_NUMBER: i64 = i64::MAX;

/// One check that compiled.
pub struct CompiledCheck {
    pub name: String,
    pub message: Option<String>,
    program: Program,
    uses_maintenance: bool,
}

impl std::fmt::Debug for CompiledCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledCheck")
            .field("name", &self.name)
            .field("message", &self.message)
            .field("uses_maintenance", &self.uses_maintenance)
            .finish_non_exhaustive()
    }
}

/// Every check of a policy, compiled, in spec order.
#[derive(Debug, Default)]
pub struct Compiled {
    pub checks: Vec<CompiledCheck>,
}

impl Compiled {
    /// Whether any check reads `maintenance.*` (and so must wait for Maintenance data).
    pub fn uses_maintenance(&self) -> bool {
        self.checks.iter().any(|c| c.uses_maintenance)
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }
}

/// The repository variables. `None` numbers are unknown: they read as `i64::MAX` with their
/// `*Known` flag false.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepositoryVars {
    /// `status.phase`; empty while the repository has none.
    pub phase: String,
    pub ready: bool,
    pub backend_reachable: bool,
    pub snapshot_count: Option<i64>,
    pub index_blob_count: Option<i64>,
    pub size_bytes: Option<i64>,
    pub last_healthy_age_seconds: Option<i64>,
    pub last_reverify_age_seconds: Option<i64>,
}

/// The Maintenance variables. `last_success_age_seconds` is `None` (read as `i64::MAX`) when no
/// run has succeeded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceVars {
    pub has_run: bool,
    pub last_success_age_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    pub repository: RepositoryVars,
    pub maintenance: MaintenanceVars,
}

/// The result of evaluating every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The first failing check, in spec order; `message` is its `message`, else its name.
    Failed {
        check: String,
        message: String,
    },
}

/// Compiles `checks`. The error names the first offending check and says why, with the CEL
/// parse error verbatim; it becomes the policy's `InvalidPreflight` message.
pub fn compile(checks: &[PreflightCheck]) -> Result<Compiled, String> {
    let mut out = Vec::with_capacity(checks.len());
    for c in checks {
        let program = Program::compile(&c.expr)
            .map_err(|e| format!("preflight check {:?}: expression does not compile: {e}", c.name))?;
        let mut refs = Refs::default();
        walk(program.expression(), &mut Vec::new(), &mut refs);
        if let Some(bad) = refs.undeclared.first() {
            return Err(format!(
                "preflight check {:?}: undeclared variable {bad}; declared are repository.{{{}}} and maintenance.{{{}}}",
                c.name,
                REPOSITORY_FIELDS.join(", "),
                MAINTENANCE_FIELDS.join(", ")
            ));
        }
        out.push(CompiledCheck {
            name: c.name.clone(),
            message: c.message.clone(),
            program,
            uses_maintenance: refs.maintenance,
        });
    }
    Ok(Compiled { checks: out })
}

/// The checks of a policy's `spec.preflight`, compiled (`Ok` with none when absent).
pub fn compile_policy(preflight: Option<&Preflight>) -> Result<Compiled, String> {
    compile(preflight.and_then(|p| p.checks.as_deref()).unwrap_or_default())
}

#[derive(Default)]
struct Refs {
    undeclared: Vec<String>,
    maintenance: bool,
}

/// Collects references: `bound` holds the variables macros introduced in scope.
fn walk(e: &IdedExpr, bound: &mut Vec<String>, refs: &mut Refs) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if bound.iter().any(|b| b == name) {
                return;
            }
            match name.as_str() {
                REPOSITORY => {}
                MAINTENANCE => refs.maintenance = true,
                other => refs.undeclared.push(other.to_string()),
            }
        }
        Expr::Select(sel) => {
            select_ref(sel, bound, refs);
            walk(&sel.operand, bound, refs);
        }
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                walk(t, bound, refs);
            }
            for a in &call.args {
                walk(a, bound, refs);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, refs);
            walk(&c.accu_init, bound, refs);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, refs);
            walk(&c.loop_step, bound, refs);
            walk(&c.result, bound, refs);
            bound.truncate(depth);
        }
        Expr::List(l) => {
            for x in &l.elements {
                walk(x, bound, refs);
            }
        }
        Expr::Map(m) => walk_entries(&m.entries, bound, refs),
        Expr::Struct(s) => walk_entries(&s.entries, bound, refs),
    }
}

/// A field selected from a declared variable (`repository.x`, `maintenance.x`) must be one of
/// its declared fields.
fn select_ref(sel: &cel::common::ast::SelectExpr, bound: &[String], refs: &mut Refs) {
    let root = match &sel.operand.expr {
        Expr::Ident(name) if !bound.iter().any(|b| b == name) => Some(name.as_str()),
        Expr::Unspecified
        | Expr::Call(_)
        | Expr::Comprehension(_)
        | Expr::Ident(_)
        | Expr::List(_)
        | Expr::Literal(_)
        | Expr::Map(_)
        | Expr::Select(_)
        | Expr::Struct(_) => None,
    };
    let declared = match root {
        Some(REPOSITORY) => Some(REPOSITORY_FIELDS),
        Some(MAINTENANCE) => Some(MAINTENANCE_FIELDS),
        Some(_) | None => None,
    };
    if let (Some(root), Some(fields)) = (root, declared)
        && !fields.contains(&sel.field.as_str())
    {
        refs.undeclared.push(format!("{root}.{}", sel.field));
    }
}

/// The keys and values of a map or struct literal.
fn walk_entries(entries: &[cel::common::ast::IdedEntryExpr], bound: &mut Vec<String>, refs: &mut Refs) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(f) => walk(&f.value, bound, refs),
            EntryExpr::MapEntry(me) => {
                walk(&me.key, bound, refs);
                walk(&me.value, bound, refs);
            }
        }
    }
}

fn number(v: Option<i64>) -> (Value, Value) {
    (Value::Int(v.unwrap_or(UNKNOWN_NUMBER)), Value::Bool(v.is_some()))
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let m: HashMap<String, Value> = entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    Value::from(m)
}

fn repository_value(r: &RepositoryVars) -> Value {
    let mut entries = vec![
        ("phase", Value::String(Arc::new(r.phase.clone()))),
        ("ready", Value::Bool(r.ready)),
        ("backendReachable", Value::Bool(r.backend_reachable)),
    ];
    for (name, known, v) in [
        ("snapshotCount", "snapshotCountKnown", r.snapshot_count),
        ("indexBlobCount", "indexBlobCountKnown", r.index_blob_count),
        ("sizeBytes", "sizeBytesKnown", r.size_bytes),
        ("lastHealthyAgeSeconds", "lastHealthyAgeSecondsKnown", r.last_healthy_age_seconds),
        ("lastReverifyAgeSeconds", "lastReverifyAgeSecondsKnown", r.last_reverify_age_seconds),
    ] {
        let (value, is_known) = number(v);
        entries.push((name, value));
        entries.push((known, is_known));
    }
    map(entries)
}

fn maintenance_value(m: &MaintenanceVars) -> Value {
    map(vec![
        ("hasRun", Value::Bool(m.has_run)),
        ("lastSuccessAgeSeconds", Value::Int(m.last_success_age_seconds.unwrap_or(UNKNOWN_NUMBER))),
    ])
}

/// Evaluates every check in spec order; the first that is not `true` fails. An evaluation
/// error, or a result that is not a bool, counts as false.
pub fn evaluate(compiled: &Compiled, vars: &Vars) -> Outcome {
    let mut ctx = Context::default();
    ctx.add_variable_from_value(REPOSITORY, repository_value(&vars.repository));
    ctx.add_variable_from_value(MAINTENANCE, maintenance_value(&vars.maintenance));
    for c in &compiled.checks {
        let passed = match c.program.execute(&ctx) {
            Ok(Value::Bool(b)) => b,
            Ok(other) => {
                tracing::debug!(check = %c.name, result = ?other, "preflight check did not evaluate to a bool");
                false
            }
            Err(e) => {
                tracing::debug!(check = %c.name, error = %e, "preflight check failed to evaluate");
                false
            }
        };
        if !passed {
            return Outcome::Failed {
                check: c.name.clone(),
                message: c.message.clone().unwrap_or_else(|| c.name.clone()),
            };
        }
    }
    Outcome::Passed
}

/// Folds the policy's preflight verdict into its desired conditions. A check that does not
/// compile (or names an undeclared variable) replaces Ready with Ready=False/`InvalidPreflight`
/// and sets Stalled=True with the same reason and the error (unless another Stalled reason is
/// already set). Once fixed, a Stalled left by `InvalidPreflight` in `existing` is cleared.
pub fn apply_policy_conditions(conds: &mut Vec<Cond>, existing: &[Condition], preflight: Option<&Preflight>) {
    match compile_policy(preflight) {
        Err(message) => {
            conds.retain(|c| c.type_ != "Ready");
            conds.push(Cond {
                type_: "Ready",
                status: CondStatus::False,
                reason: reason::INVALID_PREFLIGHT.into(),
                message: message.clone(),
            });
            // A Stalled=False from elsewhere in this pass must not hide the stall.
            conds.retain(|c| !(c.type_ == condition::STALLED && c.status == CondStatus::False));
            if !conds.iter().any(|c| c.type_ == condition::STALLED) {
                conds.push(Cond {
                    type_: condition::STALLED,
                    status: CondStatus::True,
                    reason: reason::INVALID_PREFLIGHT.into(),
                    message,
                });
            }
        }
        Ok(_) => {
            let stalled_by_us = existing
                .iter()
                .any(|c| c.type_ == condition::STALLED && c.status == "True" && c.reason == reason::INVALID_PREFLIGHT);
            if stalled_by_us && !conds.iter().any(|c| c.type_ == condition::STALLED) {
                let ready = conds.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone());
                conds.push(Cond {
                    type_: condition::STALLED,
                    status: CondStatus::False,
                    reason: ready.unwrap_or_else(|| "PreflightValid".into()),
                    message: String::new(),
                });
            }
        }
    }
}

/// The repository variables from its status (absent status: everything unknown).
pub fn repository_vars(status: Option<&RepositoryStatus>, now: DateTime<Utc>) -> RepositoryVars {
    let Some(st) = status else { return RepositoryVars::default() };
    let stats = st.storage_stats.as_ref();
    RepositoryVars {
        phase: st.phase.as_ref().map(|p| p.to_string()).unwrap_or_default(),
        ready: st.phase.as_ref().is_some_and(RepositoryPhase::admits_consumers),
        backend_reachable: st.conditions.iter().any(|c| c.type_ == condition::BACKEND_REACHABLE && c.status == "True"),
        snapshot_count: stats.and_then(|s| s.snapshot_count),
        index_blob_count: stats.and_then(|s| s.index_blob_count),
        size_bytes: stats.and_then(|s| s.total_size_bytes),
        last_healthy_age_seconds: age_seconds(st.health.as_ref().and_then(|h| h.last_healthy_at), now),
        last_reverify_age_seconds: age_seconds(st.last_reverify_at, now),
    }
}

/// The Maintenance variables over every Maintenance of the repository: a tier's `lastRunAt` is
/// written only by a successful run, so the newest one is the last success.
pub fn maintenance_vars<'a>(
    statuses: impl IntoIterator<Item = &'a MaintenanceStatus>,
    now: DateTime<Utc>,
) -> MaintenanceVars {
    let last = statuses
        .into_iter()
        .flat_map(|s| [s.quick.as_ref(), s.full.as_ref()])
        .flatten()
        .filter_map(|t| t.last_run_at)
        .max();
    MaintenanceVars { has_run: last.is_some(), last_success_age_seconds: age_seconds(last, now) }
}

/// Whole seconds from `t` to `now`, never negative (a clock skew reads as 0).
pub fn age_seconds(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<i64> {
    t.map(|t| (now - t).num_seconds().max(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn check(name: &str, expr: &str) -> PreflightCheck {
        PreflightCheck { name: name.into(), expr: expr.into(), message: None }
    }

    fn known_vars() -> Vars {
        Vars {
            repository: RepositoryVars {
                phase: "Ready".into(),
                ready: true,
                backend_reachable: true,
                snapshot_count: Some(12),
                index_blob_count: Some(7),
                size_bytes: Some(4096),
                last_healthy_age_seconds: Some(30),
                last_reverify_age_seconds: Some(90),
            },
            maintenance: MaintenanceVars { has_run: true, last_success_age_seconds: Some(3600) },
        }
    }

    fn eval(expr: &str, vars: &Vars) -> Outcome {
        evaluate(&compile(&[check("c", expr)]).unwrap(), vars)
    }

    fn passes(expr: &str, vars: &Vars) -> bool {
        match eval(expr, vars) {
            Outcome::Passed => true,
            Outcome::Failed { .. } => false,
        }
    }

    #[test]
    fn a_parse_error_is_reported_with_the_check_name_and_the_cel_error() {
        let err = compile(&[check("ok", "repository.ready"), check("repo", "repository.ready &&")]).unwrap_err();
        assert!(err.starts_with("preflight check \"repo\": expression does not compile: "), "{err}");
        assert!(err.len() > "preflight check \"repo\": expression does not compile: ".len(), "the CEL error is kept");
    }

    #[test]
    fn an_undeclared_root_variable_is_rejected_at_compile_time() {
        let err = compile(&[check("x", "repo.ready")]).unwrap_err();
        assert!(err.contains("preflight check \"x\": undeclared variable repo;"), "{err}");
        let err = compile(&[check("x", "repository.ready && size(foo) > 0")]).unwrap_err();
        assert!(err.contains("undeclared variable foo"), "{err}");
    }

    #[test]
    fn an_undeclared_field_is_rejected_at_compile_time() {
        let err = compile(&[check("x", "repository.reachable")]).unwrap_err();
        assert!(err.contains("undeclared variable repository.reachable"), "{err}");
        let err = compile(&[check("y", "maintenance.lastRunAgeSeconds < 10")]).unwrap_err();
        assert!(err.contains("undeclared variable maintenance.lastRunAgeSeconds"), "{err}");
        // has() is a test of a field: still a field of the root.
        let err = compile(&[check("z", "has(repository.nope)")]).unwrap_err();
        assert!(err.contains("repository.nope"), "{err}");
    }

    #[test]
    fn macro_bound_variables_are_not_undeclared() {
        let c = compile(&[check("m", "[1, 2].all(x, x < repository.snapshotCount)")]).unwrap();
        assert_eq!(evaluate(&c, &known_vars()), Outcome::Passed);
        // Outside its macro, the name is not bound.
        assert!(compile(&[check("m", "[1].all(x, x > 0) && x > 0")]).is_err());
    }

    #[test]
    fn every_declared_field_compiles() {
        for f in REPOSITORY_FIELDS {
            compile(&[check("r", &format!("repository.{f} == repository.{f}"))]).unwrap();
        }
        for f in MAINTENANCE_FIELDS {
            compile(&[check("m", &format!("maintenance.{f} == maintenance.{f}"))]).unwrap();
        }
    }

    #[test]
    fn each_variable_reads_its_value() {
        let v = known_vars();
        for expr in [
            "repository.phase == 'Ready'",
            "repository.ready",
            "repository.backendReachable",
            "repository.snapshotCount == 12 && repository.snapshotCountKnown",
            "repository.indexBlobCount == 7 && repository.indexBlobCountKnown",
            "repository.sizeBytes == 4096 && repository.sizeBytesKnown",
            "repository.lastHealthyAgeSeconds == 30 && repository.lastHealthyAgeSecondsKnown",
            "repository.lastReverifyAgeSeconds == 90 && repository.lastReverifyAgeSecondsKnown",
            "maintenance.hasRun",
            "maintenance.lastSuccessAgeSeconds == 3600",
        ] {
            assert!(passes(expr, &v), "{expr} should hold");
        }
        let mut off = v.clone();
        off.repository.ready = false;
        off.repository.backend_reachable = false;
        off.repository.phase = "Degraded".into();
        off.maintenance.has_run = false;
        for expr in
            ["repository.ready", "repository.backendReachable", "repository.phase == 'Ready'", "maintenance.hasRun"]
        {
            assert!(!passes(expr, &off), "{expr} should not hold");
        }
    }

    #[test]
    fn unknown_numbers_read_as_i64_max_with_known_false() {
        let mut v = known_vars();
        v.repository = RepositoryVars { phase: "Ready".into(), ready: true, ..RepositoryVars::default() };
        v.maintenance = MaintenanceVars::default();
        for f in ["snapshotCount", "indexBlobCount", "sizeBytes", "lastHealthyAgeSeconds", "lastReverifyAgeSeconds"] {
            assert!(passes(&format!("repository.{f} == 9223372036854775807"), &v), "{f} unknown = i64::MAX");
            assert!(passes(&format!("!repository.{f}Known"), &v), "{f}Known is false");
        }
        assert!(passes("maintenance.lastSuccessAgeSeconds == 9223372036854775807", &v));
        assert!(passes("!maintenance.hasRun", &v));
        // An age check without its Known flag fails closed on an unknown age.
        assert!(!passes("repository.lastHealthyAgeSeconds < 3600", &v));
    }

    #[test]
    fn an_evaluation_error_counts_as_false() {
        let v = known_vars();
        // Division by zero and a type mismatch both error at evaluation.
        assert!(!passes("repository.snapshotCount / 0 > 0", &v));
        assert!(!passes("repository.phase > 3", &v));
        // A non-bool result is not a pass either.
        assert!(!passes("repository.snapshotCount", &v));
        // Overflow past i64::MAX errors too (an unknown number plus one).
        let mut u = v.clone();
        u.repository.snapshot_count = None;
        assert!(!passes("repository.snapshotCount + 1 > 0", &u));
    }

    #[test]
    fn the_first_failing_check_wins_and_its_message_falls_back_to_its_name() {
        let mut with_message = check("reachable", "repository.backendReachable");
        with_message.message = Some("the backend is unreachable".into());
        let checks = vec![check("ready", "repository.ready"), with_message, check("fresh", "maintenance.hasRun")];
        let c = compile(&checks).unwrap();
        let mut v = known_vars();
        assert_eq!(evaluate(&c, &v), Outcome::Passed);
        v.repository.backend_reachable = false;
        v.maintenance.has_run = false;
        assert_eq!(
            evaluate(&c, &v),
            Outcome::Failed { check: "reachable".into(), message: "the backend is unreachable".into() }
        );
        v.repository.backend_reachable = true;
        assert_eq!(evaluate(&c, &v), Outcome::Failed { check: "fresh".into(), message: "fresh".into() });
    }

    #[test]
    fn maintenance_use_is_detected() {
        assert!(!compile(&[check("a", "repository.ready")]).unwrap().uses_maintenance());
        assert!(
            compile(&[check("a", "repository.ready"), check("b", "maintenance.hasRun")]).unwrap().uses_maintenance()
        );
        assert!(compile_policy(None).unwrap().is_empty());
    }

    fn preflight(checks: Vec<PreflightCheck>) -> Preflight {
        Preflight { checks: Some(checks), timeout: kopiur_api::Duration::from_secs(600) }
    }

    fn ready_true() -> Vec<Cond> {
        vec![Cond { type_: "Ready", status: CondStatus::True, reason: "Ready".into(), message: String::new() }]
    }

    #[test]
    fn an_invalid_check_stalls_the_policy_with_the_cel_error() {
        let p = preflight(vec![check("repo", "repository.ready &&")]);
        let mut conds = ready_true();
        apply_policy_conditions(&mut conds, &[], Some(&p));
        let ready: Vec<_> = conds.iter().filter(|c| c.type_ == "Ready").collect();
        assert_eq!(ready.len(), 1, "Ready is replaced, not duplicated");
        assert_eq!(ready[0].status, CondStatus::False);
        assert_eq!(ready[0].reason, "InvalidPreflight");
        assert!(ready[0].message.contains("\"repo\": expression does not compile"), "{}", ready[0].message);
        let stalled = conds.iter().find(|c| c.type_ == "Stalled").unwrap();
        assert_eq!((stalled.status, stalled.reason.as_str()), (CondStatus::True, "InvalidPreflight"));
        assert_eq!(stalled.message, ready[0].message);

        // A Stalled=False desired by another check of the same pass gives way; a True one stays.
        let mut conds = ready_true();
        conds.push(Cond { type_: "Stalled", status: CondStatus::False, reason: "Ready".into(), message: "".into() });
        apply_policy_conditions(&mut conds, &[], Some(&p));
        let stalled: Vec<_> = conds.iter().filter(|c| c.type_ == "Stalled").collect();
        assert_eq!(stalled.len(), 1);
        assert_eq!((stalled[0].status, stalled[0].reason.as_str()), (CondStatus::True, "InvalidPreflight"));
        let mut conds = ready_true();
        conds.push(Cond {
            type_: "Stalled",
            status: CondStatus::True,
            reason: "IdentityCollision".into(),
            message: "".into(),
        });
        apply_policy_conditions(&mut conds, &[], Some(&p));
        let stalled: Vec<_> = conds.iter().filter(|c| c.type_ == "Stalled").collect();
        assert_eq!((stalled.len(), stalled[0].reason.as_str()), (1, "IdentityCollision"));

        let p = preflight(vec![check("undeclared", "backend.ok")]);
        let mut conds = ready_true();
        apply_policy_conditions(&mut conds, &[], Some(&p));
        assert!(conds.iter().any(|c| c.type_ == "Stalled" && c.message.contains("undeclared variable backend")));
    }

    #[test]
    fn a_valid_preflight_leaves_the_conditions_alone_and_clears_its_own_stall() {
        let p = preflight(vec![check("reachable", "repository.backendReachable")]);
        let mut conds = ready_true();
        apply_policy_conditions(&mut conds, &[], Some(&p));
        assert_eq!(conds, ready_true());
        apply_policy_conditions(&mut conds, &[], None);
        assert_eq!(conds, ready_true());
        let stale = Condition {
            type_: "Stalled".into(),
            status: "True".into(),
            reason: "InvalidPreflight".into(),
            message: "old".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        };
        apply_policy_conditions(&mut conds, std::slice::from_ref(&stale), Some(&p));
        let stalled = conds.iter().find(|c| c.type_ == "Stalled").unwrap();
        assert_eq!((stalled.status, stalled.reason.as_str()), (CondStatus::False, "Ready"));
        // Another reason's stall is not ours to clear.
        let mut conds = ready_true();
        let other = Condition { reason: "IdentityCollision".into(), ..stale };
        apply_policy_conditions(&mut conds, &[other], Some(&p));
        assert_eq!(conds, ready_true());
    }

    #[test]
    fn repository_vars_map_the_status() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        assert_eq!(repository_vars(None, now), RepositoryVars::default());
        let st: RepositoryStatus = serde_json::from_value(serde_json::json!({
            "phase": "Ready",
            "lastReverifyAt": "2026-03-01T11:59:00Z",
            "storageStats": {"snapshotCount": 3, "totalSizeBytes": 2048, "indexBlobCount": 5},
            "health": {"consecutiveProbeFailures": 0, "lastHealthyAt": "2026-03-01T11:00:00Z"},
            "conditions": [{"type": "BackendReachable", "status": "True", "reason": "Reachable", "message": "",
                            "lastTransitionTime": "2026-03-01T11:00:00Z"}]
        }))
        .unwrap();
        let v = repository_vars(Some(&st), now);
        assert_eq!(
            v,
            RepositoryVars {
                phase: "Ready".into(),
                ready: true,
                backend_reachable: true,
                snapshot_count: Some(3),
                index_blob_count: Some(5),
                size_bytes: Some(2048),
                last_healthy_age_seconds: Some(3600),
                last_reverify_age_seconds: Some(60),
            }
        );
        let degraded: RepositoryStatus = serde_json::from_value(serde_json::json!({
            "phase": "Degraded",
            "conditions": [{"type": "BackendReachable", "status": "False", "reason": "Unreachable", "message": "",
                            "lastTransitionTime": "2026-03-01T11:00:00Z"}]
        }))
        .unwrap();
        let v = repository_vars(Some(&degraded), now);
        assert_eq!((v.phase.as_str(), v.ready, v.backend_reachable), ("Degraded", false, false));
        assert_eq!(v.snapshot_count, None);
    }

    #[test]
    fn maintenance_vars_take_the_newest_successful_run() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        assert_eq!(maintenance_vars([], now), MaintenanceVars { has_run: false, last_success_age_seconds: None });
        let never: MaintenanceStatus =
            serde_json::from_value(serde_json::json!({"quick": {"consecutiveFailures": 2}})).unwrap();
        assert!(!maintenance_vars([&never], now).has_run);
        let ran: MaintenanceStatus = serde_json::from_value(serde_json::json!({
            "quick": {"lastRunAt": "2026-03-01T11:00:00Z", "consecutiveFailures": 0},
            "full": {"lastRunAt": "2026-02-28T12:00:00Z", "consecutiveFailures": 1}
        }))
        .unwrap();
        assert_eq!(
            maintenance_vars([&never, &ran], now),
            MaintenanceVars { has_run: true, last_success_age_seconds: Some(3600) }
        );
    }

    #[test]
    fn ages_are_whole_seconds_and_never_negative() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        assert_eq!(age_seconds(Some(now - Duration::milliseconds(90_500)), now), Some(90));
        assert_eq!(age_seconds(Some(now + Duration::seconds(5)), now), Some(0));
        assert_eq!(age_seconds(None, now), None);
    }
}
