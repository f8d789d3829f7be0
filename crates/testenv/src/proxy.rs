//! Fault-injection TCP proxy.
//!
//! `client -> 127.0.0.1:<proxy> -> upstream`. The mode lives in a tokio `watch` channel;
//! the accept loop and every connection task (established ones included) consult it on
//! each chunk, so a switch takes effect on live keep-alive connections too.
//!
//! | mode | what the client sees |
//! |------|----------------------|
//! | `Pass` | normal operation |
//! | `Refuse` | the listening socket is closed, so new connects get `connection refused`; open connections are reset |
//! | `Blackhole` | connects succeed, then nothing is forwarded either way; sockets stay open |
//! | `Latency(d)` | every chunk is delayed by `d` in both directions |
//! | `Reset` | new connections are accepted and closed with `SO_LINGER=0` (RST); established flows are reset at their next chunk |
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use socket2::{Domain, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Blackhole,
    Latency(Duration),
    Reset,
}

/// Counters since the proxy started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted (in every mode; refused connects are never accepted).
    pub connections: u64,
    /// Bytes forwarded client -> upstream.
    pub bytes_to_upstream: u64,
    /// Bytes forwarded upstream -> client.
    pub bytes_to_client: u64,
    /// Connections closed with an RST by the proxy (reset or refuse modes).
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    resets: AtomicU64,
}

pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    tx: watch::Sender<Mode>,
    counters: Arc<Counters>,
    accept_task: JoinHandle<()>,
}

const CHUNK: usize = 64 * 1024;

