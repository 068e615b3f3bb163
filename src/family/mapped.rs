//! The `[[mapping]]` rules as the resolver uses them: compiled once at start, and indexed
//! by the literal first component of their pattern, so that a name is tried only against
//! the rules that can match it (its own first component's, and those without a fixed
//! one), still in file order: the first match wins. Before a glob is tried, the name's
//! number of dots and last component (found once per name) are compared with the glob's:
//! that rejects nearly every rule a name cannot match for the cost of a length compare.

use std::collections::HashMap;

use crate::mapping::{Captures, GlobShape, NameShape, Pattern, Template};
use crate::series::same_bytes;

use super::Target;
use crate::vocabulary::FamilyId;

/// One compiled rule.
pub(super) struct MappedRule {
    /// The pattern over the whole name.
    pub(super) pattern: Pattern,
    /// Where a matching name's increments go.
    pub(super) target: Target,
    /// Per key column of the family, in key order: the template that fills it from the
    /// captures, or `None` when it is filled from the tags.
    pub(super) key: Vec<Option<Template>>,
}

/// Every rule, and the index that picks the ones a name can match.
pub(super) struct MappedNames {
    rules: Vec<MappedRule>,
    /// Per rule (same positions): the shape of the names its glob can match; `None` for a
    /// regex, which is always tried.
    shapes: Vec<Option<GlobShape>>,
    /// Per literal first component that some rule fixes: the positions (in `rules`) of
    /// every rule a name with that first component can match, its own and the unindexed
    /// ones merged once here, ascending: file order.
    by_head: Heads,
    /// Positions of the rules that can match any first component, ascending: all that a
    /// name whose first component no rule fixes is tried against.
    wild: Vec<u32>,
}

/// Most first components a name's is compared with in turn; with more, it is hashed.
const FEW_HEADS: usize = 8;

/// The rules' literal first components, each with the rules a name starting so is tried
/// against.
enum Heads {
    /// A handful: compared in turn, which costs less than hashing the name's head.
    Few(Vec<(Box<str>, Vec<u32>)>),
    /// Many: hashed.
    Many(HashMap<Box<str>, Vec<u32>, foldhash::fast::RandomState>),
}

impl Heads {
    fn get(&self, head: &str) -> Option<&[u32]> {
        match self {
            Heads::Few(heads) => heads
                .iter()
                .find(|(h, _)| same_bytes(h.as_bytes(), head.as_bytes()))
                .map(|(_, list)| list.as_slice()),
            Heads::Many(heads) => heads.get(head).map(Vec::as_slice),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Heads::Few(heads) => heads.is_empty(),
            Heads::Many(heads) => heads.is_empty(),
        }
    }
}

impl MappedNames {
    /// Indexes `rules` (in file order), each with its literal first component if any.
    pub(super) fn new(rules: Vec<(MappedRule, Option<Box<str>>)>) -> MappedNames {
        let mut own: Vec<(Box<str>, Vec<u32>)> = Vec::new();
        let mut wild = Vec::new();
        let mut compiled = Vec::with_capacity(rules.len());
        let mut shapes = Vec::with_capacity(rules.len());
        for (position, (rule, head)) in rules.into_iter().enumerate() {
            // Fewer rules than u32::MAX: each comes from a line of the config file.
            let position = position as u32;
            match head {
                Some(head) => match own.iter_mut().find(|(h, _)| *h == head) {
                    Some((_, list)) => list.push(position),
                    None => own.push((head, vec![position])),
                },
                None => wild.push(position),
            }
            shapes.push(rule.pattern.shape());
            compiled.push(rule);
        }
        let merged = own.into_iter().map(|(head, mut list)| {
            list.extend_from_slice(&wild);
            list.sort_unstable();
            (head, list)
        });
        let by_head = if merged.len() <= FEW_HEADS {
            Heads::Few(merged.collect())
        } else {
            Heads::Many(merged.collect())
        };
        MappedNames {
            rules: compiled,
            shapes,
            by_head,
            wild,
        }
    }

    /// The same rules, each sending to `id(family)` instead of its family (a live reload
    /// numbers families anew; see `Families::reshape`).
    pub(super) fn renumber(&mut self, id: &dyn Fn(FamilyId) -> FamilyId) {
        for rule in &mut self.rules {
            rule.target.family = id(rule.target.family);
        }
    }

