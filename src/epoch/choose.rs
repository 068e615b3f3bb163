//! The choice of a row's epoch: a pure function of the view, the rules and the row.

use crate::bucket::Minute;
use crate::vocabulary::FamilyId;

use super::view::EpochView;

/// Where a pending row goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The family has no epoch column.
    NoEpoch,
    /// Into this epoch.
    Epoch(i32),
    /// Not yet: the view does not cover the row's minute (or there is no view). The row
    /// stays pending until a newer read of the registry covers it.
    Hold,
}

/// What a writer may assume of epochs it has not seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Horizon {
    /// Every epoch starts at least this long after it is written (`epochs.lead`).
    pub lead_secs: i64,
    /// How far the clock of the host that wrote it may be behind this one
    /// (`epochs.clock_margin`).
    pub clock_margin_secs: i64,
}

impl Horizon {
    /// The first second a view fetched at `fetched_at` does not cover: an epoch it did not
    /// see was written after `fetched_at` (less the clock margin), so it starts at or
    /// after this.
    pub fn covered_until(&self, fetched_at: i64) -> i64 {
        fetched_at + self.lead_secs - self.clock_margin_secs
    }
}

/// The epoch of a row of `family`, key `series`, minute `minute`, or [`Placement::Hold`]
/// when `view` does not cover the minute. A minute is covered when it starts before
/// [`Horizon::covered_until`]: every epoch that could still appear starts after it, so
/// the answer can no longer change and every writer reaches the same one.
pub fn choose(
    view: Option<&EpochView>,
    horizon: &Horizon,
    family: FamilyId,
    series: &[u8],
    minute: Minute,
) -> Placement {
    let Some(view) = view else {
        return Placement::Hold;
    };
    if minute.start_unix_secs() >= horizon.covered_until(view.fetched_at()) {
        return Placement::Hold;
    }
    Placement::Epoch(view.epoch_at(family, series, minute))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series;

    const HORIZON: Horizon = Horizon {
        lead_secs: 60,
        clock_margin_secs: 5,
    };
    /// A minute of 2026-11-30, and its start.
    const M: u32 = 29_934_000;
    const F: FamilyId = FamilyId(1);

    fn key(k: &str) -> Box<[u8]> {
        series::encode([k]).into_boxed_slice()
    }

    fn view(fetched_at: i64) -> EpochView {
        let mut view = EpochView::new(fetched_at);
        view.add(F, None, M as i32);
        view.add(F, Some(&key("home")), (M + 30) as i32);
        view
    }

    #[test]
    fn a_row_goes_to_the_latest_epoch_started_at_or_before_its_minute() {
        let fetched = i64::from(M + 100) * 60;
        let v = view(fetched);
        let at = |k: &str, m: u32| choose(Some(&v), &HORIZON, F, &key(k), Minute(m));
        assert_eq!(at("about", M - 1), Placement::Epoch(0), "before any reset");
        assert_eq!(
            at("about", M),
            Placement::Epoch(M as i32),
            "the boundary minute is new"
        );
        assert_eq!(at("about", M + 40), Placement::Epoch(M as i32));
        assert_eq!(at("home", M + 29), Placement::Epoch(M as i32));
        assert_eq!(
            at("home", M + 30),
            Placement::Epoch((M + 30) as i32),
            "a key's own reset"
        );
        assert_eq!(
            choose(
                Some(&v),
                &HORIZON,
                FamilyId(2),
                &key("home"),
                Minute(M + 40)
            ),
            Placement::Epoch(0),
            "another family is not reset"
        );
    }

    #[test]
    fn minutes_the_view_does_not_cover_are_held() {
        // Read at 12:00:30 of minute M+100: it covers up to 12:01:25, so minute M+101
        // (12:01:00) is covered and M+102 is not.
        let fetched = i64::from(M + 100) * 60 + 30;
        let v = view(fetched);
        let at = |m: u32| choose(Some(&v), &HORIZON, F, &key("about"), Minute(m));
        assert_eq!(at(M + 101), Placement::Epoch(M as i32));
        assert_eq!(at(M + 102), Placement::Hold);
        assert_eq!(
            choose(None, &HORIZON, F, &key("about"), Minute(M)),
            Placement::Hold,
            "no view: nothing is placed"
        );
    }

    #[test]
    fn a_placed_row_keeps_its_epoch_whatever_is_reset_later() {
        // Any epoch written after the read starts at or after covered_until: adding it
        // changes no answer the first view gave.
        let fetched = i64::from(M + 200) * 60 + 7;
        let before = view(fetched);
        let first_uncovered = HORIZON.covered_until(fetched).div_euclid(60) as u32
            + u32::from(HORIZON.covered_until(fetched) % 60 != 0);
        let mut after = before.clone();
        after.add(F, None, first_uncovered as i32);
        after.add(F, Some(&key("home")), first_uncovered as i32);
        for m in M - 5..M + 260 {
            for k in ["home", "about"] {
                let placed = choose(Some(&before), &HORIZON, F, &key(k), Minute(m));
                if let Placement::Epoch(_) = placed {
                    assert_eq!(
                        placed,
                        Placement::Epoch(after.epoch_at(F, &key(k), Minute(m))),
                        "minute {m} key {k}"
                    );
                }
            }
        }
    }
}
