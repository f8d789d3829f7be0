//! `/metrics`, `/healthz`, `/readyz` on one small HTTP/1.1 listener.
//!
//! The address `[::]:<port>` (the default, `[::]:8081`) is one dual-stack socket
//! (`IPV6_V6ONLY` off) that accepts IPv6 and IPv4 clients, so the endpoints answer on
//! IPv4-only, IPv6-only and dual-stack clusters alike; where the node has no IPv6 at all it
//! falls back to `0.0.0.0:<port>`. Any other address is bound exactly as given.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};

pub type Render = Arc<dyn Fn() -> String + Send + Sync>;
pub type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

/// Binds `addr`; `[::]:<port>` dual-stack with the IPv4 fallback (module docs).
pub async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    let parsed: Option<SocketAddr> = addr.parse().ok();
    match parsed {
        Some(SocketAddr::V6(v6)) if v6.ip().is_unspecified() => match bind_dual_stack(v6.port()) {
            Ok(l) => Ok(l),
            Err(e) => {
                let v4 = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, v6.port()));
                tracing::info!(error = %e, %v4, "no IPv6 listener possible here; serving on IPv4 only");
                Ok(TcpListener::bind(v4).await?)
            }
        },
        Some(_) | None => Ok(TcpListener::bind(addr).await?),
    }
}

/// One `[::]:<port>` socket that also accepts IPv4 (as v4-mapped addresses).
fn bind_dual_stack(port: u16) -> std::io::Result<TcpListener> {
    let sock = TcpSocket::new_v6()?;
    let off: libc::c_int = 0;
    // SAFETY: setsockopt on a socket we own, with a correctly sized int option.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&off as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    sock.set_reuseaddr(true)?;
    sock.bind(SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port))?;
    sock.listen(1024)
}

pub async fn serve(addr: &str, metrics: Render, ready: Ready) -> anyhow::Result<()> {
    serve_on(bind(addr).await?, metrics, ready).await
}

/// What one connection may cost: anyone in the cluster can reach the port, so an idle or slow
/// client is cut off and the number served at once is capped (audit 5.5).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The request must arrive within this; the response must be written within twice this.
    pub io_timeout: std::time::Duration,
    /// Connections served at once; one past the cap is closed at once (the kubelet's probes
    /// retry, and a slot frees within `io_timeout`).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { io_timeout: std::time::Duration::from_secs(5), max_connections: 64 }
    }
}

/// Where connections come from (a [`TcpListener`]; tests inject accept errors).
pub trait Accept {
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<tokio::net::TcpStream>> + Send;
    fn local(&self) -> std::io::Result<SocketAddr>;
}

impl Accept for TcpListener {
    async fn accept_one(&self) -> std::io::Result<tokio::net::TcpStream> {
        self.accept().await.map(|(s, _)| s)
    }
    fn local(&self) -> std::io::Result<SocketAddr> {
        self.local_addr()
    }
}

pub async fn serve_on(listener: TcpListener, metrics: Render, ready: Ready) -> anyhow::Result<()> {
    serve_with(listener, metrics, ready, Limits::default()).await
}

/// Serves until the process ends: an accept error (EMFILE, ECONNABORTED, …) is logged and
/// retried after a short pause, never the end of the listener (a dead listener fails
/// `/healthz`, and the kubelet would restart the controller over a client's misbehaviour).
pub async fn serve_with<A: Accept>(listener: A, metrics: Render, ready: Ready, limits: Limits) -> anyhow::Result<()> {
    let local = listener.local()?;
    tracing::info!(addr = %local, "serving /metrics, /healthz, /readyz");
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        let sock = match listener.accept_one().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Over the cap: closed at once, never queued behind idle clients.
            drop(sock);
            continue;
        };
        let (metrics, ready) = (metrics.clone(), ready.clone());
        tokio::spawn(async move {
            let _permit = permit;
            respond(sock, &metrics, &ready, limits.io_timeout).await;
        });
    }
}

