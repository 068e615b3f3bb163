//! Differential test: the corpus in `corpus.rs` runs through the real `scylla` driver against
//! cqlsim (in process) and against a real Apache Cassandra, and every response is compared:
//! rows, result and prepared metadata, error codes and messages.
//!
//! The Cassandra node is named by `CQLSIM_DIFF_CASSANDRA=host:port` (start one with
//! `tests/cassandra/cluster.sh up`). Without it the comparison is reported as NOT RUN, with
//! zero cases counted: it never passes silently. `.ci/run` sets it and fails when the count
//! of cases compared against the real node is zero.
//!
//! A custom harness (`harness = false`), so that "not run" can be reported as such: the last
//! line is `N passed, N failed, N not run`.

mod corpus;
mod known;
mod outcome;
mod step;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::retry::FallthroughRetryPolicy;

use crate::corpus::Case;
use crate::outcome::Outcome;

const ENV: &str = "CQLSIM_DIFF_CASSANDRA";

/// A session configured the way countersink configures its own: no retries, no speculative
/// execution.
async fn session(contact: &str) -> Result<Session, String> {
    let profile = ExecutionProfile::builder()
        .retry_policy(Arc::new(FallthroughRetryPolicy::new()))
        .speculative_execution_policy(None)
        .request_timeout(Some(Duration::from_secs(30)))
        .build();
    SessionBuilder::new()
        .known_node(contact)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map_err(|e| format!("cannot connect to {contact}: {e}"))
}

/// How one case came out.
enum Verdict {
    Agree,
    /// Still different, as the README says; the report is printed with `--verbose`.
    KnownDifference(String),
    Failed(String),
}

async fn compare(case: &Case, cassandra: &Session, cqlsim: &Session) -> Verdict {
    let mut report = String::new();
    let mut differs = false;
    for step in &case.steps {
        let real: Vec<Outcome> = step.run(cassandra).await;
        let sim: Vec<Outcome> = step.run(cqlsim).await;
        if real != sim {
            differs = true;
            report.push_str(&format!("    {}\n", step.text()));
            for (i, (r, s)) in real.iter().zip(&sim).enumerate() {
                if r != s {
                    report.push_str(&format!(
                        "      [{i}] cassandra: {r}\n      [{i}] cqlsim:    {s}\n"
                    ));
                }
            }
            if real.len() != sim.len() {
                report.push_str(&format!(
                    "      cassandra: {} outcomes, cqlsim: {}\n",
                    real.len(),
                    sim.len()
                ));
            }
        }
    }
    match (differs, case.known) {
        (false, false) => Verdict::Agree,
        (true, true) => Verdict::KnownDifference(report),
        (true, false) => Verdict::Failed(report),
        (false, true) => Verdict::Failed(
            "    cqlsim now agrees with Cassandra: drop the `known` mark and its README row\n"
                .to_owned(),
        ),
    }
}

/// The README table and the corpus's known cases agree (runs with or without Cassandra).
fn check_readme(cases: &[Case]) -> Result<(), String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .map_err(|e| format!("README.md: {e}"))?;
    let rows = known::readme_rows(&readme)?;
    let marked: BTreeSet<String> = cases
        .iter()
        .filter(|c| c.known)
        .map(|c| c.name.to_owned())
        .collect();
    let problems = known::mismatches(&marked, &rows);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

async fn run() -> Result<(usize, usize, usize), String> {
    let cases = corpus::cases();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let verbose = std::env::args().any(|a| a == "--verbose");
    let mut failed = 0;
    let mut passed = 0;
    match check_readme(&cases) {
        Ok(()) => {
            passed += 1;
            println!("readme_table_matches_corpus ... ok");
        }
        Err(e) => {
            failed += 1;
            println!("readme_table_matches_corpus ... FAILED\n{e}");
        }
    }
    let selected: Vec<&Case> = cases
        .iter()
        .filter(|c| filter.as_deref().is_none_or(|f| c.name.contains(f)))
        .collect();

    let Ok(contact) = std::env::var(ENV) else {
        println!(
            "differential: NOT RUN: 0 of {} cases compared against Cassandra ({ENV} is not set; \
             start a node with tests/cassandra/cluster.sh up and set {ENV}=127.0.0.1:9042)",
            selected.len()
        );
        return Ok((passed, failed, selected.len()));
    };

    let server = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse::<SocketAddr>().expect("address"),
        ..Default::default()
    })
    .await
    .map_err(|e| format!("cqlsim: {e}"))?;
    let sim = session(&server.local_addr().to_string()).await?;
    let real = session(&contact).await?;
    let version = real
        .query_unpaged(
            "SELECT release_version FROM system.local WHERE key = 'local'",
            (),
        )
        .await
        .ok()
        .and_then(|r| r.into_rows_result().ok())
        .and_then(|r| r.single_row::<(String,)>().ok())
        .map_or_else(|| "?".to_owned(), |(v,)| v);
    for cql in corpus::SETUP {
        for (store, s) in [("cassandra", &real), ("cqlsim", &sim)] {
            s.query_unpaged(*cql, ())
                .await
                .map_err(|e| format!("setup on {store}: {cql}: {e}"))?;
        }
    }

    let started = Instant::now();
    let (mut agree, mut known, mut differ) = (0, 0, 0);
    for case in &selected {
        match compare(case, &real, &sim).await {
            Verdict::Agree => {
                agree += 1;
                println!("{} ... ok", case.name);
            }
            Verdict::KnownDifference(report) => {
                known += 1;
                println!("{} ... ok (known difference, see README)", case.name);
                if verbose {
                    println!("{report}");
                }
            }
            Verdict::Failed(report) => {
                differ += 1;
                println!("{} ... FAILED\n{report}", case.name);
            }
        }
    }
    let compared = agree + known + differ;
    println!(
        "differential: {compared} cases compared against Cassandra {version} at {contact} in {:.1}s: \
         {agree} agree, {known} known differences, {differ} differ",
        started.elapsed().as_secs_f64(),
    );
    server
        .shutdown()
        .await
        .map_err(|e| format!("cqlsim: {e}"))?;
    Ok((passed + agree + known, failed + differ, 0))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok((passed, failed, not_run)) => {
            println!("{passed} passed, {failed} failed, {not_run} not run");
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            println!("differential: error: {e}\n0 passed, 1 failed");
            ExitCode::FAILURE
        }
    }
}
