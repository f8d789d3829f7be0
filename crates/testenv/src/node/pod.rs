//! NA-5, NA-12..18: one task per pod bound to the node, from volumes to deletion.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::container::{StartFail, prepare_launch};
use super::runner::{self, ProcessTree, exit_code};
use super::status::{self, CState, CStatus, Terminated, condition, status_patch};
use super::volumes::{self, ResolvedVolume, VolumeCtx};
use super::{Ctx, pod_log_path};

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

    async fn start(&mut self, init: bool, idx: usize) {
        let spec = if init { self.inits[idx].spec.clone() } else { self.mains[idx].spec.clone() };
        let term_file = self.termination_file(&spec.name);
        let prepared = prepare_launch(&self.ctx, &self.pod, &spec, &self.volumes, &term_file).await;
        let ctx = self.ctx.clone();
        let launch = match prepared {
            Ok(l) => l,
            Err(StartFail::Waiting { reason, message }) => {
                let c = if init { &mut self.inits[idx] } else { &mut self.mains[idx] };
                let st = CState::waiting(&reason, Some(message));
                if c.status.state != st {
                    tracing::info!(container = %spec.name, "{reason}");
                    c.status.state = st;
                    self.dirty = true;
                }
                c.due = Instant::now() + c.backoff;
                c.backoff = (c.backoff * 2).min(MAX_BACKOFF);
                return;
            }
            Err(StartFail::StartError(msg)) => {
                self.record_start_error(init, idx, msg);
                return;
            }
        };

        let c = if init { &self.inits[idx] } else { &self.mains[idx] };
        let restart = if c.ever_started { c.status.restart_count + 1 } else { 0 };
        let log = pod_log_path(&ctx.cfg.state_dir, &self.ns, &self.name, &self.uid, &spec.name, restart as u32);
        let setup = (|| -> std::io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            if let Some(d) = term_file.parent() {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(&term_file, b"")?;
            std::fs::set_permissions(&term_file, std::fs::Permissions::from_mode(0o666))?;
            super::mounts::ensure_targets(&launch.plan.mounts, &ctx.created)?;
            Ok(())
        })();
        let spawned = setup.and_then(|_| runner::spawn(&launch.argv, &launch.env, &launch.plan, &log));
        let mut sp = match spawned {
            Ok(s) => s,
            Err(e) => {
                self.record_start_error(init, idx, format!("failed to start container {:?}: {e}", spec.name));
                return;
            }
        };
        let pid = sp.pid;
        let tree = sp.tree.clone();
        ctx.live.lock().unwrap().insert(pid, tree.clone());
        let tx = self.exit_tx.clone();
        tokio::spawn(async move {
            let status = sp.child.wait().await;
            let _ = tx.send(Exit { init, idx, pid, status });
        });
        let now = status::now();
        let c = if init { &mut self.inits[idx] } else { &mut self.mains[idx] };
        if c.ever_started {
            if let CState::Terminated(t) = &c.status.state {
                c.status.last_state = Some(t.clone());
            }
            c.status.restart_count += 1;
        }
        c.ever_started = true;
        c.pid = Some(pid);
        c.tree = Some(tree);
        c.started_at = Some(now.clone());
        c.status.container_id = Some(format!("proc://{pid}"));
        c.status.state = CState::Running { started_at: now.clone() };
        tracing::info!(container = %spec.name, pid = pid, restart, argv = ?launch.argv, "started");
        if self.start_time.is_none() {
            self.start_time = Some(now);
            if let Some(secs) = self.pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) {
                self.deadline = Some(Instant::now() + Duration::from_secs(secs.max(0) as u64));
            }
        }
        if !init {
            self.phase = "Running";
        }
        self.dirty = true;
    }

    fn record_start_error(&mut self, init: bool, idx: usize, msg: String) {
        tracing::warn!(ns = %self.ns, pod = %self.name, "start error: {msg}");
        let c = if init { &mut self.inits[idx] } else { &mut self.mains[idx] };
        if c.ever_started {
            if let CState::Terminated(t) = &c.status.state {
                c.status.last_state = Some(t.clone());
            }
            c.status.restart_count += 1;
        }
        c.ever_started = true;
        let mut t = Terminated::exited(128, None, Some(msg), None, None);
        t.reason = "StartError".into();
        c.status.state = CState::Terminated(t);
        if self.start_time.is_none() {
            self.start_time = Some(status::now());
        }
        self.after_exit(init, idx, 128);
    }

    fn on_exit(&mut self, exit: Exit) {
        let c = if exit.init { &mut self.inits[exit.idx] } else { &mut self.mains[exit.idx] };
        if c.pid != Some(exit.pid) {
            return;
        }
        self.ctx.live.lock().unwrap().remove(&exit.pid);
        // The shim ends after the whole tree; this only matters if the shim itself was
        // killed, and then only reaches a PID 1 that is still ours (pidfd).
        if let Some(t) = c.tree.take() {
            t.kill();
        }
        let (code, signal) = match &exit.status {
            Ok(s) => exit_code(*s),
            Err(_) => (255, None),
        };
        c.pid = None;
        let term_file = volumes::pod_dir(&self.ctx.cfg.state_dir, &self.uid).join("termination").join(&c.spec.name);
        let log = pod_log_path(
            &self.ctx.cfg.state_dir,
            &self.ns,
            &self.name,
            &self.uid,
            &c.spec.name,
            c.status.restart_count as u32,
        );
        let file = std::fs::read(&term_file).unwrap_or_default();
        let msg = status::termination_message(&file, c.spec.termination_message_policy.as_deref(), code, || {
            std::fs::read(&log).unwrap_or_default()
        });
        tracing::info!(container = %c.spec.name, pid = exit.pid, code, "exited");
        c.status.state = CState::Terminated(Terminated::exited(
            code,
            signal,
            Some(msg),
            c.started_at.clone(),
            c.status.container_id.clone(),
        ));
        self.dirty = true;
        if self.stage == Stage::Terminal {
            c.done = true;
            return;
        }
        self.after_exit(exit.init, exit.idx, code);
    }

    /// Restart decision and stage/phase transitions after a container ended.
    fn after_exit(&mut self, init: bool, idx: usize, code: i32) {
        self.dirty = true;
        let restart = match self.policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => !init || code != 0,
        };
        let c = if init { &mut self.inits[idx] } else { &mut self.mains[idx] };
        if restart {
            c.due = Instant::now() + c.backoff;
            c.backoff = (c.backoff * 2).min(MAX_BACKOFF);
        } else {
            c.done = true;
        }
        if init {
            if !c.done {
                return;
            }
            if code != 0 {
                self.finish("Failed");
            } else if idx + 1 < self.inits.len() {
                self.stage = Stage::Init(idx + 1);
            } else {
                self.stage = Stage::Main;
                for m in &mut self.mains {
                    m.status.state = CState::waiting("ContainerCreating", None);
                }
            }
        } else if self.mains.iter().all(|m| m.done) {
            let phase = status::terminal_phase(self.mains.iter().map(|m| m.exit_code().unwrap_or(1)));
            self.finish(phase);
        }
    }

    fn finish(&mut self, phase: &'static str) {
        tracing::info!(ns = %self.ns, pod = %self.name, phase, "pod finished");
        self.phase = phase;
        self.stage = Stage::Terminal;
        self.dirty = true;
    }

    /// NA-17: no process can exist for this pod any more.
    fn mark_orphaned(&mut self) {
        let st = self.pod.status.clone().unwrap_or_default();
        let prev: HashMap<String, _> = st
            .container_statuses
            .iter()
            .flatten()
            .chain(st.init_container_statuses.iter().flatten())
            .map(|s| (s.name.clone(), s.clone()))
            .collect();
        for c in self.inits.iter_mut().chain(self.mains.iter_mut()) {
            let old = prev.get(&c.spec.name);
            c.status.restart_count = old.map(|o| o.restart_count).unwrap_or(0);
            let old_term = old.and_then(|o| o.state.as_ref()).and_then(|s| s.terminated.as_ref());
            let started = old
                .and_then(|o| o.state.as_ref())
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0.to_string());
            if let Some(t) = old_term.filter(|t| t.exit_code == 0) {
                c.status.state = CState::Terminated(Terminated::exited(
                    0,
                    None,
                    t.message.clone(),
                    t.started_at.as_ref().map(|x| x.0.to_string()),
                    t.container_id.clone(),
                ));
            } else {
                c.status.state =
                    CState::Terminated(Terminated::unknown(started, old.and_then(|o| o.container_id.clone())));
            }
            c.status.container_id = old.and_then(|o| o.container_id.clone());
            c.done = true;
        }
        self.start_sent = true;
        self.finish("Failed");
    }

    /// Stops every process: SIGTERM to the groups, SIGKILL after the grace period; then a
    /// terminal status (NA-18 steps 1–2).
    async fn terminate(&mut self, reason: Option<(String, String)>) {
        let spec_grace = self.pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
        let grace_secs = self.pod.metadata.deletion_grace_period_seconds.unwrap_or(spec_grace).max(0) as u64;
        let grace = Duration::from_secs(grace_secs).min(self.ctx.cfg.max_grace);
        let was_terminal = self.stage == Stage::Terminal;
        self.stage = Stage::Terminal;
        self.stop_processes(grace).await;
        if !was_terminal {
            for c in self.inits.iter_mut().chain(self.mains.iter_mut()) {
                if !matches!(c.status.state, CState::Terminated(_)) {
                    c.status.state = CState::Terminated(Terminated::unknown(None, None));
                }
                c.done = true;
            }
            let all_main_ok = self.inits.iter().all(|c| c.exit_code() == Some(0))
                && self.mains.iter().all(|c| c.exit_code() == Some(0));
            self.phase = if all_main_ok && reason.is_none() { "Succeeded" } else { "Failed" };
            self.pod_reason = reason;
            self.dirty = true;
            tracing::info!(ns = %self.ns, pod = %self.name, phase = self.phase, "pod terminated");
        }
        if self.dirty {
            self.publish().await;
        }
    }

    /// NA-18 step 1 for every running container: SIGTERM to its PID 1, SIGKILL to PID 1
    /// after `grace` (which ends its whole PID namespace), and SIGKILL to the shim if even
    /// that did not end it. Returns once every shim has been reaped, that is once no process
    /// of the pod is left.
    async fn stop_processes(&mut self, grace: Duration) {
        if self.running_trees().is_empty() {
            return;
        }
        for t in self.running_trees() {
            t.signal(libc::SIGTERM);
        }
        self.wait_exits(grace).await;
        for t in self.running_trees() {
            t.kill();
        }
        self.wait_exits(Duration::from_secs(5)).await;
        for t in self.running_trees() {
            t.kill_shim();
        }
        self.wait_exits(Duration::from_secs(5)).await;
    }

    fn running_trees(&self) -> Vec<Arc<ProcessTree>> {
        self.inits.iter().chain(self.mains.iter()).filter_map(|c| c.tree.clone()).collect()
    }

    /// Handles exits until no container runs or `wait` has passed.
    async fn wait_exits(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while !self.running_trees().is_empty() {
            match tokio::time::timeout_at(deadline, self.exit_rx.recv()).await {
                Ok(Some(e)) => self.on_exit(e),
                _ => break,
            }
        }
    }

    /// Agent shutdown: processes go, statuses stay (a restarted agent applies NA-17).
    async fn kill_all(&mut self) {
        let grace = self.ctx.cfg.max_grace;
        self.stage = Stage::Terminal;
        self.stop_processes(grace).await;
    }

    /// NA-18 steps 3–4.
    async fn confirm_deletion(&mut self) {
        self.cleanup();
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..Default::default()
        };
        for attempt in 0..5 {
            match self.api.delete(&self.name, &dp).await {
                Ok(_) => {
                    tracing::info!(ns = %self.ns, pod = %self.name, "deletion confirmed");
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => {
                    tracing::warn!(ns = %self.ns, pod = %self.name, attempt, "delete failed: {e}");
                    tokio::time::sleep(Duration::from_millis(500 * (attempt + 1))).await;
                }
            }
        }
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(volumes::pod_dir(&self.ctx.cfg.state_dir, &self.uid));
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
