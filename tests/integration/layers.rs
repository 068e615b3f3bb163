//! The layer table of `src/lib.rs` holds: a module imports only modules of its own row
//! or of rows above it; and no files of `src/` import each other around a circle (a
//! module's use of its own ancestors aside). The rows are read from the table itself, so the table and this
//! check cannot disagree; the imports are every `crate::…` path in the non-test code of
//! `src/` (`use` lines, grouped `use crate::{…}` and paths written inline).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LIB: &str = include_str!("../../src/lib.rs");

/// Imports that run back up the table today, each a debt with the reason it exists.
/// The check fails on any other, and on an entry here that is no longer true, so the
/// list only shrinks.
const KNOWN_UPWARD: [(&str, &str, &str); 0] = [];

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
            .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs") || n == "proptests.rs")
            // A module's tests split into files of their own (`tests/mod.rs` and beside it).
            || relative.components().any(|c| c.as_os_str() == "tests");
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

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs`
/// is the crate root (empty).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every path a piece of code names through `crate::`, `super::` or `self::` (in `use`
/// trees, grouped or not, and written inline), made absolute from module `me`.
fn named_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for head in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(head) {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                continue;
            }
            let mut base: Vec<String> = match head {
                "crate::" => Vec::new(),
                "self::" => me.to_vec(),
                _ => me[..me.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[at + head.len()..];
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            use_tree(rest, base, &mut out);
        }
    }
    out
}

/// The paths of one `use` tree (or inline path) starting at `text`, under `prefix`.
fn use_tree(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (0_usize, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        use_tree(group[start..i].trim_start(), path.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        use_tree(group[start..i].trim_start(), path.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() || ident == "self" {
            break;
        }
        rest = &rest[ident.len()..];
        path.push(ident);
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => break,
        }
    }
    out.push(path);
}

/// The file-level import graph of the sources under `root` (non-test code): module →
/// modules it names. A module naming one of its own ancestors is left out: a child uses
/// what its parent declares, and a parent re-exports its children (Rust's way; not a
/// circle between layers).
fn file_graph(root: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let mut texts = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(root).expect("under root");
        let test_file = relative
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs") || n == "proptests.rs");
        if test_file || relative.starts_with("bin") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("source");
        texts.insert(module_of(relative), code(&text));
    }
    let modules: BTreeSet<Vec<String>> = texts.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (me, text) in &texts {
        let mut named = BTreeSet::new();
        for path in named_paths(text, me) {
            let Some(module) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let ancestor = module.len() <= me.len() && me[..module.len()] == module[..];
            if !ancestor {
                named.insert(module);
            }
        }
        graph.insert(me.clone(), named);
    }
    graph
}

/// A circle of the graph, if it has one.
fn circle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, bool>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        state.insert(node.clone(), false);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(false) => {
                    let at = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut found: Vec<String> = stack[at..].iter().map(|n| n.join("::")).collect();
                    found.push(next.join("::"));
                    return Some(found);
                }
                Some(true) => {}
                None => {
                    if let Some(found) = visit(next, graph, state, stack) {
                        return Some(found);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node)
            && let Some(found) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(found);
        }
    }
    None
}

/// No two files of `src/` import each other, directly or around a circle (a module's
/// own ancestors aside).
#[test]
fn no_circle_among_the_files_of_src() {
    let graph = file_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 100, "only {} modules read", graph.len());
    assert_eq!(
        circle(&graph),
        None,
        "a circle of imports among the files of src/"
    );
}

/// The circle check finds a circle through `super::` and grouped paths, and leaves a
/// child's use of its parent alone.
#[test]
fn the_circle_check_sees_a_circle_and_spares_a_parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod a;\n");
    write(
        "a/mod.rs",
        "pub mod b;\npub mod c;\npub use self::b::B;\npub struct A;\n",
    );
    write("a/b.rs", "use super::{A, c::C};\npub struct B;\n");
    write("a/c.rs", "pub struct C;\n");
    assert_eq!(
        circle(&file_graph(dir.path())),
        None,
        "a parent and its child"
    );
    write("a/c.rs", "pub struct C(crate::a::b::B);\n");
    assert_eq!(
        circle(&file_graph(dir.path())).map(|c| c.len()),
        Some(3),
        "a::b -> a::c -> a::b"
    );
}