    /// The first rule, in file order, that `name` matches; its captures are left in
    /// `captures`.
    pub(super) fn find(&self, name: &str, captures: &mut Captures) -> Option<&MappedRule> {
        let listed = if self.by_head.is_empty() {
            None
        } else {
            let head = memchr::memchr(b'.', name.as_bytes()).map_or(name, |dot| &name[..dot]);
            self.by_head.get(head)
        };
        let shape = NameShape::of(name);
        for &position in listed.unwrap_or(&self.wild) {
            let position = position as usize;
            if self.shapes[position]
                .as_ref()
                .is_some_and(|glob| !glob.admits(&shape))
            {
                continue;
            }
            let rule = &self.rules[position];
            if rule.pattern.matches(name, captures) {
                return Some(rule);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{MappedNames, MappedRule};
    use crate::config::Config;
    use crate::family::{Families, GENERIC, Unplaced};
    use crate::mapping::{Captures, MatchType, Pattern};
    use crate::series;

    /// An `api` family keyed by endpoint and region, fed by an exact name and by rules.
    fn families(extra: &str) -> Families {
        let config = Config::from_toml(&format!(
            r#"
[[family]]
name = "api"
minute_table = "api_m"
day_table = "api_d"
key = ["endpoint", "region"]
[family.columns]
"api.total" = "total"

[[mapping]]
match = "*.login.requests"
family = "api"
column = "logins"
key = {{ endpoint = "$1" }}

[[mapping]]
match = "api.*.requests"
family = "api"
column = "requests"
key = {{ endpoint = "$1" }}

[[mapping]]
match = 'api\.([^.]+)\.(\d+)'
match_type = "regex"
family = "api"
column = "status"
key = {{ endpoint = "$1-$2" }}
{extra}"#
        ))
        .unwrap();
        Families::from_config(&config).unwrap()
    }

    fn resolve(
        families: &Families,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<(String, Vec<String>), Unplaced> {
        let mut series = Vec::new();
        let target = families.resolve(name, tags, &mut series)?;
        let def = families.get(target.family);
        assert_eq!(target.width, def.width());
        Ok((
            format!("{}.{}", def.name, def.columns[target.column]),
            series::fields(&series).map(str::to_owned).collect(),
        ))
    }

    #[test]
    fn captures_fill_key_columns_and_tags_the_rest() {
        let f = families("");
        let api = f.by_name("api").unwrap();
        assert_eq!(api.columns, ["total", "logins", "requests", "status"]);
        let region = &[("region", "eu"), ("env", "prod")];
        assert_eq!(
            resolve(&f, "api.home.requests", region),
            Ok(("api.requests".into(), vec!["home".into(), "eu".into()]))
        );
        assert_eq!(
            resolve(&f, "api.home.404", region),
            Ok(("api.status".into(), vec!["home-404".into(), "eu".into()]))
        );
        assert_eq!(
            resolve(&f, "api.home.requests", &[("env", "prod")]),
            Err(Unplaced::MissingKeyTag),
            "a key column left to the tags still needs its tag"
        );
        assert_eq!(
            resolve(&f, "api.total", &[("endpoint", "x"), ("region", "eu")]),
            Ok(("api.total".into(), vec!["x".into(), "eu".into()])),
            "an exact name is never tried against the rules"
        );
    }

    #[test]
    fn the_first_matching_rule_wins_across_the_index() {
        let f = families("");
        let region = &[("region", "eu")];
        // Rule 0 has no fixed first component, rule 1 is indexed under `api`: rule 0
        // still comes first for a name both match.
        assert_eq!(
            resolve(&f, "api.login.requests", region).unwrap().0,
            "api.logins"
        );
        assert_eq!(
            resolve(&f, "web.login.requests", region).unwrap(),
            ("api.logins".into(), vec!["web".into(), "eu".into()])
        );
    }

    #[test]
    fn unmatched_names_go_to_the_generic_family_or_are_unconfigured() {
        let f = families("");
        let mut series = Vec::new();
        let target = f
            .resolve("api.home.misses", &[("region", "eu")][..], &mut series)
            .unwrap();
        assert_eq!(target.family, GENERIC);
        let f = families("[generic]\nenabled = false\n");
        assert_eq!(
            resolve(&f, "api.home.misses", &[]),
            Err(Unplaced::Unconfigured)
        );
        assert_eq!(resolve(&f, "api", &[]), Err(Unplaced::Unconfigured));
    }

    #[test]
    fn renamed_tags_fill_key_columns() {
        let f = families("[tags]\nrename = { az = \"region\" }\n");
        assert_eq!(
            resolve(&f, "api.home.requests", &[("az", "eu")]).unwrap().1,
            ["home", "eu"]
        );
        assert_eq!(
            resolve(&f, "api.home.requests", &[("az", "eu"), ("region", "us")]),
            Err(Unplaced::AmbiguousKeyTag),
            "two tags stored as one key column must agree"
        );
        assert!(resolve(&f, "api.home.requests", &[("az", "eu"), ("region", "eu")]).is_ok());
    }

    #[test]
    fn tag_rules_shape_the_generic_tag_string() {
        let generic_tags = |f: &Families, tags: &[(&str, &str)]| {
            let mut series = Vec::new();
            f.resolve("other.metric", tags, &mut series).unwrap();
            series::fields(&series).nth(1).unwrap().to_owned()
        };
        let tags = &[
            ("env", "prod"),
            ("dd.internal.entity_id", "0f6c-pod-uid"),
            ("pid", "7"),
            ("host", "web-1"),
        ];
        let f = families("");
        assert_eq!(
            generic_tags(&f, tags),
            "env:prod,host:web-1,pid:7",
            "the pod UID is denied by default"
        );
        let f = families("[tags]\ndeny_default = false\n");
        assert_eq!(
            generic_tags(&f, tags),
            "dd.internal.entity_id:0f6c-pod-uid,env:prod,host:web-1,pid:7"
        );
        let f = families("[tags]\ndeny = [\"host\"]\nrename = { pid = \"process\" }\n");
        assert_eq!(generic_tags(&f, tags), "env:prod,process:7");
        // A global allow list must let the key columns' tags through too.
        let f = families("[tags]\nallow = [\"env\", \"p*\", \"endpoint\", \"region\"]\n");
        assert_eq!(generic_tags(&f, tags), "env:prod,pid:7");
        let many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("k{i:02}"), i.to_string()))
            .chain([("dd.internal.entity_id".to_owned(), "x".to_owned())])
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (&**k, &**v)).collect();
        let text = generic_tags(&families(""), &many);
        assert!(
            text.starts_with("k00:0,k01:1,") && text.ends_with("k19:19"),
            "{text}"
        );
    }

    #[test]
    fn many_heads_are_hashed_and_still_merged_with_the_unindexed_rules() {
        let mut texts: Vec<String> = (0..12).map(|i| format!("h{i}.*.x")).collect();
        texts.insert(5, "*.*.y".into());
        let rules = texts
            .iter()
            .enumerate()
            .map(|(column, text)| {
                let pattern = Pattern::compile(text, MatchType::Glob).unwrap();
                let head = pattern.literal_head(text);
                let target = crate::family::Target {
                    family: crate::family::GENERIC,
                    column,
                    width: 1,
                };
                let rule = MappedRule {
                    pattern,
                    target,
                    key: Vec::new(),
                };
                (rule, head)
            })
            .collect();
        let index = MappedNames::new(rules);
        assert!(matches!(index.by_head, super::Heads::Many(_)));
        let mut captures = Captures::default();
        let found = |name: &str, captures: &mut Captures| {
            index.find(name, captures).map(|rule| rule.target.column)
        };
        assert_eq!(found("h11.a.x", &mut captures), Some(12));
        assert_eq!(captures.get("h11.a.x", 1), Some("a"));
        assert_eq!(
            found("h11.a.y", &mut captures),
            Some(5),
            "the unindexed rule"
        );
        assert_eq!(found("h3.b.y", &mut captures), Some(5));
        assert_eq!(found("zz.b.y", &mut captures), Some(5));
        assert_eq!(found("h3.b.z", &mut captures), None);
        assert_eq!(
            found("h3.b.c.x", &mut captures),
            None,
            "one component too many"
        );
    }

    proptest::proptest! {
        /// The index and the shape test pick the same rule as trying every rule in file
        /// order, with the same captures.
        #[test]
        fn the_index_finds_what_trying_every_rule_finds(
            names in proptest::collection::vec("[ab*]{1,2}(\\.[ab*]{1,2}){0,3}", 1..12),
            name in "[ab]{1,3}(\\.[ab]{1,3}){0,4}",
        ) {
            let patterns: Vec<Pattern> = names
                .iter()
                .filter_map(|text| Pattern::compile(text, MatchType::Glob).ok())
                .chain([
                    Pattern::compile(r"a\.(b+)", MatchType::Regex).unwrap(),
                    Pattern::compile(r"(.*)\.a", MatchType::Regex).unwrap(),
                ])
                .collect();
            let texts: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|text| Pattern::compile(text, MatchType::Glob).is_ok())
                .chain([r"a\.(b+)", r"(.*)\.a"])
                .collect();
            let rules = patterns
                .iter()
                .zip(&texts)
                .enumerate()
                .map(|(column, (pattern, text))| {
                    let head = pattern.literal_head(text);
                    let rule = MappedRule {
                        pattern: pattern.clone(),
                        target: crate::family::Target { family: crate::family::GENERIC, column, width: 1 },
                        key: Vec::new(),
                    };
                    (rule, head)
                })
                .collect();
            let index = MappedNames::new(rules);
            let mut expected_captures = Captures::default();
            let expected = patterns
                .iter()
                .position(|p| p.matches(&name, &mut expected_captures));
            let mut captures = Captures::default();
            let found = index.find(&name, &mut captures).map(|rule| rule.target.column);
            proptest::prop_assert_eq!(found, expected, "{} against {:?}", name, texts);
            if found.is_some() {
                for i in 1..=4 {
                    proptest::prop_assert_eq!(captures.get(&name, i), expected_captures.get(&name, i));
                }
            }
        }
    }
}
