//! kopiur's generated CRDs on the real apiserver: they install, every example applies and
//! round-trips without pruning, schema defaults are materialized, invalid manifests are
//! rejected with a message naming the field, and the `kopiur` category lists every kind
//! with its printer columns.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopiur_testenv::TestEnv;
use kopiur_testenv::controlplane::repo_root;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;

const GROUP: &str = "kopiur.home-operations.com";

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"));
    v.sort();
    v
}

/// The API for an object's kind, from the installed CRDs (namespaced or cluster-scoped).
async fn api_for(client: &Client, obj: &Value, ns: &str) -> Result<Api<DynamicObject>> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|c| c.spec.group == group && c.spec.names.kind == kind)
        .with_context(|| format!("no CRD for {api_version} {kind}"))?;
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: crd.spec.names.plural.clone(),
    };
    Ok(if crd.spec.scope == "Namespaced" {
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    })
}

/// Every leaf of `want` is present with the same value in `got` (arrays compared whole).
fn contained(want: &Value, got: &Value, path: &str, missing: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                match g.get(k) {
                    Some(gv) => contained(v, gv, &format!("{path}.{k}"), missing),
                    None => missing.push(format!("{path}.{k} (absent)")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                contained(a, b, &format!("{path}[{i}]"), missing);
            }
        }
        (w, g) => {
            if w != g {
                missing.push(format!("{path}: wanted {w}, stored {g}"));
            }
        }
    }
}

#[tokio::test]
async fn every_crd_is_established_and_in_the_kopiur_category() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let ours: Vec<CustomResourceDefinition> =
        crds.list(&Default::default()).await?.items.into_iter().filter(|c| c.spec.group == GROUP).collect();
    let kinds: Vec<String> = ours.iter().map(|c| c.spec.names.kind.clone()).collect();
    for k in [
        "Repository",
        "ClusterRepository",
        "SnapshotPolicy",
        "Snapshot",
        "SnapshotSchedule",
        "Restore",
        "Maintenance",
        "RepositoryReplication",
    ] {
        assert!(kinds.iter().any(|x| x == k), "CRD for {k} installed; have {kinds:?}");
    }
    for c in &ours {
        let cats = c.spec.names.categories.clone().unwrap_or_default();
        assert!(cats.iter().any(|x| x == "kopiur"), "{} in category kopiur", c.spec.names.kind);
        let v = &c.spec.versions[0];
        assert!(
            v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            "{} has a status subresource",
            c.spec.names.kind
        );
        assert!(
            !v.additional_printer_columns.clone().unwrap_or_default().is_empty(),
            "{} has printer columns",
            c.spec.names.kind
        );
    }
    Ok(())
}

#[tokio::test]
async fn examples_apply_and_round_trip_without_pruning() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("examples").await?;
    let files = yaml_files(&repo_root().join("deploy/examples"));
    assert!(!files.is_empty(), "deploy/examples has manifests");
    let mut applied = 0;
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        for obj in kopiur_testenv::yaml::parse_values(&text)? {
            if !obj["apiVersion"].as_str().unwrap_or("").starts_with(GROUP) {
                continue; // Secrets, PVCs etc. that an example brings along
            }
            let api = api_for(&client, &obj, &ns).await?;
            let mut obj = obj.clone();
            obj["metadata"].as_object_mut().context("metadata")?.remove("namespace");
            let name = obj["metadata"]["name"].as_str().context("name")?.to_string();
            let typed: DynamicObject = serde_json::from_value(obj.clone())?;
            let stored = api
                .patch(&name, &PatchParams::apply("kopiur-test").force(), &Patch::Apply(&typed))
                .await
                .with_context(|| format!("applying {} from {}", name, f.display()))?;
            let stored = serde_json::to_value(&stored)?;
            let mut missing = Vec::new();
            contained(&obj["spec"], &stored["spec"], "spec", &mut missing);
            assert!(missing.is_empty(), "{}: fields pruned or changed by the apiserver: {missing:#?}", f.display());
            applied += 1;
        }
    }
    assert!(applied >= 8, "at least one example per kind applied, got {applied}");
    Ok(())
}

