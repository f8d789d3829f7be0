//! Runs the kopiur controller binary against a local control plane, under its own
//! ServiceAccount bound to the generated RBAC (`deploy/rbac/`), so a missing rule fails the
//! way it would in a cluster.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use serde_json::json;

use crate::controlplane::repo_root;
use crate::env::TestEnv;
use crate::process::{self, Proc, free_port};
use crate::{apply, tools};

pub struct Operator {
    pub proc_: Proc,
    pub metrics_port: u16,
    pub namespace: String,
    /// The Lease identity (`POD_NAME`) of a replica started with [`Operator::start_replica`].
    pub identity: Option<String>,
}

impl Operator {
    /// Applies the generated RBAC, binds it to ServiceAccount `kopiur-controller` in `ns`
    /// and starts the controller with a token kubeconfig for that account.
    pub async fn start(env: &TestEnv, ns: &str, extra_env: &[(&str, &str)]) -> Result<Operator> {
        Operator::launch(env, ns, None, extra_env).await
    }

    /// Another replica in the same operator namespace (same ServiceAccount, same Lease), with
    /// its own identity (`POD_NAME=kopiur-controller-<replica>`), metrics port and log file
    /// (`kopiur-controller-<ns>-<replica>.log`). Start the first replica with this too when a
    /// test needs to tell the replicas apart.
    pub async fn start_replica(env: &TestEnv, ns: &str, replica: &str, extra_env: &[(&str, &str)]) -> Result<Operator> {
        Operator::launch(env, ns, Some(replica), extra_env).await
    }

    /// The namespaced install mode (chart value `watchNamespaces`): the chart's RBAC for it,
    /// rendered by `helm template` (a ClusterRole for cluster-scoped kinds only, a Role in each
    /// of `served` and in `ns`, the leader-election Role), bound to ServiceAccount
    /// `kopiur-controller`, and the controller told the list (`KOPIUR_WATCH_NAMESPACES`).
    pub async fn start_namespaced(
        env: &TestEnv,
        ns: &str,
        served: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Result<Operator> {
        let client = env.client().await?;
        ensure_namespace(&client, ns).await?;
        let list = served.join(",");
        let out = Command::new(tools::helm()?)
            .args(["template", "kopiur"])
            .arg(repo_root().join("deploy/helm/kopiur"))
            .args(["--namespace", ns, "--set", &format!("watchNamespaces={{{list}}}")])
            .args(["--set", "serviceAccount.name=kopiur-controller"])
            .args(["--show-only", "templates/clusterrole.yaml", "--show-only", "templates/leader-election-role.yaml"])
            .env("HELM_CACHE_HOME", std::env::temp_dir().join("kopiur-helm-cache"))
            .env("HELM_CONFIG_HOME", std::env::temp_dir().join("kopiur-helm-config"))
            .output()
            .context("running helm template")?;
        anyhow::ensure!(out.status.success(), "helm template failed: {}", String::from_utf8_lossy(&out.stderr));
        apply::apply_yaml(&client, ns, &String::from_utf8(out.stdout)?).await.context("applying the chart's RBAC")?;
        let mut env_vars: Vec<(&str, &str)> = vec![("KOPIUR_WATCH_NAMESPACES", list.as_str())];
        env_vars.extend_from_slice(extra_env);
        Operator::spawn(env, ns, None, &env_vars).await
    }

    async fn launch(env: &TestEnv, ns: &str, replica: Option<&str>, extra_env: &[(&str, &str)]) -> Result<Operator> {
        let client = env.client().await?;
        ensure_namespace(&client, ns).await?;
        let rbac = std::fs::read_to_string(repo_root().join("deploy/rbac/kopiur-rbac.yaml"))?;
        apply::apply_yaml(&client, ns, &rbac).await.context("applying deploy/rbac")?;
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("kopiur-controller-{ns}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopiur-controller"},
            "subjects": [{"kind": "ServiceAccount", "name": "kopiur-controller", "namespace": ns}]
        });
        apply::apply_value(&client, ns, &binding).await?;
        Operator::spawn(env, ns, replica, extra_env).await
    }

    /// The controller process under ServiceAccount `kopiur-controller` of `ns` (its RBAC
    /// already applied).
    async fn spawn(env: &TestEnv, ns: &str, replica: Option<&str>, extra_env: &[(&str, &str)]) -> Result<Operator> {
        let kc = env
            .cp
            .service_account_kubeconfig(
                ns,
                "kopiur-controller",
                &env.state_dir().join(format!("operator-{ns}.kubeconfig")),
            )
            .await?;
        let port = free_port()?;
        let mut cmd = Command::new(tools::workspace_bin("kopiur-controller")?);
        cmd.env("KUBECONFIG", &kc)
            .env("KOPIUR_NAMESPACE", ns)
            .env("KOPIUR_METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("KOPIUR_MOVER_IMAGE", "kopiur-mover:local")
            .env("RUST_LOG", std::env::var("KOPIUR_OPERATOR_LOG").unwrap_or_else(|_| "info,kube=warn".into()));
        let identity = replica.map(|r| format!("kopiur-controller-{r}"));
        if let Some(id) = &identity {
            cmd.env("POD_NAME", id);
        }
        let log_name = match replica {
            Some(r) => format!("kopiur-controller-{ns}-{r}.log"),
            None => format!("kopiur-controller-{ns}.log"),
        };
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let proc_ = process::spawn("kopiur-controller", cmd, &env.cp.logs_dir().join(log_name))?;
        Ok(Operator { proc_, metrics_port: port, namespace: ns.to_string(), identity })
    }

    pub fn log_path(&self) -> &Path {
        &self.proc_.log
    }

    pub fn stop(&mut self) {
        self.proc_.stop(Duration::from_secs(10));
    }

    /// SIGKILL, no grace: a crash. Whatever it held (the Lease) must expire on its own.
    pub fn kill(&mut self) {
        self.proc_.signal(libc::SIGKILL);
        self.proc_.stop(Duration::ZERO);
    }

    /// The controller's `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        Ok(reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port)).await?.text().await?)
    }

    /// The sum of every series whose rendered line starts with `prefix` (a metric name, or a
    /// name with its leading labels: `name{kind="Repository",namespace="t"`); None when no
    /// series matches or the endpoint does not answer.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let text = self.metrics().await.ok()?;
        let values: Vec<f64> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(prefix).is_some_and(|rest| {
                    rest.starts_with([' ', '{', ',', '}']) || prefix.ends_with(['{', ',', '}']) || rest.is_empty()
                })
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// Whether this replica currently leads (`kopiur_leader 1`).
    pub async fn is_leader(&self) -> bool {
        self.metric("kopiur_leader").await == Some(1.0)
    }
}

pub async fn ensure_namespace(client: &Client, ns: &str) -> Result<()> {
    apply::apply_value(client, ns, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await
}

/// Path of the operator log for a namespace (for printing on failure).
pub fn log_file(env: &TestEnv, ns: &str) -> PathBuf {
    env.cp.logs_dir().join(format!("kopiur-controller-{ns}.log"))
}
