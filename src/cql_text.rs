//! The CQL text of every statement, read from the files under `cql/`.
//!
//! The files are compiled in (`include_str!`), so the binary needs nothing on disk, and
//! the same files are what `countersink schema` prints and what the book points to. A
//! file holds named blocks: a `-- name: <name>` line, then the statement. Other comment
//! lines are documentation and are dropped from the statement text.

/// `cql/generic.cql`: keyspace and generic tables.
pub const GENERIC: &str = include_str!("../cql/generic.cql");
/// `cql/family.cql`: tables of a configured family.
pub const FAMILY: &str = include_str!("../cql/family.cql");
/// `cql/totals.cql`: tables and write of `writer_totals` families.
pub const TOTALS: &str = include_str!("../cql/totals.cql");
/// `cql/statements.cql`: the counter UPDATE and the read path's SELECT.
pub const STATEMENTS: &str = include_str!("../cql/statements.cql");
/// `cql/key_index.cql`: the key index table and its statements.
pub const KEY_INDEX: &str = include_str!("../cql/key_index.cql");
/// `cql/leaderboard.cql`: the rankings, their pointer rows, and their statements.
pub const LEADERBOARD: &str = include_str!("../cql/leaderboard.cql");
/// `cql/migrate.cql`: the job table of `countersink migrate`.
pub const MIGRATE: &str = include_str!("../cql/migrate.cql");
/// `cql/epochs.cql`: the epoch registry of resets.
pub const EPOCHS: &str = include_str!("../cql/epochs.cql");
/// `cql/exact.cql`: the delta ledger, the outcomes table, the closed-day table, and their
/// statements.
pub const EXACT: &str = include_str!("../cql/exact.cql");
/// `cql/example_views.cql`: the example family tables of seed 000.
pub const EXAMPLE_VIEWS: &str = include_str!("../cql/example_views.cql");

/// The statement called `name` in `file`, without comments and trailing `;`.
///
/// The names used by the program are fixed; a test checks each of them exists.
pub fn block(file: &str, name: &str) -> Option<String> {
    let marker = format!("-- name: {name}");
    let start = file.lines().position(|l| l.trim() == marker)?;
    let text: Vec<&str> = file
        .lines()
        .skip(start + 1)
        .take_while(|l| !l.trim_start().starts_with("-- name:"))
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    let joined = text.join("\n");
    Some(joined.trim().trim_end_matches(';').trim_end().to_owned())
}

/// Fills `{placeholder}`s. Placeholders without a value are left as they are, which a
/// test of every template catches.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// A named statement with its placeholders filled.
pub fn statement(file: &str, name: &str, values: &[(&str, &str)]) -> String {
    // Names come from this crate's code, and the test below proves each exists.
    fill(&block(file, name).unwrap_or_default(), values)
}

/// The statements of a file (for files without names): split at `;` line ends, comments
/// dropped.
pub fn statements(file: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in file.lines() {
        let code = match line.find("--") {
            Some(at) => &line[..at],
            None => line,
        };
        if code.trim().is_empty() {
            continue;
        }
        current.push_str(code.trim_end());
        current.push('\n');
        if code.trim_end().ends_with(';') {
            out.push(current.trim().trim_end_matches(';').to_owned());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_the_program_uses_exists_and_has_no_comments() {
        for (file, name) in [
            (GENERIC, "create_keyspace"),
            (GENERIC, "create_keyspace_without_tablets"),
            (GENERIC, "create_generic_minute"),
            (GENERIC, "create_generic_day"),
            (FAMILY, "create_family_minute"),
            (FAMILY, "create_family_day"),
            (FAMILY, "create_family_hour"),
            (FAMILY, "create_family_total"),
            (STATEMENTS, "select_total"),
            (STATEMENTS, "counter_update"),
            (TOTALS, "create_totals_minute"),
            (TOTALS, "create_totals_day"),
            (TOTALS, "totals_insert"),
            (STATEMENTS, "select_partition"),
            (STATEMENTS, "scan_table"),
            (STATEMENTS, "delete_partition"),
            (KEY_INDEX, "create_key_index"),
            (KEY_INDEX, "insert_key"),
            (KEY_INDEX, "select_keys"),
            (KEY_INDEX, "delete_keys"),
            (LEADERBOARD, "create_rankings"),
            (LEADERBOARD, "create_current"),
            (LEADERBOARD, "insert_ranking"),
            (LEADERBOARD, "flip_current"),
            (LEADERBOARD, "select_current"),
            (LEADERBOARD, "select_ranking"),
            (LEADERBOARD, "delete_version"),
            (MIGRATE, "create_jobs"),
            (MIGRATE, "upsert_part"),
            (MIGRATE, "select_parts"),
            (EPOCHS, "create_epochs"),
            (EPOCHS, "insert_epoch"),
            (EPOCHS, "select_epochs"),
            (EXACT, "create_ledger"),
            (EXACT, "insert_ledger"),
            (EXACT, "select_ledger_bucket"),
            (EXACT, "select_ledger_key"),
            (EXACT, "create_outcomes"),
            (EXACT, "insert_outcome"),
            (EXACT, "select_outcomes"),
            (EXACT, "resolve_outcome"),
            (EXACT, "settle_repair"),
            (EXACT, "create_exact_days"),
            (EXACT, "insert_exact_day"),
            (EXACT, "select_exact_day"),
        ] {
            let text = block(file, name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(
                !text.is_empty() && !text.contains("-- name"),
                "{name}: {text}"
            );
            assert!(!text.ends_with(';'));
        }
        let update = statement(
            STATEMENTS,
            "counter_update",
            &[
                ("table", "ks.t"),
                ("increments", "c = c + ?"),
                ("conditions", "k = ?"),
            ],
        );
        assert_eq!(update, "UPDATE ks.t SET c = c + ? WHERE k = ?");
    }

    #[test]
    fn unnamed_files_split_into_statements() {
        let all = statements(EXAMPLE_VIEWS);
        assert_eq!(all.len(), 3);
        assert!(all[0].starts_with("CREATE TABLE IF NOT EXISTS metrics.views_by_minute"));
        assert!(!all[0].contains("0..1439"), "comments are dropped");
    }
}
