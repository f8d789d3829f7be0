//! NA-4: binds every schedulable pod to the one node.
use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

use super::config::NODE_NAME;
use super::lease::arch;

fn node_labels() -> BTreeMap<String, String> {
    [("kubernetes.io/hostname", NODE_NAME), ("kubernetes.io/os", "linux"), ("kubernetes.io/arch", arch())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whether `nodeSelector` and required node affinity (`In`, `NotIn`, `Exists`,
/// `DoesNotExist` on labels) admit this node. Unknown operators admit it.
pub fn fits(pod: &Pod) -> bool {
    let labels = node_labels();
    let Some(spec) = &pod.spec else { return true };
    if let Some(sel) = &spec.node_selector
        && sel.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.clone());
    let Some(terms) = terms else { return true };
    if terms.is_empty() {
        return true;
    }
    terms.iter().any(|t| {
        t.match_expressions.iter().flatten().all(|e| {
            let v = labels.get(&e.key);
            let vals = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => v.is_some_and(|v| vals.contains(v)),
                "NotIn" => !v.is_some_and(|v| vals.contains(v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => true,
            }
        })
    })
}

async fn bind(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let binding = Binding {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(NODE_NAME.into()),
            ..Default::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _: serde_json::Value = api.create_subresource("binding", &name, &PostParams::default(), &binding).await?;
    Ok(())
}

async fn mark_unschedulable(client: &Client, pod: &Pod) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let patch = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        "lastTransitionTime": super::status::now(), "lastProbeTime": null,
    }]}});
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        tracing::debug!(%ns, %name, "marking unschedulable: {e}");
    }
}

pub async fn run(client: Client, mut shutdown: watch::Receiver<bool>) {
    let api: Api<Pod> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields("spec.nodeName=");
    let stream = watcher(api, cfg).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    let mut unschedulable: HashSet<String> = HashSet::new();
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = super::stopped(&mut shutdown) => return,
        };
        let pod = match next {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                tracing::warn!("unscheduled pod watch: {e}");
                continue;
            }
            None => return,
        };
        let spec = pod.spec.as_ref();
        if pod.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.node_name.as_ref()).is_some_and(|n| !n.is_empty())
            || spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
        {
            continue;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !fits(&pod) {
            if unschedulable.insert(uid) {
                mark_unschedulable(&client, &pod).await;
            }
            continue;
        }
        for attempt in 0..3u64 {
            match bind(&client, &pod).await {
                Ok(()) => {
                    tracing::info!(ns = ?pod.metadata.namespace, name = ?pod.metadata.name, "bound");
                    break;
                }
                // Already bound, deleted, or its namespace is terminating.
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 403) => break,
                Err(e) => {
                    tracing::warn!(name = ?pod.metadata.name, "binding failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(200 * (attempt + 1))).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    };

    fn pod(spec: PodSpec) -> Pod {
        Pod { spec: Some(spec), ..Default::default() }
    }

    #[test]
    fn selector_and_affinity() {
        assert!(fits(&pod(PodSpec::default())));
        let sel = |k: &str, v: &str| PodSpec {
            node_selector: Some([(k.to_string(), v.to_string())].into()),
            ..Default::default()
        };
        assert!(fits(&pod(sel("kubernetes.io/hostname", "local"))));
        assert!(!fits(&pod(sel("kubernetes.io/hostname", "other"))));
        assert!(!fits(&pod(sel("disktype", "ssd"))));
        let aff = |op: &str, vals: &[&str]| PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/os".into(),
                                operator: op.into(),
                                values: Some(vals.iter().map(|s| s.to_string()).collect()),
                            }]),
                            ..Default::default()
                        }],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(fits(&pod(aff("In", &["linux"]))));
        assert!(!fits(&pod(aff("In", &["windows"]))));
        assert!(fits(&pod(aff("NotIn", &["windows"]))));
        assert!(fits(&pod(aff("Exists", &[]))));
        assert!(!fits(&pod(aff("DoesNotExist", &[]))));
    }
}
