//! The families' tests: resolution, routing and live reshaping.

use super::tagset::tag;
use super::*;
use crate::config::FamilyConfig;
use crate::line::Tag;

fn config() -> Config {
    let mut c = Config::default();
    c.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [
            ("page.views".to_string(), "views".to_string()),
            ("page.bytes".to_string(), "bytes".to_string()),
            ("page.views.mobile".to_string(), "views".to_string()),
        ]
        .into(),
        ..FamilyConfig::default()
    });
    c
}

fn fields(series: &[u8]) -> Vec<&str> {
    series::fields(series).collect()
}

#[test]
fn generic_keys_use_canonical_tags() {
    let families = Families::from_config(&config()).unwrap();
    let mut series = Vec::new();
    let tags: &[(&str, &str)] = &[
        ("env", "prod"),
        ("az", "b"),
        ("env", "prod"),
        ("canary", ""),
    ];
    let target = families.resolve("req.count", tags, &mut series).unwrap();
    assert_eq!(
        target,
        Target {
            family: GENERIC,
            column: 0,
            width: 1
        }
    );
    assert_eq!(fields(&series), ["req.count", "az:b,canary,env:prod"]);
    let no_tags: &[(&str, &str)] = &[];
    families.resolve("req.count", no_tags, &mut series).unwrap();
    assert_eq!(fields(&series), ["req.count", ""]);
}

#[test]
fn configured_metrics_map_to_columns_and_take_key_tags() {
    let families = Families::from_config(&config()).unwrap();
    let def = families.by_name("views").unwrap();
    assert_eq!(
        def.columns,
        ["bytes", "views"],
        "columns in metric-name order, shared ones once"
    );
    assert_eq!(def.table_text(Granularity::Day), "metrics.views_by_day");
    assert_eq!(
        def.table_text(Granularity::Minute),
        "countersink.views_by_minute"
    );
    let mut series = Vec::new();
    let tags: &[(&str, &str)] = &[("env", "prod"), ("page_id", "p1")];
    let views = families.resolve("page.views", tags, &mut series).unwrap();
    assert_eq!(fields(&series), ["p1"]);
    let mobile = families
        .resolve("page.views.mobile", tags, &mut series)
        .unwrap();
    let bytes = families.resolve("page.bytes", tags, &mut series).unwrap();
    assert_eq!(
        (views.column, mobile.column, bytes.column, views.width),
        (1, 1, 0, 2)
    );
    let missing: &[(&str, &str)] = &[("env", "prod")];
    assert_eq!(
        families.resolve("page.views", missing, &mut series),
        Err(Unplaced::MissingKeyTag)
    );
}

#[test]
fn empty_or_ambiguous_key_tags_are_refused() {
    let families = Families::from_config(&config()).unwrap();
    let mut series = Vec::new();
    let empty: &[(&str, &str)] = &[("page_id", "")];
    assert_eq!(
        families.resolve("page.views", empty, &mut series),
        Err(Unplaced::MissingKeyTag)
    );
    let twice: &[(&str, &str)] = &[("page_id", "a"), ("page_id", "b")];
    assert_eq!(
        families.resolve("page.views", twice, &mut series),
        Err(Unplaced::AmbiguousKeyTag)
    );
    let repeated: &[(&str, &str)] = &[("page_id", "a"), ("page_id", "a")];
    assert!(
        families
            .resolve("page.views", repeated, &mut series)
            .is_ok()
    );
    assert_eq!(
        families.encode_key(FamilyId(1), &[""], &mut series),
        Err(Unplaced::MissingKeyTag)
    );
}

#[test]
fn key_length_limit_and_disabled_generic() {
    let mut c = config();
    c.limits.max_key_bytes = 16;
    c.generic.enabled = false;
    let families = Families::from_config(&c).unwrap();
    let mut series = Vec::new();
    let long: &[(&str, &str)] = &[("page_id", "p-0123456789abcdef")];
    assert_eq!(
        families.resolve("page.views", long, &mut series),
        Err(Unplaced::KeyTooLong)
    );
    let short: &[(&str, &str)] = &[("page_id", "p-0123456789abcd")];
    assert!(families.resolve("page.views", short, &mut series).is_ok());
    assert_eq!(
        families.resolve("other", short, &mut series),
        Err(Unplaced::Unconfigured)
    );
}

/// Each flush moves a writer to the next shard; writers start apart; unsharded
/// families have no shard.
#[test]
fn shards_rotate_per_flush_from_a_seed_per_writer() {
    let mut c = config();
    c.families[0].shards = 4;
    let families = Families::from_config(&c).unwrap();
    let views = families.by_name("views").unwrap().id;
    let seed = shard_seed("web-1");
    let shards: Vec<Option<u8>> = (1..=5)
        .map(|seq| families.shard_of(views, seed, seq))
        .collect();
    let first = shards[0].unwrap();
    assert_eq!(
        shards,
        (0..5).map(|i| Some((first + i) % 4)).collect::<Vec<_>>()
    );
    assert_ne!(shard_seed("web-1"), shard_seed("web-2"));
    assert_eq!(families.shard_of(GENERIC, seed, 1), None);
}

#[test]
fn many_tags_fall_back_to_the_heap_with_the_same_result() {
    let pairs: Vec<(String, String)> = (0..40)
        .rev()
        .map(|i| (format!("k{i:02}"), format!("v{i}")))
        .collect();
    let tags: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut out = Vec::new();
    tags.as_slice().write_canonical(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("k00:v0,k01:v1,"), "{text}");
    assert_eq!(text.matches(',').count(), 39);
}

