//! The one write pipeline every kind of write goes through.
//!
//! Five kinds of write leave countersink: the sidecar's counter deltas, the driver
//! wrapper's counter deltas, the running totals of `writer_totals` families, the rows of
//! the delta ledger and the rows of the outcomes table. They differ in where their
//! pending rows live, how rows become requests, and one policy: whether a request may
//! be sent twice. Everything else is the same for all of them and lives here, once:
//!
//! - [`decide`](mod@decide): the one decision table, outcome → action, with a [`Policy`] column
//!   per kind of write;
//! - [`run`]: the stage runner, [`run_stage`]: group commit, bounded send with every
//!   answer journaled, decision, apply, logs and spill, end; a kind of write is a
//!   [`WriteKind`] and a [`Sender`];
//! - [`replay`](mod@replay): the one replay loop, spilled records read back through the
//!   spill's one cursor, each kind taking its own.
//!
//! It sits below the sink contract and the state directory (it speaks of their
//! outcomes and journal) and above every path that sends: `totals`, `flush`, `wrapper`.

pub mod decide;
pub mod replay;
pub mod run;

pub use self::decide::{
    Action, AgeRule, AtFinal, Decision, Facts, OnPermanent, OnUnknown, Policy, Sent, decide,
    for_row, store_answers,
};
pub use self::run::{
    CrashPoints, Sender, StageCx, StageReport, WriteKind, run_stage, start_window,
};
