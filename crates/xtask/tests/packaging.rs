//! Packaging checks: the Helm chart (lint, render, values schema, RBAC), the Prometheus rules
//! (promtool), the Grafana dashboard, and the copies the chart carries of generated files.
//! Helm comes from the test-environment cache (`testenv/build-tools.sh helm`), promtool from
//! the Debian package `prometheus`.
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[path = "packaging/alerts.rs"]
mod alerts;
#[path = "packaging/chart.rs"]
mod chart;
#[path = "packaging/copies.rs"]
mod copies;
#[path = "packaging/dashboard.rs"]
mod dashboard;
#[path = "packaging/promql.rs"]
mod promql;
#[path = "packaging/rbac.rs"]
mod rbac;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/kopiur")
}

pub fn read(rel: &str) -> String {
    let p = repo_root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// A YAML file (one document) as JSON.
pub fn yaml_file(rel: &str) -> Value {
    let y: serde_norway::Value = serde_norway::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_json::to_value(y).unwrap_or_else(|e| panic!("{rel} as JSON: {e}"))
}

/// Every non-empty document of a multi-document YAML stream, as JSON.
pub fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(text)
        .map(|d| serde_norway::Value::deserialize(d).expect("valid YAML document"))
        .filter(|v| !v.is_null())
        .map(|v| serde_json::to_value(v).expect("YAML document as JSON"))
        .collect()
}

/// The cached helm binary; a clear failure when it has not been built.
pub fn helm() -> Command {
    let bin = kopiur_testenv::tools::helm().unwrap_or_else(|e| panic!("helm is required for the chart tests: {e:#}"));
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let mut cmd = Command::new(bin);
    // Hermetic: no user repositories, plugins or registry logins leak into the checks.
    cmd.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(repo_root());
    cmd
}

pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(mut cmd: Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