proptest::proptest! {
    /// The in-process API's canonical tag string is the sorted, de-duplicated set of
    /// its tags, whatever their order and repetition, at every size.
    #[test]
    fn slice_tags_canonicalise_like_a_sorted_set(
        pairs in proptest::collection::vec(("[a-c:é]{1,3}", "[a-c,]{0,2}"), 0..24),
    ) {
        let tags: Vec<(&str, &str)> =
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut out = Vec::new();
        tags.as_slice().write_canonical(&mut out);
        let set: std::collections::BTreeSet<Tag<'_>> =
            tags.iter().map(|&(key, value)| tag(key, value)).collect();
        let mut reference = Vec::new();
        for (i, t) in set.iter().enumerate() {
            if i > 0 {
                reference.push(b',');
            }
            t.write_to(&mut reference);
        }
        proptest::prop_assert_eq!(out, reference);
    }
}

/// `config()` with a second family, `clicks`, and a rule sending `api.*.views` to
/// `views`.
fn two() -> Config {
    let mut c = config();
    c.families.push(FamilyConfig {
        name: "clicks".into(),
        minute_table: "clicks_by_minute".into(),
        day_table: "clicks_by_day".into(),
        key: vec!["page_id".into()],
        columns: [("page.clicks".to_string(), "clicks".to_string())].into(),
        ..FamilyConfig::default()
    });
    c.mappings.push(crate::config::MappingConfig {
        pattern: "api.*.views".into(),
        family: "views".into(),
        column: "views".into(),
        key: [("page_id".to_string(), "$1".to_string())].into(),
        ..Default::default()
    });
    c
}

fn place(f: &Families, name: &str) -> Option<FamilyId> {
    let mut series = Vec::new();
    f.resolve(name, &[("page_id", "p1")][..], &mut series)
        .ok()
        .map(|t| t.family)
}

#[test]
fn a_reload_appends_changed_and_new_families_and_retires_the_old() {
    let f = Families::from_config(&two()).unwrap();
    let (views, clicks) = (FamilyId(1), FamilyId(2));
    // `views` moves to another table, `clicks` goes, `likes` comes, listed first.
    let mut next = two();
    next.families[0].minute_table = "views_by_minute_v2".into();
    next.families.pop();
    next.families.insert(
        0,
        FamilyConfig {
            name: "likes".into(),
            minute_table: "likes_by_minute".into(),
            day_table: "likes_by_day".into(),
            key: vec!["page_id".into()],
            columns: [("page.likes".to_string(), "likes".to_string())].into(),
            ..FamilyConfig::default()
        },
    );
    let reshape = f.reshape(Families::from_config(&next).unwrap()).unwrap();
    let added: Vec<(u16, &str)> = reshape
        .added()
        .iter()
        .map(|d| (d.id.0, d.name.as_str()))
        .collect();
    assert_eq!(added, [(3, "likes"), (4, "views")]);
    assert_eq!(reshape.retired(), [views, clicks]);
    assert_eq!(reshape.id_of(FamilyId(1)), Some(FamilyId(3)));
    assert_eq!(reshape.id_of(FamilyId(2)), Some(FamilyId(4)));
    assert_eq!(
        f.change_of(&reshape).unwrap(),
        "the list of families (`likes` is new)"
    );
    // Nothing changed before it is applied.
    assert_eq!(place(&f, "api.home.views"), Some(views));
    assert_eq!(f.len(), 3);

    f.apply(reshape).unwrap();
    assert_eq!(f.len(), 5);
    assert_eq!(place(&f, "api.home.views"), Some(FamilyId(4)));
    assert_eq!(place(&f, "page.views"), Some(FamilyId(4)));
    assert_eq!(place(&f, "page.likes"), Some(FamilyId(3)));
    // A name of the family that went falls to the generic family.
    assert_eq!(place(&f, "page.clicks"), Some(GENERIC));
    // The old definitions stay, for rows placed under them.
    assert_eq!(
        f.get(views).minute_table.as_ref().unwrap().table,
        "views_by_minute"
    );
    assert_eq!(
        f.get(FamilyId(4)).minute_table.as_ref().unwrap().table,
        "views_by_minute_v2"
    );
    assert_eq!(f.by_name("views").unwrap().id, FamilyId(4));
    assert!(f.by_name("clicks").is_none());
    assert!(!f.in_force(views) && !f.in_force(clicks));
    assert!(f.in_force(FamilyId(4)) && f.in_force(GENERIC));

    // The same file again changes nothing; a reordered one neither.
    next.families.reverse();
    let again = f.reshape(Families::from_config(&next).unwrap()).unwrap();
    assert!(again.is_routing_only());
    assert_eq!(f.change_of(&again), None);
    f.apply(again).unwrap();
    assert_eq!(place(&f, "page.likes"), Some(FamilyId(3)));
    assert_eq!(place(&f, "api.home.views"), Some(FamilyId(4)));
}

#[test]
fn families_with_state_of_their_own_do_not_change_live() {
    let f = Families::from_config(&two()).unwrap();
    let mut next = two();
    next.families[1].exact = true;
    let refused = f.reshape(Families::from_config(&next).unwrap());
    assert!(refused.is_err());
    let mut next = two();
    next.families[1].minute_table = "elsewhere".into();
    next.families[1].mode = CountingMode::WriterTotals;
    let refused = f
        .reshape(Families::from_config(&next).unwrap())
        .err()
        .unwrap();
    assert!(
        refused.contains("family `clicks`: a family with `exact`"),
        "{refused}"
    );
    let mut next = two();
    next.generic.minute_table = "elsewhere".into();
    let refused = f
        .reshape(Families::from_config(&next).unwrap())
        .err()
        .unwrap();
    assert_eq!(refused, "generic: minute_table");
    // A refused reshape changed nothing.
    assert_eq!(f.len(), 3);
    assert_eq!(place(&f, "page.clicks"), Some(FamilyId(2)));
}
