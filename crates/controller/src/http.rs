//! `/metrics`, `/healthz`, `/readyz` on one small HTTP/1.1 listener (hyper).
//!
//! The address `[::]:<port>` (the default, `[::]:8081`) is one dual-stack socket
//! (`IPV6_V6ONLY` off) that accepts IPv6 and IPv4 clients, so the endpoints answer on
//! IPv4-only, IPv6-only and dual-stack clusters alike; where the node has no IPv6 at all it
//! falls back to `0.0.0.0:<port>`. Any other address is bound exactly as given.
//!
//! Anyone in the cluster can reach the port, so what a client may hold is bounded ([`Limits`],
//! audit 5.5, issue 32): a request head must arrive within `io_timeout` of the connection's start
//! or of the end of its previous request (so a kept-alive connection idles at most that long), a
//! connection lives at most `max_connection_life`, and at most `max_connections` are held at once.
//! At the cap a new connection evicts the one that has waited longest for a request head (a client
//! that sent nothing, stalls half-way through a request, or idles between keep-alive requests), so
//! idle or slow clients cannot keep the kubelet's probes out, and the listener's open files stay
//! bounded. An accept error (out of file descriptors, …) is logged and retried after a short
//! pause, never the end of the listener.
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

pub type Render = Arc<dyn Fn() -> String + Send + Sync>;
pub type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

/// The most a request head may take in memory (hyper's read buffer; probes and Prometheus send a
/// few hundred bytes).
const MAX_HEAD_BYTES: usize = 16 * 1024;

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
    socket2::SockRef::from(&sock).set_only_v6(false)?;
    sock.set_reuseaddr(true)?;
    sock.bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port))?;
    sock.listen(1024)
}

pub async fn serve(addr: &str, metrics: Render, ready: Ready) -> anyhow::Result<()> {
    serve_on(bind(addr).await?, metrics, ready).await
}

/// What one connection may cost (module docs).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A request head must arrive within this, counted from the connection's start or from the
    /// end of its previous request (hyper's header read timeout).
    pub io_timeout: Duration,
    /// A connection is closed after this; a request in flight then gets `io_timeout` to finish.
    pub max_connection_life: Duration,
    /// Connections held at once; at the cap a new one evicts the one that has waited longest for
    /// a request head.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { io_timeout: Duration::from_secs(5), max_connection_life: Duration::from_secs(30), max_connections: 64 }
    }
}

/// Where connections come from (a [`TcpListener`]; tests inject accept errors).
pub trait Accept {
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<TcpStream>> + Send;
    fn local(&self) -> std::io::Result<SocketAddr>;
}

impl Accept for TcpListener {
    async fn accept_one(&self) -> std::io::Result<TcpStream> {
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
    let table = Table::default();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.io_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let sock = match listener.accept_one().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some((id, evicted)) = table.lock().admit(limits.max_connections.max(1)) else {
            // Every slot is inside a handler this instant (they return at once): not queued.
            tracing::debug!("metrics listener: every connection is answering a request; closing a new one");
            drop(sock);
            continue;
        };
        let conn = Conn { table: table.clone(), id, metrics: metrics.clone(), ready: ready.clone() };
        tokio::spawn(conn.run(sock, builder.clone(), evicted, limits));
    }
}

/// The connections held, so that at the cap a new one can evict the longest-waiting.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<Held>>);

#[derive(Default)]
struct Held {
    next_id: u64,
    /// Ticks on every accept and every answered request: the order connections began waiting in.
    clock: u64,
    conns: HashMap<u64, Slot>,
}

