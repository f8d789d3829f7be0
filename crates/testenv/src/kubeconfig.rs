//! Minimal kubeconfig files: admin (client certificate) and ServiceAccount (bearer token).
use std::path::Path;

use anyhow::Result;
use base64::Engine;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Which credential the kubeconfig carries.
pub enum Credential<'a> {
    ClientCert { cert_pem: &'a [u8], key_pem: &'a [u8] },
    Token(&'a str),
}

/// Renders a one-cluster, one-user, one-context kubeconfig.
pub fn render(server: &str, ca_pem: &[u8], user: &str, cred: Credential<'_>) -> String {
    let user_block = match cred {
        Credential::ClientCert { cert_pem, key_pem } => {
            format!("    client-certificate-data: {}\n    client-key-data: {}\n", b64(cert_pem), b64(key_pem))
        }
        Credential::Token(t) => format!("    token: {t}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{user_block}contexts:\n- name: {user}@local\n  context:\n    cluster: local\n    user: {user}\ncurrent-context: {user}@local\n",
        ca = b64(ca_pem),
    )
}

pub fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(())
}

/// Builds a kube client from a kubeconfig file.
pub async fn client(path: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}
