//! Garage, Secrets and repositories: the `kopia` Secret with Garage's keys, S3 backends on
//! Garage, Repository and PVC manifests, and kopia repositories created directly with the
//! kopia binary (`KopiaRepo`: one `kopia snapshot create d1 … dN` makes N manifests with one
//! connect).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{self, Identity, SnapshotCreateOptions};
use kopiur_kopia::model::{self, SnapshotManifest};
use kopiur_kopia::{KopiaEnv, Runner};
use kopiur_testenv::garage::Garage;
use kopiur_testenv::proxy::FaultProxy;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

/// The repository password of the harness's repositories and of `KopiaRepo`.
pub const PASSWORD: &str = "deletion-e2e correct horse";

/// The `kopia` Secret for `ns`: the repository password under `password_key` (a test may
/// misspell it on purpose) and Garage's S3 keys.
pub fn secret(ns: &str, g: &Garage, password_key: &str, password: &str) -> Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {password_key: password, "AWS_ACCESS_KEY_ID": g.access_key(), "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?)
}

/// Creates the `kopia` Secret (`KOPIA_PASSWORD` = `password`) in `ns`; one already there is
/// an error.
pub async fn create_secret(client: &Client, ns: &str, g: &Garage, password: &str) -> Result<()> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret(ns, g, "KOPIA_PASSWORD", password)?)
        .await?;
    Ok(())
}

/// A repository backend on Garage's bucket at `prefix`, reached at `endpoint` (a proxy or a
/// TLS front instead of Garage's own address).
pub fn s3_backend_at(g: &Garage, endpoint: &str, prefix: &str) -> Value {
    json!({"s3": {"bucket": g.bucket(), "endpoint": endpoint, "region": g.region(), "prefix": prefix}})
}

/// A repository backend on Garage's bucket at `prefix`, over plain HTTP.
pub fn s3_backend(g: &Garage, prefix: &str) -> Value {
    s3_backend_at(g, &format!("http://{}", g.s3_addr()), prefix)
}

/// A repository backend on Garage's bucket at `prefix`, reached through the fault proxy.
pub fn s3_backend_through(g: &Garage, proxy: &FaultProxy, prefix: &str) -> Value {
    s3_backend_at(g, &format!("http://{}", proxy.endpoint()), prefix)
}

/// A Repository `ns/name` on `backend` whose password is in the `kopia` Secret; the fields of
/// `extra` (an object) are added to its spec.
pub fn repository(ns: &str, name: &str, backend: Value, extra: Value) -> Value {
    let mut spec = json!({"backend": backend, "encryption": {"passwordSecretRef": {"name": "kopia"}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    })
}

/// A 1Gi ReadWriteOnce PVC `ns/name` (the process node provisions a host directory).
pub fn claim(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    })
}