struct Slot {
    /// Dropped to end the connection (its task waits on the receiver).
    _evict: oneshot::Sender<()>,
    /// When it began waiting for a request head; `None` while a handler runs for it.
    waiting_since: Option<u64>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Held {
    /// Registers one more connection, first evicting the longest-waiting ones while at `max`;
    /// `None` if every held connection is inside a handler.
    fn admit(&mut self, max: usize) -> Option<(u64, oneshot::Receiver<()>)> {
        while self.conns.len() >= max {
            let (_, oldest) = self.conns.iter().filter_map(|(id, s)| s.waiting_since.map(|t| (t, *id))).min()?;
            self.conns.remove(&oldest);
        }
        let (tx, rx) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        self.conns.insert(id, Slot { _evict: tx, waiting_since: Some(self.clock) });
        Some((id, rx))
    }

    fn set_waiting(&mut self, id: u64, waiting: bool) {
        self.clock += 1;
        let now = self.clock;
        if let Some(s) = self.conns.get_mut(&id) {
            s.waiting_since = waiting.then_some(now);
        }
    }
}

/// One accepted connection; leaves the table when its task ends (or is evicted).
struct Conn {
    table: Table,
    id: u64,
    metrics: Render,
    ready: Ready,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.table.lock().conns.remove(&self.id);
    }
}

impl Conn {
    async fn run(
        self,
        sock: TcpStream,
        builder: Arc<http1::Builder>,
        mut evicted: oneshot::Receiver<()>,
        limits: Limits,
    ) {
        let this = Arc::new(self);
        let svc = {
            let this = this.clone();
            hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                this.table.lock().set_waiting(this.id, false);
                let resp = answer(req.method(), req.uri().path(), &this.metrics, &this.ready);
                this.table.lock().set_waiting(this.id, true);
                std::future::ready(Ok::<_, Infallible>(resp))
            })
        };
        let conn = builder.serve_connection(TokioIo::new(sock), svc);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "metrics listener: connection ended");
                }
                return;
            }
            _ = &mut evicted => return,
            () = tokio::time::sleep(limits.max_connection_life) => {}
        }
        // Lived its bound: closed after the request in flight, if any.
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            _ = tokio::time::timeout(limits.io_timeout, conn) => {}
            _ = evicted => {}
        }
    }
}

