//! Garage S3 (single node) for tests.
//!
//! One `garage server` child per instance, on free loopback ports, following the recipe
//! described in docs/testenv.md ("What runs"). The server runs in its own process group with
//! `PR_SET_PDEATHSIG(SIGKILL)`, so a crashed test never leaves a Garage behind, and signals
//! (stop, kill, pause) reach the whole group.
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// Fixed test credentials in Garage's own key format (`GK` + 24 hex, 64 hex secret).
pub const ACCESS_KEY_ID: &str = "GK6b6f70697572746573740001";
pub const SECRET_ACCESS_KEY: &str = "2b53cfea5cc2464aac4bca05f1e8395f661b92206c171eff52c5811a0492b781";
/// Name of the imported key inside Garage (used by `bucket allow --key`).
pub const KEY_NAME: &str = "kopiur-test";
/// The bucket every instance starts with.
pub const BUCKET: &str = "kopiur-test";
/// Garage's region; kopia must be given it explicitly (`--region`).
pub const REGION: &str = "garage";

/// How long an admin CLI call or readiness may take before the harness gives up.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct Garage {
    bin: PathBuf,
    state_dir: PathBuf,
    config_path: PathBuf,
    s3_addr: SocketAddr,
    admin_addr: SocketAddr,
    child: Option<Child>,
    paused: bool,
}