/// A SnapshotPolicy `ns/name` backing up the PVC `pvc` with `copyMethod: Direct` into
/// `repository` (a reference: `{"name": "r"}`, with a namespace or a kind as needed); the
/// fields of `extra` (an object) are added to its spec.
pub fn policy(ns: &str, name: &str, repository: Value, pvc: &str, extra: Value) -> Value {
    let mut spec = json!({"repository": repository, "copyMethod": "Direct", "sources": [{"pvc": {"name": pvc}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    })
}

/// The kopia binary under its own config and cache in `work` (created), with the repository
/// `password` and Garage's keys: a client that writes snapshots no Snapshot CR owns.
pub fn kopia_runner(work: &Path, g: &Garage, password: &str) -> Result<Runner> {
    std::fs::create_dir_all(work)?;
    let env = KopiaEnv::new(work, work.join("cache"));
    Ok(Runner::new(kopiur_testenv::tools::kopia()?, Duration::from_secs(120))
        .envs(env.vars())
        .env("KOPIA_PASSWORD", password)
        .env("AWS_ACCESS_KEY_ID", g.access_key())
        .env("AWS_SECRET_ACCESS_KEY", g.secret_key())
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE"))
}

/// The kopia crate's backend for Garage's bucket at `prefix` (plain HTTP), for `kopia_runner`.
pub fn kopia_backend(g: &Garage, prefix: &str) -> Backend {
    Backend::S3(S3Backend {
        bucket: g.bucket().into(),
        endpoint: Some(g.s3_endpoint()),
        prefix: Some(prefix.into()),
        region: Some(g.region().into()),
        disable_tls: true,
        ..Default::default()
    })
}

/// One `kopia snapshot create` of `src` by `k` (a kopia runner connected to the repository),
/// recorded as `app@<ns>:/data`, the source a namespace's mover writes; returns the manifest id.
pub async fn kopia_snapshot_as_app(k: &Runner, src: &Path, ns: &str) -> Result<String> {
    let out = k
        .run_ok(&cmd::snapshot_create(
            &src.display().to_string(),
            &SnapshotCreateOptions {
                override_source: Some(Identity::new("app", ns.to_string()).source("/data")),
                ..Default::default()
            },
        ))
        .await?;
    let made: Vec<SnapshotManifest> = model::parse_stream("snapshot create", &out.stdout)?;
    Ok(made.first().context("a manifest")?.id.clone())
}

/// Server-side applies `v` in `ns`.
pub async fn apply(client: &Client, ns: &str, v: Value) -> Result<()> {
    kopiur_testenv::apply::apply_value(client, ns, &v).await
}

/// Applies the Repository `name` in `ns` over `backend` ([`repository`]).
pub async fn apply_repository(client: &Client, ns: &str, name: &str, backend: Value, extra: Value) -> Result<()> {
    apply(client, ns, repository(ns, name, backend, extra)).await
}

/// A kopia repository created and seeded directly, with its own client config.
pub struct KopiaRepo {
    pub prefix: String,
    pub work: PathBuf,
    bin: PathBuf,
    bucket: String,
    endpoint: String,
    region: String,
}

impl KopiaRepo {
    fn cmd(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.env("KOPIA_CONFIG_PATH", self.work.join("repository.config"))
            .env("KOPIA_CACHE_DIRECTORY", self.work.join("cache"))
            .env("KOPIA_LOG_DIR", self.work.join("logs"))
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", kopiur_testenv::garage::ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", kopiur_testenv::garage::SECRET_ACCESS_KEY)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[String], cwd: Option<&Path>) -> Result<String> {
        let mut c = self.cmd();
        c.args(args);
        if let Some(d) = cwd {
            c.current_dir(d);
        }
        let out = tokio::time::timeout(Duration::from_secs(300), c.output()).await.context("kopia timed out")??;
        if !out.status.success() {
            bail!(
                "kopia {} failed ({}):\n{}",
                args.iter().take(3).cloned().collect::<Vec<_>>().join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Creates the kopia repository at `prefix` in the Garage bucket.
    pub async fn create(g: &Garage, work: &Path, prefix: &str) -> Result<KopiaRepo> {
        std::fs::create_dir_all(work)?;
        let r = KopiaRepo {
            prefix: prefix.to_string(),
            work: work.to_path_buf(),
            bin: kopiur_testenv::tools::kopia()?,
            bucket: g.bucket().to_string(),
            endpoint: g.s3_endpoint(),
            region: g.region().to_string(),
        };
        let args: Vec<String> = [
            "repository",
            "create",
            "s3",
            &format!("--bucket={}", r.bucket),
            &format!("--endpoint={}", r.endpoint),
            &format!("--prefix={prefix}"),
            &format!("--region={}", r.region),
            "--disable-tls",
            "--override-username=seed",
            "--override-hostname=deletion-e2e",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        r.run(&args, None).await.context("kopia repository create")?;
        Ok(r)
    }

    /// One `kopia snapshot create` over one tiny distinct directory per name: N manifests,
    /// one connect. Returns name -> manifest id, and records each manifest's source for the
    /// seeded Snapshots' `status.resolved.identity` (`seed::record_source`). The manifests carry
    /// no `kopiur-uid` tag (one create call cannot tag each with its own Snapshot's uid), as if
    /// made outside kopiur: the batch mover deletes them on their recorded source alone.
    pub async fn seed(&self, names: &[String]) -> Result<BTreeMap<String, String>> {
        let src = self.work.join("src");
        for n in names {
            let d = src.join(n);
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("data.txt"), format!("seeded snapshot {n} in {}\n", self.prefix))?;
        }
        let before = self.list().await?;
        let mut args: Vec<String> = vec!["snapshot".into(), "create".into()];
        args.extend(names.iter().cloned());
        args.push("--no-progress".into());
        self.run(&args, Some(&src)).await.context("kopia snapshot create")?;
        let listed = self.list_json().await?;
        let mut out = BTreeMap::new();
        for m in listed {
            let id = m["id"].as_str().unwrap_or_default().to_string();
            if before.contains(&id) {
                continue;
            }
            let path = m["source"]["path"].as_str().unwrap_or_default();
            let name = Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            crate::support::seed::record_source(
                &id,
                m["source"]["userName"].as_str().unwrap_or_default(),
                m["source"]["host"].as_str().unwrap_or_default(),
                path,
            );
            out.insert(name, id);
        }
        for n in names {
            if !out.contains_key(n) {
                bail!("no manifest for seeded directory {n} ({} new manifests)", out.len());
            }
        }
        Ok(out)
    }

    /// One manifest made as a kopiur backup makes it: tagged `kopiur-uid` with the Snapshot's
    /// uid. Returns its id and records its source like [`KopiaRepo::seed`].
    pub async fn seed_tagged(&self, name: &str, uid: &str) -> Result<String> {
        let src = self.work.join("src");
        let d = src.join(name);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("data.txt"), format!("a kopiur backup of {name} in {}\n", self.prefix))?;
        let args: Vec<String> = vec![
            "snapshot".into(),
            "create".into(),
            name.into(),
            format!("--tags=kopiur-uid:{uid}"),
            "--no-progress".into(),
            "--json".into(),
        ];
        let out = self.run(&args, Some(&src)).await.context("kopia snapshot create --tags")?;
        let m: Value =
            serde_json::from_str(out.trim()).with_context(|| format!("parsing snapshot create: {out:.200}"))?;
        let id = m["id"].as_str().context("no id in snapshot create")?.to_string();
        crate::support::seed::record_source(
            &id,
            m["source"]["userName"].as_str().unwrap_or_default(),
            m["source"]["host"].as_str().unwrap_or_default(),
            m["source"]["path"].as_str().unwrap_or_default(),
        );
        Ok(id)
    }

    async fn list_json(&self) -> Result<Vec<Value>> {
        let out = self.run(&["snapshot".into(), "list".into(), "--all".into(), "--json".into()], None).await?;
        serde_json::from_str(&out).with_context(|| format!("parsing snapshot list: {out:.200}"))
    }

    /// `kopia snapshot list --all`: every manifest id in the repository.
    pub async fn list(&self) -> Result<BTreeSet<String>> {
        Ok(self.list_json().await?.iter().filter_map(|m| m["id"].as_str().map(str::to_string)).collect())
    }
}
