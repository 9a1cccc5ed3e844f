//! `weir`: start the server (`weir` or `weir serve`) or run a benchmark (`weir bench`).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use weir_server::{bench, server, Config, Database};

/// mimalloc reuses freed memory instead of returning it to the kernel (see Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "weir", about = "Weir: a streaming SQL database", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(clap::Args, Clone, Default)]
struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:6543).
    #[arg(long, global = true)]
    listen: Option<String>,
    /// Data directory (default ./weir-data).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Config file (default ./weir.toml if present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Actors per parallel fragment (parallelism.default).
    #[arg(long, global = true)]
    parallelism: Option<u32>,
    /// Prometheus endpoint port (metrics.reporter.prom.port; 0 disables it).
    #[arg(long, global = true)]
    metrics_port: Option<u16>,
    /// Web dashboard port (rest.port; 0 disables it).
    #[arg(long, global = true)]
    web_port: Option<u16>,
    /// PEM certificate chain for TLS connections (tls.cert-file; needs --tls-key).
    #[arg(long, global = true)]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS connections (tls.key-file; needs --tls-cert).
    #[arg(long, global = true)]
    tls_key: Option<PathBuf>,
    /// Listen on a non-loopback address without a password
    /// (auth.allow-unauthenticated-remote).
    #[arg(long, global = true)]
    allow_unauthenticated_remote: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Start the server (the default).
    Serve,
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Savepoints of a running server: create, list, restore, drop (`--json` for
    /// scripts; non-zero exit status on failure).
    Savepoint(weir_server::savepoint_cli::SavepointArgs),
}

fn load_config(args: &ServeArgs) -> Result<Config, String> {
    let mut cfg = Config::load(args.config.as_deref())?;
    let cli = "command line";
    if let Some(l) = &args.listen {
        cfg.listen = l.clone();
        cfg.set_origin("listen", cli);
    }
    if let Some(d) = &args.data_dir {
        cfg.data_dir = d.clone();
        cfg.set_origin("data-dir", cli);
    }
    if let Some(p) = args.parallelism {
        if p == 0 || p > cfg.max_parallelism {
            return Err(format!(
                "--parallelism must be in 1..={}",
                cfg.max_parallelism
            ));
        }
        cfg.parallelism = p;
        cfg.set_origin("parallelism.default", cli);
    }
    if let Some(p) = args.metrics_port {
        cfg.metrics_port = p;
        cfg.set_origin("metrics.reporter.prom.port", cli);
    }
    if let Some(p) = args.web_port {
        cfg.web_port = p;
        cfg.set_origin("rest.port", cli);
    }
    if let Some(c) = &args.tls_cert {
        cfg.tls_cert = Some(c.clone());
        cfg.set_origin("tls.cert-file", cli);
    }
    if let Some(k) = &args.tls_key {
        cfg.tls_key = Some(k.clone());
        cfg.set_origin("tls.key-file", cli);
    }
    if args.allow_unauthenticated_remote {
        cfg.allow_unauthenticated_remote = true;
        cfg.set_origin("auth.allow-unauthenticated-remote", cli);
    }
    // A password from the environment keeps it out of files and process lists
    // (docker run -e WEIR_PASSWORD=...).
    if let Ok(pw) = std::env::var("WEIR_PASSWORD") {
        if !pw.is_empty() {
            cfg.password = Some(pw);
            cfg.set_origin("auth.password", "environment");
        }
    }
    Ok(cfg)
}

/// Transparent huge pages off for this process. mimalloc asks for them on its arenas
/// and returns freed ranges to the kernel; each later touch of such a range then has
/// the kernel zero a whole 2 MiB page for what may be a few KiB. In Nexmark q17 at
/// parallelism 2 that zeroing was 17% of all CPU time; with THP off it left the
/// profile and throughput rose by 2–13% (docs/nexmark.md, "Huge pages").
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

fn main() {
    disable_transparent_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: log files stay greppable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    if let Some(Command::Savepoint(args)) = cli.command {
        // A client of a running server: no configuration of its own to load.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        std::process::exit(rt.block_on(weir_server::savepoint_cli::run(args)));
    }
    let cfg = match load_config(&cli.serve) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Planning and optimizing a deeply nested expression recurses deeply; a stack
        // overflow would abort the whole server, not just the statement. Stacks are
        // reserved lazily, so a large limit costs only address space.
        .thread_stack_size(256 * 1024 * 1024)
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async move {
        match cli.command {
            Some(Command::Bench(b)) => bench::run(b, cfg).await,
            Some(Command::Savepoint(_)) => unreachable!("handled before the server starts"),
            None | Some(Command::Serve) => {
                cfg.check_listen_safety()?;
                let tls = match cfg.tls_files()? {
                    Some((cert, key)) => Some(weir_server::pg::tls::acceptor(cert, key)?),
                    None => None,
                };
                let listener = tokio::net::TcpListener::bind(&cfg.listen)
                    .await
                    .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
                let host = cfg.listen.rsplit_once(':').map(|(h, _)| h).unwrap_or("127.0.0.1");
                weir_server::metrics_http::start(host, cfg.metrics_port).await;
                if let Some(ha) = weir_server::cluster::ha_config(&cfg)? {
                    let password = cfg.password.clone();
                    let (web_host, web_port) = (host.to_string(), cfg.web_port);
                    return weir_server::member::run(cfg, ha, move |member| async move {
                        let leader = member.clone();
                        weir_server::web::start(
                            &web_host,
                            web_port,
                            password.clone(),
                            std::sync::Arc::new(move || leader.database()),
                        )
                        .await;
                        if let Err(e) = server::serve_member(member, password, listener, tls).await {
                            tracing::error!(error = %e, "listener failed");
                            std::process::exit(1);
                        }
                    })
                    .await;
                }
                let db = Database::open(cfg.clone()).await?;
                let web_db = db.clone();
                weir_server::web::start(
                    host,
                    cfg.web_port,
                    cfg.password.clone(),
                    std::sync::Arc::new(move || Some(web_db.clone())),
                )
                .await;
                tracing::info!(listen = %cfg.listen, data_dir = %cfg.data_dir.display(), "weir is ready");
                server::serve(db, listener, tls).await.map_err(|e| e.to_string())
            }
        }
    });
    if let Err(e) = result {
        eprintln!("weir: {e}");
        std::process::exit(1);
    }
}
