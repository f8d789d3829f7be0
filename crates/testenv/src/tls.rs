//! A TLS-terminating front for Garage (or any plain TCP upstream): listens on a free
//! `127.0.0.1` port, presents a certificate for `127.0.0.1`/`localhost` signed by a CA made
//! for this front, and forwards the decrypted bytes to `upstream`. Loopback only; the accept
//! loop and every connection end when the front is dropped.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA: its PEM certificate and the issuer that signs with it.
pub struct TestCa {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh self-signed CA named `cn`.
    pub fn generate(cn: &str) -> Result<TestCa> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut p);
        let pem = p.self_signed(&key)?.pem();
        Ok(TestCa { pem, issuer: Issuer::new(p, key) })
    }

    /// A serving certificate for `127.0.0.1` and `localhost`: (DER chain, PKCS#8 key).
    fn serving(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec!["localhost".to_string()])?;
        p.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kopiur-testenv-s3");
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        validity(&mut p);
        let cert = p.signed_by(&key, &self.issuer)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone()], der))
    }
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(7);
}

pub struct TlsFront {
    addr: SocketAddr,
    upstream: SocketAddr,
    ca_pem: String,
    accept_task: JoinHandle<()>,
}

impl TlsFront {
    /// Terminates TLS with a certificate signed by a CA made for this front.
    pub async fn start(upstream: SocketAddr) -> Result<TlsFront> {
        let ca = TestCa::generate("kopiur-testenv-s3-ca")?;
        let (chain, key) = ca.serving()?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("TLS serving certificate")?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let accept_task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    // A client that rejects the certificate aborts the handshake: nothing to do.
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let Ok(mut up) = TcpStream::connect(upstream).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(TlsFront { addr, upstream, ca_pem: ca.pem, accept_task })
    }

    /// `127.0.0.1:<port>` (no scheme).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

impl Drop for TlsFront {
    /// Dropping the accept task drops its JoinSet, which aborts every open connection.
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}
