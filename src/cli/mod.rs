//! The `countersink` command line: a contract, since scripts and operators rely on these
//! names (docs/src/reference/cli.md).
//!
//! Settings come from, highest first: command-line flags, `COUNTERSINK_*` environment
//! variables (each flag names its variable in `--help`), the config file (`--config` or
//! `COUNTERSINK_CONFIG`), and the built-in defaults. Exit codes: 0 after a clean
//! shutdown, 2 for bad configuration or arguments (the message names the field), 1 for
//! anything else.

mod advise;
mod args;
mod contexts;
#[cfg(feature = "dev")]
mod dev;
mod get;
mod leaderboard;
mod logging;
mod migrate;
mod outcomes;
mod prune;
mod reconcile;
mod reset;
mod schema;
mod send;
mod serve;
mod state_size;
mod store_args;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Client-side pre-aggregation for Cassandra and ScyllaDB counter tables.
#[derive(Debug, Parser)]
#[command(name = "countersink", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the sidecar: receive StatsD counter lines, flush them to the cluster.
    Serve(args::ServeArgs),
    /// Run the sidecar against an embedded test store (cqlsim), with the schema created,
    /// and print how to send a line and read it back.
    #[cfg(feature = "dev")]
    Dev(dev::DevArgs),
    /// Send counter lines to a running sidecar (from the arguments, or stdin when none).
    Send(send::SendArgs),
    /// Read a counter back: the day total (default) or the minute series.
    Get(get::GetArgs),
    /// Print the CQL schema for a configuration, or create it with --apply.
    Schema(schema::SchemaArgs),
    /// Recommend a shard count per family from the sidecars' measured peak write rate
    /// per key (their /debug/hot) and the safe rate per key of a load test.
    AdviseShards(advise::AdviseArgs),
    /// Which families and tags bring the most distinct contexts: a sidecar's
    /// /debug/contexts as a table (the tag that exploded, with sample values).
    Contexts(contexts::ContextsArgs),
    /// Leaderboard jobs: `leaderboard run [--once]` ranks the configured boards.
    Leaderboard(leaderboard::LeaderboardArgs),
    /// Show a leaderboard's ranking for a period.
    Top(leaderboard::TopArgs),
    /// Delete a family's partitions older than a cutoff (whole partitions only).
    Prune(prune::PruneArgs),
    /// Copy a family's counters into another table or cluster by read-and-increment, as
    /// a resumable job; or verify one.
    Migrate(migrate::MigrateArgs),
    /// Start a new epoch of a family (or of one key): counters restart from zero in it,
    /// without deleting or decrementing anything.
    Reset(reset::ResetArgs),
    /// Compare the exact families' counters with their delta ledger for a day, and
    /// explain the drift (exit 3 on unexplained drift over the threshold).
    Reconcile(reconcile::ReconcileArgs),
    /// What the state directory says became of writes that did not apply: unknown,
    /// rejected, spilled, and an unfinished flush in the journal. Reads only.
    Outcomes(outcomes::OutcomesArgs),
    /// The most disk a state directory can take with a configuration (spill, outcome
    /// logs, journal), to size its volume by.
    StateSize(state_size::StateSizeArgs),
}

/// A command's failure, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Bad configuration or arguments: exit code 2.
    pub fn usage(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// Anything else: exit code 1.
    pub fn other(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }

    /// With an explicit code.
    pub fn with_code(code: u8, message: impl std::fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version are not errors; everything else is a usage error (2).
            let code = if error.use_stderr() { 2 } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("countersink: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            #[cfg(feature = "dev")]
            Command::Dev(args) => dev::run(args).await,
            Command::Send(args) => send::run(args),
            Command::Get(args) => get::run(args).await,
            Command::Schema(args) => schema::run(args).await,
            Command::StateSize(args) => state_size::run(args),
            Command::AdviseShards(args) => advise::run(args).await,
            Command::Contexts(args) => contexts::run(args).await,
            Command::Leaderboard(args) => leaderboard::run(args).await,
            Command::Top(args) => leaderboard::top(args).await,
            Command::Prune(args) => prune::run(args).await,
            Command::Migrate(args) => migrate::run(args).await,
            Command::Reset(args) => reset::run(args).await,
            Command::Reconcile(args) => reconcile::run(args).await,
            Command::Outcomes(args) => outcomes::run(args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("countersink: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command};

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn documented_command_lines_parse() {
        for line in [
            "countersink serve --udp off --uds /tmp/s --uds-stream /tmp/t --metrics 127.0.0.1:0 --contact-point a:9042 --contact-point b:9042 --keyspace ks --local-dc dc1 --flush-interval 2s --state-dir /tmp/x",
            "countersink dev --cql-listen 127.0.0.1:0 --udp 127.0.0.1:0 --metrics off",
            "countersink send --udp 127.0.0.1:8125 a:1|c b:2|c",
            "countersink send --uds-stream /tmp/s a:1|c",
            "countersink get --contact-point 127.0.0.1:9042 --keyspace ks page.views --tag page:home --day 2026-11-30 --minutes",
            "countersink schema --config x.toml --apply --contact-point 127.0.0.1:9042",
            "countersink get page.views --tag page_id:home --consistency one",
            "countersink migrate --from a.toml --to b.toml --family views --day-from 2026-11-01 --day-to 2026-11-30 --job j1 --verify-only --allow-live",
            "countersink prune --family views --before 2026-10-01 --dry-run --yes",
            "countersink leaderboard run --once --config x.toml --board top_pages --day 2026-11-30",
            "countersink top top_pages --day 2026-11-30 --limit 5 --format json",
            "countersink advise-shards --safe-rate 100 --from http://127.0.0.1:9102 --from hot.json",
            "countersink contexts --metrics-addr 127.0.0.1:9102 --tags 5 --format json",
            "countersink reset views --tag page_id:home --at 2026-12-01T13:00:00Z --reason launch --config x.toml",
            "countersink reset --all --reason yearly",
            "countersink get page.views --tag page_id:home --epoch 29934060",
            "countersink outcomes summary --state-dir /tmp/x --format json",
            "countersink outcomes list --config x.toml --outcome unknown --outcome rejected --since 2h --family views --tag page_id:home --tag k:v --format json",
        ]
        .into_iter()
        .filter(|line| cfg!(feature = "dev") || !line.starts_with("countersink dev "))
        {
            let cli =
                Cli::try_parse_from(line.split(' ')).unwrap_or_else(|e| panic!("{line}: {e}"));
            if let Command::Serve(args) = cli.command {
                let config = args.load().unwrap();
                assert_eq!(config.ingest.udp.listen, None);
                assert_eq!(config.store.contact_points, ["a:9042", "b:9042"]);
                assert_eq!(config.flush.interval, std::time::Duration::from_secs(2));
                assert_eq!(config.state.dir, std::path::PathBuf::from("/tmp/x"));
            }
        }
        assert!(
            Cli::try_parse_from([
                "countersink",
                "send",
                "--udp",
                "1.2.3.4:5",
                "--uds",
                "/s",
                "x"
            ])
            .is_err()
        );
        assert!(Cli::try_parse_from(["countersink", "serve", "--flush-interval", "5"]).is_err());
    }
}
