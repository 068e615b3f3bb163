//! Patterns over dotted metric names, and the key templates that use their captures.
//!
//! A **glob** is matched component by component: the name and the pattern are split at
//! `.`, they must have as many components, and each pattern component is either literal
//! text or holds one `*`, which matches one or more characters other than `.` and is a
//! capture (`api.*.requests` matches `api.login.requests`, capture 1 = `login`;
//! `api.v*.requests` matches `api.v2.requests`, capture 1 = `2`). That is statsd_exporter's
//! glob, except that a `*` never matches an empty component, so a capture is never empty.
//!
//! A **regex** (the `regex` crate's syntax) must match the whole name; its capture groups
//! are the captures, by number.
//!
//! A **template** (`"$1"`, `"${2}"`, `"v$1-$2"`, `"$$"` for a `$`) builds a key value from
//! captures and literal text.

use serde::{Deserialize, Serialize};

use crate::series::same_bytes;

/// How a rule's `match` is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchType {
    /// Dot-separated components, `*` capturing within one component (the default).
    #[default]
    Glob,
    /// A regular expression over the whole name.
    Regex,
}

impl MatchType {
    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchType::Glob => "glob",
            MatchType::Regex => "regex",
        }
    }
}

/// Most captures one pattern may have: the spans of a match are kept on the stack.
pub const MAX_CAPTURES: usize = 16;

/// The captures of one match: byte ranges into the matched name.
#[derive(Clone, Copy, Debug, Default)]
pub struct Captures {
    spans: [(u32, u32); MAX_CAPTURES],
    len: usize,
}

impl Captures {
    /// Capture `index` (1-based) of a match of `name`.
    pub fn get<'n>(&self, name: &'n str, index: usize) -> Option<&'n str> {
        let &(start, end) = self.spans[..self.len].get(index.checked_sub(1)?)?;
        name.get(start as usize..end as usize)
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    fn push(&mut self, start: usize, end: usize) {
        // Patterns have at most MAX_CAPTURES captures (checked when compiled) and names
        // fit in u32 (lines are at most 1 MiB).
        if self.len < MAX_CAPTURES {
            self.spans[self.len] = (start as u32, end as u32);
            self.len += 1;
        }
    }
}

/// One component of a glob.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Component {
    /// Matches exactly this text.
    Literal(Box<str>),
    /// `prefix*suffix`: the prefix, one or more characters (the capture), the suffix.
    Star { prefix: Box<str>, suffix: Box<str> },
}

impl Component {
    fn parse(text: &str) -> Result<Component, String> {
        if text.is_empty() {
            return Err("has an empty component (two dots in a row, or a dot at an end)".into());
        }
        match text.split_once('*') {
            None => Ok(Component::Literal(text.into())),
            Some((_, suffix)) if suffix.contains('*') => Err(format!(
                "component `{text}` holds two `*`: a glob component holds at most one (use match_type = \"regex\")"
            )),
            Some((prefix, suffix)) => Ok(Component::Star {
                prefix: prefix.into(),
                suffix: suffix.into(),
            }),
        }
    }

    /// The capture's span within `text`, or `Some(None)` for a literal that matches.
    /// Compares with [`same_bytes`]: components are a few bytes, and a `memcmp` call
    /// for each (even of zero bytes, for the bare `*`) measured as most of the cost of a
    /// rule.
    #[inline]
    fn matches(&self, text: &str) -> Option<Option<(usize, usize)>> {
        let text = text.as_bytes();
        match self {
            Component::Literal(literal) => same_bytes(literal.as_bytes(), text).then_some(None),
            Component::Star { prefix, suffix } => {
                let (prefix, suffix) = (prefix.as_bytes(), suffix.as_bytes());
                let end = text.len().checked_sub(suffix.len())?;
                (end > prefix.len()
                    && (prefix.is_empty() || same_bytes(&text[..prefix.len()], prefix))
                    && (suffix.is_empty() || same_bytes(&text[end..], suffix)))
                .then_some(Some((prefix.len(), end)))
            }
        }
    }

    /// Whether this component matches every text that `other` matches.
    fn covers(&self, other: &Component) -> bool {
        match (self, other) {
            (_, Component::Literal(text)) => self.matches(text).is_some(),
            (Component::Literal(_), Component::Star { .. }) => false,
            // `other` matches p2 + x + s2 with x non-empty: self matches it when p2 starts
            // with p and s2 ends with s (the length then always suffices).
            (
                Component::Star { prefix, suffix },
                Component::Star {
                    prefix: p2,
                    suffix: s2,
                },
            ) => p2.starts_with(&**prefix) && s2.ends_with(&**suffix),
        }
    }
}

