//! Resets by epoch instead of deletes.
//!
//! Seed 003: a counter deleted and written again is undefined, and decrementing it to
//! zero under traffic is not safe either. Seed 000: change the key instead, with an epoch
//! column in the partition key. A family with an `epoch_column` writes every row into an
//! epoch; `countersink reset` starts a new one by adding a row to a registry table.
//!
//! **The rule.** An epoch is named by the UTC minute it starts (its number is that
//! minute, counted from 1970; 0 is the epoch before the first reset). A row of minute `m`
//! belongs to the latest epoch whose start is at or before `m`, for the whole family or
//! for its key. That is a function of the row's minute, not of when a writer flushes it,
//! so every writer of a fleet (and a writer that replays a spill hours later) puts a row
//! into the same epoch.
//!
//! **Why a writer can decide alone.** `reset` only schedules epochs that start at least
//! `epochs.lead` after it writes them. A writer that read the registry at `t` has seen
//! every epoch that can start before `t + lead` (less `epochs.clock_margin`, for clocks
//! that disagree); rows of later minutes are *held* (kept pending, counted) until a newer
//! read covers them, never guessed. A registry that cannot be read only delays rows.
//!
//! | module | job |
//! |---|---|
//! | [`view`] | what one read of the registry found: epoch starts per family and per key |
//! | [`choose`](mod@choose) | the pure choice: a row's epoch, or hold it |
//! | [`registry`] | the async shell: reading the registry on a timer, writing a reset |
//! | [`reset`] | when a reset may start (pure) |

pub mod choose;
pub mod registry;
pub mod reset;
pub mod view;

pub use self::choose::{Horizon, Placement, choose};
pub use self::registry::{EpochRegistry, RegistryError};
pub use self::view::EpochView;
