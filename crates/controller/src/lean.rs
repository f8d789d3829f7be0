//! The Snapshot watch reads each object without building what no reader of the store uses.
//!
//! A Snapshot as the API server sends it carries `managedFields` (on a catalog row two entries,
//! about 1.6 KB of JSON, deserialised as a tree of small maps and strings) and labels only the
//! catalog's own listing reads. Dropped after deserialisation (`heap::slim_snapshot`), they
//! still cost the allocations: an initial list deserialises a page of 500 objects at once, so
//! each page leaves the kept rows interleaved with the freed blocks, and the store, filled
//! page by page, keeps holes glibc cannot return. [`LeanSnapshot`] is the same resource read
//! through its own deserialiser: `managedFields` is skipped by the parser (never built), and of
//! the labels only `origin` (the one label a reader takes from a stored Snapshot, see
//! `heap::slim_snapshot`) is built. Everything else is read as `Snapshot` reads it; the feed
//! turns each object into a `Snapshot` by moving its parts (no copy) and then slims it as
//! before. The equivalence is a unit test: full read plus slim equals lean read plus slim.
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kopiur_api::Snapshot;
use kopiur_api::names::label;
use kopiur_api::snapshot::{SnapshotSpec, SnapshotStatus};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A Snapshot read without `managedFields` and without the labels no store reader reads.
#[derive(Clone, Debug)]
pub struct LeanSnapshot(pub Snapshot);