/// A compiled name pattern.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// Dot-separated components.
    Glob(Vec<GlobComponent>),
    /// A regular expression anchored at both ends.
    Regex(Box<regex::Regex>),
}

/// One component of a compiled glob (opaque).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobComponent(Component);

impl Pattern {
    /// Compiles `text` read as `kind`. The error says what is wrong with the pattern.
    pub fn compile(text: &str, kind: MatchType) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err("is empty".into());
        }
        if text.contains(['\n', '\r']) {
            return Err("holds a line break".into());
        }
        let pattern = match kind {
            MatchType::Glob => {
                if text.contains([':', '|', '#', ',']) {
                    return Err("holds `:`, `|`, `#` or `,`, which no metric name holds".into());
                }
                Pattern::Glob(
                    text.split('.')
                        .map(|c| Component::parse(c).map(GlobComponent))
                        .collect::<Result<_, _>>()?,
                )
            }
            MatchType::Regex => Pattern::Regex(Box::new(
                regex::Regex::new(&format!("^(?:{text})$"))
                    .map_err(|e| format!("is not a regular expression: {e}"))?,
            )),
        };
        if pattern.captures() > MAX_CAPTURES {
            return Err(format!(
                "has {} captures; at most {MAX_CAPTURES} are supported",
                pattern.captures()
            ));
        }
        Ok(pattern)
    }

    /// How many captures a match yields.
    pub fn captures(&self) -> usize {
        match self {
            Pattern::Glob(components) => components
                .iter()
                .filter(|c| matches!(c.0, Component::Star { .. }))
                .count(),
            Pattern::Regex(regex) => regex.captures_len() - 1,
        }
    }

    /// The first component of every name this pattern matches, when it is fixed: the
    /// key under which a rule is indexed, so that a name is tried only against the rules
    /// of its own first component (and those without one).
    pub fn literal_head(&self, text: &str) -> Option<Box<str>> {
        match self {
            Pattern::Glob(components) => match &components.first()?.0 {
                Component::Literal(head) => Some(head.clone()),
                Component::Star { .. } => None,
            },
            Pattern::Regex(_) => regex_literal_head(text),
        }
    }

    /// What a name must look like for this pattern to be worth trying, known without
    /// matching: for a glob, its number of components and its last component when that is
    /// literal (`api.*.requests`: three components, the last `requests`). A regex says
    /// nothing here (the regex engine rejects most names on its own, by length).
    pub fn shape(&self) -> Option<GlobShape> {
        match self {
            Pattern::Glob(components) => Some(GlobShape {
                // At most a line's length of components; u32 is plenty.
                dots: components.len().saturating_sub(1) as u32,
                tail: match &components.last()?.0 {
                    Component::Literal(tail) => Some(tail.clone()),
                    Component::Star { .. } => None,
                },
            }),
            Pattern::Regex(_) => None,
        }
    }

    /// Whether `name` matches; its captures are left in `captures`.
    pub fn matches(&self, name: &str, captures: &mut Captures) -> bool {
        captures.clear();
        match self {
            Pattern::Glob(components) => {
                let bytes = name.as_bytes();
                let last = components.len() - 1;
                let mut start = 0;
                for (i, component) in components.iter().enumerate() {
                    let rest = bytes.get(start..).unwrap_or_default();
                    // A literal is compared in place, without searching for its dot.
                    let end = match &component.0 {
                        Component::Literal(literal)
                            if rest.len() < literal.len()
                                || rest.get(literal.len()).is_some_and(|&b| b != b'.') =>
                        {
                            return false;
                        }
                        Component::Literal(literal) => start + literal.len(),
                        Component::Star { .. } => {
                            memchr::memchr(b'.', rest).map_or(bytes.len(), |dot| start + dot)
                        }
                    };
                    let Some(part) = name.get(start..end) else {
                        return false;
                    };
                    match component.0.matches(part) {
                        None => return false,
                        Some(Some((from, to))) => captures.push(start + from, start + to),
                        Some(None) => {}
                    }
                    // The last component must end the name; the others end at a dot.
                    if (i == last) != (end == bytes.len()) {
                        return false;
                    }
                    start = end + 1;
                }
                true
            }
            Pattern::Regex(regex) => {
                // The DFA answers most names without building captures; a match (once
                // per distinct line, which the engine then caches) pays for the groups.
                if !regex.is_match(name) {
                    return false;
                }
                let Some(found) = regex.captures(name) else {
                    return false;
                };
                for group in found.iter().skip(1) {
                    let (start, end) = group.map_or((0, 0), |m| (m.start(), m.end()));
                    captures.push(start, end);
                }
                true
            }
        }
    }

    /// Whether every name `later` matches is matched by `self` already, as far as that is
    /// cheaply decidable: glob against glob, component by component. (An identical
    /// pattern text is caught before this, whatever its type.)
    pub fn covers(&self, later: &Pattern) -> bool {
        match (self, later) {
            (Pattern::Glob(a), Pattern::Glob(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0.covers(&y.0))
            }
            _ => false,
        }
    }
}

