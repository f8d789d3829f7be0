//! The cheap endpoint check (the I/O half; the decision is `health::plan`): while a
//! repository's breaker is open for an unreachable backend, the controller itself asks the
//! backend endpoint whether it answers at all, with no Job and no kopia, so the strict connect
//! can run as soon as the backend is back instead of at the end of a long holdoff. The same
//! check runs once before a deadline-killed connect is folded (`health::plan::fold_check_due`),
//! in any phase: its answer tells a slow backend (`TimedOut`) from a dead one.
//!
//! One unauthenticated request: `HEAD /` over plain HTTP, or a TLS ClientHello for an `https`
//! endpoint. Any protocol answer counts (an HTTP status line, even 403; a TLS handshake record
//! or alert); a refused, reset or timed-out connection, or one closed without a byte, is down.
//! A bare TCP connect is not enough: a proxy or load balancer in front of a dead backend may
//! accept and then reset. The answer is never a verdict: only a strict connect closes the
//! breaker.
//!
//! Only S3 backends with an explicit `endpoint` are checked; the others (a filesystem has no
//! endpoint) keep the holdoff alone. The results live in process memory keyed by object uid;
//! after a restart the open breaker's own verdict is the last "down".
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use kopiur_api::shared::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::health::{Endpoint, EndpointAnswer, EndpointCheck, RepoFacts, Time};

/// How long one check may take, connect and first answer byte together.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where to ask, and in which protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `host:port`.
    pub authority: String,
    pub host: String,
    pub tls: bool,
}

/// The endpoint of a backend, when it has one the controller can ask.
pub fn target(backend: &Backend) -> Option<Target> {
    let s = backend.s3()?;
    let raw = s.endpoint.as_deref()?.trim();
    let tls_off = s.tls.as_ref().and_then(|t| t.disable_tls).unwrap_or(false);
    let (rest, tls) = if let Some(r) = raw.strip_prefix("http://") {
        (r, false)
    } else if let Some(r) = raw.strip_prefix("https://") {
        (r, !tls_off)
    } else {
        (raw, !tls_off)
    };
    let authority = rest.split('/').next().unwrap_or("").trim();
    if authority.is_empty() {
        return None;
    }
    let (host, has_port) = split_host(authority);
    let authority = if has_port {
        authority.to_string()
    } else if tls {
        format!("{authority}:443")
    } else {
        format!("{authority}:80")
    };
    Some(Target { authority, host, tls })
}

/// `(host, has_port)` of `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host(authority: &str) -> (String, bool) {
    if let Some(rest) = authority.strip_prefix('[') {
        let host = rest.split(']').next().unwrap_or("").to_string();
        return (host, rest.contains("]:"));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            (h.to_string(), true)
        }
        Some(_) | None => (authority.to_string(), false),
    }
}

/// Ask once. Never errors: anything but a protocol answer within [`CHECK_TIMEOUT`] is down.
pub async fn check(t: &Target) -> EndpointAnswer {
    match tokio::time::timeout(CHECK_TIMEOUT, ask(t)).await {
        Ok(Ok(true)) => EndpointAnswer::Answers,
        Ok(Ok(false)) | Ok(Err(_)) | Err(_) => EndpointAnswer::Down,
    }
}

async fn ask(t: &Target) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(&t.authority).await?;
    let _ = s.set_nodelay(true);
    let request = if t.tls {
        client_hello(&t.host)
    } else {
        format!(
            "HEAD / HTTP/1.1\r\nHost: {}\r\nUser-Agent: kopiur-endpoint-check\r\nConnection: close\r\n\r\n",
            t.authority
        )
        .into_bytes()
    };
    s.write_all(&request).await?;
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < 5 {
        let n = s.read(&mut buf[got..]).await?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(answers(&buf[..got], t.tls))
}

/// An HTTP status line, or a TLS record of type handshake (22) or alert (21).
pub fn answers(first: &[u8], tls: bool) -> bool {
    if tls { first.len() >= 3 && matches!(first[0], 21 | 22) && first[1] == 3 } else { first.starts_with(b"HTTP/") }
}