fn bind_reuse(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // Rebinding the same port after `Refuse` must not trip over TIME_WAIT.
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

impl FaultProxy {
    /// Listens on a free `127.0.0.1` port and forwards to `upstream`, starting in `Pass`.
    pub async fn start(upstream: SocketAddr) -> Result<FaultProxy> {
        FaultProxy::start_on(std::net::Ipv4Addr::LOCALHOST, upstream).await
    }

    /// Listens on a free port of `ip` (an address the environment created, such as the real
    /// node's bridge address, so pods reach it) and forwards to `upstream`.
    pub async fn start_on(ip: std::net::Ipv4Addr, upstream: SocketAddr) -> Result<FaultProxy> {
        let listener = bind_reuse(SocketAddr::from((ip, 0))).context("bind proxy listener")?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(Mode::Pass);
        let counters = Arc::new(Counters::default());
        let accept_task = tokio::spawn(accept_loop(listener, addr, upstream, rx, counters.clone()));
        Ok(FaultProxy { addr, upstream, tx, counters, accept_task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `host:port` for kopia's `--endpoint`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches the mode; live connections see it at their next chunk (refuse: at once).
    pub fn set(&self, mode: Mode) {
        self.tx.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        self.tx.borrow().clone()
    }

    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            connections: self.counters.connections.load(Ordering::Relaxed),
            bytes_to_upstream: self.counters.up.load(Ordering::Relaxed),
            bytes_to_client: self.counters.down.load(Ordering::Relaxed),
            resets: self.counters.resets.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Connection tasks end when the sender is gone (their `changed()` fails).
        self.accept_task.abort();
    }
}

async fn accept_loop(
    first: TcpListener,
    addr: SocketAddr,
    upstream: SocketAddr,
    mut rx: watch::Receiver<Mode>,
    counters: Arc<Counters>,
) {
    let mut listener = Some(first);
    loop {
        let mode = rx.borrow_and_update().clone();
        if mode == Mode::Refuse {
            // Closing the listener makes the kernel answer new SYNs with RST, which is
            // exactly `connect: connection refused`; queued, unaccepted connects are reset.
            listener = None;
            if rx.changed().await.is_err() {
                return;
            }
            continue;
        }
        let l = match listener.as_ref() {
            Some(l) => l,
            None => {
                match bind_reuse(addr) {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "fault proxy: rebind failed, retrying");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                continue;
            }
        };
        tokio::select! {
            accepted = l.accept() => {
                let Ok((client, _)) = accepted else { continue };
                counters.connections.fetch_add(1, Ordering::Relaxed);
                let _ = client.set_nodelay(true);
                let mode = rx.borrow().clone();
                if mode == Mode::Reset {
                    reset(&client, &counters);
                    continue;
                }
                tokio::spawn(connection(client, upstream, rx.clone(), counters.clone()));
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Closes with `SO_LINGER=0`, so the peer receives an RST instead of a FIN.
fn reset(s: &TcpStream, counters: &Counters) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
    counters.resets.fetch_add(1, Ordering::Relaxed);
}

/// Why a direction stopped.
enum Abort {
    /// The mode demands a reset (reset, refuse) or the proxy is gone.
    Reset,
    /// A socket error (the peer reset or similar): propagate as a reset.
    Io,
}

async fn connection(client: TcpStream, upstream: SocketAddr, rx: watch::Receiver<Mode>, counters: Arc<Counters>) {
    let upstream = match TcpStream::connect(upstream).await {
        Ok(u) => u,
        Err(_) => {
            // The upstream is down: the client sees its connection reset.
            reset(&client, &counters);
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let c2u = pump(&client, &upstream, rx.clone(), &counters.up);
    let u2c = pump(&upstream, &client, rx, &counters.down);
    match futures::future::try_join(c2u, u2c).await {
        Ok(((), ())) => {}
        Err(Abort::Reset) | Err(Abort::Io) => {
            reset(&client, &counters);
            let _ = SockRef::from(&upstream).set_linger(Some(Duration::ZERO));
        }
    }
    // Dropping both streams closes them (with RST where linger 0 was set).
}

async fn read_some(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn write_all(s: &TcpStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        s.writable().await?;
        match s.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Copies `src` to `dst` chunk by chunk, consulting the mode for every chunk.
async fn pump(src: &TcpStream, dst: &TcpStream, mut rx: watch::Receiver<Mode>, bytes: &AtomicU64) -> Result<(), Abort> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Wait for data, but react to a switch to `Refuse` on an idle connection at once.
        let n = tokio::select! {
            r = read_some(src, &mut buf) => r.map_err(|_| Abort::Io)?,
            changed = rx.changed() => {
                if changed.is_err() || *rx.borrow() == Mode::Refuse {
                    return Err(Abort::Reset);
                }
                continue;
            }
        };
        if n == 0 {
            // Half-close: pass the FIN on and let the other direction finish.
            let _ = SockRef::from(dst).shutdown(std::net::Shutdown::Write);
            return Ok(());
        }
        loop {
            let mode = rx.borrow_and_update().clone();
            match mode {
                Mode::Pass => {
                    write_all(dst, &buf[..n]).await.map_err(|_| Abort::Io)?;
                    break;
                }
                Mode::Latency(d) => {
                    tokio::time::sleep(d).await;
                    write_all(dst, &buf[..n]).await.map_err(|_| Abort::Io)?;
                    break;
                }
                Mode::Blackhole => {
                    // Hold the chunk (and, by not reading further, the whole flow) until the
                    // mode changes; then decide again.
                    if rx.changed().await.is_err() {
                        return Err(Abort::Reset);
                    }
                }
                Mode::Reset | Mode::Refuse => return Err(Abort::Reset),
            }
        }
        bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An echo server standing in for the upstream.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else { return };
                tokio::spawn(async move {
                    let mut b = [0u8; 4096];
                    loop {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&b[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn modes_switch_on_live_connections() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"hello").await.unwrap(), b"hello");

        // Latency applies to the established connection, in both directions.
        p.set(Mode::Latency(Duration::from_millis(200)));
        let t = std::time::Instant::now();
        roundtrip(&mut c, b"slow").await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(400), "{:?}", t.elapsed());

        // Blackhole: nothing comes back on the live connection...
        p.set(Mode::Blackhole);
        c.write_all(b"held").await.unwrap();
        let mut b = [0u8; 4];
        assert!(tokio::time::timeout(Duration::from_millis(500), c.read_exact(&mut b)).await.is_err());
        // ...new connects still succeed...
        let mut c2 = TcpStream::connect(p.addr()).await.unwrap();
        c2.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        assert!(tokio::time::timeout(Duration::from_millis(300), c2.read_exact(&mut one)).await.is_err());
        // ...and the held chunk flows once the mode is back to pass.
        p.set(Mode::Pass);
        tokio::time::timeout(Duration::from_secs(2), c.read_exact(&mut b)).await.unwrap().unwrap();
        assert_eq!(&b, b"held");

        // Reset: the live connection is reset at its next chunk.
        p.set(Mode::Reset);
        let r = roundtrip(&mut c, b"boom").await;
        let e = r.expect_err("reset");
        assert!(matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof), "{e:?}");
        // New connections are accepted, then reset.
        let mut c3 = TcpStream::connect(p.addr()).await.unwrap();
        let mut b1 = [0u8; 1];
        let r = c3.read(&mut b1).await;
        assert!(matches!(r, Err(ref e) if e.kind() == ErrorKind::ConnectionReset) || matches!(r, Ok(0)), "{r:?}");

        // Refuse closes the listener: connect is refused, not accepted-then-closed.
        p.set(Mode::Pass);
        let mut live = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut live, b"ok").await.unwrap(), b"ok");
        let before = p.stats().connections;
        p.set(Mode::Refuse);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let e = TcpStream::connect(p.addr()).await.expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        assert_eq!(p.stats().connections, before);
        // The idle open connection was reset.
        let r = live.read(&mut b1).await;
        assert!(matches!(r, Err(ref e) if e.kind() == ErrorKind::ConnectionReset) || matches!(r, Ok(0)), "{r:?}");

        // Leaving refuse rebinds the same port.
        p.set(Mode::Pass);
        let mut again = None;
        for _ in 0..50 {
            if let Ok(s) = TcpStream::connect(p.addr()).await {
                again = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut again = again.expect("rebound");
        assert_eq!(roundtrip(&mut again, b"back").await.unwrap(), b"back");

        let s = p.stats();
        assert!(s.bytes_to_upstream >= 5 + 4 + 4 + 2 + 4, "{s:?}");
        assert!(s.bytes_to_client >= 5 + 4 + 4 + 2 + 4, "{s:?}");
        assert!(s.resets >= 2, "{s:?}");
    }
}
