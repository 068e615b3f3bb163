//! Name mapping and tag rules, compiled: the pure part of deciding where a metric name
//! and its tags go. [`config`](crate::config) checks the rules a file declares with these
//! types; [`family`](crate::family) routes increments with them.
//!
//! - [`pattern`]: globs and regexes over dotted names, their captures, and the key
//!   templates (`"$1"`) that use them;
//! - [`tags`]: allow and deny lists and renames of tag keys, and the default deny list of
//!   the per-process tags DogStatsD clients add.

pub mod pattern;
pub mod tags;

pub use self::pattern::{
    Captures, GlobShape, MAX_CAPTURES, MatchType, NameShape, Pattern, Template,
};
pub use self::tags::{DEFAULT_DENY, KeyPattern, TagRules};