/// A minimal TLS 1.2-compatible ClientHello (SNI for a host name, common ECDHE/RSA AES-GCM
/// suites and the TLS 1.3 AES-GCM suite). Any server that speaks TLS answers it with a
/// ServerHello or an alert; either is an answer.
pub fn client_hello(host: &str) -> Vec<u8> {
    let mut ext = Vec::new();
    let is_name = !host.is_empty() && host.parse::<std::net::IpAddr>().is_err() && host.len() < 256;
    if is_name {
        let h = host.as_bytes();
        let list_len = 3 + h.len();
        ext.extend_from_slice(&[0x00, 0x00]);
        ext.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(list_len as u16).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&(h.len() as u16).to_be_bytes());
        ext.extend_from_slice(h);
    }
    // supported_groups: x25519, secp256r1, secp384r1.
    ext.extend_from_slice(&[0x00, 0x0a, 0x00, 0x08, 0x00, 0x06, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18]);
    // ec_point_formats: uncompressed.
    ext.extend_from_slice(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]);
    // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256, rsa_pkcs1_sha256.
    ext.extend_from_slice(&[0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01]);

    let mut body = vec![0x03, 0x03];
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    body.extend((0..32u32).map(|i| (seed >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(37)));
    body.push(0); // no session id
    let suites: [u16; 5] = [0xc02b, 0xc02f, 0xc02c, 0xc030, 0x009c];
    body.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for s in suites {
        body.extend_from_slice(&s.to_be_bytes());
    }
    body.extend_from_slice(&[0x01, 0x00]); // compression: null
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);

    let mut hs = vec![0x01];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// Cheap-check results per repository uid (process memory).
static MEMORY: LazyLock<Mutex<HashMap<String, Endpoint>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The remembered cheap-check facts of `uid`, or a fresh `Checkable` when the backend has an
/// endpoint to ask.
pub fn remembered(uid: &str, checkable: bool) -> Endpoint {
    if !checkable {
        return Endpoint::NotCheckable;
    }
    let m = MEMORY.lock().ok().and_then(|m| m.get(uid).cloned());
    match m {
        Some(e @ Endpoint::Checkable { .. }) => e,
        Some(Endpoint::NotCheckable) | None => Endpoint::Checkable { last: None, returned: None },
    }
}

fn remember(uid: &str, e: Endpoint) {
    if let Ok(mut m) = MEMORY.lock() {
        m.insert(uid.to_string(), e);
    }
}

/// Forget a repository: it left Degraded (or was deleted), so the next outage starts fresh.
pub fn forget(uid: &str) {
    if let Ok(mut m) = MEMORY.lock() {
        m.remove(uid);
    }
}

/// The reconcile shell's step before planning: fill `facts.endpoint` from memory and, when
/// `health::endpoint_check_due` says so, ask the endpoint once and record the answer. Returns
/// the answer of a check made now (for the counter).
pub async fn observe(facts: &mut RepoFacts, uid: &str, backend: &Backend, now: Time) -> Option<EndpointAnswer> {
    let t = target(backend);
    facts.endpoint = remembered(uid, t.is_some());
    let t = t?;
    if crate::health::plan::fold_check_due(facts) {
        // A deadline-killed connect is about to be folded: does the backend answer (slow) or
        // not (down)? One check decides `TimedOut` against an unreachable verdict.
        let answer = check(&t).await;
        facts.endpoint = crate::health::plan::record_fold_check(&facts.endpoint, EndpointCheck { at: now, answer });
        remember(uid, facts.endpoint.clone());
        return Some(answer);
    }
    if !crate::health::plan::endpoint_watched(facts) {
        if facts.status.phase != Some(crate::health::Phase::Degraded) {
            // Out of the breaker: a later outage starts with no remembered transition.
            forget(uid);
            facts.endpoint = remembered(uid, true);
        }
        return None;
    }
    if !crate::health::plan::endpoint_check_due(facts, now) {
        return None;
    }
    let answer = check(&t).await;
    facts.endpoint = crate::health::plan::record_endpoint_check(&facts.endpoint, EndpointCheck { at: now, answer });
    remember(uid, facts.endpoint.clone());
    Some(answer)
}

