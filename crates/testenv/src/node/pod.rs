//! NA-5, NA-12..18: one task per pod bound to the node, from volumes to deletion.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Ctx;
use super::runner::ProcessTree;
use super::status::{self, CState, CStatus, condition, status_patch};
use super::volumes::{self, ResolvedVolume, VolumeCtx};

mod containers;
mod teardown;

/// What the dispatcher tells a pod worker.
#[derive(Debug, Clone)]
pub enum Update {
    Pod(Box<Pod>),
    /// The object is gone from the API.
    Gone,
}

const MAX_BACKOFF: Duration = Duration::from_secs(10);
const VOLUME_RETRY: Duration = Duration::from_millis(500);
/// How long a pod waits for its ServiceAccount before running without a token.
const SA_WAIT: Duration = Duration::from_secs(10);

struct Ctr {
    spec: Container,
    status: CStatus,
    /// Host pid of the running container's shim (its container ID).
    pid: Option<i32>,
    tree: Option<Arc<ProcessTree>>,
    started_at: Option<String>,
    due: Instant,
    backoff: Duration,
    done: bool,
    ever_started: bool,
}

impl Ctr {
    fn new(spec: Container, waiting_reason: &str) -> Self {
        let image = spec.image.clone().unwrap_or_default();
        let status = CStatus::new(&spec.name, &image, CState::waiting(waiting_reason, None));
        Ctr {
            spec,
            status,
            pid: None,
            tree: None,
            started_at: None,
            due: Instant::now(),
            backoff: Duration::from_secs(1),
            done: false,
            ever_started: false,
        }
    }

    fn exit_code(&self) -> Option<i32> {
        match &self.status.state {
            CState::Terminated(t) => Some(t.exit_code),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Volumes,
    Init(usize),
    Main,
    Terminal,
}

struct Exit {
    init: bool,
    idx: usize,
    pid: i32,
    status: std::io::Result<std::process::ExitStatus>,
}

struct Worker {
    ctx: Arc<Ctx>,
    api: Api<Pod>,
    pod: Pod,
    ns: String,
    name: String,
    uid: String,
    policy: String,
    inits: Vec<Ctr>,
    mains: Vec<Ctr>,
    stage: Stage,
    volumes: HashMap<String, ResolvedVolume>,
    volume_due: Instant,
    volume_backoff: Duration,
    created: Instant,
    phase: &'static str,
    pod_reason: Option<(String, String)>,
    start_time: Option<String>,
    start_sent: bool,
    deadline: Option<Instant>,
    sent_conditions: HashMap<&'static str, bool>,
    last_patch: Option<Value>,
    dirty: bool,
    exit_tx: mpsc::UnboundedSender<Exit>,
    exit_rx: mpsc::UnboundedReceiver<Exit>,
}

enum Next {
    Continue,
    Delete,
    Gone,
    Shutdown,
}

pub async fn run(ctx: Arc<Ctx>, mut rx: watch::Receiver<Update>) {
    let Update::Pod(pod) = rx.borrow_and_update().clone() else {
        return;
    };
    let pod = *pod;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let (exit_tx, exit_rx) = mpsc::unbounded_channel();
    let has_init = spec.init_containers.as_ref().is_some_and(|v| !v.is_empty());
    let mut w = Worker {
        api: Api::namespaced(ctx.client.clone(), &ns),
        ctx,
        ns,
        name,
        uid,
        policy: spec.restart_policy.clone().unwrap_or_else(|| "Always".into()),
        inits: spec
            .init_containers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| Ctr::new(c, "PodInitializing"))
            .collect(),
        mains: spec
            .containers
            .clone()
            .into_iter()
            .map(|c| Ctr::new(c, if has_init { "PodInitializing" } else { "ContainerCreating" }))
            .collect(),
        stage: Stage::Volumes,
        volumes: HashMap::new(),
        volume_due: Instant::now(),
        volume_backoff: VOLUME_RETRY,
        created: Instant::now(),
        phase: "Pending",
        pod_reason: None,
        start_time: None,
        start_sent: false,
        deadline: None,
        sent_conditions: HashMap::new(),
        last_patch: None,
        dirty: true,
        exit_tx,
        exit_rx,
        pod,
    };
    w.main(&mut rx).await;
}

fn terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

impl Worker {
    async fn main(&mut self, rx: &mut watch::Receiver<Update>) {
        let st = self.pod.status.clone().unwrap_or_default();
        if terminal(st.phase.as_deref()) {
            self.stage = Stage::Terminal;
            self.dirty = false;
        } else if st.start_time.is_some() {
            // NA-17: started by an earlier agent; its processes died with it.
            tracing::info!(ns = %self.ns, pod = %self.name, "orphaned pod: marking Failed");
            self.mark_orphaned();
            self.publish().await;
        }

        if self.stage != Stage::Terminal {
            match self.live(rx).await {
                Next::Continue => {}
                Next::Delete => {
                    self.terminate(None).await;
                    self.confirm_deletion().await;
                    return;
                }
                Next::Gone => {
                    self.terminate(None).await;
                    self.cleanup();
                    return;
                }
                Next::Shutdown => {
                    self.kill_all().await;
                    return;
                }
            }
        }

        // Terminal: wait for the deletion to confirm it (NA-18), or for the object to go.
        loop {
            if self.pod.metadata.deletion_timestamp.is_some() {
                self.confirm_deletion().await;
                return;
            }
            let mut shutdown = self.ctx.shutdown.clone();
            tokio::select! {
                r = rx.changed() => {
                    if r.is_err() { return; }
                    match rx.borrow_and_update().clone() {
                        Update::Pod(p) => self.pod = *p,
                        Update::Gone => { self.cleanup(); return; }
                    }
                }
                _ = super::stopped(&mut shutdown) => return,
                _ = tokio::time::sleep(Duration::from_secs(1)), if self.dirty => self.publish().await,
            }
        }
    }

