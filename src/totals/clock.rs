//! The writer's write times: microseconds from the wall clock, strictly increasing.
//!
//! Every total a writer sends carries the next time of this clock (`USING TIMESTAMP`), so
//! a total sent later always has the later write time, and the store keeps it whatever
//! order the writes arrive in, and however often an older one is retried. A writer's
//! rows are its own (its writer column), so only its own clock orders them: nobody else's
//! clock, and no clock skew between hosts, enters the comparison.

/// A monotonic source of write times for one writer.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriterClock {
    last: i64,
}

impl WriterClock {
    /// The next write time: `now_micros`, or just past the last one handed out when the
    /// wall clock stood still or went back.
    pub(crate) fn tick(&mut self, now_micros: i64) -> i64 {
        self.last = now_micros.max(self.last.saturating_add(1));
        self.last
    }
}

/// Now, in microseconds since the epoch.
pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_increase_even_when_the_wall_clock_goes_back() {
        let mut clock = WriterClock::default();
        assert_eq!(clock.tick(1_000), 1_000);
        assert_eq!(clock.tick(1_000), 1_001, "the same instant twice");
        assert_eq!(clock.tick(500), 1_002, "the wall clock stepped back");
        assert_eq!(clock.tick(5_000), 5_000);
    }
}
