//! NA-13..16: pod status as strategic-merge patches for `pods/<name>/status`.
//!
//! Strategic merge merges `containerStatuses` by `name` and `conditions` by `type`, so each
//! patch only carries what changed. A container `state` holds exactly one of
//! waiting/running/terminated: the other two are sent as `null` to delete the previous one,
//! which a plain map merge would otherwise keep.
use serde_json::{Value, json};

/// Kubelet caps termination messages at 4 KiB.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;
/// `FallbackToLogsOnError` takes at most this many log lines...
pub const FALLBACK_LOG_LINES: usize = 80;
/// ...and at most this many bytes.
pub const FALLBACK_LOG_BYTES: usize = 2048;

pub fn now() -> String {
    rfc3339(chrono::Utc::now())
}

pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: String,
    pub container_id: Option<String>,
}

impl Terminated {
    /// Exit status of a process: reason `Completed` for 0, else `Error`.
    pub fn exited(
        exit_code: i32,
        signal: Option<i32>,
        message: Option<String>,
        started_at: Option<String>,
        container_id: Option<String>,
    ) -> Self {
        Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            message: message.filter(|m| !m.is_empty()),
            started_at,
            finished_at: now(),
            container_id,
        }
    }

    /// A container whose process is unknown (never started, or lost with a previous agent).
    pub fn unknown(started_at: Option<String>, container_id: Option<String>) -> Self {
        Terminated {
            exit_code: 137,
            signal: None,
            reason: "ContainerStatusUnknown".into(),
            message: Some("The container could not be located when the pod was terminated".into()),
            started_at,
            finished_at: now(),
            container_id,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut t = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": self.finished_at,
        });
        if let Some(s) = self.signal {
            t["signal"] = json!(s);
        }
        if let Some(m) = &self.message {
            t["message"] = json!(m);
        }
        // startedAt is required by consumers that compute durations; fall back to finishedAt.
        t["startedAt"] = json!(self.started_at.clone().unwrap_or_else(|| self.finished_at.clone()));
        if let Some(id) = &self.container_id {
            t["containerID"] = json!(id);
        }
        t
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum CState {
    Waiting { reason: String, message: Option<String> },
    Running { started_at: String },
    Terminated(Terminated),
}

impl CState {
    pub fn waiting(reason: &str, message: impl Into<Option<String>>) -> Self {
        CState::Waiting { reason: reason.into(), message: message.into() }
    }

    pub fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                let mut w = json!({ "reason": reason });
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({ "waiting": w, "running": null, "terminated": null })
            }
            CState::Running { started_at } => {
                json!({ "waiting": null, "running": { "startedAt": started_at }, "terminated": null })
            }
            CState::Terminated(t) => {
                json!({ "waiting": null, "running": null, "terminated": t.to_json() })
            }
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self, CState::Running { .. })
    }
}

/// One entry of `containerStatuses` / `initContainerStatuses`.
#[derive(Debug, Clone, PartialEq)]
pub struct CStatus {
    pub name: String,
    pub image: String,
    pub restart_count: i32,
    pub state: CState,
    pub last_state: Option<Terminated>,
    pub container_id: Option<String>,
}

impl CStatus {
    pub fn new(name: &str, image: &str, state: CState) -> Self {
        CStatus {
            name: name.into(),
            image: image.into(),
            restart_count: 0,
            state,
            last_state: None,
            container_id: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let running = self.state.is_running();
        let mut v = json!({
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": self.restart_count,
            "state": self.state.to_json(),
        });
        if let Some(id) = &self.container_id {
            v["containerID"] = json!(id);
        }
        if let Some(t) = &self.last_state {
            v["lastState"] = json!({ "terminated": t.to_json() });
        }
        v
    }
}

pub fn condition(kind: &str, status: bool, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": now(),
        "lastProbeTime": null,
    });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// Builds the `{"status": …}` body. `None`/empty parts are left out, so the server keeps them.
pub fn status_patch(
    phase: Option<&str>,
    extra: Option<Value>,
    conditions: Vec<Value>,
    init_statuses: &[CStatus],
    statuses: &[CStatus],
) -> Value {
    let mut st = serde_json::Map::new();
    if let Some(p) = phase {
        st.insert("phase".into(), json!(p));
    }
    if let Some(Value::Object(extra)) = extra {
        st.extend(extra);
    }
    if !conditions.is_empty() {
        st.insert("conditions".into(), Value::Array(conditions));
    }
    if !init_statuses.is_empty() {
        st.insert("initContainerStatuses".into(), Value::Array(init_statuses.iter().map(CStatus::to_json).collect()));
    }
    if !statuses.is_empty() {
        st.insert("containerStatuses".into(), Value::Array(statuses.iter().map(CStatus::to_json).collect()));
    }
    json!({ "status": Value::Object(st) })
}

/// Fields set once when the pod starts (NA-14).
pub fn start_fields(start_time: &str) -> Value {
    json!({
        "startTime": start_time,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
    })
}

/// Terminal phase from the final exit codes under `restartPolicy: Never`.
pub fn terminal_phase(exit_codes: impl IntoIterator<Item = i32>) -> &'static str {
    if exit_codes.into_iter().all(|c| c == 0) { "Succeeded" } else { "Failed" }
}

