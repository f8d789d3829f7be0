//! The process node agent: its image map, the binaries it hands to pods, and starting and
//! stopping it.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::Api;

use super::{ControlPlane, STEP_TIMEOUT, node_ready};
use crate::process;
use crate::tools;

impl ControlPlane {
    /// Copies a workspace binary into `<state>/bin` (traversable and executable by pod UIDs).
    fn copy_to_state_bin(&self, built: &Path, name: &str) -> Result<PathBuf> {
        let dir = self.state.join("bin");
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let dst = dir.join(name);
        std::fs::copy(built, &dst)?;
        std::fs::set_permissions(&dst, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        Ok(dst)
    }

    /// The image map handed to the node agent: controller image -> the locally built
    /// controller, mover image -> the locally built mover, busybox-like images -> /bin/sh,
    /// plus any configured extras.
    fn write_image_map(&self) -> Result<PathBuf> {
        let mut images = Vec::new();
        for (pattern, command) in &self.opts.images {
            images.push(serde_json::json!({"pattern": pattern, "command": command, "args": []}));
        }
        // The controller image (Helm chart) first, whatever registry prefix names it. The chart
        // runs it as a non-root UID, so it gets a copy in the state directory as well.
        if let Ok(built) = tools::workspace_bin("kopiur-controller") {
            let ctrl = self.copy_to_state_bin(&built, "kopiur-controller")?;
            images.push(serde_json::json!({"pattern": "*kopiur-controller*", "command": [ctrl], "args": []}));
        }
        if let Ok(built) = tools::workspace_bin("kopiur-mover") {
            // Mover pods run as a non-root UID, which may not traverse the checkout (CI may
            // clone under a 0700 home), so they run a copy kept in the state directory.
            let dir = self.state.join("bin");
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let mover = dir.join("kopiur-mover");
            std::fs::copy(&built, &mover)?;
            std::fs::set_permissions(&mover, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            images.push(serde_json::json!({"pattern": "*kopiur-mover*", "command": [mover], "args": []}));
        }
        images.push(serde_json::json!({"pattern": "*busybox*", "command": ["/bin/sh"], "args": []}));
        images.push(serde_json::json!({"pattern": "*alpine*", "command": ["/bin/sh"], "args": []}));
        let path = self.state.join("image-map.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&serde_json::json!({ "images": images }))?)?;
        Ok(path)
    }

    pub async fn start_node_agent(&mut self) -> Result<()> {
        let bin = tools::workspace_bin("kopiur-testnode")?;
        let image_map = self.write_image_map()?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .arg("--state-dir")
            .arg(self.node_state_dir())
            .arg("--image-map")
            .arg(&image_map)
            .arg("--apiserver-port")
            .arg(self.apiserver_port.to_string())
            .arg("--kubelet-version")
            .arg(tools::version("K8S_VERSION"))
            .env("RUST_LOG", std::env::var("KOPIUR_TESTNODE_LOG").unwrap_or_else(|_| "info".into()));
        // The mover image ships kopia on its PATH; pods inherit the agent's PATH here. The
        // cache under $HOME is not traversable by the non-root mover UID, so pods get a copy
        // inside the state directory.
        if let Ok(kopia) = tools::kopia() {
            let dir = self.state.join("bin");
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let dst = dir.join("kopia");
            if !dst.exists() {
                std::fs::copy(&kopia, &dst)?;
                std::fs::set_permissions(&dst, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            }
            let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
            cmd.env("PATH", format!("{}:{path}", dir.display()));
        }
        let mut proc_ = process::spawn("node-agent", cmd, &self.logs_dir().join("node-agent.log"))?;
        let client = self.client().await?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if let Some(st) = proc_.try_wait() {
                bail!("node agent exited with {st}:\n{}", proc_.log_tail(50));
            }
            if node_ready(&nodes, "local").await {
                break;
            }
            if Instant::now() > deadline {
                bail!("Node local never became Ready:\n{}", proc_.log_tail(50));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.node = Some(proc_);
        Ok(())
    }

    /// Stops the node agent (SIGTERM: it ends its pods' processes first).
    pub fn stop_node_agent(&mut self) {
        if let Some(mut p) = self.node.take() {
            p.stop(Duration::from_secs(15));
        }
    }

    /// Kills the node agent hard (SIGKILL), as a crash would.
    pub fn kill_node_agent(&mut self) {
        if let Some(mut p) = self.node.take() {
            p.stop(Duration::ZERO);
        }
    }
}