/// The cheap facts about the names a glob can match (see [`Pattern::shape`]), checked
/// against a name's [`NameShape`] before the glob is tried: most names a rule cannot take
/// differ from it in their number of dots or in their last component, which one length
/// compare nearly always tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobShape {
    dots: u32,
    tail: Option<Box<str>>,
}

impl GlobShape {
    /// Whether a name of this shape could match the glob.
    #[inline]
    pub fn admits(&self, name: &NameShape<'_>) -> bool {
        self.dots == name.dots
            && self
                .tail
                .as_deref()
                .is_none_or(|tail| same_bytes(tail.as_bytes(), name.tail))
    }
}

/// A name's number of dots and its last component, found in one pass over it, once per
/// name whatever the number of rules tried.
#[derive(Clone, Copy, Debug)]
pub struct NameShape<'n> {
    dots: u32,
    tail: &'n [u8],
}

impl<'n> NameShape<'n> {
    /// The shape of `name`.
    #[inline]
    pub fn of(name: &'n str) -> NameShape<'n> {
        let bytes = name.as_bytes();
        let tail_at = memchr::memrchr(b'.', bytes).map_or(0, |dot| dot + 1);
        NameShape {
            // Names are at most a line long (1 MiB): the count fits.
            dots: bytes.iter().filter(|&&b| b == b'.').count() as u32,
            tail: &bytes[tail_at..],
        }
    }
}

/// The literal first component of an anchored regex, when its text makes it plain: only
/// name characters up to the first `\.`, with no quantifier after that dot and no `|`
/// anywhere (an alternative could start differently). Otherwise `None`: the rule is then
/// tried against every name.
fn regex_literal_head(text: &str) -> Option<Box<str>> {
    if text.contains('|') {
        return None;
    }
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))?;
    let (head, rest) = text.split_at(end);
    let after = rest.strip_prefix("\\.")?;
    if head.is_empty() || after.starts_with(['?', '*', '+', '{']) {
        return None;
    }
    Some(head.into())
}

/// One part of a key template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(Box<str>),
    Capture(usize),
}

