//! A live reload of the families: what taking a new configuration's families means
//! ([`Families::reshape`]: which keep their ids, which are added or retired, what may not
//! change live) and taking it ([`Families::apply`]), the routing renumbered to the ids in
//! force.

use std::sync::Arc;

use crate::config::CountingMode;
use crate::vocabulary::FamilyId;

use super::{Families, FamilyDef, GENERIC, Routing};

impl Families {
    /// Takes the routing of `next` (its exact names, `[[mapping]]` rules and tag rules)
    /// when its families are the ones in force, field for field; otherwise leaves the
    /// routing as it is and says, by name, what differs. A change of families goes
    /// through [`Families::reshape`] and [`Families::apply`] instead, so that the sink
    /// can check and prepare the new tables in between.
    pub fn replace_routing(&self, next: Families) -> Result<(), String> {
        let reshape = self.reshape(next)?;
        if let Some(change) = self.change_of(&reshape) {
            return Err(change);
        }
        self.apply(reshape)
    }

    /// The first family `reshape` adds, changes or removes, named as the configuration
    /// names it; `None` when it only routes.
    pub fn change_of(&self, reshape: &Reshape) -> Option<String> {
        Some(match (reshape.added.first(), reshape.retired.first()) {
            (Some(new), _) => match self.by_name(&new.name) {
                Some(old) => format!(
                    "family `{}`: {}",
                    old.name,
                    family_difference(old, new).unwrap_or_default()
                ),
                None => format!("the list of families (`{}` is new)", new.name),
            },
            (None, Some(&gone)) => {
                format!("the list of families (`{}` is gone)", self.get(gone).name)
            }
            (None, None) => return None,
        })
    }

    /// What taking `next`'s families live means: each family of `next` keeps the id of
    /// the family in force of its name when their definitions are the same, field for
    /// field, and is otherwise added with a new id (appended); a family in force that
    /// `next` lacks or defines otherwise is retired (its rows pending keep its id and its
    /// tables). Refused, naming the family, for what cannot change live: the generic
    /// family and `[exact]`, and the families that keep state of their own beyond their
    /// pending rows (`exact`, `mode = "writer_totals"`, an `epoch_column`), which may be
    /// neither added, removed nor changed. Nothing changes until [`Families::apply`].
    pub fn reshape(&self, next: Families) -> Result<Reshape, String> {
        if self.generic_enabled != next.generic_enabled {
            return Err("generic.enabled".into());
        }
        if let Some(field) = family_difference(self.get(GENERIC), next.get(GENERIC)) {
            return Err(format!("generic: {field}"));
        }
        if self.exact != next.exact {
            return Err("exact".into());
        }
        let stateful = |def: &FamilyDef| {
            (def.exact || def.mode == CountingMode::WriterTotals || def.epoch_column.is_some())
                .then(|| {
                    format!(
                        "family `{}`: a family with `exact`, `mode = \"writer_totals\"` or an `epoch_column` cannot be added, removed or changed live",
                        def.name
                    )
                })
        };
        let routing = self.routing.load();
        let first_new = self.defs.len();
        let next_defs: Vec<FamilyDef> = next.iter().cloned().collect();
        let mut ids = vec![GENERIC];
        let mut added: Vec<FamilyDef> = Vec::new();
        let mut kept = Vec::new();
        for new in next_defs.iter().skip(1) {
            let old = routing
                .by_name
                .get(new.name.as_str())
                .map(|&id| self.get(id));
            match old {
                Some(old) if family_difference(old, new).is_none() => {
                    ids.push(old.id);
                    kept.push(old.id);
                }
                _ => {
                    if let Some(refusal) = old.and_then(stateful).or_else(|| stateful(new)) {
                        return Err(refusal);
                    }
                    let id = u16::try_from(first_new + added.len())
                        .map(FamilyId)
                        .map_err(|_| {
                            "the list of families: no family id left; restart".to_owned()
                        })?;
                    ids.push(id);
                    added.push(FamilyDef { id, ..new.clone() });
                }
            }
        }
        let mut retired = Vec::new();
        for (_, &id) in routing.by_name.iter() {
            if id != GENERIC && !kept.contains(&id) {
                if let Some(refusal) = stateful(self.get(id)) {
                    return Err(refusal);
                }
                retired.push(id);
            }
        }
        retired.sort_unstable();
        Ok(Reshape {
            first_new,
            routing: Arc::try_unwrap(next.routing.into_inner())
                .map_err(|_| "the new routing is shared".to_owned())?
                .renumbered(&ids, first_new + added.len()),
            added,
            retired,
            ids,
        })
    }