    /// Runs the pod until it is terminal (`Continue`) or interrupted.
    async fn live(&mut self, rx: &mut watch::Receiver<Update>) -> Next {
        let mut shutdown = self.ctx.shutdown.clone();
        loop {
            if *shutdown.borrow() {
                return Next::Shutdown;
            }
            if self.pod.metadata.deletion_timestamp.is_some() {
                return Next::Delete;
            }
            self.step().await;
            if self.deadline.is_some_and(|d| d <= Instant::now()) && self.stage != Stage::Terminal {
                let secs = self.pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).unwrap_or(0);
                self.terminate(Some((
                    "DeadlineExceeded".into(),
                    format!("Pod was active on the node longer than the specified deadline ({secs}s)"),
                )))
                .await;
            }
            if self.dirty {
                self.publish().await;
            }
            if self.stage == Stage::Terminal {
                return Next::Continue;
            }
            let wake = self.next_wakeup();
            tokio::select! {
                Some(exit) = self.exit_rx.recv() => self.on_exit(exit),
                r = rx.changed() => {
                    if r.is_err() { return Next::Shutdown; }
                    match rx.borrow_and_update().clone() {
                        Update::Pod(p) => self.pod = *p,
                        Update::Gone => return Next::Gone,
                    }
                }
                _ = shutdown.changed() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn next_wakeup(&self) -> Instant {
        let mut t = Instant::now() + Duration::from_secs(30);
        let mut consider = |x: Instant| {
            if x < t {
                t = x
            }
        };
        match self.stage {
            Stage::Volumes => consider(self.volume_due),
            Stage::Init(i) => {
                let c = &self.inits[i];
                if c.pid.is_none() && !c.done {
                    consider(c.due);
                }
            }
            Stage::Main => {
                for c in &self.mains {
                    if c.pid.is_none() && !c.done {
                        consider(c.due);
                    }
                }
            }
            Stage::Terminal => {}
        }
        if let Some(d) = self.deadline {
            consider(d);
        }
        if self.dirty {
            consider(Instant::now() + Duration::from_secs(1));
        }
        t
    }

    /// Starts whatever is due.
    async fn step(&mut self) {
        let now = Instant::now();
        match self.stage {
            Stage::Volumes if self.volume_due <= now => {
                let vctx = VolumeCtx {
                    client: &self.ctx.client,
                    state_dir: &self.ctx.cfg.state_dir,
                    ca_pem: self.ctx.ca_pem.as_deref(),
                    wait_for_service_account: self.created.elapsed() < SA_WAIT,
                };
                match volumes::prepare(&vctx, &self.pod).await {
                    Ok(v) => {
                        self.apply_fs_group(&v);
                        self.volumes = v;
                        self.stage = if self.inits.is_empty() { Stage::Main } else { Stage::Init(0) };
                        self.dirty = true;
                        Box::pin(self.step()).await;
                    }
                    Err(msg) => {
                        tracing::debug!(ns = %self.ns, pod = %self.name, "volumes not ready: {msg}");
                        for c in self.inits.iter_mut().chain(self.mains.iter_mut()) {
                            let reason = if let CState::Waiting { reason, .. } = &c.status.state {
                                reason.clone()
                            } else {
                                "ContainerCreating".into()
                            };
                            let st = CState::waiting(&reason, Some(msg.clone()));
                            if c.status.state != st {
                                c.status.state = st;
                                self.dirty = true;
                            }
                        }
                        self.volume_due = now + self.volume_backoff;
                        self.volume_backoff = (self.volume_backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
            Stage::Init(i) => {
                let c = &self.inits[i];
                if c.pid.is_none() && !c.done && c.due <= now {
                    self.start(true, i).await;
                }
            }
            Stage::Main => {
                for i in 0..self.mains.len() {
                    let c = &self.mains[i];
                    if c.pid.is_none() && !c.done && c.due <= now {
                        self.start(false, i).await;
                    }
                }
            }
            _ => {}
        }
    }

    /// NA-11: the fsGroup goes to the volumes a kubelet would give it, once, when they are
    /// set up ([`volumes::fs_group_targets`]).
    fn apply_fs_group(&self, vols: &HashMap<String, ResolvedVolume>) {
        let psc = self.pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let Some(gid) = psc.and_then(|s| s.fs_group).map(|g| g as u32) else { return };
        let on_root_mismatch = psc.and_then(|s| s.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
        for t in volumes::fs_group_targets(&self.pod, vols) {
            if on_root_mismatch && volumes::root_matches(&t.path, gid, t.writable) {
                continue;
            }
            tracing::debug!(ns = %self.ns, pod = %self.name, volume = %t.volume, gid, "applying fsGroup");
            volumes::apply_fs_group(&t.path, gid, t.writable);
        }
    }

    fn termination_file(&self, container: &str) -> PathBuf {
        volumes::pod_dir(&self.ctx.cfg.state_dir, &self.uid).join("termination").join(container)
    }

    fn conditions(&self) -> Vec<(&'static str, bool, Option<&'static str>)> {
        let terminal = matches!(self.phase, "Succeeded" | "Failed");
        let sandbox = self.stage != Stage::Volumes;
        let inits_ok = self.inits.iter().all(|c| c.exit_code() == Some(0));
        let initialized = self.stage == Stage::Main || (self.stage == Stage::Terminal && inits_ok);
        let ready = !terminal && self.stage == Stage::Main && self.mains.iter().all(|c| c.pid.is_some());
        let not_ready = if terminal { Some("PodCompleted") } else { Some("ContainersNotReady") };
        vec![
            ("PodReadyToStartContainers", sandbox || terminal, None),
            ("Initialized", initialized, if initialized { None } else { Some("ContainersNotInitialized") }),
            ("ContainersReady", ready, if ready { None } else { not_ready }),
            ("Ready", ready, if ready { None } else { not_ready }),
        ]
    }

    /// Sends the current status as one strategic-merge patch (NA-13), skipping no-ops.
    async fn publish(&mut self) {
        let conds = self.conditions();
        let changed: Vec<_> =
            conds.iter().filter(|(k, v, _)| self.sent_conditions.get(k) != Some(v)).cloned().collect();
        let cond_json = changed.iter().map(|(k, v, r)| condition(k, *v, *r, None)).collect();
        let mut extra = serde_json::Map::new();
        if let (Some(st), false) = (&self.start_time, self.start_sent)
            && let Value::Object(m) = status::start_fields(st)
        {
            extra.extend(m);
        }
        if let Some((reason, message)) = &self.pod_reason {
            extra.insert("reason".into(), reason.clone().into());
            extra.insert("message".into(), message.clone().into());
        }
        let inits: Vec<CStatus> = self.inits.iter().map(|c| c.status.clone()).collect();
        let mains: Vec<CStatus> = self.mains.iter().map(|c| c.status.clone()).collect();
        let patch = status_patch(Some(self.phase), Some(Value::Object(extra)), cond_json, &inits, &mains);
        if changed.is_empty() && self.last_patch.as_ref() == Some(&patch) {
            self.dirty = false;
            return;
        }
        match self.api.patch_status(&self.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(p) => {
                for (k, v, _) in changed {
                    self.sent_conditions.insert(k, v);
                }
                if self.start_time.is_some() {
                    self.start_sent = true;
                }
                self.last_patch = Some(patch);
                self.dirty = false;
                // Keep our view fresh (deletionTimestamp may have arrived meanwhile).
                if p.metadata.uid.as_deref() == Some(self.uid.as_str()) {
                    self.pod = p;
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.dirty = false;
            }
            Err(e) => {
                tracing::warn!(ns = %self.ns, pod = %self.name, "status patch failed: {e}");
                self.dirty = true;
            }
        }
    }
}