fn answer(method: &Method, path: &str, metrics: &Render, ready: &Ready) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain";
    let (status, ctype, body) = if method != Method::GET && method != Method::HEAD {
        (StatusCode::METHOD_NOT_ALLOWED, PLAIN, "method not allowed\n".to_string())
    } else {
        match path {
            "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", metrics()),
            "/healthz" => (StatusCode::OK, PLAIN, "ok\n".to_string()),
            "/readyz" if ready() => (StatusCode::OK, PLAIN, "ok\n".to_string()),
            "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, PLAIN, "not ready\n".to_string()),
            _ => (StatusCode::NOT_FOUND, PLAIN, "not found\n".to_string()),
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

    const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    const HEALTHZ_KEEP_ALIVE: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

    /// One request over a fresh connection; the whole answer, or why there is none.
    async fn request(addr: SocketAddr, head: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        s.write_all(head.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        read.map_err(|e| format!("read: {e} after {text:?}"))?;
        Ok(text)
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        match tokio::time::timeout(Duration::from_secs(5), request(addr, &head)).await {
            Ok(Ok(got)) => got,
            other => panic!("GET {path} on {addr}: {other:?}"),
        }
    }

    /// Reads until the server closes the connection (EOF or reset): what it sent, or `None` if
    /// it is still open after `within`.
    async fn until_closed(s: &mut (impl AsyncRead + Unpin), within: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        let (mut out, mut b) = (Vec::new(), [0u8; 4096]);
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut b)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
                Ok(Ok(n)) => out.extend_from_slice(&b[..n]),
            }
        }
    }

    /// One response off a kept-alive connection (framed by its Content-Length); `None` once the
    /// server has closed the connection.
    async fn next_response(s: &mut TcpStream) -> Option<String> {
        let (mut buf, mut b) = (Vec::new(), [0u8; 4096]);
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buf.len() >= end + 4 + len {
                    return Some(String::from_utf8_lossy(&buf).into_owned());
                }
            }
            match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(n)) => buf.extend_from_slice(&b[..n]),
                Err(_) => panic!("no response and no close within 5 s: {:?}", String::from_utf8_lossy(&buf)),
            }
        }
    }

    fn handlers() -> (Render, Ready) {
        (Arc::new(|| "kopiur_up 1\n".to_string()), Arc::new(|| true))
    }

    async fn serving(limits: Limits) -> SocketAddr {
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (m, r) = handlers();
        tokio::spawn(serve_with(l, m, r, limits));
        addr
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
        let v6 = get(SocketAddr::from((Ipv6Addr::LOCALHOST, port)), "/healthz").await;
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
        assert!(TcpStream::connect((Ipv6Addr::LOCALHOST, addr.port())).await.is_err());
    }

    #[tokio::test]
    async fn each_path_and_method_gets_its_answer() {
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let is_ready = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let ready: Ready = {
            let is_ready = is_ready.clone();
            Arc::new(move || is_ready.load(std::sync::atomic::Ordering::SeqCst))
        };
        tokio::spawn(serve_on(l, handlers().0, ready));
        let metrics = get(addr, "/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n") && metrics.ends_with("\r\n\r\nkopiur_up 1\n"), "{metrics}");
        assert!(metrics.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4\r\n"), "{metrics}");
        let health = get(addr, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200 OK\r\n") && health.ends_with("\r\n\r\nok\n"), "{health}");
        assert!(get(addr, "/readyz").await.ends_with("\r\n\r\nok\n"));
        is_ready.store(false, std::sync::atomic::Ordering::SeqCst);
        let not_ready = get(addr, "/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{not_ready}");
        assert!(not_ready.ends_with("\r\n\r\nnot ready\n"), "{not_ready}");
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404 Not Found\r\n"));
        let post = request(addr, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        let post = post.await.unwrap();
        assert!(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{post}");
        assert!(post.to_ascii_lowercase().contains("allow: get, head\r\n"), "{post}");
        let head = request(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "no body for HEAD: {head}");
    }

    /// issue 31 (audit 5.5), issue 32: a client that sends nothing is cut off after the timeout,
    /// and so is a kept-alive connection that idles that long after its answers.
    #[tokio::test]
    async fn idle_clients_time_out() {
        let timeout = Duration::from_millis(300);
        let addr = serving(Limits { io_timeout: timeout, ..Limits::default() }).await;
        let t = Instant::now();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert_eq!(until_closed(&mut silent, Duration::from_secs(3)).await.as_deref(), Some(""), "kept");
        assert!(t.elapsed() >= timeout - Duration::from_millis(50), "closed before the timeout: {:?}", t.elapsed());

        let mut kept = TcpStream::connect(addr).await.unwrap();
        for _ in 0..3 {
            kept.write_all(HEALTHZ_KEEP_ALIVE.as_bytes()).await.unwrap();
            let got = next_response(&mut kept).await.expect("closed while in use");
            assert!(got.starts_with("HTTP/1.1 200 OK") && got.ends_with("ok\n"), "{got}");
            tokio::time::sleep(timeout / 3).await;
        }
        assert_eq!(until_closed(&mut kept, Duration::from_secs(3)).await.as_deref(), Some(""), "an idle keep-alive");
    }

    /// issue 32: at the cap a new client is served, and the connection that has waited longest
    /// for a request head makes room for it; a younger one is kept.
    #[tokio::test]
    async fn at_the_cap_a_new_client_evicts_the_longest_waiting() {
        let addr =
            serving(Limits { io_timeout: Duration::from_secs(30), max_connections: 2, ..Limits::default() }).await;
        let mut oldest = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut younger = TcpStream::connect(addr).await.unwrap();
        younger.write_all(b"GET /heal").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let got = tokio::time::timeout(Duration::from_secs(2), request(addr, HEALTHZ)).await;
        assert!(got.as_ref().is_ok_and(|g| g.as_ref().is_ok_and(|g| g.starts_with("HTTP/1.1 200 OK"))), "{got:?}");
        assert_eq!(until_closed(&mut oldest, Duration::from_secs(1)).await.as_deref(), Some(""), "not evicted");
        assert_eq!(until_closed(&mut younger, Duration::from_millis(300)).await, None, "the younger one was evicted");
        younger.write_all(b"thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let rest = until_closed(&mut younger, Duration::from_secs(2)).await.expect("no answer");
        assert!(rest.starts_with("HTTP/1.1 200 OK") && rest.ends_with("ok\n"), "{rest}");
    }

    /// issue 32: a client that sends its request one byte a second is cut off by the header
    /// timeout, long before its request is complete.
    #[tokio::test]
    async fn a_slowloris_is_cut_off_by_the_header_timeout() {
        let timeout = Duration::from_secs(2);
        let addr = serving(Limits { io_timeout: timeout, ..Limits::default() }).await;
        let (mut rd, mut wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let t = Instant::now();
        let drip = tokio::spawn(async move {
            let mut sent = 0;
            for b in HEALTHZ.bytes() {
                if wr.write_all(&[b]).await.is_err() {
                    break;
                }
                sent += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            sent
        });
        let got = until_closed(&mut rd, Duration::from_secs(10)).await;
        let took = t.elapsed();
        drip.abort();
        let got = got.expect("the slow client was kept for 10 s");
        assert!(!got.contains("200 OK"), "answered: {got}");
        assert!(took >= timeout - Duration::from_millis(100) && took < timeout * 2, "cut off after {took:?}");
    }

    /// issue 32: a connection in steady use is still closed once it has lived its bound (after
    /// the answer in flight).
    #[tokio::test]
    async fn a_connection_lives_at_most_its_bound() {
        let life = Duration::from_millis(500);
        let addr =
            serving(Limits { io_timeout: Duration::from_secs(2), max_connection_life: life, ..Limits::default() })
                .await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let t = Instant::now();
        let mut answers = 0;
        while t.elapsed() < Duration::from_secs(5) {
            if s.write_all(HEALTHZ_KEEP_ALIVE.as_bytes()).await.is_err() {
                break;
            }
            match next_response(&mut s).await {
                Some(got) => assert!(got.ends_with("ok\n"), "{got}"),
                None => break,
            }
            answers += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = t.elapsed();
        assert!(answers >= 3, "only {answers} answers");
        assert!(took >= life && took < life * 4, "closed after {took:?}");
    }

    /// An acceptor that fails `failures` times (EMFILE) before handing out real connections.
    struct Flaky {
        inner: TcpListener,
        failures: std::sync::atomic::AtomicUsize,
    }

    impl Accept for Flaky {
        async fn accept_one(&self) -> std::io::Result<TcpStream> {
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
        let got = tokio::time::timeout(Duration::from_secs(5), get(addr, "/metrics")).await;
        assert!(got.is_ok_and(|g| g.ends_with("kopiur_up 1\n")), "no answer after accept errors");
        assert!(!server.is_finished(), "the listener ended");
    }

    #[tokio::test]
    async fn a_bad_address_is_an_error_naming_it() {
        assert!(bind("not-an-address").await.is_err());
    }

    /// Raises this process's soft limit on open files to the hard one (test code only: the
    /// test below holds over a thousand sockets, and a soft limit of 1,024 is common).
    fn raise_fd_limit(needed: u64) {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit with a valid, correctly typed struct.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            if lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            }
        }
        assert!(lim.rlim_cur >= needed, "the test needs {needed} open files; the hard limit is {}", lim.rlim_max);
    }

    /// issue 32: a thousand clients that connect and send nothing, and more that stall half-way
    /// through a request line, cannot stop `/healthz` answering promptly over fresh connections
    /// (the real limits).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_idle_connections_cannot_stop_healthz() {
        const SILENT: usize = 1_000;
        const STALLED: usize = 100;
        raise_fd_limit((SILENT + STALLED + 512) as u64);
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (m, r) = handlers();
        tokio::spawn(serve_on(l, m, r));
        let t0 = Instant::now();
        let mut idle = Vec::with_capacity(SILENT + STALLED);
        for _ in 0..SILENT {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        for _ in 0..STALLED {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(b"GET /heal").await;
            idle.push(s);
        }
        eprintln!("opened {} idle connections in {:?}", idle.len(), t0.elapsed());
        for round in 1..=5 {
            let t = Instant::now();
            let got = tokio::time::timeout(Duration::from_secs(2), request(addr, HEALTHZ)).await;
            let took = t.elapsed();
            match got {
                Ok(Ok(g)) if g.starts_with("HTTP/1.1 200 OK") && g.ends_with("\r\n\r\nok\n") => {
                    eprintln!("round {round}: /healthz 200 in {took:?}")
                }
                other => panic!(
                    "round {round}: /healthz over a fresh connection beside {} idle ones: {other:?} after {took:?}",
                    idle.len()
                ),
            }
        }
        drop(idle);
    }
}
