//! What the plugin prints, as pure functions of what it read (and the time, passed in), so the
//! wording and the arithmetic are unit-tested without a cluster.
use chrono::{DateTime, Utc};
use kopiur_api::names::{annotation, condition};
use kopiur_api::repository::RepositoryStatus;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::shared::status::ResolvedRepository;

/// Where a command looked: every namespace, or one. Printed as `all namespaces` or
/// `namespace demo`, so the output always says what it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Namespace(String),
}

impl Scope {
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::All => None,
            Scope::Namespace(n) => Some(n),
        }
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.namespace().is_none_or(|n| n == namespace)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::All => f.write_str("all namespaces"),
            Scope::Namespace(n) => write!(f, "namespace {n}"),
        }
    }
}

/// One Repository or ClusterRepository, as read.
#[derive(Clone, Debug, PartialEq)]
pub struct RepoRow {
    /// `Repository` or `ClusterRepository`.
    pub kind: &'static str,
    /// None for a ClusterRepository.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
    pub status: RepositoryStatus,
}

/// One Snapshot, as read: what the status table counts.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapRow {
    pub namespace: String,
    pub name: String,
    /// `Deleting` once it has a deletion timestamp, `Pending` before its first status.
    pub phase: String,
    /// `status.resolved.repository`: the repository the operator pinned it to.
    pub repository: Option<ResolvedRepository>,
}

impl SnapRow {
    /// Whether the Snapshot is pinned to this repository: same kind and name, same namespace
    /// for a Repository (an absent one is the Snapshot's own), and the same uid when both are
    /// known, so a deleted-and-recreated namesake's Snapshots are not counted as its.
    pub fn is_of(&self, r: &RepoRow) -> bool {
        let Some(p) = &self.repository else { return false };
        let same_kind = match p.kind {
            RepositoryKind::Repository => r.kind == "Repository",
            RepositoryKind::ClusterRepository => r.kind == "ClusterRepository",
        };
        let same_namespace = match p.kind {
            RepositoryKind::Repository => {
                r.namespace.as_deref() == Some(p.namespace.as_deref().unwrap_or(&self.namespace))
            }
            RepositoryKind::ClusterRepository => true,
        };
        let same_uid = match (&p.uid, &r.uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        same_kind && same_namespace && p.name == r.name && same_uid
    }
}

/// The SNAPSHOTS cell: the Snapshot objects pinned to the repository and how many of them
/// Succeeded, e.g. `3 (2 Succeeded)`; `0` when none.
pub fn snapshots_cell(r: &RepoRow, snaps: &[SnapRow]) -> String {
    let mine: Vec<&SnapRow> = snaps.iter().filter(|s| s.is_of(r)).collect();
    if mine.is_empty() {
        return "0".into();
    }
    let succeeded = mine.iter().filter(|s| s.phase == "Succeeded").count();
    format!("{} ({succeeded} Succeeded)", mine.len())
}

impl RepoRow {
    fn phase(&self) -> &str {
        self.status.phase.as_ref().map(|p| p.as_str()).unwrap_or("Pending")
    }

    fn condition(&self, type_: &str) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `-n <ns>` for a Repository, nothing for a ClusterRepository.
    fn ns_flag(&self) -> String {
        self.namespace.as_ref().map(|n| format!(" -n {n}")).unwrap_or_default()
    }

    fn resource(&self) -> &'static str {
        if self.namespace.is_some() { "repository" } else { "clusterrepository" }
    }

    fn held(&self) -> i32 {
        self.status.deletion_protection.as_ref().map_or(0, |d| d.held)
    }
}

