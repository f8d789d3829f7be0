//! PKI for one local control plane: a CA, the apiserver serving certificate, the admin
//! client certificate and the service-account signing key pair, all ECDSA P-256.
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// File paths of the generated material under `<state>/pki`.
#[derive(Clone, Debug)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca_crt: PathBuf,
    pub ca_key: PathBuf,
    pub apiserver_crt: PathBuf,
    pub apiserver_key: PathBuf,
    pub admin_crt: PathBuf,
    pub admin_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(7);
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

impl Pki {
    pub fn generate(state: &Path) -> Result<Pki> {
        Pki::generate_with(state, &[])
    }

    /// Like [`Pki::generate`], with extra IP SANs on the apiserver certificate (the real
    /// node's bridge address and the `kubernetes` Service IP).
    pub fn generate_with(state: &Path, extra_ips: &[IpAddr]) -> Result<Pki> {
        let dir = state.join("pki");
        std::fs::create_dir_all(&dir)?;
        let pki = Pki {
            ca_crt: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            apiserver_crt: dir.join("apiserver.crt"),
            apiserver_key: dir.join("apiserver.key"),
            admin_crt: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
            dir,
        };

        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = dn("kopiur-testenv-ca", None);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut ca);
        let ca_cert = ca.self_signed(&ca_key)?;
        write(&pki.ca_crt, &ca_cert.pem())?;
        write(&pki.ca_key, &ca_key.serialize_pem())?;
        let issuer = Issuer::new(ca, ca_key);

        let srv_key = KeyPair::generate()?;
        let mut srv = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        srv.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        srv.subject_alt_names.extend(extra_ips.iter().map(|ip| SanType::IpAddress(*ip)));
        srv.distinguished_name = dn("kube-apiserver", None);
        srv.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        srv.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        validity(&mut srv);
        write(&pki.apiserver_crt, &srv.signed_by(&srv_key, &issuer)?.pem())?;
        write(&pki.apiserver_key, &srv_key.serialize_pem())?;

        let (crt, key) = client_cert(&issuer, "admin", Some("system:masters"))?;
        write(&pki.admin_crt, &crt)?;
        write(&pki.admin_key, &key)?;

        let sa = KeyPair::generate()?;
        write(&pki.sa_key, &sa.serialize_pem())?;
        write(&pki.sa_pub, &sa.public_key_pem())?;
        Ok(pki)
    }
}

fn dn(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    d.push(DnType::CommonName, cn);
    if let Some(o) = org {
        d.push(DnType::OrganizationName, o);
    }
    d
}

/// A client certificate (PEM cert, PEM key) for user `cn` in group `org`.
fn client_cert(issuer: &Issuer<'_, KeyPair>, cn: &str, org: Option<&str>) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = dn(cn, org);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut p);
    Ok((p.signed_by(&key, issuer)?.pem(), key.serialize_pem()))
}
