//! The auditing kopia wrapper the movers run instead of kopia: every invocation and its exit
//! code, so repository connects and deletes can be counted, and one-shot delete faults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Result;

/// One kopia invocation by a mover, from the auditing wrapper's log.
#[derive(Clone, Debug)]
pub struct Call {
    /// Order in the log.
    pub seq: usize,
    /// The wrapper's pid inside its container: each container is PID 1 of its own PID
    /// namespace, so pids repeat across pods and identify a call only with `host`.
    pub pid: u32,
    pub ppid: u32,
    /// The pod (HOSTNAME): one mover run, since mover pods never restart.
    pub host: String,
    pub args: Vec<String>,
    /// None while running, or when the wrapper was killed.
    pub rc: Option<i32>,
}

impl Call {
    pub fn is_connect(&self) -> bool {
        self.args.len() >= 2 && self.args[0] == "repository" && self.args[1] == "connect"
    }
    pub fn is_delete(&self) -> bool {
        self.args.len() >= 2 && self.args[0] == "snapshot" && self.args[1] == "delete"
    }
    /// The manifest ids of a `snapshot delete`.
    pub fn delete_ids(&self) -> Vec<String> {
        if !self.is_delete() {
            return Vec::new();
        }
        self.args[2..].iter().filter(|a| !a.starts_with('-')).cloned().collect()
    }
}

/// The auditing wrapper the movers run instead of kopia (`KOPIUR_MOVER_KOPIA_BINARY`).
/// Movers run as a non-root UID: the directory, the kopia copy and the log are world
/// readable/writable.
pub struct Audit {
    pub dir: PathBuf,
    pub wrapper: PathBuf,
    pub log: PathBuf,
}

impl Audit {
    pub fn new(dir: &Path) -> Result<Audit> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
        let kopia = dir.join("kopia-real");
        std::fs::copy(kopiur_testenv::tools::kopia()?, &kopia)?;
        std::fs::set_permissions(&kopia, std::fs::Permissions::from_mode(0o755))?;
        let log = dir.join("kopia-calls.log");
        std::fs::write(&log, b"")?;
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666))?;
        let wrapper = dir.join("kopia-audit");
        // One line before and one after each call: `S pid ppid host args…` / `E pid host rc`.
        // Not `exec`, so the exit code is recorded. A `snapshot delete` naming an id with a
        // `fail-delete-<id>` marker in the directory consumes the marker (one `rm` wins) and
        // fails without calling kopia: a one-shot fault for exactly that batch.
        let script = format!(
            "#!/bin/sh\nL='{log}'\nD='{dir}'\necho \"S $$ $PPID ${{HOSTNAME:-?}} $*\" >> \"$L\"\n\
             if [ \"$1\" = snapshot ] && [ \"$2\" = delete ]; then\n\
             for a in \"$@\"; do\n\
             if rm \"$D/fail-delete-$a\" 2>/dev/null; then\n\
             echo \"kopiur test fault: snapshot delete refused for $a\" >&2\n\
             echo \"E $$ ${{HOSTNAME:-?}} 1\" >> \"$L\"\nexit 1\nfi\ndone\nfi\n\
             '{kopia}' \"$@\"\nrc=$?\necho \"E $$ ${{HOSTNAME:-?}} $rc\" >> \"$L\"\nexit $rc\n",
            log = log.display(),
            dir = dir.display(),
            kopia = kopia.display()
        );
        std::fs::write(&wrapper, script)?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        Ok(Audit { dir: dir.to_path_buf(), wrapper, log })
    }

    pub fn calls(&self) -> Vec<Call> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut calls: Vec<Call> = Vec::new();
        let mut open: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for line in text.lines() {
            let mut it = line.split(' ');
            match it.next() {
                Some("S") => {
                    let pid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let ppid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let host = it.next().unwrap_or("").to_string();
                    let args: Vec<String> = it.filter(|a| !a.is_empty()).map(str::to_string).collect();
                    open.insert((host.clone(), pid), calls.len());
                    calls.push(Call { seq: calls.len(), pid, ppid, host, args, rc: None });
                }
                Some("E") => {
                    let pid: u32 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                    let host = it.next().unwrap_or("").to_string();
                    let rc: Option<i32> = it.next().and_then(|v| v.parse().ok());
                    if let Some(i) = open.remove(&(host, pid)) {
                        calls[i].rc = rc;
                    }
                }
                _ => {}
            }
        }
        calls
    }

    /// Arms a one-shot fault: the next mover `snapshot delete` naming manifest `id` fails
    /// (exit 1, an unclassified kopia error, so the batch Job fails without a retry) and
    /// deletes nothing. Later calls run kopia again.
    pub fn fail_next_delete_of(&self, id: &str) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let marker = self.dir.join(format!("fail-delete-{id}"));
        std::fs::write(&marker, b"")?;
        std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o666))?;
        Ok(())
    }

    /// Whether the fault armed for `id` is still waiting (not yet consumed by a delete).
    pub fn fault_armed(&self, id: &str) -> bool {
        self.dir.join(format!("fail-delete-{id}")).exists()
    }

    /// Calls at or after `mark` (a previous `calls().len()`).
    pub fn since(&self, mark: usize) -> Vec<Call> {
        self.calls().into_iter().skip(mark).collect()
    }
}

/// Connects made by mover runs (pods) that also deleted snapshots (batch delete Jobs), and all
/// connects, among `calls`.
pub fn connect_counts(calls: &[Call]) -> (usize, usize) {
    let deleters: BTreeSet<&str> = calls.iter().filter(|c| c.is_delete()).map(|c| c.host.as_str()).collect();
    let all = calls.iter().filter(|c| c.is_connect()).count();
    let batch = calls.iter().filter(|c| c.is_connect() && deleters.contains(c.host.as_str())).count();
    (batch, all)
}

/// Manifest id -> number of successful (`rc=0`) `snapshot delete` calls naming it.
pub fn successful_deletes(calls: &[Call]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for c in calls.iter().filter(|c| c.is_delete() && c.rc == Some(0)) {
        for id in c.delete_ids() {
            *m.entry(id).or_insert(0) += 1;
        }
    }
    m
}

/// Issue 31: no secret value of the fixtures in any kopiur object, Job, ConfigMap or Event of any
/// namespace, nor in the `extra` documents (the controller's log, its `/metrics`). Returns how
/// many documents were searched.
pub async fn sweep_for_secrets(
    client: &kube::Client,
    extra: Vec<(String, String)>,
    secrets: &[&str],
) -> anyhow::Result<usize> {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    use kube::Api;
    use kube::api::ListParams;
    let mut docs: Vec<(String, String)> = Vec::new();
    macro_rules! all {
        ($($k:ty),*) => {$(
            for o in Api::<$k>::all(client.clone()).list(&ListParams::default()).await?.items {
                docs.push((format!("{} {}/{}", stringify!($k), o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default()), serde_json::to_string(&o)?));
            }
        )*};
    }
    all!(
        kopiur_api::Repository,
        kopiur_api::ClusterRepository,
        kopiur_api::Snapshot,
        kopiur_api::SnapshotPolicy,
        kopiur_api::SnapshotSchedule,
        kopiur_api::Restore,
        kopiur_api::Maintenance,
        Job,
        ConfigMap,
        Event
    );
    // Searching nothing proves nothing.
    for (what, text) in &extra {
        anyhow::ensure!(text.len() > 1000, "{what} is (nearly) empty");
    }
    docs.extend(extra);
    for (what, text) in &docs {
        for s in secrets {
            anyhow::ensure!(!text.contains(s), "a fixture secret appears in {what}");
        }
    }
    Ok(docs.len())
}
