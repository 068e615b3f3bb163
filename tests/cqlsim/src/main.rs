//! The `cqlsim` binary: `cqlsim [--listen ADDR] [--fault SPEC]... [--seed N] [--data-dir DIR]
//! [--persona cassandra|scylla]`.
//! A test/dev store, not for production. Stops cleanly (writing the snapshot when
//! `--data-dir` is set) on SIGINT or SIGTERM. Bad arguments exit with code 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// In-memory CQL v4 server for tests and development (not a production database).
#[derive(Debug, Parser)]
#[command(name = "cqlsim", version, about, long_about = None)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9042")]
    listen: SocketAddr,
    /// A fault rule, e.g. `write-timeout,applied=yes,table=ks.t,every=3` (repeatable; see the README).
    #[arg(long = "fault", value_name = "SPEC", value_parser = parse_fault)]
    faults: Vec<cqlsim::FaultRule>,
    /// Seed for probabilistic faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Load schema and data from DIR at start, write them back on clean shutdown.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The server to pose as: `cassandra` (Apache Cassandra 3.11) or `scylla` (ScyllaDB's
    /// SUPPORTED keys and system tables, tablets, its counter leader's `Unavailable`).
    #[arg(long, default_value = "cassandra")]
    persona: cqlsim::Persona,
    /// ScyllaDB persona: the cluster's `tablets_mode_for_new_keyspaces` (`disabled`,
    /// `enabled`, `enforced`).
    #[arg(long, default_value = "enabled")]
    tablets_mode: cqlsim::TabletsMode,
    /// ScyllaDB persona: a release that supports counters in keyspaces with tablets
    /// (`COUNTERS_WITH_TABLETS` among its features).
    #[arg(long)]
    counters_with_tablets: bool,
}

fn parse_fault(s: &str) -> Result<cqlsim::FaultRule, String> {
    s.parse().map_err(|e: cqlsim::Error| e.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cqlsim: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cqlsim: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), cqlsim::Error> {
    let config = cqlsim::Config {
        listen: args.listen,
        seed: args.seed,
        faults: args.faults,
        data_dir: args.data_dir,
        persona: args.persona,
        tablets_mode: args.tablets_mode,
        counters_with_tablets: args.counters_with_tablets,
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| cqlsim::Error::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr()?;
    eprintln!("{}", cqlsim::BANNER);
    if config.persona != cqlsim::Persona::Cassandra {
        eprintln!(
            "cqlsim: posing as {} (see the README's persona section)",
            config.persona
        );
    }
    // Scripts wait for this line to learn the port (with --listen 127.0.0.1:0).
    println!("cqlsim listening on {addr}");
    cqlsim::run(listener, config, shutdown_signal()).await?;
    eprintln!("cqlsim: stopped");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
