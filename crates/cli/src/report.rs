//! What the plugin prints, as pure functions of what it read (and the time, passed in), so the
//! wording and the arithmetic are unit-tested without a cluster.
use chrono::{DateTime, Utc};
use kopiur_api::names::annotation;
use kopiur_api::repository::RepositoryStatus;

/// One Repository or ClusterRepository, as read.
#[derive(Clone, Debug, PartialEq)]
pub struct RepoRow {
    /// `Repository` or `ClusterRepository`.
    pub kind: &'static str,
    /// None for a ClusterRepository.
    pub namespace: Option<String>,
    pub name: String,
    pub status: RepositoryStatus,
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

/// The repositories table plus one line of advice per repository that needs attention.
pub fn repositories(rows: &[RepoRow], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "No repositories found.\n".into();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let reachable = r.condition("BackendReachable").map_or("-".to_string(), |c| c.status.clone());
            let snapshots = r
                .status
                .storage_stats
                .as_ref()
                .and_then(|s| s.snapshot_count)
                .map_or("-".to_string(), |n| n.to_string());
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
        let out = repositories(&[row(RepositoryPhase::Initializing), c], t("2026-11-30T01:00:00Z"));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE") && lines[0].contains("HELD-DELETIONS"), "{out}");
        assert!(lines[1].starts_with("apps") && lines[1].contains("Initializing"), "{out}");
        assert!(lines[2].starts_with("(cluster)") && lines[2].contains("shared") && lines[2].contains("True"), "{out}");
        assert_eq!(repositories(&[], Utc::now()), "No repositories found.\n");
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
