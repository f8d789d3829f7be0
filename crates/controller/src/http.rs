//! `/metrics`, `/healthz`, `/readyz` on one small HTTP/1.1 listener.
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub type Render = Arc<dyn Fn() -> String + Send + Sync>;
pub type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

pub async fn serve(addr: &str, metrics: Render, ready: Ready) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    loop {
        let (mut sock, _) = listener.accept().await?;
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = match sock.read(&mut buf).await {
                Ok(n) => n,
                Err(_) => return,
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
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
