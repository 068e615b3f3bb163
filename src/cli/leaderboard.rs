//! `countersink leaderboard run` and `countersink top`.

use std::sync::Arc;

use clap::{Args, Subcommand};

use crate::bucket::{self, Day};
use crate::ops::leaderboard::{LeaderboardError, Leaderboards, Ranking};
use crate::sink::cql::session;
use crate::telemetry::OperationsMetrics;

use super::Failure;
use super::store_args::StoreArgs;

/// `countersink leaderboard ...`.
#[derive(Debug, Args)]
pub(super) struct LeaderboardArgs {
    #[command(subcommand)]
    command: LeaderboardCommand,
}

#[derive(Debug, Subcommand)]
enum LeaderboardCommand {
    /// Rank the configured boards (or one) and serve the new rankings.
    Run(RunArgs),
}

/// The flags of `leaderboard run`.
#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Run each board once and exit (for a cron job); without it, run every board at its
    /// interval until SIGTERM or SIGINT.
    #[arg(long)]
    once: bool,
    /// Only this board.
    #[arg(long, value_name = "NAME")]
    board: Option<String>,
    /// Rank the period holding this UTC day (`YYYY-MM-DD`) [default: today].
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day)]
    day: Option<Day>,
    /// For a family with an epoch column: rank this epoch (its start minute, as `reset`
    /// printed it; 0 before the first reset) [default: the one in force at the end of
    /// the period, or now].
    #[arg(long, value_name = "N")]
    epoch: Option<i32>,
}

/// The flags of `top`.
#[derive(Debug, Args)]
pub(super) struct TopArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The board.
    #[arg(value_name = "BOARD")]
    board: String,
    /// The period holding this UTC day (`YYYY-MM-DD`) [default: today].
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day)]
    day: Option<Day>,
    /// Entries to show [default: the board's `top`].
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// For a family with an epoch column: the ranking of this epoch (its start minute)
    /// [default: the one in force at the end of the period, or now].
    #[arg(long, value_name = "N")]
    epoch: Option<i32>,
}

fn today() -> Day {
    Day((bucket::unix_secs(std::time::SystemTime::now()) / 86_400) as u32)
}

fn failure(error: LeaderboardError) -> Failure {
    match error {
        LeaderboardError::Usage(_) => Failure::usage(error),
        other => Failure::other(other),
    }
}

async fn jobs(store: &StoreArgs) -> Result<(crate::config::Config, Leaderboards), Failure> {
    let config = store.load()?;
    let session = session::connect(&config.store)
        .await
        .map_err(Failure::other)?;
    let jobs = Leaderboards::new(&config, Arc::new(session), OperationsMetrics::default())
        .map_err(failure)?;
    Ok((config, jobs))
}

/// `leaderboard run`.
pub(super) async fn run(args: LeaderboardArgs) -> Result<(), Failure> {
    let LeaderboardCommand::Run(args) = args.command;
    let (config, jobs) = jobs(&args.store).await?;
    let boards: Vec<_> = match &args.board {
        Some(name) => vec![jobs.board(name).map_err(failure)?.clone()],
        None => config.leaderboards.clone(),
    };
    if boards.is_empty() {
        return Err(Failure::usage(
            "the configuration has no [[leaderboard]] section",
        ));
    }
    if !args.once {
        let mut config = config.clone();
        for board in &mut config.leaderboards {
            board.run_in_serve = boards.iter().any(|b| b.name == board.name);
        }
        let jobs = Arc::new(
            Leaderboards::new(&config, jobs.reader_session(), OperationsMetrics::default())
                .map_err(failure)?,
        );
        let mut signals = super::serve::ShutdownSignals::install();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(crate::ops::leaderboard::serve_jobs(jobs, stopped));
        signals.recv().await;
        let _ = stop.send(true);
        let _ = task.await;
        return Ok(());
    }
    let day = args.day.unwrap_or_else(today);
    let mut failed = 0;
    for board in &boards {
        match jobs.run_in_epoch(board, day, args.epoch).await {
            Ok(report) => println!(
                "{}: {} ranked, {} of {} keys, version {}",
                board.name, report.period, report.entries, report.keys, report.version
            ),
            Err(error) => {
                failed += 1;
                eprintln!("countersink: {}: {error}", board.name);
            }
        }
    }
    if failed > 0 {
        return Err(Failure::other(format!(
            "{failed} of {} boards failed; their previous rankings are still served",
            boards.len()
        )));
    }
    Ok(())
}

/// `top`.
pub(super) async fn top(args: TopArgs) -> Result<(), Failure> {
    let (_, jobs) = jobs(&args.store).await?;
    let board = jobs.board(&args.board).map_err(failure)?.clone();
    let day = args.day.unwrap_or_else(today);
    let limit = args.limit.unwrap_or(board.top);
    let ranking = jobs
        .top_in_epoch(&board, day, limit, args.epoch)
        .await
        .map_err(failure)?;
    match (args.format.as_str(), ranking) {
        ("json", ranking) => println!(
            "{}",
            serde_json::to_string(&ranking).map_err(Failure::other)?
        ),
        (_, None) => println!(
            "no ranking of `{}` for the period of {} yet",
            board.name,
            bucket::format_date(day.date())
        ),
        (_, Some(ranking)) => print_text(&ranking),
    }
    Ok(())
}

fn print_text(ranking: &Ranking) {
    println!(
        "# {} {} (computed {}, {} entries)",
        ranking.board, ranking.period, ranking.computed, ranking.size
    );
    for entry in &ranking.entries {
        println!("{}\t{}\t{}", entry.rank, entry.score, entry.key.join("\t"));
    }
}
