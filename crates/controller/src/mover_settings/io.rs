//! What the mover settings read from the cluster: the namespace's pods and the run's claim,
//! for `inheritSecurityContextFrom` and `sourceColocation`.
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kopiur_api::shared::mover::{MoverDefaults, MoverSpec, SourceColocationMode};
use kube::api::ListParams;

use super::MoverFacts;

/// Reads what the recipe's inheritance and the repository's `sourceColocation` need: one
/// LIST of the namespace's pods, only when one of them applies. `privileged_permitted` is
/// left false (the caller reads the namespace only when a privileged setting asks).
pub async fn facts(
    client: &kube::Client,
    ns: &str,
    defaults: Option<&MoverDefaults>,
    recipe: Option<&MoverSpec>,
    claim: Option<&str>,
) -> MoverFacts {
    let inherit = recipe.and_then(|r| r.inherit_security_context_from.as_ref());
    let mode = defaults.and_then(|d| d.source_colocation.as_ref()).map(|c| c.mode).unwrap_or_default();
    let mut colocate = None;
    if let Some(c) = claim
        && mode != SourceColocationMode::Disabled
    {
        // An absent or unreadable claim is not co-located (the run's own checks report it).
        let pvc = kube::Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns).get_opt(c).await;
        let modes = pvc.ok().flatten().and_then(|p| p.spec.and_then(|s| s.access_modes)).unwrap_or_default();
        if crate::mover_pods::single_node(&modes) {
            colocate = Some(c);
        }
    }
    let mut f = MoverFacts::default();
    if inherit.is_none() && colocate.is_none() {
        return f;
    }
    let pods = list(client, ns).await;
    if let Some(spec) = inherit {
        f.inherited = Some(match &pods {
            Ok(p) => crate::mover_pods::inherit(spec, p, claim),
            Err(e) => Err(e.clone()),
        });
    }
    if let (Some(c), Ok(p)) = (colocate, &pods) {
        let nodes = crate::mover_pods::nodes_using(p, c);
        // One node holds a RWO volume; more than one (or none) leaves scheduling alone.
        if nodes.len() == 1 {
            f.colocate_node = nodes.into_iter().next();
        }
    }
    f
}

/// The pods of `ns`; `Err` carries a message for the condition (the run waits).
pub async fn list(client: &kube::Client, ns: &str) -> Result<Vec<Pod>, String> {
    kube::Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| format!("listing the pods of namespace {ns} failed: {e}; the run waits and retries"))
}
