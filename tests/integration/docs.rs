//! The book (`docs/`) documents what the program has: every metric it exports and every
//! configuration key are in its reference chapters; and the README, CONTRIBUTING.md and
//! the book's chapters link only to files and headings that exist.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use countersink::telemetry::catalogue;

/// The reference chapter of the metrics.
const METRICS: &str = include_str!("../../docs/src/reference/metrics.md");
/// The configuration reference, and the guide chapter whose sections document the
/// `[ingest.*]` inputs key by key.
const CONFIGURATION: [&str; 2] = [
    include_str!("../../docs/src/reference/configuration.md"),
    include_str!("../../docs/src/guide/sidecar.md"),
];

/// Every metric of the catalogue (which the library's tests hold equal to what is
/// exported) is named in the book's metrics catalogue.
#[test]
fn every_exported_metric_is_in_the_catalogue() {
    let names: Vec<&str> = catalogue::ENGINE_METRICS
        .iter()
        .chain(&catalogue::INGEST_METRICS)
        .chain(&catalogue::OPERATIONS_METRICS)
        .chain(&catalogue::EXACT_METRICS)
        .chain(&catalogue::WRAPPER_METRICS)
        .map(|m| m.name)
        .collect();
    assert!(names.len() >= 15, "{names:?}");
    for name in names {
        assert!(
            METRICS.contains(&format!("`{name}`")),
            "{name} is exported but not in docs/src/reference/metrics.md"
        );
    }
}

/// No metric name ends in a suffix that the Prometheus exposition and OpenMetrics formats
/// give the series of histograms and summaries (`_sum`, `_count`, `_bucket`) or their
/// creation time (`_created`): a scraper would read such a gauge as part of a histogram
/// or summary that does not exist.
#[test]
fn no_metric_name_ends_in_a_reserved_suffix() {
    let all = catalogue::ENGINE_METRICS
        .iter()
        .chain(&catalogue::INGEST_METRICS)
        .chain(&catalogue::OPERATIONS_METRICS)
        .chain(&catalogue::EXACT_METRICS)
        .chain(&catalogue::WRAPPER_METRICS);
    for metric in all {
        for suffix in ["_sum", "_count", "_bucket", "_created"] {
            assert!(
                !metric.name.ends_with(suffix),
                "{} ends in `{suffix}`, which Prometheus reserves for histograms and summaries",
                metric.name
            );
        }
    }
}

#[test]
fn every_configuration_key_is_in_the_reference() {
    let example: toml::Table =
        toml::from_str(include_str!("../../examples/countersink.toml")).unwrap();
    fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
        for (key, value) in table {
            match value {
                toml::Value::Table(inner) if key != "columns" => {
                    walk(&format!("{prefix}{key}."), inner, out)
                }
                toml::Value::Array(items) if items.iter().all(toml::Value::is_table) => {
                    for item in items {
                        if let toml::Value::Table(inner) = item {
                            walk(&format!("{prefix}{key}[]."), inner, out);
                        }
                    }
                }
                _ => out.push(format!("{prefix}{key}")),
            }
        }
    }
    let mut keys = Vec::new();
    walk("", &example, &mut keys);
    assert!(keys.len() > 30, "{keys:?}");
    let reference = CONFIGURATION.concat();
    for key in keys {
        // The whole dotted key, in backticks: a leaf such as `mode` or `path` alone would
        // be found anywhere.
        assert!(
            reference.contains(&format!("`{key}`")),
            "config key `{key}` is not in docs/src/reference/configuration.md (nor the inputs of docs/src/guide/sidecar.md)"
        );
    }
}

/// The repository's root (the crate's manifest directory).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked: the README, CONTRIBUTING.md and every
/// chapter of the book.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let root = root();
    let mut out = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    walk(&root.join("docs/src"), &mut out);
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(i, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((i + 1, line))
    })
}

/// A heading's anchor as GitHub and mdBook make it: lowercase, spaces to `-`, every other
/// character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated heading's anchor gets `-1`,
/// `-2`, ..., as on GitHub).
fn anchors(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// The link targets of one line: inline links `[text](target)` outside code spans, and
/// a reference definition `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    // Code spans hold examples, not links: blank them out (a link's text may be code).
    let mut text = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            text.push(c);
        }
    }
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_owned());
        rest = &rest[end..];
    }
    if let Some((_, target)) = text.strip_prefix('[').and_then(|d| d.split_once("]: ")) {
        out.push(target.trim().to_owned());
    }
    out
}