impl Resource for LeanSnapshot {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Snapshot::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Snapshot::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Snapshot::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Snapshot::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// Every `ObjectMeta` field but `managedFields`, which the parser skips unbuilt.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    #[serde(default, deserialize_with = "origin_label_only")]
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<LeanMeta> for ObjectMeta {
    fn from(m: LeanMeta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// Whether a map key is `want`, read without allocating it.
struct KeyIs(&'static str);

impl<'de> DeserializeSeed<'de> for KeyIs {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a label key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

/// The labels map, keeping only `origin`: the others are skipped by the parser.
fn origin_label_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Labels;
    impl<'de> Visitor<'de> for Labels {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of labels")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(is_origin) = map.next_key_seed(KeyIs(label::ORIGIN))? {
                if is_origin {
                    out.insert(label::ORIGIN.to_string(), map.next_value::<String>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Labels)
}

impl<'de> Deserialize<'de> for LeanSnapshot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: LeanMeta,
            spec: SnapshotSpec,
            status: Option<SnapshotStatus>,
        }
        let Raw { metadata, spec, status } = Raw::deserialize(d)?;
        Ok(LeanSnapshot(Snapshot { metadata: metadata.into(), spec, status }))
    }
}

/// One watch event of the lean read as the `Snapshot` event the feed stores.
fn into_snapshot(e: watcher::Event<LeanSnapshot>) -> watcher::Event<Snapshot> {
    match e {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.0),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The watch of every served Snapshot (`crate::scope`), read lean, as `Snapshot` events.
pub fn snapshot_watch(
    client: Client,
    namespaces: crate::scope::Namespaces,
    wc: watcher::Config,
) -> futures::stream::BoxStream<'static, Result<watcher::Event<Snapshot>, watcher::Error>> {
    crate::scope::watch::<LeanSnapshot>(client, namespaces, wc).map_ok(into_snapshot).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Snapshot with every metadata field set, labels kopiur does and does not read,
    /// both managedFields entries, the kubectl copy, and a full status.
    fn full(origin_label: Option<&str>, status_origin: Option<&str>) -> String {
        let mut labels = serde_json::json!({
            "app.kubernetes.io/managed-by": "kopiur",
            "kopiur.home-operations.com/snapshot-id": "k0123",
            "kopiur.home-operations.com/repository-uid": "u-1",
            "team": "media"
        });
        if let Some(o) = origin_label {
            labels["kopiur.home-operations.com/origin"] = o.into();
        }
        let mut status = serde_json::json!({
            "phase": "Discovered",
            "observedGeneration": 3,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "SnapshotDiscovered", "message": "m",
                 "observedGeneration": 3, "lastTransitionTime": "2026-12-03T10:00:00Z"},
                {"type": "Reconciling", "status": "False", "reason": "SnapshotDiscovered", "message": "",
                 "observedGeneration": 3, "lastTransitionTime": "2026-12-03T10:00:00Z"}
            ],
            "snapshot": {"kopiaSnapshotID": "k0123", "identity": {"username": "app", "hostname": "h", "sourcePath": "/data"}},
            "timing": {"startTime": "2026-11-01T00:00:00Z", "endTime": "2026-11-01T00:00:42Z", "durationSeconds": 42},
            "stats": {"sizeBytes": 1073741824},
            "resolved": {"repository": {"kind": "Repository", "name": "r", "namespace": "t", "uid": "u-1"},
                         "deletionPolicy": "Retain", "repositoryUniqueId": "abc"}
        });
        if let Some(o) = status_origin {
            status["origin"] = o.into();
        }
        serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {
                "annotations": {
                    crate::heap::LAST_APPLIED: "{\"big\": true}",
                    "kopiur.home-operations.com/pruned-by": "retention"
                },
                "creationTimestamp": "2026-12-03T09:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "deletionTimestamp": "2026-12-03T11:00:00Z",
                "finalizers": ["kopiur.home-operations.com/snapshot-cleanup"],
                "generateName": "s-",
                "generation": 3,
                "labels": labels,
                "managedFields": [
                    {"apiVersion": "kopiur.home-operations.com/v1alpha1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}},
                     "manager": "kubectl", "operation": "Update", "time": "2026-12-03T09:00:00Z"},
                    {"apiVersion": "kopiur.home-operations.com/v1alpha1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {".": {}, "f:phase": {}}},
                     "manager": "kopiur", "operation": "Update", "subresource": "status", "time": "2026-12-03T09:00:01Z"}
                ],
                "name": "s-abc",
                "namespace": "t",
                "ownerReferences": [{"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule",
                                     "name": "daily", "uid": "u-2", "controller": true}],
                "resourceVersion": "42",
                "selfLink": "/apis/kopiur.home-operations.com/v1alpha1/namespaces/t/snapshots/s-abc",
                "uid": "u-3"
            },
            "spec": {"repository": {"name": "r"}, "deletionPolicy": "Retain", "pin": true},
            "status": status
        })
        .to_string()
    }

    fn both(text: &str) -> (Snapshot, Snapshot) {
        let mut full: Snapshot = serde_json::from_str(text).expect("a Snapshot");
        crate::heap::slim_snapshot(&mut full);
        let mut lean = serde_json::from_str::<LeanSnapshot>(text).expect("a lean Snapshot").0;
        crate::heap::slim_snapshot(&mut lean);
        (full, lean)
    }

    #[test]
    fn a_lean_read_then_slim_equals_a_full_read_then_slim() {
        for (label, status) in [
            (Some("discovered"), Some("discovered")),
            (Some("discovered"), None),
            (Some("discovered"), Some("manual")),
            (Some("scheduled"), Some("scheduled")),
            (None, Some("manual")),
            (None, None),
        ] {
            let text = full(label, status);
            let (full, lean) = both(&text);
            assert_eq!(full.metadata, lean.metadata, "label {label:?}, status origin {status:?}");
            assert_eq!(
                serde_json::to_value(&full).unwrap(),
                serde_json::to_value(&lean).unwrap(),
                "label {label:?}, status origin {status:?}"
            );
            assert_eq!(lean.metadata.deletion_timestamp, full.metadata.deletion_timestamp);
        }
    }

    #[test]
    fn every_object_meta_field_but_managed_fields_is_read() {
        // A struct literal without `..`: a field k8s-openapi adds to ObjectMeta fails to compile
        // here until `LeanMeta` reads it too.
        let m = ObjectMeta {
            annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
            creation_timestamp: Some(serde_json::from_str("\"2027-01-15T08:00:00Z\"").unwrap()),
            deletion_grace_period_seconds: Some(5),
            deletion_timestamp: Some(serde_json::from_str("\"2027-01-15T08:01:40Z\"").unwrap()),
            finalizers: Some(vec!["f".into()]),
            generate_name: Some("g-".into()),
            generation: Some(7),
            labels: Some(BTreeMap::from([(label::ORIGIN.into(), "manual".into())])),
            managed_fields: None,
            name: Some("n".into()),
            namespace: Some("ns".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "K".into(),
                name: "o".into(),
                uid: "u".into(),
                block_owner_deletion: Some(true),
                controller: Some(true),
            }]),
            resource_version: Some("9".into()),
            self_link: Some("/x".into()),
            uid: Some("u-9".into()),
        };
        let text = serde_json::json!({"metadata": m, "spec": {}}).to_string();
        let lean = serde_json::from_str::<LeanSnapshot>(&text).expect("a lean Snapshot").0;
        assert_eq!(lean.metadata, m);
    }

    #[test]
    fn labels_absent_null_or_without_origin() {
        let read = |labels: serde_json::Value| {
            let text = serde_json::json!({"metadata": {"name": "s", "labels": labels}, "spec": {}}).to_string();
            serde_json::from_str::<LeanSnapshot>(&text).expect("a lean Snapshot").0.metadata.labels
        };
        assert_eq!(read(serde_json::Value::Null), None);
        assert_eq!(read(serde_json::json!({"team": "x"})), Some(BTreeMap::new()));
        let text = serde_json::json!({"metadata": {"name": "s"}, "spec": {}}).to_string();
        assert_eq!(serde_json::from_str::<LeanSnapshot>(&text).unwrap().0.metadata.labels, None);
    }
}
