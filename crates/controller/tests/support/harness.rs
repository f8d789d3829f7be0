//! The general harness: the private control plane, Garage, the auditing kopia wrapper and
//! (once started) the operator, with Secrets and repositories over Garage.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::Repository;
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::audit::Audit;
use super::env::Stack;
use super::repos::{KopiaRepo, PASSWORD, repository, s3_backend, secret};
use super::seed::ALLOW_MASS_DELETION;
use super::wait::wait_for;

/// The whole environment: private control plane, Garage, the auditing wrapper and (once
/// started) the operator. Field order is drop order.
pub struct Harness {
    pub op: Option<Operator>,
    pub op_ns: String,
    pub client: Client,
    pub audit: Audit,
    pub garage: Garage,
    pub env: TestEnv,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start() -> Result<Harness> {
        let Stack { client, garage, op_ns, env, dir } = Stack::start().await?;
        let audit = Audit::new(&env.state_dir().join("audit"))?;
        Ok(Harness { op: None, op_ns, client, audit, garage, env, dir })
    }

    /// Starts the operator; its movers run the auditing kopia wrapper.
    pub async fn start_operator(&mut self) -> Result<()> {
        self.start_operator_with(&[]).await
    }

    /// Starts the operator like [`Harness::start_operator`], with `extra` in its environment
    /// (e.g. `KOPIUR_MAX_CONCURRENT_DELETE_JOBS`).
    pub async fn start_operator_with(&mut self, extra: &[(&str, &str)]) -> Result<()> {
        let wrapper = self.audit.wrapper.display().to_string();
        let mut env: Vec<(&str, &str)> = vec![("KOPIUR_MOVER_KOPIA_BINARY", wrapper.as_str())];
        env.extend_from_slice(extra);
        let op = Operator::start(&self.env, &self.op_ns, &env).await?;
        self.op = Some(op);
        Ok(())
    }

    /// Starts the operator in the namespaced install mode, serving `served` (and its own
    /// namespace) under the chart's RBAC for it (`Operator::start_namespaced`).
    pub async fn start_operator_namespaced(&mut self, served: &[&str]) -> Result<()> {
        let wrapper = self.audit.wrapper.display().to_string();
        let env = [("KOPIUR_MOVER_KOPIA_BINARY", wrapper.as_str())];
        self.op = Some(Operator::start_namespaced(&self.env, &self.op_ns, served, &env).await?);
        Ok(())
    }

    /// SIGKILL to the controller's process group (no graceful shutdown, the Lease is not
    /// released), then reaps it.
    pub fn kill_operator(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.proc_.signal(9);
            op.stop();
        }
    }

    pub fn stop_operator(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.stop();
        }
    }

    pub fn log(&self) -> PathBuf {
        kopiur_testenv::operator::log_file(&self.env, &self.op_ns)
    }

    pub async fn metrics(&self) -> Result<String> {
        self.op.as_ref().context("operator not running")?.metrics().await
    }

    /// The `kopia` Secret (password and S3 keys) in `ns`.
    pub async fn secret(&self, ns: &str) -> Result<()> {
        let secret = secret(ns, &self.garage, "KOPIA_PASSWORD", PASSWORD)?;
        match Api::<Secret>::namespaced(self.client.clone(), ns).create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A kopia repository at `prefix` created directly (not by the operator).
    pub async fn kopia_repo(&self, prefix: &str) -> Result<KopiaRepo> {
        let work = self.dir.path().join("kopia").join(prefix.trim_end_matches('/'));
        KopiaRepo::create(&self.garage, &work, prefix).await
    }

    /// A Repository CR over the existing kopia repository at `prefix`; `extra` is merged into
    /// its spec (e.g. `{"onNamespaceDelete": "Delete"}`).
    pub async fn repository(&self, ns: &str, name: &str, prefix: &str, extra: Value) -> Result<Repository> {
        self.secret(ns).await?;
        let obj: Repository = serde_json::from_value(repository(ns, name, s3_backend(&self.garage, prefix), extra))?;
        Ok(Api::<Repository>::namespaced(self.client.clone(), ns).create(&PostParams::default(), &obj).await?)
    }

    /// A ClusterRepository over the existing kopia repository at `prefix`, admitting
    /// `allowed` (`{"list": [...]}` or `{"selector": {...}}`); its `kopia` Secret lives in the
    /// operator namespace (an absent Secret namespace means the operator's).
    pub async fn cluster_repository(
        &self,
        name: &str,
        prefix: &str,
        allowed: Value,
    ) -> Result<kopiur_api::ClusterRepository> {
        self.secret(&self.op_ns).await?;
        let obj: kopiur_api::ClusterRepository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": name},
            "spec": {
                "backend": s3_backend(&self.garage, prefix),
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "allowedNamespaces": allowed
            },
        }))?;
        Ok(Api::<kopiur_api::ClusterRepository>::all(self.client.clone()).create(&PostParams::default(), &obj).await?)
    }

    pub async fn wait_cluster_repository_ready(&self, name: &str, timeout: Duration) -> Result<()> {
        let repos: Api<kopiur_api::ClusterRepository> = Api::all(self.client.clone());
        wait_for(&format!("ClusterRepository {name} Ready"), timeout, &self.log(), || async {
            let r = repos.get(name).await?;
            let phase = r.status.as_ref().and_then(|s| s.common.phase.as_ref()).map(|p| p.as_str().to_string());
            Ok((phase.as_deref() == Some("Ready")).then_some(()))
        })
        .await
    }

    pub async fn wait_repository_ready(&self, ns: &str, name: &str, timeout: Duration) -> Result<()> {
        let repos: Api<Repository> = Api::namespaced(self.client.clone(), ns);
        wait_for(&format!("Repository {ns}/{name} Ready"), timeout, &self.log(), || async {
            let r = repos.get(name).await?;
            Ok((r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) == Some("Ready")).then_some(()))
        })
        .await
    }

    /// Annotates the ClusterRepository with `allow-mass-deletion=<value>` (overwriting).
    pub async fn ack_cluster(&self, name: &str, value: &str) -> Result<()> {
        let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: value}}});
        Api::<kopiur_api::ClusterRepository>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }

    /// Annotates the repository with `allow-mass-deletion=<value>` (overwriting).
    pub async fn ack(&self, ns: &str, name: &str, value: &str) -> Result<()> {
        let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: value}}});
        Api::<Repository>::namespaced(self.client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }
}