/// `3m`, `2h5m`, `4d3h`: coarse and short, for a table cell.
pub fn age(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// The breaker cell: `closed`, or `open 12m, retry in 3m` from the stamped holdoff.
pub fn breaker(status: &RepositoryStatus, now: DateTime<Utc>) -> String {
    let Some(h) = &status.health else { return "-".into() };
    let Some(opened) = &h.breaker_opened_at else {
        return if h.consecutive_probe_failures > 0 {
            format!("closed ({} failed probe(s))", h.consecutive_probe_failures)
        } else {
            "closed".into()
        };
    };
    let mut out = format!("open {}", age(now - *opened));
    if let Some(next) = h.strict_retry.as_ref().and_then(|r| r.next_attempt_at.as_ref()) {
        if *next > now {
            out.push_str(&format!(", retry in {}", age(*next - now)));
        } else {
            out.push_str(", retrying");
        }
    }
    out
}

/// Left-aligned columns separated by three spaces, like kubectl.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// What to try when nothing was found in a namespace.
fn elsewhere(scope: &Scope) -> &'static str {
    match scope {
        Scope::All => "",
        Scope::Namespace(_) => " (-A looks in all namespaces)",
    }
}

/// The repositories table (found in `scope`, plus every ClusterRepository) plus one line of
/// advice per repository that needs attention. SNAPSHOTS counts the `snaps` pinned to each.
pub fn repositories(rows: &[RepoRow], snaps: &[SnapRow], scope: &Scope, now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return format!("No Repository in {scope} and no ClusterRepository{}.\n", elsewhere(scope));
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let reachable = r.condition(condition::BACKEND_REACHABLE).map_or("-".to_string(), |c| c.status.clone());
            let snapshots = snapshots_cell(r, snaps);
            vec![
                r.namespace.clone().unwrap_or_else(|| "(cluster)".into()),
                r.name.clone(),
                r.phase().to_string(),
                reachable,
                breaker(&r.status, now),
                r.held().to_string(),
                snapshots,
            ]
        })
        .collect();
    let mut out = table(&["NAMESPACE", "NAME", "PHASE", "REACHABLE", "BREAKER", "HELD-DELETIONS", "SNAPSHOTS"], &cells);
    for r in rows {
        out.push_str(&advice(r));
    }
    out
}

/// What to do about one repository, or nothing when it is healthy.
pub fn advice(r: &RepoRow) -> String {
    let who = format!("{} {}{}", r.resource(), r.name, r.ns_flag());
    let mut out = String::new();
    let ready = r.condition("Ready");
    match r.phase() {
        "Ready" => {}
        "Degraded" => out.push_str(&format!(
            "  {who}: Degraded, the backend is unreachable; consumers are parked and resume by themselves on \
             recovery. Check now: kubectl kopiur reverify {}{}\n",
            r.name,
            r.ns_flag()
        )),
        phase => {
            let why = ready.map(|c| format!("{}: {}", c.reason, c.message)).unwrap_or_default();
            out.push_str(&format!("  {who}: {phase} {why}\n"));
        }
    }
    if r.held() > 0 {
        out.push_str(&format!(
            "  {who}: {} external deletion(s) held by the mass-deletion breaker; nothing is deleted until you \
             acknowledge: kubectl kopiur ack {}{} (shows what it releases first)\n",
            r.held(),
            r.name,
            r.ns_flag()
        ));
    }
    out
}

