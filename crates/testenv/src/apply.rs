//! Server-side apply of arbitrary manifests (YAML -> JSON value -> object), resolving each
//! kind through API discovery, like `kubectl apply --server-side`.
use anyhow::{Context, Result};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

const MANAGER: &str = "kopiur-testenv";

/// Applies every document of `text`; namespaced objects without a namespace land in `ns`.
pub async fn apply_yaml(client: &Client, ns: &str, text: &str) -> Result<usize> {
    let docs = crate::yaml::parse_values(text)?;
    for v in &docs {
        apply_value(client, ns, v).await?;
    }
    Ok(docs.len())
}

pub async fn apply_value(client: &Client, ns: &str, v: &Value) -> Result<()> {
    let api_version = v["apiVersion"].as_str().context("apiVersion missing")?;
    let kind = v["kind"].as_str().context("kind missing")?;
    let name = v["metadata"]["name"].as_str().context("metadata.name missing")?.to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) =
        discovery::pinned_kind(client, &gvk).await.with_context(|| format!("discovering {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let target = v["metadata"]["namespace"].as_str().unwrap_or(ns);
            Api::namespaced_with(client.clone(), target, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(v.clone())?;
    api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj))
        .await
        .with_context(|| format!("applying {kind}/{name}"))?;
    Ok(())
}
