//! Starting a pod's containers, and what happens when one exits: the restart decision and
//! the stage and phase transitions.
use std::time::Duration;

use tokio::time::Instant;

use super::super::container::{StartFail, prepare_launch};
use super::super::pod_log_path;
use super::super::runner::{self, exit_code};
use super::super::status::{self, CState, Terminated};
use super::super::volumes;
use super::{Exit, MAX_BACKOFF, Stage, Worker};

impl Worker {
    pub(super) async fn start(&mut self, init: bool, idx: usize) {
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
            super::super::mounts::ensure_targets(&launch.plan.mounts, &ctx.created)?;
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

    pub(super) fn on_exit(&mut self, exit: Exit) {
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

    pub(super) fn finish(&mut self, phase: &'static str) {
        tracing::info!(ns = %self.ns, pod = %self.name, phase, "pod finished");
        self.phase = phase;
        self.stage = Stage::Terminal;
        self.dirty = true;
    }
}