/// After the decision was applied: remember what it left (a strict connect spends a pending
/// return; `health::plan::spend_return`).
pub fn remember_after(uid: &str, facts: &RepoFacts, after: Endpoint) {
    if after != facts.endpoint {
        remember(uid, after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn s3(endpoint: Option<&str>, disable_tls: Option<bool>) -> Backend {
        let mut s = serde_json::json!({"bucket": "b"});
        if let Some(e) = endpoint {
            s["endpoint"] = e.into();
        }
        if let Some(d) = disable_tls {
            s["tls"] = serde_json::json!({"disableTls": d});
        }
        serde_json::from_value(serde_json::json!({ "s3": s })).expect("an S3 backend")
    }

    #[test]
    fn targets_follow_the_endpoint_scheme_and_default_ports() {
        let t = |e: &str| target(&s3(Some(e), None)).map(|t| (t.authority, t.host, t.tls));
        assert_eq!(t("http://10.0.0.1:3900"), Some(("10.0.0.1:3900".into(), "10.0.0.1".into(), false)));
        assert_eq!(t("http://minio.local"), Some(("minio.local:80".into(), "minio.local".into(), false)));
        assert_eq!(t("https://s3.example.test/"), Some(("s3.example.test:443".into(), "s3.example.test".into(), true)));
        assert_eq!(t("s3.example.test:9000"), Some(("s3.example.test:9000".into(), "s3.example.test".into(), true)));
        assert_eq!(t("[fd00::1]:3900"), Some(("[fd00::1]:3900".into(), "fd00::1".into(), true)));
        assert_eq!(t(""), None);
        let plain = target(&s3(Some("s3.example.test:9000"), Some(true))).unwrap();
        assert!(!plain.tls, "tls.disableTLS means plain HTTP");
        assert_eq!(target(&s3(None, None)), None, "no explicit endpoint: not checked");
        let fs: Backend = serde_json::from_value(serde_json::json!({"filesystem": {"path": "/r"}})).unwrap();
        assert_eq!(target(&fs), None, "a filesystem has no endpoint");
    }

    #[test]
    fn a_client_hello_is_one_well_formed_tls_record() {
        let h = client_hello("s3.example.test");
        assert_eq!(&h[..3], &[0x16, 0x03, 0x01]);
        let rec_len = u16::from_be_bytes([h[3], h[4]]) as usize;
        assert_eq!(rec_len, h.len() - 5);
        assert_eq!(h[5], 1, "ClientHello");
        let hs_len = u32::from_be_bytes([0, h[6], h[7], h[8]]) as usize;
        assert_eq!(hs_len, h.len() - 9);
        assert!(h.windows(15).any(|w| w == b"s3.example.test"), "SNI carried");
        assert!(!client_hello("10.0.0.1").windows(8).any(|w| w == b"10.0.0.1"), "no SNI for an address");
    }

    #[test]
    fn only_protocol_answers_count() {
        assert!(answers(b"HTTP/1.1 403 Forbidden", false));
        assert!(!answers(b"", false));
        assert!(!answers(b"SSH-2.0", false));
        assert!(answers(&[22, 3, 3, 0, 80], true));
        assert!(answers(&[21, 3, 1, 0, 2], true));
        assert!(!answers(b"HTTP/1.0 400", true));
    }

    async fn serve(reply: Option<&'static [u8]>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else { return };
                let mut b = [0u8; 512];
                let _ = s.read(&mut b).await;
                match reply {
                    Some(r) => {
                        let _ = s.write_all(r).await;
                    }
                    // Accept, then reset: what a proxy in front of a dead backend does.
                    None => {
                        let _ = socket_reset(&s);
                    }
                }
            }
        });
        addr
    }

    #[allow(deprecated)] // tokio: set_linger; only this test resets by hand
    fn socket_reset(s: &TcpStream) -> std::io::Result<()> {
        s.set_linger(Some(Duration::ZERO))
    }

    #[tokio::test]
    async fn an_http_answer_counts_a_reset_or_refusal_does_not() {
        let forbidden = serve(Some(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")).await;
        let t = |a: &str| Target { authority: a.to_string(), host: "127.0.0.1".into(), tls: false };
        assert_eq!(check(&t(&forbidden)).await, EndpointAnswer::Answers, "403 answers");
        let reset = serve(None).await;
        assert_eq!(check(&t(&reset)).await, EndpointAnswer::Down, "accept then reset is down");
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert_eq!(check(&t(&closed)).await, EndpointAnswer::Down, "refused is down");
        let tls_alert = serve(Some(&[21, 3, 3, 0, 2, 2, 40])).await;
        let tt = Target { authority: tls_alert, host: "localhost".into(), tls: true };
        assert_eq!(check(&tt).await, EndpointAnswer::Answers, "a TLS alert answers");
    }
}