/// A path with `.` and `..` taken out, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The problems of one document's links (empty when every link resolves).
fn broken_links(document: &Path) -> Vec<String> {
    let root = root();
    let text = std::fs::read_to_string(document).unwrap();
    let shown = document.strip_prefix(&root).unwrap().display().to_string();
    let mut problems = Vec::new();
    for (number, line) in prose(&text) {
        for target in link_targets(line) {
            if target.is_empty() {
                problems.push(format!("{shown}:{number}: an empty link"));
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                document.to_path_buf()
            } else {
                normalise(&document.parent().unwrap().join(path))
            };
            if !file.starts_with(&root) || !file.exists() {
                problems.push(format!("{shown}:{number}: `{target}`: no such file"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if file.extension().is_none_or(|ext| ext != "md") {
                problems.push(format!(
                    "{shown}:{number}: `{target}`: an anchor into a file that is not Markdown"
                ));
                continue;
            }
            let headings = anchors(&std::fs::read_to_string(&file).unwrap());
            if !headings.contains(fragment) {
                problems.push(format!(
                    "{shown}:{number}: `{target}`: no heading with the anchor `{fragment}`"
                ));
            }
        }
    }
    problems
}

/// Every relative link of the README, CONTRIBUTING.md and the book's chapters names a
/// file (or directory) of the repository, and every `#anchor` a heading of its target.
#[test]
fn every_relative_link_and_anchor_resolves() {
    let documents = documents();
    assert!(documents.len() > 20, "{documents:?}");
    let problems: Vec<String> = documents.iter().flat_map(|d| broken_links(d)).collect();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// Every chapter under `docs/src/` is in the book's table of contents, and the table names
/// only chapters that exist (mdBook would otherwise create an empty one).
#[test]
fn every_chapter_is_in_the_summary() {
    let src = root().join("docs/src");
    let summary_path = src.join("SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).unwrap();
    let listed: HashSet<PathBuf> = prose(&summary)
        .flat_map(|(_, line)| link_targets(line))
        .map(|target| normalise(&src.join(target)))
        .collect();
    for chapter in documents().into_iter().filter(|d| d.starts_with(&src)) {
        if chapter == summary_path {
            continue;
        }
        assert!(
            listed.contains(&chapter),
            "{} is not in docs/src/SUMMARY.md",
            chapter.display()
        );
    }
    for chapter in listed {
        assert!(
            chapter.is_file(),
            "SUMMARY.md lists {}, which does not exist",
            chapter.display()
        );
    }
}

#[test]
fn anchors_follow_the_slug_rules() {
    assert_eq!(
        slug("Live reload (SIGHUP, `POST /-/reload`)"),
        "live-reload-sighup-post--reload"
    );
    assert_eq!(
        slug("The driver wrapper: `CounterSession`"),
        "the-driver-wrapper-countersession"
    );
    assert_eq!(slug("writer_totals"), "writer_totals");
    let twice = anchors("# A\n\n## A\n\n```sh\n# not a heading\n```\n");
    assert_eq!(twice, HashSet::from(["a".to_owned(), "a-1".to_owned()]));
    assert_eq!(
        link_targets("see [`x`](a.md#b) and `[c](d)`"),
        vec!["a.md#b".to_owned()]
    );
}

/// Every chapter is included in the library's `#[cfg(doctest)]` module `book`, so that
/// `cargo test --doc` compiles the Rust blocks of every chapter.
#[test]
fn every_chapter_is_compiled_by_the_doc_tests() {
    let lib = include_str!("../../src/lib.rs");
    let src = root().join("docs/src");
    for chapter in documents().into_iter().filter(|d| d.starts_with(&src)) {
        let name = chapter.strip_prefix(&src).unwrap().display().to_string();
        if name == "SUMMARY.md" {
            continue;
        }
        assert!(
            lib.contains(&format!("#[doc = include_str!(\"../docs/src/{name}\")]")),
            "docs/src/{name} is not included in the `book` module of src/lib.rs"
        );
    }
}

/// The names in backticks of a table cell (the text between each pair of backticks).
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The guarantees chapter's table names, for each guarantee, files that exist and tests
/// that exist in the files it names (`path`: `test`, `test`; `path`: `test`).
#[test]
fn the_guarantees_table_names_files_and_tests_that_exist() {
    let root = root();
    let chapter = include_str!("../../docs/src/guarantees.md");
    let table = &chapter[chapter
        .find("## Who keeps each guarantee")
        .expect("the table's heading")..];
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|line| !line.starts_with("|---"))
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(rows.len() >= 7, "{rows:?}");
    let mut tests_named = 0;
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        assert_eq!(cells.len(), 3, "{row}");
        for module in code_spans(cells[1])
            .into_iter()
            .filter(|m| m.starts_with("src/"))
        {
            assert!(
                root.join(module).exists(),
                "{module}, named in the table, does not exist"
            );
        }
        for part in cells[2].trim_end_matches(" |").split("; ") {
            let (file, names) = part
                .split_once(": ")
                .unwrap_or_else(|| panic!("`path`: `test` expected, got {part}"));
            let file = file.trim_matches('`');
            let text = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("{file}, named in the table: {e}"));
            for name in code_spans(names) {
                assert!(
                    text.contains(&format!("fn {name}(")),
                    "{file} has no test `{name}` (named in the guarantees table)"
                );
                tests_named += 1;
            }
        }
    }
    assert!(tests_named >= 20, "{tests_named}");
}

/// The command-line reference names every subcommand (as `countersink <path>`) and every
/// long flag that `--help` shows.
#[cfg(feature = "sidecar")]
#[test]
fn the_cli_reference_holds_every_subcommand_and_flag() {
    use clap::CommandFactory;
    let reference = include_str!("../../docs/src/reference/cli.md");
    fn walk(path: &str, command: &clap::Command, problems: &mut Vec<String>, reference: &str) {
        for arg in command.get_arguments() {
            if arg.is_hide_set() {
                continue;
            }
            if let Some(long) = arg.get_long()
                && long != "help"
                && long != "version"
                && !reference.contains(&format!("--{long}"))
            {
                problems.push(format!("`{path}` has `--{long}`"));
            }
        }
        for sub in command.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let name = sub.get_name();
            // `countersink outcomes summary|list` names both.
            let named = reference
                .match_indices(&format!("{path} "))
                .any(|(at, found)| {
                    reference[at + found.len()..]
                        .split_whitespace()
                        .next()
                        .is_some_and(|word| word.split('|').any(|w| w == name))
                });
            let path = format!("{path} {name}");
            if !named {
                problems.push(format!("no `{path}`"));
            }
            walk(&path, sub, problems, reference);
        }
    }
    let mut problems = Vec::new();
    walk(
        "countersink",
        &countersink::cli::Cli::command(),
        &mut problems,
        reference,
    );
    assert!(
        problems.is_empty(),
        "docs/src/reference/cli.md lacks:\n{}",
        problems.join("\n")
    );
}

/// The README's two commands are still there, and the test command is the one `.ci/run`
/// runs in its step "tests (the README's test command)".
#[test]
fn the_readme_holds_the_two_commands_ci_runs() {
    let readme = include_str!("../../README.md");
    assert!(readme.contains("```sh\ncargo run --release -- dev\n```"));
    assert!(readme.contains("```sh\ncargo test --workspace\n```"));
    let ci = include_str!("../../.ci/run");
    let step = &ci[ci
        .find("step \"tests (the README's test command)\"")
        .expect("the tests step of .ci/run")..];
    let step = &step[..step[1..].find("\nstep ").map_or(step.len(), |end| end + 1)];
    assert!(
        step.lines()
            .any(|line| line.contains("cargo test --workspace --locked")),
        "the tests step of .ci/run no longer runs the README's test command:\n{step}"
    );
}

/// The state directory's chapter lists every file the code names: each file-name constant
/// of `src/` (`const NAME: &str = "name.ext"`) and the fixed names the state module joins
/// to the directory.
#[test]
fn the_state_directory_chapter_lists_every_file() {
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let chapter = include_str!("../../docs/src/operations/state-directory.md");
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    let code: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let extensions = [
        "jsonl", "json", "wal", "bin", "cursor", "mark", "days", "log", "corrupt",
    ];
    let mut names = Vec::new();
    for line in code.lines() {
        let line = line.trim();
        let rest = line.split_once("const ").map_or("", |(visibility, rest)| {
            if visibility.is_empty() || visibility.starts_with("pub") {
                rest
            } else {
                ""
            }
        });
        let Some(rest) = Some(rest).filter(|rest| !rest.is_empty()) else {
            continue;
        };
        let Some((_, value)) = rest.split_once(": &str = \"") else {
            continue;
        };
        let Some(name) = value.strip_suffix("\";") else {
            continue;
        };
        if name
            .split('.')
            .next_back()
            .is_some_and(|ext| extensions.contains(&ext))
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        {
            names.push(name.to_owned());
        }
    }
    assert!(names.len() >= 12, "{names:?}");
    for fixed in [
        "journal.wal",
        "unknown.jsonl",
        "rejected.jsonl",
        "status.json",
        "writer_id",
        "dir_id",
        "incarnation",
        "lock",
    ] {
        assert!(
            code.contains(&format!("\"{fixed}\"")),
            "{fixed} is no longer named in src/: update this test and the chapter"
        );
        names.push(fixed.to_owned());
    }
    for name in names {
        assert!(
            chapter.contains(&format!("`{name}`")),
            "{name} is a state file the code names but docs/src/operations/state-directory.md does not list"
        );
    }
}