/// Binds `127.0.0.1:0` and releases it. The small race with other processes is accepted
/// for tests; Garage fails loudly on a taken port and the log says so.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Garage {
    /// Starts a fresh single-node Garage under `state_dir` (created if missing) and
    /// returns once the layout is applied, the test key imported and bucket
    /// [`BUCKET`] exists and is allowed for that key.
    ///
    /// The three ports are picked free and released before Garage binds them, so a test
    /// starting beside it can take one first (seen in CI: the layout call reached another
    /// instance's RPC port and failed its handshake). Such a start is retried on fresh ports
    /// and a clean state directory, up to three attempts.
    pub async fn start(state_dir: &Path) -> Result<Garage> {
        let mut last = None;
        for attempt in 1..=3 {
            match Self::start_once(state_dir).await {
                Ok(g) => return Ok(g),
                Err(e) => {
                    tracing::warn!(attempt, error = %format!("{e:#}"), "garage start failed; retrying on fresh ports");
                    let _ = std::fs::remove_dir_all(state_dir.join("garage"));
                    last = Some(e);
                }
            }
        }
        Err(last.expect("three attempts").context("garage did not start in three attempts"))
    }

    async fn start_once(state_dir: &Path) -> Result<Garage> {
        let bin = crate::tools::garage()?;
        std::fs::create_dir_all(state_dir).with_context(|| format!("create {}", state_dir.display()))?;
        let state_dir = state_dir.canonicalize()?;
        let meta = state_dir.join("garage/meta");
        let data = state_dir.join("garage/data");
        std::fs::create_dir_all(&meta)?;
        std::fs::create_dir_all(&data)?;
        let rpc = free_port()?;
        let s3 = free_port()?;
        let admin = free_port()?;
        // A fresh RPC secret per instance: two test Garages can never join each other.
        let rpc_secret = hex::encode(rand::random::<[u8; 32]>());
        let config = format!(
            r#"metadata_dir = "{meta}"
data_dir = "{data}"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{rpc_secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3}"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
"#,
            meta = meta.display(),
            data = data.display(),
        );
        let config_path = state_dir.join("garage.toml");
        std::fs::write(&config_path, config)?;

        let mut g = Garage {
            bin,
            state_dir,
            config_path,
            s3_addr: SocketAddr::from(([127, 0, 0, 1], s3)),
            admin_addr: SocketAddr::from(([127, 0, 0, 1], admin)),
            child: None,
            paused: false,
        };
        g.spawn_server()?;
        // /health answers 503 until the layout is applied; wait until it answers at all.
        g.wait_health(|code| code == 200 || code == 503).await?;

        let node = g.admin(&["node", "id", "-q"]).await?;
        let node_id = node.trim().split('@').next().unwrap_or_default().to_string();
        if node_id.len() != 64 {
            bail!("unexpected `garage node id -q` output: {node:?}");
        }
        g.admin(&["layout", "assign", "-z", "dc1", "-c", "1G", &node_id]).await?;
        g.admin(&["layout", "apply", "--version", "1"]).await?;
        g.wait_health(|code| code == 200).await?;
        g.admin(&["key", "import", "--yes", ACCESS_KEY_ID, SECRET_ACCESS_KEY, "-n", KEY_NAME]).await?;
        g.create_bucket(BUCKET).await?;
        Ok(g)
    }

    pub fn s3_addr(&self) -> SocketAddr {
        self.s3_addr
    }
    /// `host:port` as kopia's `--endpoint` wants it (no scheme).
    pub fn s3_endpoint(&self) -> String {
        self.s3_addr.to_string()
    }
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }
    pub fn access_key(&self) -> &'static str {
        ACCESS_KEY_ID
    }
    pub fn secret_key(&self) -> &'static str {
        SECRET_ACCESS_KEY
    }
    pub fn bucket(&self) -> &'static str {
        BUCKET
    }
    pub fn region(&self) -> &'static str {
        REGION
    }
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
    pub fn log_path(&self) -> PathBuf {
        self.state_dir.join("garage.log")
    }
    /// The server's process id (also its process group id), while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Creates a bucket and allows the test key full access to it.
    pub async fn create_bucket(&self, name: &str) -> Result<()> {
        self.admin(&["bucket", "create", name]).await?;
        self.admin(&["bucket", "allow", "--read", "--write", "--owner", name, "--key", KEY_NAME]).await?;
        Ok(())
    }

    /// Deletes a bucket. Garage refuses non-empty buckets; use [`Garage::wipe_bucket`] first.
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        self.admin(&["bucket", "delete", "--yes", name]).await?;
        Ok(())
    }

    /// Deletes every object in `bucket` (optionally only under `prefix`) through the S3 API
    /// with the test key. Returns how many objects were deleted.
    pub async fn wipe_bucket(&self, bucket: &str, prefix: &str) -> Result<usize> {
        let s3 = crate::garage::s3::Client::new(self.s3_addr, ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION);
        let keys = s3.list_keys(bucket, prefix).await?;
        for k in &keys {
            s3.delete_object(bucket, k).await?;
        }
        Ok(keys.len())
    }

    /// Lists the object keys in `bucket` under `prefix`.
    pub async fn list_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
        let s3 = crate::garage::s3::Client::new(self.s3_addr, ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION);
        s3.list_keys(bucket, prefix).await
    }

    /// SIGTERM, then SIGKILL after 10 s. Keeps the state directories.
    pub async fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        if let Some(pid) = child.id() {
            let pg = Pid::from_raw(pid as i32);
            let _ = killpg(pg, Signal::SIGTERM);
            // A stopped process only acts on SIGTERM once continued.
            let _ = killpg(pg, Signal::SIGCONT);
        }
        self.paused = false;
        match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(r) => {
                r?;
            }
            Err(_) => {
                if let Some(pid) = child.id() {
                    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
                child.wait().await?;
            }
        }
        Ok(())
    }

    /// SIGKILL to the process group; its S3 port refuses connections at once.
    pub async fn kill(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        if let Some(pid) = child.id() {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        self.paused = false;
        child.wait().await?;
        Ok(())
    }

    /// Stops (if running) and starts again on the same directories, config and ports;
    /// returns once `/health` is 200.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop().await?;
        self.spawn_server()?;
        self.wait_health(|code| code == 200).await
    }

    /// SIGSTOP: the kernel still completes TCP connects on its ports, but nothing answers.
    pub fn pause(&mut self) -> Result<()> {
        let pid = self.pid().context("garage is not running")?;
        killpg(Pid::from_raw(pid as i32), Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after [`Garage::pause`].
    pub fn resume(&mut self) -> Result<()> {
        let pid = self.pid().context("garage is not running")?;
        killpg(Pid::from_raw(pid as i32), Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    fn spawn_server(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path())?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c")
            .arg(&self.config_path)
            .arg("server")
            .env("RUST_LOG", std::env::var("KOPIUR_GARAGE_LOG").unwrap_or_else(|_| "garage=info".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe libc calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("spawn {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    async fn wait_health(&mut self, ok: impl Fn(u16) -> bool) -> Result<()> {
        let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(2)).build()?;
        let url = format!("http://{}/health", self.admin_addr);
        let start = Instant::now();
        let mut last = String::from("no answer");
        while start.elapsed() < READY_TIMEOUT {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("garage server exited with {status} during startup; see {}", self.log_path().display());
            }
            match client.get(&url).send().await {
                Ok(r) => {
                    let code = r.status().as_u16();
                    if ok(code) {
                        return Ok(());
                    }
                    last = format!("HTTP {code}");
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("garage not healthy after {READY_TIMEOUT:?} (last: {last}); see {}", self.log_path().display())
    }

    /// Runs `garage -c <config> <args>` under a deadline and returns stdout.
    async fn admin(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c").arg(&self.config_path).args(args).stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(ADMIN_TIMEOUT, cmd.output())
            .await
            .with_context(|| format!("garage {} timed out after {ADMIN_TIMEOUT:?}", args.join(" ")))??;
        if !out.status.success() {
            bail!(
                "garage {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Some(pid) = child.id() {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            let _ = child.start_kill();
        }
    }
}

/// A minimal S3 client (AWS SigV4, path-style, plain HTTP) for test bookkeeping:
/// listing and deleting objects, and `HeadBucket`. Not used by the product.
pub mod s3 {
    use std::net::SocketAddr;

    use anyhow::{Result, bail};
    use sha2::{Digest, Sha256};

    pub struct Client {
        addr: SocketAddr,
        access_key: String,
        secret_key: String,
        region: String,
        http: reqwest::Client,
    }

    fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
        const B: usize = 64;
        let mut k = [0u8; B];
        if key.len() > B {
            k[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            k[..key.len()].copy_from_slice(key);
        }
        let mut ipad = [0x36u8; B];
        let mut opad = [0x5cu8; B];
        for i in 0..B {
            ipad[i] ^= k[i];
            opad[i] ^= k[i];
        }
        let inner = Sha256::new().chain_update(ipad).chain_update(msg).finalize();
        Sha256::new().chain_update(opad).chain_update(inner).finalize().into()
    }

    /// RFC 3986 encoding as SigV4 requires (unreserved characters kept; `/` kept in paths).
    fn uri_encode(s: &str, keep_slash: bool) -> String {
        let mut out = String::new();
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
                b'/' if keep_slash => out.push('/'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    }

    impl Client {
        pub fn new(addr: SocketAddr, access_key: &str, secret_key: &str, region: &str) -> Client {
            Client {
                addr,
                access_key: access_key.into(),
                secret_key: secret_key.into(),
                region: region.into(),
                http: reqwest::Client::builder()
                    .no_proxy()
                    .timeout(std::time::Duration::from_secs(30))
                    .build()
                    .expect("reqwest client"),
            }
        }

        async fn request(&self, method: reqwest::Method, path: &str, query: &[(&str, &str)]) -> Result<(u16, String)> {
            let now = chrono::Utc::now();
            let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
            let date = now.format("%Y%m%d").to_string();
            let host = self.addr.to_string();
            let canonical_uri = uri_encode(path, true);
            let mut q: Vec<(String, String)> =
                query.iter().map(|(k, v)| (uri_encode(k, false), uri_encode(v, false))).collect();
            q.sort();
            let canonical_query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
            let payload_hash = hex::encode(Sha256::digest(b""));
            let canonical_headers =
                format!("host:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n");
            let signed_headers = "host;x-amz-content-sha256;x-amz-date";
            let canonical_request = format!(
                "{}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload_hash}",
                method.as_str()
            );
            let scope = format!("{date}/{}/s3/aws4_request", self.region);
            let string_to_sign = format!(
                "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
                hex::encode(Sha256::digest(canonical_request.as_bytes()))
            );
            let k_date = hmac(format!("AWS4{}", self.secret_key).as_bytes(), date.as_bytes());
            let k_region = hmac(&k_date, self.region.as_bytes());
            let k_service = hmac(&k_region, b"s3");
            let k_signing = hmac(&k_service, b"aws4_request");
            let signature = hex::encode(hmac(&k_signing, string_to_sign.as_bytes()));
            let auth = format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
                self.access_key
            );
            let mut url = format!("http://{host}{canonical_uri}");
            if !canonical_query.is_empty() {
                url.push('?');
                url.push_str(&canonical_query);
            }
            let resp = self
                .http
                .request(method, url)
                .header("x-amz-date", amz_date)
                .header("x-amz-content-sha256", payload_hash)
                .header("authorization", auth)
                .send()
                .await?;
            let code = resp.status().as_u16();
            Ok((code, resp.text().await.unwrap_or_default()))
        }

        /// `HeadBucket`: the HTTP status (200 exists, 404 missing, 403 forbidden).
        pub async fn head_bucket(&self, bucket: &str) -> Result<u16> {
            Ok(self.request(reqwest::Method::HEAD, &format!("/{bucket}"), &[]).await?.0)
        }

        pub async fn list_keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
            let mut keys = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let mut q = vec![("list-type", "2"), ("prefix", prefix)];
                if let Some(t) = token.as_deref() {
                    q.push(("continuation-token", t));
                }
                let (code, body) = self.request(reqwest::Method::GET, &format!("/{bucket}"), &q).await?;
                if code != 200 {
                    bail!("ListObjectsV2 {bucket}: HTTP {code}: {body}");
                }
                keys.extend(xml_values(&body, "Key"));
                let truncated = xml_values(&body, "IsTruncated").first().is_some_and(|v| v == "true");
                token = xml_values(&body, "NextContinuationToken").into_iter().next();
                if !truncated || token.is_none() {
                    return Ok(keys);
                }
            }
        }

        pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
            let (code, body) = self.request(reqwest::Method::DELETE, &format!("/{bucket}/{key}"), &[]).await?;
            if code != 204 && code != 200 {
                bail!("DeleteObject {bucket}/{key}: HTTP {code}: {body}");
            }
            Ok(())
        }
    }

    /// Values of `<tag>…</tag>` (flat; enough for ListObjectsV2 answers).
    fn xml_values(body: &str, tag: &str) -> Vec<String> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let mut out = Vec::new();
        let mut rest = body;
        while let Some(i) = rest.find(&open) {
            rest = &rest[i + open.len()..];
            let Some(j) = rest.find(&close) else { break };
            out.push(
                rest[..j]
                    .replace("&amp;", "&")
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'"),
            );
            rest = &rest[j + close.len()..];
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// RFC 4231 test case 2.
        #[test]
        fn hmac_sha256_known_answer() {
            assert_eq!(
                hex::encode(hmac(b"Jefe", b"what do ya want for nothing?")),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
            );
        }

        #[test]
        fn xml_keys() {
            let b = "<ListBucketResult><Contents><Key>a/b</Key></Contents><Contents><Key>c&amp;d</Key></Contents><IsTruncated>false</IsTruncated></ListBucketResult>";
            assert_eq!(xml_values(b, "Key"), vec!["a/b", "c&d"]);
        }
    }
}
