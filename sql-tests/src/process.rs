//! A `weir` server process for tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

/// The `weir` binary: `$WEIR_BIN`, or `weir` next to the test executable's `deps/`.
pub fn weir_binary() -> PathBuf {
    if let Ok(p) = std::env::var("WEIR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("weir");
    assert!(
        bin.exists(),
        "weir binary not found at {} (run `cargo build --bin weir` first or set WEIR_BIN)",
        bin.display()
    );
    bin
}

/// A client of the server on `port` (its connection task runs in the background).
pub async fn connect_port(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        NoTls,
    )
    .await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A connection whose NOTICE messages are collected (oldest first).
pub async fn connect_with_notices(port: u16) -> (Client, Arc<Mutex<Vec<String>>>) {
    use futures::StreamExt;
    let (client, mut conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        NoTls,
    )
    .await
    .expect("connect to weir");
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notice(n) = m {
                sink.lock().unwrap().push(n.message().to_string());
            }
        }
    });
    (client, notices)
}

/// A free port never handed out before in this process: the kernel readily returns a
/// just-released port again, and two servers of concurrent tests must not race for one.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// How long a connection to a started server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

pub struct WeirProcess {
    child: Option<Child>,
    pub port: u16,
    /// The Prometheus endpoint's port.
    pub metrics_port: u16,
    /// The web dashboard's port.
    pub web_port: u16,
    pub data_dir: PathBuf,
    parallelism: u32,
    extra_config: String,
    log_path: PathBuf,
}

impl WeirProcess {
    /// Starts a server on a fresh port over `data_dir` and waits until it accepts
    /// connections.
    pub async fn start(data_dir: &Path, parallelism: u32) -> WeirProcess {
        Self::start_with_config(data_dir, parallelism, "").await
    }

    pub async fn start_with_config(data_dir: &Path, parallelism: u32, config: &str) -> WeirProcess {
        let mut p = WeirProcess {
            child: None,
            port: 0,
            metrics_port: 0,
            web_port: 0,
            data_dir: data_dir.to_path_buf(),
            parallelism,
            extra_config: config.to_string(),
            log_path: data_dir.with_extension("log"),
        };
        p.spawn().await;
        p
    }

    /// A handle to a server started elsewhere (for checks that only connect).
    /// Dropping it does not stop that server.
    pub fn attach(port: u16, data_dir: PathBuf) -> WeirProcess {
        WeirProcess {
            child: None,
            port,
            metrics_port: 0,
            web_port: 0,
            log_path: data_dir.with_extension("log"),
            data_dir,
            parallelism: 0,
            extra_config: String::new(),
        }
    }

    async fn spawn(&mut self) {
        std::fs::create_dir_all(&self.data_dir).expect("data dir");
        self.port = free_port();
        self.metrics_port = free_port();
        self.web_port = free_port();
        let config_path = self.data_dir.with_extension("toml");
        std::fs::write(&config_path, &self.extra_config).expect("config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("log file");
        let child = Command::new(weir_binary())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--config")
            .arg(&config_path)
            .arg("--parallelism")
            .arg(self.parallelism.to_string())
            .arg("--metrics-port")
            .arg(self.metrics_port.to_string())
            .arg("--web-port")
            .arg(self.web_port.to_string())
            // Tests may inject failures (`SET failpoint.<name> = ...`).
            .env("WEIR_FAILPOINTS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn weir");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // Ready once the port accepts connections (works with and without a
            // configured password).
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                // The port answers; make sure it is our child that answers.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("wait") {
                    panic!(
                        "weir exited with {status} during startup; log:\n{}",
                        std::fs::read_to_string(&self.log_path).unwrap_or_default()
                    );
                }
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("wait") {
                panic!(
                    "weir exited with {status} during startup; log:\n{}",
                    std::fs::read_to_string(&self.log_path).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "weir did not start in time");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A server that listens but never answers (a startup that hangs) fails the test
    /// with its log, instead of holding the whole suite until CI's time limit.
    pub async fn connect(&self) -> Client {
        match tokio::time::timeout(CONNECT_TIMEOUT, connect_port(self.port)).await {
            Ok(client) => client.expect("connect to weir"),
            Err(_) => panic!(
                "weir answered no connection within {CONNECT_TIMEOUT:?}; log:\n{}",
                std::fs::read_to_string(&self.log_path).unwrap_or_default()
            ),
        }
    }

    /// The running server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL: no shutdown hook runs, exactly like a crash.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics", &[]).await
    }

    /// The whole HTTP response (status line, headers, body) of `GET path` on the web
    /// dashboard, with extra request header lines.
    pub async fn web_get(&self, path: &str, headers: &[&str]) -> String {
        http_get(self.web_port, path, headers).await
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// `GET path` on a loopback port; the whole response as text.
pub async fn http_get(port: u16, path: &str, headers: &[&str]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("HTTP endpoint");
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n").as_bytes())
        .await
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("response");
    out
}

impl Drop for WeirProcess {
    fn drop(&mut self) {
        self.kill9();
        // For debugging a failed run: keep the server log outside the temporary dir.
        if let Ok(dir) = std::env::var("WEIR_KEEP_LOGS") {
            let _ = std::fs::create_dir_all(&dir);
            let name = format!("weir-{}-{}.log", std::process::id(), self.port);
            let _ = std::fs::copy(&self.log_path, std::path::Path::new(&dir).join(name));
        }
    }
}

/// How many kills a test makes: `env` (e.g. `WEIR_KAFKA_KILLS=20`) or `default`.
pub fn kills_from_env(env: &str, default: u64) -> u64 {
    std::env::var(env)
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(default)
}

/// The random source of kill moments: seeded from `WEIR_KILL_SEED` or at random, and
/// the seed printed, so that a run can be repeated.
pub fn kill_rng() -> rand::rngs::StdRng {
    use rand::SeedableRng;
    let seed: u64 = std::env::var("WEIR_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("kill seed {seed}");
    rand::rngs::StdRng::seed_from_u64(seed)
}
