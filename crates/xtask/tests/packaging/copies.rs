//! The chart carries copies of files whose source of truth lives elsewhere in deploy/
//! (Helm can only read files inside the chart directory). They must stay byte-identical.
use std::collections::BTreeMap;
use std::path::Path;

use super::{chart_dir, repo_root};

fn yaml_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("yaml"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

fn assert_same(source: &str, copy: &str) {
    let a = std::fs::read(repo_root().join(source)).unwrap_or_else(|e| panic!("{source}: {e}"));
    let b = std::fs::read(chart_dir().join(copy)).unwrap_or_else(|e| panic!("chart {copy}: {e}"));
    assert!(a == b, "deploy/helm/kopiur/{copy} differs from {source}; run: cp {source} deploy/helm/kopiur/{copy}");
}

#[test]
fn chart_dashboard_is_the_deploy_dashboard() {
    assert_same("deploy/dashboards/kopiur.json", "dashboards/kopiur.json");
}

#[test]
fn chart_rules_are_the_deploy_rules() {
    assert_same("deploy/prometheus/kopiur-rules.yaml", "prometheus/kopiur-rules.yaml");
}

/// Every generated file of deploy/<dir> is in the chart's <dir>, byte for byte, and nothing else.
fn assert_same_dir(dir: &str) {
    let generated = yaml_files(&repo_root().join("deploy").join(dir));
    let shipped = yaml_files(&chart_dir().join(dir));
    let fix = format!("run: rm -f deploy/helm/kopiur/{dir}/*.yaml && cp deploy/{dir}/*.yaml deploy/helm/kopiur/{dir}/");
    assert!(!generated.is_empty(), "deploy/{dir} is empty: run cargo xtask gen");
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>(),
        "deploy/helm/kopiur/{dir} must hold exactly the files of deploy/{dir}; {fix}"
    );
    for (name, bytes) in &generated {
        assert!(shipped[name] == *bytes, "deploy/helm/kopiur/{dir}/{name} differs from deploy/{dir}/{name}; {fix}");
    }
}

#[test]
fn chart_crds_are_the_generated_crds() {
    assert_same_dir("crds");
}

#[test]
fn chart_rbac_is_the_generated_rbac() {
    assert_same_dir("rbac");
}
