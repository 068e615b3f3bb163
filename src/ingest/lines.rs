//! Newline stream framing: StatsD over TCP, and the Unix stream clients that write lines
//! (Python `statsd`'s `TCPStatsClient` and `UnixSocketStatsClient` end every line with
//! `\n`). A line ends at `\n`; a `\r` before it is the parser's business (it accepts CRLF).
//!
//! [`LineReader`] is a bounded read buffer, like [`FrameReader`](super::framing::FrameReader)
//! for length prefixes, with two differences that follow from the framing:
//!
//! - **An overlong line does not end the connection.** A length prefix announces a message
//!   the reader cannot skip without trusting it; a newline stream resynchronises by itself.
//!   A line longer than `max_line_bytes` is counted as oversized and its bytes are dropped
//!   up to the next `\n`, whatever the read boundaries: the same input gives the same
//!   count however the kernel splits it.
//! - **The buffer holds at most one incomplete line.** Complete lines are handed on after
//!   every read, so memory per connection is bounded by `max_line_bytes + 1`, and grows that
//!   far only for a peer that really sends a line that long.
//!
//! Bytes after the last `\n` when the connection ends are a partial line: the caller counts
//! it (see [`LineReader::has_partial`]) and drops it. It is never joined to anything else,
//! and never parsed: a line cut short can still parse (`a:12|c` from `a:123|c`, or a tag
//! value cut in half) and would count a wrong value or a wrong row.

use memchr::memchr_iter;

/// Initial buffer size (also the most one read returns at first).
const INITIAL: usize = 64 * 1024;
/// Smallest buffer, whatever the limit: room for the bytes `auto` framing read first.
const MIN_BUF: usize = 16;

/// What one [`LineReader::drain`] handed on and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Drained {
    /// Complete lines handed on (empty ones included: the parser skips them).
    pub(super) lines: u64,
    /// Lines longer than the limit, dropped.
    pub(super) oversized: u64,
}

/// Cuts a byte stream into complete lines.
#[derive(Debug)]
pub(super) struct LineReader {
    buf: Vec<u8>,
    /// End of the received bytes; `buf[..end]` is the incomplete line (after a drain).
    end: usize,
    /// Inside a line already counted as oversized: bytes are dropped up to the next `\n`.
    discarding: bool,
    max_line: usize,
}

impl LineReader {
    /// A reader that accepts lines of up to `max_line` bytes (the `\n` not included).
    pub(super) fn new(max_line: usize) -> LineReader {
        LineReader {
            buf: vec![0; INITIAL.min(max_line + 1).max(MIN_BUF)],
            end: 0,
            discarding: false,
            max_line,
        }
    }