async fn respond(mut sock: tokio::net::TcpStream, metrics: &Render, ready: &Ready, io_timeout: std::time::Duration) {
    let mut buf = vec![0u8; 4096];
    let n = match tokio::time::timeout(io_timeout, sock.read(&mut buf)).await {
        Ok(Ok(n)) => n,
        Ok(Err(_)) | Err(_) => return,
    };
    let req = String::from_utf8_lossy(&buf[..n]);
    let path = req.split_whitespace().nth(1).unwrap_or("/");
    let (status, ctype, body) = match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics()),
        "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
        "/readyz" if ready() => ("200 OK", "text/plain", "ok\n".to_string()),
        "/readyz" => ("503 Service Unavailable", "text/plain", "not ready\n".to_string()),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(io_timeout * 2, async {
        let _ = sock.write_all(resp.as_bytes()).await;
        let _ = sock.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    fn handlers() -> (Render, Ready) {
        (Arc::new(|| "kopiur_up 1\n".to_string()), Arc::new(|| true))
    }

    #[tokio::test]
    async fn the_all_interfaces_address_answers_on_ipv4_and_ipv6() {
        let l = bind("[::]:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(l.local_addr().unwrap().is_ipv6(), "a dual-stack socket where IPv6 exists");
        let (m, r) = handlers();
        tokio::spawn(serve_on(l, m, r));
        let v4 = get(SocketAddr::from(([127, 0, 0, 1], port)), "/metrics").await;
        assert!(v4.starts_with("HTTP/1.1 200 OK") && v4.ends_with("kopiur_up 1\n"), "{v4}");
        let v6 = get(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)), "/healthz").await;
        assert!(v6.starts_with("HTTP/1.1 200 OK") && v6.ends_with("ok\n"), "{v6}");
    }

    #[tokio::test]
    async fn an_explicit_address_is_bound_as_given() {
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        assert_eq!(addr.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
        let (m, r) = handlers();
        tokio::spawn(serve_on(l, m, r));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200 OK"));
        // Not listening on IPv6 loopback on that port.
        assert!(tokio::net::TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, addr.port())).await.is_err());
    }

    /// issue 31 (audit 5.5): idle clients are cut off after the timeout, one past the cap is
    /// closed at once, and the endpoints answer again once a slot frees.
    #[tokio::test]
    async fn idle_clients_time_out_and_the_cap_holds() {
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (m, r) = handlers();
        let limits = Limits { io_timeout: std::time::Duration::from_millis(300), max_connections: 2 };
        tokio::spawn(serve_with(l, m, r, limits));
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // A third client while both slots are held: closed without an answer (a reset or EOF).
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut over = String::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_string(&mut over)).await;
        assert_eq!(over, "", "served past the cap: {over}");
        // The idle ones are closed by the server within the timeout...
        for mut s in idle {
            let mut b = [0u8; 1];
            let n = tokio::time::timeout(std::time::Duration::from_secs(2), s.read(&mut b)).await;
            assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "an idle client was kept: {n:?}");
        }
        // ...and the endpoints answer again.
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
    }

    /// An acceptor that fails `failures` times (EMFILE) before handing out real connections.
    struct Flaky {
        inner: TcpListener,
        failures: std::sync::atomic::AtomicUsize,
    }

    impl Accept for Flaky {
        async fn accept_one(&self) -> std::io::Result<tokio::net::TcpStream> {
            if self.failures.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                self.failures.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
            self.inner.accept_one().await
        }
        fn local(&self) -> std::io::Result<SocketAddr> {
            self.inner.local_addr()
        }
    }

    /// issue 31 (audit 5.5): accept errors (out of file descriptors) do not end the listener.
    #[tokio::test]
    async fn accept_errors_do_not_stop_the_listener() {
        let inner = bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let (m, r) = handlers();
        let flaky = Flaky { inner, failures: std::sync::atomic::AtomicUsize::new(3) };
        let server = tokio::spawn(serve_with(flaky, m, r, Limits::default()));
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), get(addr, "/metrics")).await;
        assert!(got.is_ok_and(|g| g.ends_with("kopiur_up 1\n")), "no answer after accept errors");
        assert!(!server.is_finished(), "the listener ended");
    }

    #[tokio::test]
    async fn a_bad_address_is_an_error_naming_it() {
        assert!(bind("not-an-address").await.is_err());
    }
}
