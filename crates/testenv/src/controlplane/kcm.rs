//! kube-controller-manager: the controllers the test environment runs, started and restarted.
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

use super::{ControlPlane, STEP_TIMEOUT, wait_until};
use crate::process::{self, free_port};
use crate::tools;

impl ControlPlane {
    pub(super) async fn start_kcm(&mut self) -> Result<()> {
        let bin = tools::kube_controller_manager()?;
        let k = free_port()?;
        let kc = self.admin_kubeconfig.display().to_string();
        let mut cmd = Command::new(&bin);
        cmd.args([
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            format!("--controllers={}", self.kcm_controllers()),
            format!("--service-account-private-key-file={}", self.pki.sa_key.display()),
            format!("--root-ca-file={}", self.pki.ca_crt.display()),
            "--use-service-account-credentials=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={k}"),
            format!("--cert-dir={}", self.state.join("kcm").display()),
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
            "--kube-api-qps=200".into(),
            "--kube-api-burst=400".into(),
            "--v=1".into(),
        ]);
        if let Some((b, max)) = &self.opts.job_backoff {
            cmd.env("KOPIUR_TESTENV_JOB_BACKOFF", b).env("KOPIUR_TESTENV_JOB_BACKOFF_MAX", max);
        }
        let mut proc_ =
            process::spawn("kube-controller-manager", cmd, &self.logs_dir().join("kube-controller-manager.log"))?;
        let http =
            reqwest::Client::builder().danger_accept_invalid_certs(true).timeout(Duration::from_secs(5)).build()?;
        let url = format!("https://127.0.0.1:{k}/healthz");
        wait_until(STEP_TIMEOUT, &mut proc_, || {
            let (http, url) = (http.clone(), url.clone());
            async move { matches!(http.get(&url).send().await, Ok(r) if r.status().is_success()) }
        })
        .await
        .map_err(|e| e.context(proc_.log_tail(50)))?;
        // The default ServiceAccount proves the controllers actually sync.
        let sas: Api<ServiceAccount> = Api::namespaced(self.client().await?, "default");
        let deadline = Instant::now() + STEP_TIMEOUT;
        while sas.get_opt("default").await?.is_none() {
            if Instant::now() > deadline {
                bail!("ServiceAccount default/default never appeared:\n{}", proc_.log_tail(50));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.kcm_port = k;
        self.kcm = Some(proc_);
        Ok(())
    }

    /// The kcm controllers: what the process node agent needs, ResourceQuota usage and
    /// ephemeral volumes, plus EndpointSlices for the real node's kube-proxy.
    fn kcm_controllers(&self) -> String {
        let mut c = vec![
            "garbage-collector-controller",
            "job-controller",
            "deployment-controller",
            "replicaset-controller",
            "namespace-controller",
            "serviceaccount-controller",
            "serviceaccount-token-controller",
            "persistentvolumeclaim-protection-controller",
            "persistentvolume-protection-controller",
            "ttl-after-finished-controller",
            "root-ca-certificate-publisher-controller",
            // ResourceQuota usage (a quota-refused mover is a tested wedge) and generic ephemeral
            // volumes (a mover's `cache.capacity`).
            "resourcequota-controller",
            "ephemeral-volume-controller",
        ];
        if self.opts.cluster.is_some() {
            // The node lifecycle controller lifts the not-ready taint a kubelet registers with.
            c.extend([
                "endpointslice-controller",
                "endpointslice-mirroring-controller",
                "pod-garbage-collector-controller",
                "node-lifecycle-controller",
            ]);
        }
        c.join(",")
    }

    pub async fn restart_kcm(&mut self) -> Result<()> {
        if let Some(mut p) = self.kcm.take() {
            p.stop(Duration::from_secs(10));
        }
        self.start_kcm().await
    }
}
