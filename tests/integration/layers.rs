//! The layer table of `src/lib.rs` holds: a module imports only modules of its own row
//! or of rows above it. The rows are read from the table itself, so the table and this
//! check cannot disagree; the imports are every `crate::…` path in the non-test code of
//! `src/` (`use` lines, grouped `use crate::{…}` and paths written inline).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LIB: &str = include_str!("../../src/lib.rs");

/// Imports that run back up the table today, each a debt with the reason it exists.
/// The check fails on any other, and on an entry here that is no longer true, so the
/// list only shrinks.
const KNOWN_UPWARD: [(&str, &str, &str); 1] = [(
    "ops",
    "wrapper",
    "ops/outcomes.rs reads the driver wrapper's own records and request ids",
)];

/// The modules of each row of the layer table, top row first.
fn rows() -> Vec<Vec<String>> {
    let table = LIB
        .lines()
        .skip_while(|l| !l.starts_with("//! | module | job |"))
        .skip(2)
        .take_while(|l| l.starts_with("//! | "));
    let rows: Vec<Vec<String>> = table
        .map(|line| {
            let cell = line
                .trim_start_matches("//! | ")
                .split(" | ")
                .next()
                .unwrap_or("");
            // Each name is between backticks: [`name`], [`name`](mod@name) or `name`.
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert!(rows.len() >= 10, "the layer table of src/lib.rs: {rows:?}");
    rows
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its tests and comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::`.
fn imported(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::X, b, c::{Y, Z}}`: the first name of each top-level item.
            let (mut depth, mut item_start) = (0_usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        names.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest));
        }
    }
    names
}

#[test]
fn no_import_runs_back_up_the_layer_table() {
    let rows = rows();
    let rank: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, row)| row.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut upward: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under src");
        let name = relative.to_string_lossy().into_owned();
        let top = name.split('/').next().unwrap_or("").trim_end_matches(".rs");
        let test_file = relative
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs") || n == "proptests.rs");
        if matches!(top, "lib" | "main") || test_file {
            continue;
        }
        let Some(&own) = rank.get(top) else {
            panic!("src/{name}: module {top} is not in the layer table of src/lib.rs");
        };
        checked += 1;
        let text = std::fs::read_to_string(file).expect("source");
        for module in imported(&code(&text)) {
            if let Some(&theirs) = rank.get(module.as_str())
                && theirs > own
            {
                upward
                    .entry((top.to_owned(), module))
                    .or_default()
                    .insert(name.clone());
            }
        }
    }
    assert!(checked > 100, "only {checked} files checked");
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(from, to, _)| ((*from).to_owned(), (*to).to_owned()))
        .collect();
    let new: Vec<_> = upward.iter().filter(|(k, _)| !known.contains(*k)).collect();
    assert!(
        new.is_empty(),
        "imports that run back up the layer table of src/lib.rs (importer, imported, files): {new:?}"
    );
    for (from, to, why) in KNOWN_UPWARD {
        assert!(
            upward.contains_key(&(from.to_owned(), to.to_owned())),
            "{from} no longer imports {to} ({why}): take it off KNOWN_UPWARD"
        );
    }
}

/// The parser of this check sees grouped and inline paths.
#[test]
fn the_import_reader_sees_grouped_and_inline_paths() {
    let code = "use crate::{a::X, b, c::{Y, Z}};\nlet v = crate::d::f();\nuse crate::e;";
    assert_eq!(
        imported(code).into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e"]
    );
}