/// Snapshot counts per phase, in a fixed order; phases this version does not know are listed
/// after, by name.
pub fn phase_counts(phases: &[String]) -> String {
    const ORDER: [&str; 7] = ["Pending", "Running", "Succeeded", "Unchanged", "Failed", "Discovered", "Deleting"];
    let mut counts: Vec<(String, usize)> = ORDER.iter().map(|p| (p.to_string(), 0)).collect();
    for p in phases {
        match counts.iter_mut().find(|(k, _)| k == p) {
            Some((_, n)) => *n += 1,
            None => counts.push((p.clone(), 1)),
        }
    }
    counts.into_iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// The `allow-mass-deletion` ack value: whole seconds, UTC (`2026-11-30T03:04:05Z`).
pub fn ack_value(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses `--at`; the operator clamps a future value to now, so one is refused here instead
/// of silently meaning something else.
pub fn parse_ack_at(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let at = DateTime::parse_from_rfc3339(raw)
        .map_err(|e| format!("--at {raw:?} is not an RFC 3339 time (e.g. 2026-11-30T03:04:05Z): {e}"))?
        .with_timezone(&Utc);
    if at > now {
        return Err(format!("--at {raw} is in the future; an ack releases deletions requested at or before it"));
    }
    Ok(at)
}

/// What `ack` is about to do, printed before it does it.
pub fn ack_plan(r: &RepoRow, at: DateTime<Utc>) -> String {
    let dp = r.status.deletion_protection.clone().unwrap_or_default();
    let previous = dp.ack.as_ref().map(|a| a.value.clone());
    format!(
        "{} {}{}: {} external deletion(s) pending, {} held by the mass-deletion breaker.\n\
         Acknowledging at {} releases every pending deletion requested at or before that time: their kopia \
         snapshots are deleted and cannot be recovered.{}\n",
        r.resource(),
        r.name,
        r.ns_flag(),
        dp.pending_external,
        dp.held,
        ack_value(at),
        previous.map(|p| format!(" (The ack in effect is {p}.)")).unwrap_or_default()
    )
}

/// The annotation patch an ack writes.
pub fn ack_patch(at: DateTime<Utc>) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {annotation::ALLOW_MASS_DELETION: ack_value(at)}}})
}

/// A Kubernetes object name for a manual run: `<base>-manual-<unix seconds>`, cut to fit 63
/// characters (the Job name derived from it must stay a valid label value).
pub fn manual_name(base: &str, now: DateTime<Utc>) -> String {
    let suffix = format!("-manual-{}", now.timestamp());
    let keep = 63usize.saturating_sub(suffix.len());
    let head: String = base.chars().take(keep).collect();
    format!("{}{suffix}", head.trim_end_matches('-'))
}

/// One doctor finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub what: String,
}

impl Finding {
    pub fn ok(what: impl Into<String>) -> Finding {
        Finding { level: Level::Ok, what: what.into() }
    }
    pub fn warn(what: impl Into<String>) -> Finding {
        Finding { level: Level::Warn, what: what.into() }
    }
    pub fn fail(what: impl Into<String>) -> Finding {
        Finding { level: Level::Fail, what: what.into() }
    }
}

/// The doctor's report and its exit code: 1 when anything failed.
pub fn doctor(findings: &[Finding]) -> (String, i32) {
    let mut out = String::new();
    for f in findings {
        let tag = match f.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        out.push_str(&format!("[{tag}] {}\n", f.what));
    }
    let fails = findings.iter().filter(|f| f.level == Level::Fail).count();
    let warns = findings.iter().filter(|f| f.level == Level::Warn).count();
    out.push_str(&format!("{fails} failed, {warns} warning(s), {} ok\n", findings.len() - fails - warns));
    (out, i32::from(fails > 0))
}

/// The doctor's findings for the repositories found in `scope` (plus every
/// ClusterRepository, unless `cluster_unlisted` says why they could not be listed): how
/// many, where it looked, then each one's phase and next step.
pub fn repository_findings(scope: &Scope, rows: &[RepoRow], cluster_unlisted: Option<&str>) -> Vec<Finding> {
    let cluster = rows.iter().filter(|r| r.namespace.is_none()).count();
    let namespaced = rows.len() - cluster;
    let clusters = match cluster_unlisted {
        None => format!("ClusterRepositories: {cluster}"),
        Some(why) => format!("ClusterRepositories: cannot list them ({why})"),
    };
    if rows.is_empty() {
        let none = if cluster_unlisted.is_some() { clusters } else { "no ClusterRepository".into() };
        return vec![Finding::warn(format!(
            "no Repository in {scope}; {none}: create one (docs/backups.md §1){}",
            elsewhere(scope)
        ))];
    }
    let mut out = vec![Finding::ok(format!("Repositories in {scope}: {namespaced}; {clusters}"))];
    for r in rows {
        let who = format!("{} {}", r.kind, r.namespace.as_ref().map_or(r.name.clone(), |n| format!("{n}/{}", r.name)));
        let advice = advice(r);
        let what = if advice.is_empty() { format!("{who}: {}", r.phase()) } else { advice.trim().to_string() };
        out.push(match r.phase() {
            "Ready" if advice.is_empty() => Finding::ok(what),
            "Failed" => Finding::fail(what),
            _ => Finding::warn(what),
        });
    }
    out
}

