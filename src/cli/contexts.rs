//! `countersink contexts`: a sidecar's `/debug/contexts` as a table, so an operator sees
//! which family is full and which tag exploded, with sample values.

use std::fmt::Write as _;

use clap::Args;

use crate::aggregate::cardinality::{ContextsReport, FamilyContexts, WindowView};
use crate::bucket;

use super::Failure;

/// The flags of `contexts`.
#[derive(Debug, Args)]
pub(super) struct ContextsArgs {
    /// The sidecar's metrics address, `HOST:PORT` or `http://HOST:PORT`, or a file
    /// holding a `/debug/contexts` answer.
    #[arg(
        long = "metrics-addr",
        env = "COUNTERSINK_METRICS_ADDR",
        value_name = "ADDR|FILE",
        default_value = "127.0.0.1:9102"
    )]
    metrics_addr: String,
    /// Tags shown per family and window, the most distinct values first.
    #[arg(long, default_value_t = 5, value_name = "N")]
    tags: usize,
    /// `text` or `json` (the answer as the sidecar gave it).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Fetches the report and prints it.
pub(super) async fn run(args: ContextsArgs) -> Result<(), Failure> {
    let source = if args.metrics_addr.starts_with("http://")
        || std::path::Path::new(&args.metrics_addr).is_file()
    {
        args.metrics_addr.clone()
    } else {
        format!("http://{}", args.metrics_addr)
    };
    let text = super::advise::fetch(&source, "/debug/contexts").await?;
    let report: ContextsReport = serde_json::from_str(&text)
        .map_err(|e| Failure::other(format!("{source} is not a /debug/contexts answer: {e}")))?;
    if args.format == "json" {
        println!("{text}");
    } else {
        print!("{}", render(&report, args.tags));
    }
    Ok(())
}

/// The report as a table: one block per family, its window now and the one before.
fn render(report: &ContextsReport, tags: usize) -> String {
    let mut out = String::new();
    if report.families.is_empty() {
        out.push_str(
            "no family has a cardinality cap: set max_contexts or max_tag_values to track one\n",
        );
        return out;
    }
    let _ = writeln!(out, "cardinality window: {}s", report.window_secs);
    for family in &report.families {
        family_block(&mut out, family, tags);
    }
    out
}

fn family_block(out: &mut String, family: &FamilyContexts, tags: usize) {
    let _ = writeln!(
        out,
        "\nfamily {}: max_contexts {}; dropped since start: {} (family full), {} (tag full)",
        family.family,
        cap(family.max_contexts),
        family.dropped_family_total,
        family.dropped_tag_total,
    );
    window_block(out, "now", &family.current, family.max_contexts, tags);
    if let Some(previous) = &family.previous {
        window_block(out, "previous", previous, family.max_contexts, tags);
    }
}

fn window_block(
    out: &mut String,
    label: &str,
    window: &WindowView,
    max_contexts: Option<u64>,
    tags: usize,
) {
    let start = u64::try_from(window.start_unix_secs)
        .map(|secs| bucket::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)))
        .unwrap_or_else(|_| window.start_unix_secs.to_string());
    let _ = writeln!(
        out,
        "  window {label} (from {start}): {}{} contexts of {}; dropped {} (family full), {} (tag full)",
        if window.saturated { ">=" } else { "" },
        window.contexts,
        cap(max_contexts),
        window.dropped_family,
        window.dropped_tag,
    );
    if window.tags.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "    {:<24} {:>10} {:>10} {:>10}  samples",
        "tag", "values", "max", "dropped"
    );
    for tag in window.tags.iter().take(tags) {
        let full = tag.max_values.is_some_and(|max| tag.values >= max);
        let _ = writeln!(
            out,
            "    {:<24} {:>10} {:>10} {:>10}  {}{}",
            tag.tag,
            tag.values,
            cap(tag.max_values),
            tag.dropped,
            tag.samples.join(", "),
            if full { "  <- full" } else { "" },
        );
    }
}

fn cap(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::cardinality::{Cardinality, FamilyCaps, TagSource};
    use crate::series;
    use crate::vocabulary::FamilyId;

    #[test]
    fn the_table_names_the_full_tag_with_samples() {
        let caps = FamilyCaps {
            family: FamilyId(0),
            name: "generic".into(),
            source: TagSource::Generic,
            max_contexts: Some(100),
            max_tag_values: vec![("user_id".into(), 2)],
        };
        let c = Cardinality::new(60, 1000, vec![caps]);
        for user in ["u1", "u2", "u3", "u4"] {
            let tags = format!("env:prod,user_id:{user}");
            let _ = c.admit(FamilyId(0), &series::encode(["req", &tags]), 120, 1);
        }
        let text = render(&c.report(121), 5);
        assert!(text.contains("family generic: max_contexts 100"), "{text}");
        assert!(text.contains("2 contexts of 100; dropped 0 (family full), 2 (tag full)"));
        let row = text.lines().find(|l| l.contains("user_id")).unwrap();
        assert!(row.contains("u1, u2") && row.ends_with("<- full"), "{row}");
        assert!(render(&ContextsReport::default(), 5).starts_with("no family has"));
    }
}