/// A key value built from captures and literal text: `"$1"`, `"${1}"`, `"v$1_$2"`;
/// `$$` is a `$`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses a template; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (number, used) = if let Some(braced) = after.strip_prefix('{') {
                let close = braced
                    .find('}')
                    .ok_or_else(|| format!("`{text}`: `${{` without `}}`"))?;
                (&braced[..close], close + 2)
            } else if let Some(tail) = after.strip_prefix('$') {
                literal.push('$');
                rest = tail;
                continue;
            } else {
                let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                (&after[..digits], digits)
            };
            let index: usize = number.parse().map_err(|_| {
                format!("`{text}`: `$` must be followed by a capture number (`$1`, `${{1}}`) or another `$`")
            })?;
            if index == 0 {
                return Err(format!("`{text}`: captures are numbered from 1"));
            }
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal).into()));
            }
            parts.push(Part::Capture(index));
            rest = &after[used..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal.into()));
        }
        if parts.is_empty() {
            return Err("is empty: the key column would never be filled".into());
        }
        Ok(Template { parts })
    }

    /// The capture numbers the template uses, in order of appearance.
    pub fn captures(&self) -> impl Iterator<Item = usize> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Capture(i) => Some(*i),
            Part::Text(_) => None,
        })
    }

    /// Appends the value for a match of `name` to `out`.
    pub fn write(&self, name: &str, captures: &Captures, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Text(text) => out.extend_from_slice(text.as_bytes()),
                Part::Capture(i) => {
                    out.extend_from_slice(captures.get(name, *i).unwrap_or("").as_bytes())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> Pattern {
        Pattern::compile(text, MatchType::Glob).unwrap()
    }

    fn regex(text: &str) -> Pattern {
        Pattern::compile(text, MatchType::Regex).unwrap()
    }

    fn captured<'n>(pattern: &Pattern, name: &'n str) -> Option<Vec<&'n str>> {
        let mut captures = Captures::default();
        pattern.matches(name, &mut captures).then(|| {
            (1..=pattern.captures())
                .map(|i| captures.get(name, i).unwrap())
                .collect()
        })
    }

    #[test]
    fn a_glob_star_captures_one_nonempty_component() {
        let p = glob("api.*.requests");
        assert_eq!(p.captures(), 1);
        assert_eq!(captured(&p, "api.login.requests"), Some(vec!["login"]));
        assert_eq!(captured(&p, "api..requests"), None, "empty component");
        assert_eq!(captured(&p, "api.a.b.requests"), None, "two components");
        assert_eq!(captured(&p, "api.login.requests.x"), None);
        assert_eq!(captured(&p, "api.login"), None);
        assert_eq!(captured(&p, "web.login.requests"), None);
    }

    #[test]
    fn a_glob_star_may_sit_inside_a_component() {
        let p = glob("api.v*.*_count");
        assert_eq!(captured(&p, "api.v2.get_count"), Some(vec!["2", "get"]));
        assert_eq!(
            captured(&p, "api.v.get_count"),
            None,
            "the star needs a character"
        );
        assert_eq!(captured(&p, "api.v2._count"), None);
        assert_eq!(captured(&p, "api.x2.get_count"), None);
    }

    #[test]
    fn regexes_match_the_whole_name_and_number_their_groups() {
        let p = regex(r"api\.([^.]+)\.(?:get|post)\.(\d+)");
        assert_eq!(p.captures(), 2);
        assert_eq!(
            captured(&p, "api.login.get.200"),
            Some(vec!["login", "200"])
        );
        assert_eq!(
            captured(&p, "xapi.login.get.200"),
            None,
            "anchored at the start"
        );
        assert_eq!(captured(&p, "api.login.get.200x"), None, "and at the end");
    }

    #[test]
    fn bad_patterns_say_why() {
        for (text, kind, expected) in [
            ("", MatchType::Glob, "empty"),
            ("api..x", MatchType::Glob, "empty component"),
            ("api.", MatchType::Glob, "empty component"),
            ("api.**", MatchType::Glob, "two `*`"),
            ("api.x:y", MatchType::Glob, "`:`"),
            ("api.(", MatchType::Regex, "not a regular expression"),
        ] {
            let error = Pattern::compile(text, kind).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let many = vec!["*"; MAX_CAPTURES + 1].join(".");
        assert!(
            Pattern::compile(&many, MatchType::Glob)
                .unwrap_err()
                .contains("at most")
        );
    }

    #[test]
    fn literal_heads_index_globs_and_plain_regexes() {
        let head = |p: &Pattern, t: &str| p.literal_head(t).map(String::from);
        assert_eq!(head(&glob("api.*"), "api.*"), Some("api".into()));
        assert_eq!(head(&glob("*.requests"), "*.requests"), None);
        assert_eq!(head(&glob("a*.requests"), "a*.requests"), None);
        for (text, expected) in [
            (r"api\.(.+)", Some("api")),
            (r"api-v2\.x", Some("api-v2")),
            (r"api\.?x", None),
            (r"ap?i\.x", None),
            (r"api\.x|web\.y", None),
            (r"(api)\.x", None),
            (r".*", None),
        ] {
            assert_eq!(
                head(&regex(text), text),
                expected.map(String::from),
                "{text}"
            );
        }
    }

    #[test]
    fn a_glob_covers_the_globs_it_makes_unreachable() {
        assert!(glob("api.*.requests").covers(&glob("api.login.requests")));
        assert!(glob("api.*.requests").covers(&glob("api.*.requests")));
        assert!(glob("api.*.*").covers(&glob("api.v*.requests")));
        assert!(glob("api.v*.*").covers(&glob("api.v2*.x")));
        assert!(glob("api.*_count").covers(&glob("api.get_count")));
        assert!(!glob("api.login.requests").covers(&glob("api.*.requests")));
        assert!(!glob("api.v*").covers(&glob("api.*")));
        assert!(
            !glob("api.*").covers(&glob("api.*.requests")),
            "length differs"
        );
        assert!(
            !glob("api.*_count").covers(&glob("api._count")),
            "star is non-empty"
        );
        assert!(
            !regex(".*").covers(&glob("api.x")),
            "regexes are not compared"
        );
    }

    #[test]
    fn templates_mix_captures_and_text() {
        let p = glob("api.*.*");
        let mut captures = Captures::default();
        assert!(p.matches("api.login.get", &mut captures));
        let render = |t: &str| {
            let mut out = Vec::new();
            Template::parse(t)
                .unwrap()
                .write("api.login.get", &captures, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(render("$1"), "login");
        assert_eq!(render("${2}"), "get");
        assert_eq!(render("$2-$1"), "get-login");
        assert_eq!(render("v${1}x$$"), "vloginx$");
        assert_eq!(render("fixed"), "fixed");
        assert_eq!(
            Template::parse("$2$1")
                .unwrap()
                .captures()
                .collect::<Vec<_>>(),
            [2, 1]
        );
        for bad in ["", "$", "$x", "${1", "$0", "${a}"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }
}
