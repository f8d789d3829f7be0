//! `kopiur_kube_client_requests_total{verb,group,kind,client}`: every apiserver call the
//! controller makes, counted in a tower layer on the kube client. `kind` is the resource
//! (plural) from the request path, so the label set stays bounded by the API surface.
use std::sync::Arc;

use http::{Method, Request};
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};

use crate::metrics::Metrics;
use crate::metrics::labels::KubeRequestLabels;

/// `(verb, group, resource)` of one request, the way the apiserver names them.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... (core) or /apis/<group>/<version>/...
    let (group, rest): (String, &[&str]) = match segs.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest),
        ["apis", g, _v, rest @ ..] => ((*g).to_string(), rest),
        // Not a resource path, spelled out so a new API prefix is a decision: the root, one
        // segment (`/version`, `/healthz`, the `/api` and `/apis` discovery roots), a group's
        // discovery document (`/apis/<group>`), and any other non-resource path (`/openapi/v3`,
        // `/.well-known/...`). None has a resource: resource "" and group "".
        [] | [_] | ["apis", _] | [_, _, ..] => (String::new(), &[]),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("", false),
        [r] => (*r, false),
        // `<resource>/<name>[/<subresource>]`: a call on one object.
        [r, ..] => (*r, true),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        // `http::Method` is open (extension methods), so it cannot be matched exhaustively.
        _ => "other",
    };
    (verb, group, resource.to_string())
}

/// Whether a verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

/// A client from the ambient configuration whose every request is counted under `client`.
pub async fn client(metrics: Arc<Metrics>, label: &'static str) -> anyhow::Result<Client> {
    let config = Config::infer().await?;
    let layer = tower::util::MapRequestLayer::new(move |req: Request<Body>| {
        let (verb, group, kind) = classify(req.method(), req.uri().path(), req.uri().query());
        metrics.kube_requests.inc(KubeRequestLabels { verb: verb.into(), group, kind, client: label.into() });
        req
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_classify_like_the_apiserver() {
        let c = |m: Method, p: &str, q: Option<&str>| {
            let (v, g, k) = classify(&m, p, q);
            (v.to_string(), g, k)
        };
        assert_eq!(c(Method::GET, "/api/v1/namespaces/t/pods", None), ("list".into(), "".into(), "pods".into()));
        assert_eq!(
            c(Method::GET, "/apis/batch/v1/jobs", Some("labelSelector=x&watch=true")),
            ("watch".into(), "batch".into(), "jobs".into())
        );
        assert_eq!(
            c(Method::PATCH, "/apis/kopiur.home-operations.com/v1alpha1/namespaces/t/snapshots/s1/status", None),
            ("patch".into(), "kopiur.home-operations.com".into(), "snapshots".into())
        );
        assert_eq!(
            c(Method::GET, "/apis/kopiur.home-operations.com/v1alpha1/clusterrepositories/r", None),
            ("get".into(), "kopiur.home-operations.com".into(), "clusterrepositories".into())
        );
        assert_eq!(
            c(Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/k/leases/kopiur-leader", None),
            ("update".into(), "coordination.k8s.io".into(), "leases".into())
        );
        assert_eq!(c(Method::GET, "/api/v1/namespaces", None), ("list".into(), "".into(), "namespaces".into()));
        assert_eq!(c(Method::GET, "/api/v1/namespaces/t", None), ("get".into(), "".into(), "namespaces".into()));
        assert_eq!(c(Method::POST, "/api/v1/namespaces/t/events", None).0, "create");
        assert!(is_write("patch") && !is_write("watch"));
        // Non-resource paths carry no group and no resource.
        for p in ["/", "/version", "/api", "/apis", "/apis/batch", "/openapi/v3", "/.well-known/openid-configuration"] {
            assert_eq!(c(Method::GET, p, None), ("list".into(), "".into(), "".into()), "{p}");
        }
        assert_eq!(c(Method::GET, "/api/v1", None), ("list".into(), "".into(), "".into()), "core discovery");
        assert_eq!(c(Method::GET, "/apis/batch/v1", None), ("list".into(), "batch".into(), "".into()));
        assert_eq!(c(Method::OPTIONS, "/api/v1/pods", None).0, "other");
    }
}
