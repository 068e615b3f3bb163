//! Operating counter tables (seed 000's operations, seed 003's warnings): reading them
//! back, the key index, leaderboards, retention, migration and shard advice.
//!
//! | module | job |
//! |---|---|
//! | [`read`], [`read_cache`] | one partition summed over its shards, at a chosen consistency; a short cache in front |
//! | [`advise`] | a shard count from the peak write rate per key and the safe rate |
//! | [`keyindex`] | the keys written per family and day: fed by the flush hook, retried until applied; listed by day |
//! | [`migrate`] | read-and-increment into another table or cluster, resumable through a job table, with verification |
//! | [`prune`] | retention by whole partitions older than a cutoff, never a row or a cell |
//! | [`reconcile`] | the exact families' counters against their delta ledger: per key, drift explained by the outcomes table or reported |
//! | [`sizing`] | at start, yesterday's ledger and key index partitions measured, and a warning with the bucket count when one passes ~100 MB |
//! | [`outcomes`] | what the state directory says became of writes that did not apply: summed by outcome, family, table and day, or listed, read-only |
//! | [`leaderboard`] | rankings per period, written as versions in a regular table clustered by score, served through a pointer flipped last |

pub mod advise;
pub mod keyindex;
pub mod leaderboard;
pub mod migrate;
pub mod outcomes;
pub mod prune;
pub mod read;
pub mod read_cache;
pub mod reconcile;
pub mod sizing;
