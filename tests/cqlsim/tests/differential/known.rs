//! The README's table of differences found by this test, kept in step with the corpus: every
//! case marked `known` has a row, and every row names a case marked `known`.

use std::collections::BTreeSet;

/// The heading above the table in cqlsim's README.
pub(crate) const HEADING: &str = "### Differences the differential test found";

/// The case names in the first column of the table under [`HEADING`].
pub(crate) fn readme_rows(readme: &str) -> Result<BTreeSet<String>, String> {
    let start = readme
        .find(HEADING)
        .ok_or_else(|| format!("README has no '{HEADING}' section"))?;
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in readme[start + HEADING.len()..].lines() {
        let line = line.trim();
        if line.starts_with('#') {
            break;
        }
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        in_table = true;
        let first = line
            .trim_matches('|')
            .split('|')
            .next()
            .unwrap_or("")
            .trim();
        // The header row and the separator row name no case.
        if let Some(name) = first.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
            names.insert(name.to_owned());
        }
    }
    Ok(names)
}

/// Problems between the corpus's known cases and the README rows (empty when they agree).
pub(crate) fn mismatches(known: &BTreeSet<String>, rows: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for name in known.difference(rows) {
        problems.push(format!(
            "case `{name}` is marked known but the README table has no row for it"
        ));
    }
    for name in rows.difference(known) {
        problems.push(format!(
            "the README table lists `{name}`, which is not a known case of the corpus"
        ));
    }
    problems
}
