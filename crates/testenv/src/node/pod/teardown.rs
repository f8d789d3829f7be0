//! Ending a pod: orphaned pods after an agent restart, stopping its processes, confirming its
//! deletion and removing its directory (NA-17, NA-18).
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, Preconditions};
use tokio::time::Instant;

use super::super::runner::ProcessTree;
use super::super::status::{CState, Terminated};
use super::super::volumes;
use super::{Stage, Worker};

impl Worker {
    /// NA-17: no process can exist for this pod any more.
    pub(super) fn mark_orphaned(&mut self) {
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
    pub(super) async fn terminate(&mut self, reason: Option<(String, String)>) {
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
    pub(super) async fn kill_all(&mut self) {
        let grace = self.ctx.cfg.max_grace;
        self.stage = Stage::Terminal;
        self.stop_processes(grace).await;
    }

    /// NA-18 steps 3–4.
    pub(super) async fn confirm_deletion(&mut self) {
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

    pub(super) fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(volumes::pod_dir(&self.ctx.cfg.state_dir, &self.uid));
    }
}