    /// Takes `reshape` (from [`Families::reshape`] of these families, the last one taken
    /// since): appends the families it adds, then routes by its routing, so no increment
    /// is routed to a family before its definition is there. Refused, changing nothing,
    /// when families were added since `reshape` was made.
    pub fn apply(&self, reshape: Reshape) -> Result<(), String> {
        if self.defs.len() != reshape.first_new {
            return Err("the families changed since the reload was checked".into());
        }
        for def in reshape.added {
            self.defs
                .push(def)
                .map_err(|_| "the list of families: no family id left; restart".to_owned())?;
        }
        self.routing.store(Arc::new(reshape.routing));
        Ok(())
    }
}

/// What a live reload does to the families (see [`Families::reshape`]).
pub struct Reshape {
    /// The id the first added family takes: the number of definitions when checked.
    first_new: usize,
    /// Families added, with their new ids, in id order.
    added: Vec<FamilyDef>,
    /// Families in force now that the reload retires (removed, or replaced by an added
    /// definition of the same name).
    retired: Vec<FamilyId>,
    /// The new routing, naming families by the ids they have here.
    routing: Routing,
    /// The id here of each family of the new configuration, by its id there.
    ids: Vec<FamilyId>,
}

impl Reshape {
    /// The families added, with their ids.
    pub fn added(&self) -> &[FamilyDef] {
        &self.added
    }

    /// The families retired.
    pub fn retired(&self) -> &[FamilyId] {
        &self.retired
    }

    /// The id, once taken, of the family with id `next` in the new configuration (as
    /// its [`Families::from_config`] numbers them: its position in the file, plus one).
    pub fn id_of(&self, next: FamilyId) -> Option<FamilyId> {
        self.ids.get(usize::from(next.0)).copied()
    }

    /// Whether it changes no family.
    pub fn is_routing_only(&self) -> bool {
        self.added.is_empty() && self.retired.is_empty()
    }
}

impl Routing {
    /// The same routing with every family id `i` turned into `ids[i]`, for families
    /// numbered up to `len`.
    fn renumbered(mut self, ids: &[FamilyId], len: usize) -> Routing {
        let id = |family: FamilyId| ids.get(usize::from(family.0)).copied().unwrap_or(family);
        let mut key_sources = vec![Vec::new(); len];
        for (family, sources) in std::mem::take(&mut self.key_sources)
            .into_iter()
            .enumerate()
        {
            let to = u16::try_from(family).map_or(family, |f| usize::from(id(FamilyId(f)).0));
            if let Some(slot) = key_sources.get_mut(to) {
                *slot = sources;
            }
        }
        self.key_sources = key_sources;
        let mut widths = vec![0; len];
        for (family, width) in std::mem::take(&mut self.widths).into_iter().enumerate() {
            let to = u16::try_from(family).map_or(family, |f| usize::from(id(FamilyId(f)).0));
            if let Some(slot) = widths.get_mut(to) {
                *slot = width;
            }
        }
        self.widths = widths;
        for family in self.by_name.values_mut() {
            *family = id(*family);
        }
        for (family, _) in self.by_metric.values_mut() {
            *family = id(*family);
        }
        if let Some(mapped) = &mut self.mapped {
            mapped.renumber(&id);
        }
        self
    }
}

/// The first field in which two definitions of one family differ, as the configuration
/// names it.
fn family_difference(old: &FamilyDef, new: &FamilyDef) -> Option<String> {
    let changed = |differs: bool, field: &str| differs.then(|| field.to_owned());
    changed(old.name != new.name, "name (the families' order or names)")
        .or_else(|| changed(old.minute_table != new.minute_table, "minute_table"))
        .or_else(|| changed(old.day_table != new.day_table, "day_table"))
        .or_else(|| changed(old.hour_table != new.hour_table, "hour_table"))
        .or_else(|| changed(old.total_table != new.total_table, "total_table"))
        .or_else(|| changed(old.minute_time != new.minute_time, "minute_time"))
        .or_else(|| changed(old.day_time != new.day_time, "day_time"))
        .or_else(|| changed(old.key_columns != new.key_columns, "key"))
        .or_else(|| {
            (old.columns != new.columns).then(|| {
                format!(
                    "its counter columns (from `columns` and the `[[mapping]]` rules: {:?}, now {:?})",
                    old.columns, new.columns
                )
            })
        })
        .or_else(|| changed(old.sharding != new.sharding, "shards"))
        .or_else(|| changed(old.epoch_column != new.epoch_column, "epoch_column"))
        .or_else(|| changed(old.exact != new.exact, "exact"))
        .or_else(|| changed(old.mode != new.mode, "mode"))
}
