//! `countersink dev`: the sidecar against an embedded cqlsim, schema created.

use std::net::SocketAddr;

use clap::Args;

use crate::ddl;
use crate::vocabulary::Transport;

use super::args::ServeArgs;
use super::serve::run_sidecar;
use super::{Failure, logging};

/// The flags of `dev`.
#[derive(Debug, Args)]
pub(super) struct DevArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Address of the embedded CQL store.
    #[arg(
        long = "cql-listen",
        env = "COUNTERSINK_CQL_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:9042"
    )]
    cql_listen: SocketAddr,
}

/// Runs cqlsim and the sidecar until SIGTERM or SIGINT.
pub(super) async fn run(args: DevArgs) -> Result<(), Failure> {
    let mut config = args.serve.load()?;
    logging::init(&config.log).map_err(Failure::usage)?;
    let data_dir = config.state.dir.join("cqlsim-data");
    let store = cqlsim::Server::start(cqlsim::Config {
        listen: args.cql_listen,
        data_dir: Some(data_dir.clone()),
        ..Default::default()
    })
    .await
    .map_err(|e| {
        Failure::usage(format!(
            "cannot start the embedded store on {}: {e}",
            args.cql_listen
        ))
    })?;
    for statement in ddl::statements(&config, ddl::DEV_REPLICATION)? {
        store.execute(None, &statement).map_err(|e| {
            Failure::other(format!("creating the schema in the embedded store: {e}"))
        })?;
    }
    let cql = store.local_addr();
    config.store.contact_points = vec![cql.to_string()];
    // A reload reads the file and flags again, pointed at the same embedded store.
    let serve = std::sync::Arc::new(args.serve);
    let source: crate::sidecar::reload::ConfigSource = std::sync::Arc::new(move || {
        let mut config = serve.load().map_err(|f| f.to_string())?;
        config.store.contact_points = vec![cql.to_string()];
        Ok(config)
    });
    let result = run_sidecar(&config, Some(source), |sidecar| {
        let bound = sidecar.bound();
        println!("{}", banner(&config, cql, bound));
    })
    .await;
    if let Err(error) = store.shutdown().await {
        tracing::error!(%error, "The embedded store did not save its data.");
    }
    result
}

fn banner(config: &crate::config::Config, cql: SocketAddr, bound: crate::sidecar::Bound) -> String {
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "countersink".into());
    // `send`'s flag for a transport is its label with dashes (`--uds-stream`).
    // OTLP receivers take OpenTelemetry exporters, not `send`.
    let send_target = match bound
        .listening
        .iter()
        .find(|l| !matches!(l.transport, Transport::OtlpHttp | Transport::OtlpGrpc))
    {
        Some(l) => format!("--{} {}", l.transport.as_str().replace('_', "-"), l.address),
        None => "--udp 127.0.0.1:8125".into(),
    };
    let mut text = String::new();
    text.push_str("countersink dev: the sidecar, with an embedded store\n");
    text.push_str(&format!("  {}\n", cqlsim::BANNER));
    text.push_str(&format!(
        "  CQL store:  {cql} (keyspace {}, schema created)\n",
        config.store.keyspace
    ));
    for listening in &bound.listening {
        let title = format!("{}:", listening.transport.title());
        text.push_str(&format!("  {title:<11} {}\n", listening.address));
        if listening.transport == Transport::UnixDatagram
            && let Some(qlen) = bound.uds_max_dgram_qlen
            && qlen < crate::ingest::ADVISED_QLEN
        {
            text.push_str(&format!(
                "  WARNING: net.unix.max_dgram_qlen is {qlen}: non-blocking senders lose datagrams when that\n\
                 \x20          many wait. Raise it with `{}`, then restart.\n",
                crate::ingest::RAISE_QLEN
            ));
        }
    }
    if let Some(metrics) = bound.metrics {
        text.push_str(&format!("  Metrics:    http://{metrics}/metrics\n"));
    }
    text.push_str(&format!("  State dir:  {}\n\n", config.state.dir.display()));
    text.push_str("Send a counter line:\n");
    text.push_str(&format!(
        "  {program} send {send_target} 'page.views:1|c|#page:home'\n"
    ));
    text.push_str(&format!(
        "Read it back after the next flush (every {}):\n",
        crate::config::duration::render(config.flush.interval)
    ));
    text.push_str(&format!(
        "  {program} get --contact-point {cql} page.views --tag page:home\n"
    ));
    text.push_str(&format!(
        "  {program} get --contact-point {cql} page.views --tag page:home --minutes\n"
    ));
    text.push_str("Ctrl-C flushes everything and stops.");
    text
}
