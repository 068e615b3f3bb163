//! Socket tests of the receivers.