/// `<name>.yaml` holds a minimal object, `<name>.expected.yaml` the fields the apiserver must
/// fill in.
#[tokio::test]
async fn schema_defaults_are_materialized() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("defaults").await?;
    let dir = repo_root().join("crates/api/tests/defaults");
    let mut checked = 0;
    for f in yaml_files(&dir) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".expected.yaml") {
            continue;
        }
        let expected_path = dir.join(name.replace(".yaml", ".expected.yaml"));
        let input = kopiur_testenv::yaml::parse_values(&std::fs::read_to_string(&f)?)?.remove(0);
        let expected = kopiur_testenv::yaml::parse_values(&std::fs::read_to_string(&expected_path)?)?.remove(0);
        let api = api_for(&client, &input, &ns).await?;
        let mut input = input;
        input["metadata"].as_object_mut().context("metadata")?.remove("namespace");
        let obj: DynamicObject = serde_json::from_value(input)?;
        let created =
            api.create(&PostParams::default(), &obj).await.with_context(|| format!("creating {}", f.display()))?;
        let stored = serde_json::to_value(&created)?;
        let mut missing = Vec::new();
        contained(&expected, &stored, "", &mut missing);
        assert!(missing.is_empty(), "{}: defaults not materialized: {missing:#?}\nstored: {stored:#}", f.display());
        // Fixtures may share a name; nothing holds a finalizer here, so this is immediate.
        api.delete(created.metadata.name.as_deref().unwrap_or_default(), &Default::default()).await?;
        checked += 1;
    }
    assert!(checked >= 5, "default fixtures checked: {checked}");
    Ok(())
}

/// Each `invalid/*.yaml` starts with `# expect: <substring>`; the apiserver must reject it with
/// a message containing that substring.
#[tokio::test]
async fn invalid_manifests_are_rejected_naming_the_field() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let mut failures = Vec::new();
    let files = yaml_files(&repo_root().join("crates/api/tests/invalid"));
    for f in &files {
        // A namespace per fixture, so fixtures may reuse names; cluster-scoped setup objects
        // are deleted at the end of their fixture.
        let ns = env.namespace("invalid").await?;
        let mut cleanup: Vec<(Api<DynamicObject>, String)> = Vec::new();
        let text = std::fs::read_to_string(f)?;
        let Some(expect) = text.lines().find_map(|l| l.trim().strip_prefix("# expect:")).map(|s| s.trim().to_string())
        else {
            bail!("{} lacks a `# expect:` line", f.display());
        };
        let mut docs = kopiur_testenv::yaml::parse_values(&text)?;
        // A fixture may hold a valid object first, then an invalid update of it.
        let last = docs.pop().context("empty fixture")?;
        for d in docs {
            let api = api_for(&client, &d, &ns).await?;
            let mut d = d;
            d["metadata"].as_object_mut().context("metadata")?.remove("namespace");
            let obj: DynamicObject = serde_json::from_value(d)?;
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("setup object of {}", f.display()))?;
            cleanup.push((api, obj.metadata.name.clone().unwrap_or_default()));
        }
        let api = api_for(&client, &last, &ns).await?;
        let mut last = last;
        last["metadata"].as_object_mut().context("metadata")?.remove("namespace");
        let name = last["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let obj: DynamicObject = serde_json::from_value(last)?;
        let res = match api.get_opt(&name).await? {
            Some(cur) => {
                let mut upd = obj.clone();
                upd.metadata.resource_version = cur.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &upd).await
            }
            None => api.create(&PostParams::default(), &obj).await,
        };
        match res {
            Ok(_) => failures.push(format!("{}: ACCEPTED (expected rejection containing {expect:?})", f.display())),
            Err(kube::Error::Api(s)) if s.message.contains(&expect) => {}
            Err(e) => failures.push(format!("{}: rejected, but message lacks {expect:?}: {e}", f.display())),
        }
        let _ = api.delete(&name, &Default::default()).await;
        for (api, name) in cleanup {
            let _ = api.delete(&name, &Default::default()).await;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid fixtures misbehaved:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(files.len() >= 30, "at least 30 invalid fixtures, have {}", files.len());
    Ok(())
}

#[tokio::test]
async fn table_view_has_printer_columns() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("table").await?;
    let req = http::Request::get(format!("/apis/{GROUP}/v1alpha1/namespaces/{ns}/repositories"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())?;
    let table: Value = client.request(req).await?;
    let cols: Vec<&str> =
        table["columnDefinitions"].as_array().context("a Table")?.iter().filter_map(|c| c["name"].as_str()).collect();
    assert!(cols.contains(&"Phase"), "Repository table columns include Phase: {cols:?}");
    Ok(())
}