/// NA-15: the message from the termination-log file, capped; under
/// `FallbackToLogsOnError`, an empty file and a non-zero exit take the log tail.
pub fn termination_message(file: &[u8], policy: Option<&str>, exit_code: i32, log: impl FnOnce() -> Vec<u8>) -> String {
    let file_msg = String::from_utf8_lossy(file);
    if !file_msg.is_empty() || exit_code == 0 || policy != Some("FallbackToLogsOnError") {
        return cap_front(&file_msg, MAX_TERMINATION_MESSAGE).to_string();
    }
    log_tail(&log(), FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
}

/// Keeps at most `max` bytes from the start, cut at a char boundary.
fn cap_front(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The last `lines` lines of a log, then at most its last `bytes` bytes.
pub fn log_tail(log: &[u8], lines: usize, bytes: usize) -> String {
    let text = String::from_utf8_lossy(log);
    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
    let mut start = 0;
    let mut seen = 0;
    for (i, b) in trimmed.bytes().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == lines {
                start = i + 1;
                break;
            }
        }
    }
    let mut tail = &text[start..];
    if tail.len() > bytes {
        let mut cut = tail.len() - bytes;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = &tail[cut..];
    }
    tail.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_replaces_other_variants() {
        let t = Terminated::exited(
            3,
            None,
            Some("boom".into()),
            Some("2025-01-01T00:00:00Z".into()),
            Some("proc://7".into()),
        );
        let v = CState::Terminated(t.clone()).to_json();
        assert_eq!(v["running"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("running"));
        assert!(v.as_object().unwrap().contains_key("waiting"));
        assert_eq!(v["terminated"]["exitCode"], 3);
        assert_eq!(v["terminated"]["reason"], "Error");
        assert_eq!(v["terminated"]["message"], "boom");
        assert_eq!(v["terminated"]["containerID"], "proc://7");
        assert!(v["terminated"]["finishedAt"].as_str().unwrap().ends_with('Z'));
        assert_eq!(v["terminated"]["startedAt"], "2025-01-01T00:00:00Z");
        let ok = Terminated::exited(0, None, Some(String::new()), None, None);
        assert_eq!(ok.reason, "Completed");
        assert!(ok.message.is_none());
        // startedAt falls back to finishedAt.
        assert_eq!(ok.to_json()["startedAt"], ok.to_json()["finishedAt"]);
    }

    #[test]
    fn container_status_shape() {
        let mut s = CStatus::new("main", "busybox", CState::Running { started_at: "t0".into() });
        s.container_id = Some("proc://42".into());
        s.restart_count = 2;
        s.last_state = Some(Terminated::exited(1, None, None, Some("t".into()), None));
        let v = s.to_json();
        assert_eq!(v["name"], "main");
        assert_eq!(v["imageID"], "");
        assert_eq!(v["ready"], true);
        assert_eq!(v["started"], true);
        assert_eq!(v["restartCount"], 2);
        assert_eq!(v["containerID"], "proc://42");
        assert_eq!(v["state"]["running"]["startedAt"], "t0");
        assert_eq!(v["lastState"]["terminated"]["exitCode"], 1);
        let w =
            CStatus::new("c", "img", CState::waiting("ErrImagePull", Some("image \"img\" is not mapped".to_string())));
        let v = w.to_json();
        assert_eq!(v["ready"], false);
        assert_eq!(v["state"]["waiting"]["reason"], "ErrImagePull");
        assert!(v.get("lastState").is_none());
    }

    #[test]
    fn patch_shape() {
        let statuses = vec![CStatus::new("a", "i", CState::Running { started_at: "t".into() })];
        let p = status_patch(
            Some("Running"),
            Some(start_fields("t")),
            vec![condition("Ready", true, None, None)],
            &[],
            &statuses,
        );
        let st = &p["status"];
        assert_eq!(st["phase"], "Running");
        assert_eq!(st["podIP"], "127.0.0.1");
        assert_eq!(st["hostIPs"][0]["ip"], "127.0.0.1");
        assert_eq!(st["startTime"], "t");
        assert_eq!(st["conditions"][0]["type"], "Ready");
        assert_eq!(st["conditions"][0]["status"], "True");
        assert_eq!(st["containerStatuses"][0]["name"], "a");
        assert!(st.get("initContainerStatuses").is_none());
        let empty = status_patch(None, None, vec![], &[], &[]);
        assert_eq!(empty, json!({"status": {}}));
    }

    #[test]
    fn phases() {
        assert_eq!(terminal_phase([0, 0]), "Succeeded");
        assert_eq!(terminal_phase([0, 3]), "Failed");
        assert_eq!(terminal_phase([137]), "Failed");
    }

    #[test]
    fn termination_message_rules() {
        let log = || b"line1\nline2\n".to_vec();
        assert_eq!(termination_message(b"msg", None, 1, log), "msg");
        assert_eq!(termination_message(b"", None, 1, log), "");
        assert_eq!(termination_message(b"", Some("File"), 1, log), "");
        assert_eq!(termination_message(b"", Some("FallbackToLogsOnError"), 0, log), "");
        assert_eq!(termination_message(b"", Some("FallbackToLogsOnError"), 2, log), "line1\nline2\n");
        assert_eq!(termination_message(b"file wins", Some("FallbackToLogsOnError"), 2, log), "file wins");
        let big = "é".repeat(5000);
        let m = termination_message(big.as_bytes(), None, 0, log);
        assert!(m.len() <= MAX_TERMINATION_MESSAGE && m.len() > MAX_TERMINATION_MESSAGE - 4);
    }

    #[test]
    fn tail_limits() {
        let log: String = (0..200).map(|i| format!("l{i}\n")).collect();
        let t = log_tail(log.as_bytes(), 80, 1 << 20);
        assert!(t.starts_with("l120\n"), "{t:?}");
        assert!(t.ends_with("l199\n"));
        assert_eq!(t.lines().count(), 80);
        let t = log_tail(log.as_bytes(), 80, 10);
        assert_eq!(t.len(), 10);
        assert!(t.ends_with("l199\n"));
        assert_eq!(log_tail(b"one", 80, 2048), "one");
        assert_eq!(log_tail(b"", 80, 2048), "");
    }
}
