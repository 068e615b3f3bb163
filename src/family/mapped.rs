//! The `[[mapping]]` rules as the resolver uses them: compiled once at start, and indexed
//! by the literal first component of their pattern, so that a name is tried only against
//! the rules that can match it (its own first component's, and those without a fixed
//! one), still in file order: the first match wins.

use std::collections::HashMap;

use crate::mapping::{Captures, Pattern, Template};

use super::Target;

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
    /// Positions (in `rules`) of the rules whose pattern fixes the first component, by
    /// that component; each list ascending.
    by_head: HashMap<Box<str>, Vec<u32>, foldhash::fast::RandomState>,
    /// Positions of the rules that can match any first component; ascending.
    wild: Vec<u32>,
}

impl MappedNames {
    /// Indexes `rules` (in file order), each with its literal first component if any.
    pub(super) fn new(rules: Vec<(MappedRule, Option<Box<str>>)>) -> MappedNames {
        let mut by_head: HashMap<Box<str>, Vec<u32>, _> = HashMap::default();
        let mut wild = Vec::new();
        let mut compiled = Vec::with_capacity(rules.len());
        for (position, (rule, head)) in rules.into_iter().enumerate() {
            // Fewer rules than u32::MAX: each comes from a line of the config file.
            let position = position as u32;
            match head {
                Some(head) => by_head.entry(head).or_default().push(position),
                None => wild.push(position),
            }
            compiled.push(rule);
        }
        MappedNames {
            rules: compiled,
            by_head,
            wild,
        }
    }

    /// The first rule, in file order, that `name` matches; its captures are left in
    /// `captures`.
    pub(super) fn find(&self, name: &str, captures: &mut Captures) -> Option<&MappedRule> {
        let listed: &[u32] = if self.by_head.is_empty() {
            &[]
        } else {
            let head = memchr::memchr(b'.', name.as_bytes()).map_or(name, |dot| &name[..dot]);
            self.by_head.get(head).map_or(&[], Vec::as_slice)
        };
        let (mut a, mut b) = (listed.iter().peekable(), self.wild.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&x), Some(&&y)) if x < y => a.next(),
                (_, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => return None,
            };
            let rule = &self.rules[*next? as usize];
            if rule.pattern.matches(name, captures) {
                return Some(rule);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::family::{Families, GENERIC, Unplaced};
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
}
