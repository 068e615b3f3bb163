//! `countersink advise-shards`: a shard count per family from the measured peak write
//! rate of its busiest key (see [`crate::ops::advise`]).

use std::path::PathBuf;

use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::config::Config;
use crate::ops::advise::{self, Advice};
use crate::telemetry::HotReport;

use super::Failure;

/// The flags of `advise-shards`.
#[derive(Debug, Args)]
pub(super) struct AdviseArgs {
    /// The counter write rate one key sustains comfortably, in writes per second, as a
    /// load test of the hottest key measured it.
    #[arg(long = "safe-rate", value_name = "WRITES_PER_SECOND")]
    safe_rate: f64,
    /// A sidecar's `/debug/hot`: `http://HOST:PORT` (its metrics address) or a file
    /// holding that JSON. Repeat for every sidecar of the fleet: the rates are summed.
    #[arg(long = "from", value_name = "URL|FILE", required = true)]
    from: Vec<String>,
    /// Config file, to show each family's current shard count beside the advice.
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Prints one line (or JSON object) per family seen.
pub(super) async fn run(args: AdviseArgs) -> Result<(), Failure> {
    if !(args.safe_rate.is_finite() && args.safe_rate > 0.0) {
        return Err(Failure::usage(
            "--safe-rate must be a positive number of writes per second",
        ));
    }
    let config = match &args.config {
        Some(path) => Some(Config::from_file(path).map_err(Failure::usage)?),
        None => None,
    };
    let mut reports = Vec::new();
    for source in &args.from {
        let text = fetch(source, "/debug/hot?k=1000").await?;
        let report: HotReport = serde_json::from_str(&text)
            .map_err(|e| Failure::other(format!("{source} is not a /debug/hot answer: {e}")))?;
        reports.push(report);
    }
    let advice = advise::advise(&reports, args.safe_rate);
    let shards_now = |family: &str| {
        config.as_ref().and_then(|c| {
            c.families
                .iter()
                .find(|f| f.name == family)
                .map(|f| u32::from(f.shards))
                .or((family == "generic").then_some(1))
        })
    };
    if args.format == "json" {
        let rows: Vec<serde_json::Value> = advice
            .iter()
            .map(|a| {
                let mut value = serde_json::to_value(a).unwrap_or_default();
                if let (Some(now), Some(object)) = (shards_now(&a.family), value.as_object_mut()) {
                    object.insert("shards_now".into(), now.into());
                }
                value
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    if advice.is_empty() {
        println!("no counter writes seen in the sources");
    }
    for a in &advice {
        println!("{}", line(a, shards_now(&a.family)));
    }
    Ok(())
}

fn line(a: &Advice, now: Option<u32>) -> String {
    let mut text = format!(
        "{}: shards = {}{} (peak {:.2} writes/s on key {:?} at {}, {:.1} increments/s; {} needed at the safe rate)",
        a.family,
        a.shards,
        now.map(|n| format!(" (now {n})")).unwrap_or_default(),
        a.peak.writes_per_second,
        a.peak.key,
        a.peak.minute,
        a.peak.increments_per_second,
        a.needed,
    );
    if a.capped {
        text.push_str(&format!(
            "; more than {} shards would be needed: lower the flush rate per key (fewer writers, a longer flush.interval)",
            advise::MAX_SHARDS
        ));
    }
    text
}

/// The text of a file, or of a `GET` on a sidecar (`default_path` when the URL has no
/// path).
pub(super) async fn fetch(source: &str, default_path: &str) -> Result<String, Failure> {
    let Some(rest) = source.strip_prefix("http://") else {
        return std::fs::read_to_string(source)
            .map_err(|e| Failure::usage(format!("cannot read {source}: {e}")));
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, default_path),
    };
    let failed = |e: &dyn std::fmt::Display| Failure::other(format!("GET {source}: {e}"));
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| failed(&e))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| failed(&e))?;
    let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(&e))?
        .to_bytes();
    if !status.is_success() {
        return Err(failed(&status));
    }
    String::from_utf8(body.to_vec()).map_err(|e| failed(&e))
}