/// The doctor's finding for the Snapshots in `scope`: how many, and the Failed ones
/// (`namespace/name (reason)`), five of them named.
pub fn snapshot_finding(scope: &Scope, total: usize, failed: &[String]) -> Finding {
    if failed.is_empty() {
        return Finding::ok(format!("Snapshots in {scope}: {total}, none Failed"));
    }
    let shown: Vec<&str> = failed.iter().take(5).map(String::as_str).collect();
    Finding::warn(format!(
        "Snapshots in {scope}: {total}, {} Failed, e.g. {}; see kubectl describe snapshot",
        failed.len(),
        shown.join(", ")
    ))
}

/// Said when listing in all namespaces was forbidden and the command looked in the
/// kubeconfig context's namespace instead.
pub fn fallback_note(what: &str, looked: &Scope, why: &str) -> String {
    format!(
        "cannot list {what} in all namespaces ({why}); looked in {looked} only (the kubeconfig context's; -n picks another)"
    )
}

/// The doctor's finding for the leader Lease: fresh means renewed within three lease
/// durations.
pub fn lease_finding(
    holder: Option<&str>,
    renewed: Option<DateTime<Utc>>,
    duration_s: i64,
    now: DateTime<Utc>,
) -> Finding {
    match (holder, renewed) {
        (Some(h), Some(t)) if now - t <= chrono::Duration::seconds(3 * duration_s.max(1)) => {
            Finding::ok(format!("the operator is running: leader {h}, lease renewed {} ago", age(now - t)))
        }
        (Some(h), Some(t)) => Finding::fail(format!(
            "the leader lease (holder {h}) was last renewed {} ago: the operator is not running or cannot reach \
             the API server; check its Deployment and logs",
            age(now - t)
        )),
        _ => Finding::fail(
            "no operator holds the kopiur-leader lease: the operator is not running (helm install kopiur \
             deploy/helm/kopiur)"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use kopiur_api::repository::{
        DeletionProtectionStatus, HealthStatus, MassDeletionAck, RepositoryPhase, StrictRetry,
    };

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn row(phase: RepositoryPhase) -> RepoRow {
        RepoRow {
            kind: "Repository",
            namespace: Some("apps".into()),
            name: "r".into(),
            uid: Some("uid-r".into()),
            status: RepositoryStatus { phase: Some(phase), ..Default::default() },
        }
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(chrono::Duration::seconds(-5)), "0s");
        assert_eq!(age(chrono::Duration::seconds(59)), "59s");
        assert_eq!(age(chrono::Duration::seconds(600)), "10m");
        assert_eq!(age(chrono::Duration::seconds(3600 + 300)), "1h5m");
        assert_eq!(age(chrono::Duration::seconds(2 * 86400 + 3 * 3600)), "2d3h");
    }

    #[test]
    fn the_breaker_cell_reads_the_stamped_holdoff() {
        let now = t("2026-11-30T01:00:00Z");
        let mut s = RepositoryStatus::default();
        assert_eq!(breaker(&s, now), "-");
        s.health = Some(HealthStatus { consecutive_probe_failures: 2, ..Default::default() });
        assert_eq!(breaker(&s, now), "closed (2 failed probe(s))");
        s.health = Some(HealthStatus {
            breaker_opened_at: Some(t("2026-11-30T00:48:00Z")),
            strict_retry: Some(StrictRetry {
                attempt: 2,
                holdoff_seconds: 240,
                next_attempt_at: Some(t("2026-11-30T01:03:00Z")),
            }),
            ..Default::default()
        });
        assert_eq!(breaker(&s, now), "open 12m, retry in 3m");
        assert_eq!(breaker(&s, t("2026-11-30T01:04:00Z")), "open 16m, retrying");
    }

    #[test]
    fn the_table_aligns_columns() {
        let out = table(&["A", "BB"], &[vec!["long".into(), "x".into()], vec!["y".into(), "z".into()]]);
        assert_eq!(out, "A      BB\nlong   x\ny      z\n");
    }

    #[test]
    fn a_healthy_repository_needs_no_advice_and_a_sick_one_gets_the_next_step() {
        assert_eq!(advice(&row(RepositoryPhase::Ready)), "");
        let degraded = advice(&row(RepositoryPhase::Degraded));
        assert!(degraded.contains("kubectl kopiur reverify r -n apps"), "{degraded}");
        let mut failed = row(RepositoryPhase::Failed);
        failed.status.conditions.push(cond("Ready", "False", "RepositoryAuthFailed", "wrong password"));
        assert_eq!(advice(&failed), "  repository r -n apps: Failed RepositoryAuthFailed: wrong password\n");
        let mut held = row(RepositoryPhase::Ready);
        held.status.deletion_protection = Some(DeletionProtectionStatus { pending_external: 12, held: 12, ack: None });
        let a = advice(&held);
        assert!(a.contains("12 external deletion(s) held") && a.contains("kubectl kopiur ack r -n apps"), "{a}");
    }

    #[test]
    fn the_repositories_report_has_one_row_each() {
        let mut c = row(RepositoryPhase::Ready);
        c.kind = "ClusterRepository";
        c.namespace = None;
        c.name = "shared".into();
        c.status.conditions.push(cond("BackendReachable", "True", "Reachable", ""));
        let scope = Scope::Namespace("apps".into());
        let snaps = [snap("apps", "s1", "Succeeded", pin(RepositoryKind::Repository, Some("apps"), "r", None))];
        let out = repositories(&[row(RepositoryPhase::Initializing), c], &snaps, &scope, t("2026-11-30T01:00:00Z"));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE") && lines[0].contains("HELD-DELETIONS"), "{out}");
        assert!(lines[1].starts_with("apps") && lines[1].contains("Initializing"), "{out}");
        assert!(lines[1].ends_with("1 (1 Succeeded)"), "{out}");
        assert!(lines[2].starts_with("(cluster)") && lines[2].contains("shared") && lines[2].contains("True"), "{out}");
        assert!(lines[2].ends_with("   0"), "{out}");
        assert_eq!(
            repositories(&[], &[], &scope, Utc::now()),
            "No Repository in namespace apps and no ClusterRepository (-A looks in all namespaces).\n"
        );
        assert_eq!(
            repositories(&[], &[], &Scope::All, Utc::now()),
            "No Repository in all namespaces and no ClusterRepository.\n"
        );
    }

    fn pin(kind: RepositoryKind, namespace: Option<&str>, name: &str, uid: Option<&str>) -> Option<ResolvedRepository> {
        Some(ResolvedRepository {
            kind,
            namespace: namespace.map(str::to_string),
            name: name.into(),
            uid: uid.map(str::to_string),
        })
    }

    fn snap(namespace: &str, name: &str, phase: &str, repository: Option<ResolvedRepository>) -> SnapRow {
        SnapRow { namespace: namespace.into(), name: name.into(), phase: phase.into(), repository }
    }

    #[test]
    fn the_snapshots_cell_counts_the_snapshots_pinned_to_the_repository() {
        use RepositoryKind::{ClusterRepository, Repository};
        let r = row(RepositoryPhase::Ready); // Repository apps/r, uid-r
        let mut shared = row(RepositoryPhase::Ready);
        (shared.kind, shared.namespace, shared.name, shared.uid) =
            ("ClusterRepository", None, "r".into(), Some("uid-c".into()));
        let snaps = [
            snap("apps", "a", "Succeeded", pin(Repository, Some("apps"), "r", Some("uid-r"))),
            snap("apps", "b", "Running", pin(Repository, Some("apps"), "r", Some("uid-r"))),
            // An absent namespace is the Snapshot's own; an absent uid matches.
            snap("apps", "c", "Succeeded", pin(Repository, None, "r", None)),
            snap("apps", "d", "Deleting", pin(Repository, Some("apps"), "r", Some("uid-r"))),
            // Not r's: a recreated namesake's, another namespace's r, the ClusterRepository r,
            // another name, not pinned yet.
            snap("apps", "e", "Succeeded", pin(Repository, Some("apps"), "r", Some("uid-old"))),
            snap("web", "f", "Succeeded", pin(Repository, None, "r", None)),
            snap("apps", "g", "Succeeded", pin(ClusterRepository, None, "r", Some("uid-c"))),
            snap("web", "h", "Failed", pin(ClusterRepository, None, "r", Some("uid-c"))),
            snap("apps", "i", "Succeeded", pin(Repository, Some("apps"), "other", None)),
            snap("apps", "j", "Pending", None),
        ];
        assert_eq!(snapshots_cell(&r, &snaps), "4 (2 Succeeded)");
        // A ClusterRepository's Snapshots, from every namespace.
        assert_eq!(snapshots_cell(&shared, &snaps), "2 (1 Succeeded)");
        let mut lone = row(RepositoryPhase::Ready);
        lone.name = "lone".into();
        assert_eq!(snapshots_cell(&lone, &snaps), "0");
    }

    #[test]
    fn the_scope_is_always_said() {
        assert_eq!(Scope::All.to_string(), "all namespaces");
        assert_eq!(Scope::Namespace("demo".into()).to_string(), "namespace demo");
        assert!(Scope::All.contains("x") && Scope::Namespace("x".into()).contains("x"));
        assert!(!Scope::Namespace("x".into()).contains("y"));
    }

    #[test]
    fn the_doctor_says_where_it_looked_for_repositories_and_snapshots() {
        let all = Scope::All;
        let demo = Scope::Namespace("demo".into());
        let none = repository_findings(&demo, &[], None);
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].level, Level::Warn);
        assert_eq!(
            none[0].what,
            "no Repository in namespace demo; no ClusterRepository: create one (docs/backups.md §1) (-A looks in \
             all namespaces)"
        );
        assert!(repository_findings(&all, &[], None)[0].what.starts_with("no Repository in all namespaces; no"));
        let mut c = row(RepositoryPhase::Ready);
        (c.kind, c.namespace, c.name) = ("ClusterRepository", None, "shared".into());
        let f = repository_findings(&all, &[row(RepositoryPhase::Ready), row(RepositoryPhase::Failed), c], None);
        assert_eq!(f[0], Finding::ok("Repositories in all namespaces: 2; ClusterRepositories: 1"));
        assert_eq!(f[1], Finding::ok("Repository apps/r: Ready"));
        assert_eq!(f[2].level, Level::Fail);
        assert_eq!(f[3], Finding::ok("ClusterRepository shared: Ready"));
        let f = repository_findings(&demo, &[row(RepositoryPhase::Ready)], Some("forbidden"));
        assert_eq!(f[0].what, "Repositories in namespace demo: 1; ClusterRepositories: cannot list them (forbidden)");
        assert_eq!(snapshot_finding(&all, 3, &[]), Finding::ok("Snapshots in all namespaces: 3, none Failed"));
        let failed: Vec<String> = (0..7).map(|i| format!("demo/s{i} (Boom)")).collect();
        let w = snapshot_finding(&demo, 9, &failed);
        assert_eq!(w.level, Level::Warn);
        assert!(w.what.starts_with("Snapshots in namespace demo: 9, 7 Failed, e.g. demo/s0 (Boom),"), "{}", w.what);
        assert!(w.what.contains("demo/s4") && !w.what.contains("demo/s5"), "{}", w.what);
        let note = fallback_note("Repositories", &demo, "forbidden");
        assert!(note.starts_with("cannot list Repositories in all namespaces (forbidden); looked in namespace demo"));
    }

    #[test]
    fn phases_are_counted_in_order_and_unknown_ones_kept() {
        let p: Vec<String> =
            ["Failed", "Succeeded", "Pending", "Succeeded", "Future"].iter().map(|s| s.to_string()).collect();
        assert_eq!(phase_counts(&p), "Pending 1, Succeeded 2, Failed 1, Future 1");
        assert_eq!(phase_counts(&[]), "");
    }

    #[test]
    fn the_ack_time_is_validated_and_written_in_whole_seconds() {
        let now = t("2026-11-30T03:04:05.678Z");
        assert_eq!(ack_value(now), "2026-11-30T03:04:05Z");
        assert_eq!(parse_ack_at("2026-11-30T02:00:00+01:00", now).unwrap(), t("2026-11-30T01:00:00Z"));
        assert!(parse_ack_at("yesterday", now).unwrap_err().contains("not an RFC 3339 time"));
        assert!(parse_ack_at("2026-12-01T00:00:00Z", now).unwrap_err().contains("in the future"));
        assert_eq!(
            ack_patch(now),
            serde_json::json!({"metadata": {"annotations": {"kopiur.home-operations.com/allow-mass-deletion": "2026-11-30T03:04:05Z"}}})
        );
    }

    #[test]
    fn the_ack_plan_says_what_is_released_and_that_it_is_final() {
        let mut r = row(RepositoryPhase::Ready);
        r.status.deletion_protection = Some(DeletionProtectionStatus {
            pending_external: 600,
            held: 600,
            ack: Some(MassDeletionAck { value: "2026-11-29T00:00:00Z".into(), ..Default::default() }),
        });
        let p = ack_plan(&r, t("2026-11-30T03:04:05Z"));
        assert!(p.contains("600 external deletion(s) pending, 600 held"), "{p}");
        assert!(p.contains("at 2026-11-30T03:04:05Z") && p.contains("cannot be recovered"), "{p}");
        assert!(p.contains("The ack in effect is 2026-11-29T00:00:00Z"), "{p}");
    }

    #[test]
    fn manual_names_fit_a_label_value() {
        let now = t("2026-11-30T03:04:05Z");
        assert_eq!(manual_name("app", now), "app-manual-1796007845");
        let long = manual_name(&"x".repeat(80), now);
        assert_eq!(long.len(), 63);
        assert!(long.ends_with("-manual-1796007845"));
    }

    #[test]
    fn the_doctor_fails_on_any_failure_and_counts_the_rest() {
        let (out, code) = doctor(&[Finding::ok("a"), Finding::warn("b")]);
        assert_eq!((out.as_str(), code), ("[ok  ] a\n[warn] b\n0 failed, 1 warning(s), 1 ok\n", 0));
        let (_, code) = doctor(&[Finding::ok("a"), Finding::fail("c")]);
        assert_eq!(code, 1);
    }

    #[test]
    fn the_lease_must_be_fresh() {
        let now = t("2026-11-30T03:00:00Z");
        assert_eq!(lease_finding(Some("pod-a"), Some(t("2026-11-30T02:59:50Z")), 15, now).level, Level::Ok);
        let stale = lease_finding(Some("pod-a"), Some(t("2026-11-30T02:50:00Z")), 15, now);
        assert_eq!(stale.level, Level::Fail);
        assert!(stale.what.contains("10m ago"), "{}", stale.what);
        assert_eq!(lease_finding(None, None, 15, now).level, Level::Fail);
    }
}