    /// The free space to read into; never empty.
    pub(super) fn spare(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() {
            // Only an incomplete line of at most `max_line` bytes is kept (see `drain`),
            // so a full buffer is shorter than `max_line + 1`: it may grow to that.
            let grown = (self.buf.len() * 2).min(self.max_line + 1);
            self.buf.resize(grown.max(self.end + 1), 0);
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` bytes were read into [`Self::spare`].
    pub(super) fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Hands every complete line to `deliver`, in runs of consecutive lines within the
    /// limit (each run ends with its `\n`), and keeps the incomplete rest. A line over the
    /// limit, complete or not, is counted once and skipped.
    pub(super) fn drain(&mut self, mut deliver: impl FnMut(&[u8])) -> Drained {
        let mut drained = Drained::default();
        let bytes = &self.buf[..self.end];
        let mut line_start = 0;
        let mut run_start = 0;
        for newline in memchr_iter(b'\n', bytes) {
            if self.discarding {
                // The tail of a line counted before: drop it with its newline.
                self.discarding = false;
                line_start = newline + 1;
                run_start = line_start;
                continue;
            }
            if newline - line_start > self.max_line {
                if run_start < line_start {
                    deliver(&bytes[run_start..line_start]);
                }
                drained.oversized += 1;
                run_start = newline + 1;
            } else {
                drained.lines += 1;
            }
            line_start = newline + 1;
        }
        if run_start < line_start {
            deliver(&bytes[run_start..line_start]);
        }
        let rest = self.end - line_start;
        if self.discarding || rest > self.max_line {
            // Counted when it first went over the limit, not again.
            if !self.discarding {
                drained.oversized += 1;
                self.discarding = true;
            }
            self.end = 0;
        } else {
            self.buf.copy_within(line_start..self.end, 0);
            self.end = rest;
        }
        drained
    }

    /// True if bytes of an incomplete line within the limit are buffered: at the end of
    /// the connection, a partial line.
    pub(super) fn has_partial(&self) -> bool {
        self.end > 0 && !self.discarding
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{Just, prop_assert, prop_assert_eq};

    use super::*;

    /// Feeds `bytes` in reads of at most `chunk` bytes; returns the lines handed on (each
    /// run split at its newlines), the totals, and whether a partial line is left.
    fn feed(max_line: usize, bytes: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Drained, bool) {
        let mut reader = LineReader::new(max_line);
        let mut lines = Vec::new();
        let mut total = Drained::default();
        let mut rest = bytes;
        while !rest.is_empty() {
            let spare = reader.spare();
            assert!(!spare.is_empty());
            let n = chunk.min(spare.len()).min(rest.len());
            spare[..n].copy_from_slice(&rest[..n]);
            reader.filled(n);
            rest = &rest[n..];
            let drained = reader.drain(|run| {
                assert_eq!(run.last(), Some(&b'\n'), "a run ends with its newline");
                lines.extend(run.split(|&b| b == b'\n').map(<[u8]>::to_vec));
                lines.pop();
            });
            total.lines += drained.lines;
            total.oversized += drained.oversized;
            assert!(reader.buf.len() <= (max_line + 1).max(MIN_BUF));
        }
        (lines, total, reader.has_partial())
    }

    fn strs(lines: &[Vec<u8>]) -> Vec<&str> {
        lines
            .iter()
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_split_across_reads_at_every_boundary() {
        let input = b"a:1|c\nbb:22|c|#k:v\n\nccc:3|c\n";
        for chunk in 1..=input.len() {
            let (lines, drained, partial) = feed(100, input, chunk);
            assert_eq!(
                strs(&lines),
                ["a:1|c", "bb:22|c|#k:v", "", "ccc:3|c"],
                "{chunk}"
            );
            assert_eq!(
                drained,
                Drained {
                    lines: 4,
                    oversized: 0
                }
            );
            assert!(!partial);
        }
    }

    #[test]
    fn crlf_is_kept_for_the_parser() {
        let (lines, drained, partial) = feed(100, b"a:1|c\r\nb:2|c\r\n", 3);
        assert_eq!(strs(&lines), ["a:1|c\r", "b:2|c\r"]);
        assert_eq!(drained.lines, 2);
        assert!(!partial);
    }

    #[test]
    fn an_overlong_line_is_counted_once_and_the_stream_resyncs() {
        let long = "x".repeat(50);
        let input = format!("a:1|c\n{long}\nb:2|c\n{long}{long}\nc:3|c\n");
        for chunk in [1, 7, 10, 64, 1000] {
            let (lines, drained, partial) = feed(20, input.as_bytes(), chunk);
            assert_eq!(strs(&lines), ["a:1|c", "b:2|c", "c:3|c"], "{chunk}");
            assert_eq!(
                drained,
                Drained {
                    lines: 3,
                    oversized: 2
                },
                "{chunk}"
            );
            assert!(!partial);
        }
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_kept() {
        let line = "y".repeat(20);
        for chunk in [1, 5, 21, 100] {
            let (lines, drained, _) = feed(20, format!("{line}\n").as_bytes(), chunk);
            assert_eq!(strs(&lines), [line.as_str()]);
            assert_eq!(
                drained,
                Drained {
                    lines: 1,
                    oversized: 0
                }
            );
        }
    }

    #[test]
    fn a_partial_last_line_is_reported_not_delivered() {
        let (lines, drained, partial) = feed(100, b"a:1|c\nb:2", 4);
        assert_eq!(strs(&lines), ["a:1|c"]);
        assert_eq!(drained.lines, 1);
        assert!(partial);
        // An overlong unfinished line is oversized, not partial as well.
        let (_, drained, partial) = feed(10, b"a:1|c\nbbbbbbbbbbbbbbbbbbbb", 4);
        assert_eq!(
            drained,
            Drained {
                lines: 1,
                oversized: 1
            }
        );
        assert!(!partial);
    }

    #[test]
    fn memory_stays_within_the_limit_under_an_endless_line() {
        let mut reader = LineReader::new(1000);
        let mut oversized = 0;
        for _ in 0..10_000 {
            let spare = reader.spare();
            let n = spare.len().min(333);
            spare[..n].fill(b'z');
            reader.filled(n);
            oversized += reader.drain(|_| panic!("nothing is complete")).oversized;
            assert!(reader.buf.len() <= 1001);
        }
        assert_eq!(oversized, 1);
        assert!(!reader.has_partial());
    }

    #[test]
    fn many_lines_through_a_small_buffer() {
        let mut input = Vec::new();
        for i in 0..100_000u32 {
            input.extend(format!("m{i}:1|c\n").as_bytes());
        }
        let (lines, drained, partial) = feed(64, &input, 7_777);
        assert_eq!(lines.len(), 100_000);
        assert_eq!(drained.lines, 100_000);
        assert_eq!(lines[99_999], b"m99999:1|c");
        assert!(!partial);
    }

    proptest::proptest! {
        /// Whatever the bytes, the limit and the read sizes, the reader hands on exactly
        /// the complete lines within the limit, counts every longer line (complete or
        /// not) once, and reports the unfinished rest as partial only within the limit:
        /// the same as splitting the whole input at its newlines.
        #[test]
        fn reads_of_any_size_give_the_whole_input_split_at_newlines(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'x'), Just(b'y')],
                0..600,
            ),
            max_line in 1usize..40,
            chunks in proptest::collection::vec(1usize..70, 1..20),
        ) {
            let mut reader = LineReader::new(max_line);
            let mut got = Vec::new();
            let mut total = Drained::default();
            let mut rest = &bytes[..];
            let mut i = 0;
            while !rest.is_empty() {
                let spare = reader.spare();
                let n = chunks[i % chunks.len()].min(spare.len()).min(rest.len());
                i += 1;
                spare[..n].copy_from_slice(&rest[..n]);
                reader.filled(n);
                rest = &rest[n..];
                let drained = reader.drain(|run| {
                    got.extend(run.split(|&b| b == b'\n').map(<[u8]>::to_vec));
                    got.pop();
                });
                total.lines += drained.lines;
                total.oversized += drained.oversized;
                prop_assert!(reader.buf.len() <= (max_line + 1).max(MIN_BUF));
            }
            let mut pieces: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            let last = pieces.pop().unwrap_or_default();
            let want: Vec<Vec<u8>> = pieces
                .iter()
                .filter(|l| l.len() <= max_line)
                .map(|l| l.to_vec())
                .collect();
            let oversized = pieces.iter().filter(|l| l.len() > max_line).count()
                + usize::from(last.len() > max_line);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(total.lines, want.len() as u64);
            prop_assert_eq!(total.oversized, oversized as u64);
            prop_assert_eq!(reader.has_partial(), !last.is_empty() && last.len() <= max_line);
        }
    }
}
