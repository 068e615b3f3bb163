//! The wall clock of the in-process API: coarse, because `incr` reads it per call.
//!
//! `SystemTime::now()` costs about 40 ns on a virtual machine whose clock source is the
//! TSC (measured: 34-40 ns on the 2-core development VM), more than the rest of an
//! increment. Minute buckets need the time to about a second, so on Linux the clock is
//! `CLOCK_REALTIME_COARSE` (through `rustix` and libc, from the vDSO: 3-6 ns): the
//! kernel's wall time as of its last timer tick.
//!
//! # Precision
//!
//! The coarse clock is never ahead of `CLOCK_REALTIME` and at most one tick behind it
//! (`1/HZ`: 4 ms at `HZ=250`, 10 ms at the slowest common `HZ=100`; the resolution
//! `clock_getres` reports), and it follows the same NTP steps and slews. So an increment
//! made within one tick after a minute boundary may be counted in the minute before
//! (and, at midnight, in the day before). It is still counted exactly once: only its
//! bucket can be off, by one minute, and only in that first tick of a minute. Other
//! systems, or a clock read that fails, fall back to `SystemTime::now()`.

/// Seconds since the Unix epoch, at most one timer tick behind the wall clock (see the
/// module documentation).
#[inline]
pub fn now_unix_secs() -> i64 {
    #[cfg(target_os = "linux")]
    {
        rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse).tv_sec
    }
    #[cfg(not(target_os = "linux"))]
    {
        crate::bucket::unix_secs(std::time::SystemTime::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_system_clock_to_the_second() {
        for _ in 0..1000 {
            let before = crate::bucket::unix_secs(std::time::SystemTime::now());
            let coarse = now_unix_secs();
            let after = crate::bucket::unix_secs(std::time::SystemTime::now());
            // Never ahead; behind by at most one tick, so at most one second boundary.
            assert!(coarse <= after, "{coarse} > {after}");
            assert!(coarse >= before - 1, "{coarse} < {before} - 1");
        }
    }
}
