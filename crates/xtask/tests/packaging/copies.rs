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

#[test]
fn chart_crds_are_the_generated_crds() {
    let generated = yaml_files(&repo_root().join("deploy/crds"));
    let shipped = yaml_files(&chart_dir().join("crds"));
    assert!(!generated.is_empty(), "deploy/crds is empty: run cargo xtask gen");
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>(),
        "deploy/helm/kopiur/crds must hold exactly the files of deploy/crds; run: rm deploy/helm/kopiur/crds/*.yaml && cp deploy/crds/*.yaml deploy/helm/kopiur/crds/"
    );
    for (name, bytes) in &generated {
        assert!(
            shipped[name] == *bytes,
            "deploy/helm/kopiur/crds/{name} differs from deploy/crds/{name}; run: cp deploy/crds/*.yaml deploy/helm/kopiur/crds/"
        );
    }
}
