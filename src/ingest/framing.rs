//! DogStatsD stream framing: every message is preceded by its length, a 4-byte little-endian
//! unsigned integer (the Datadog Agent reads it with `binary.LittleEndian.Uint32`; saluki's
//! `LengthDelimitedFramer` documents the same). A message may hold several lines.
//!
//! [`FrameReader`] is a bounded read buffer: it starts at 64 KiB and grows only to fit a
//! message whose announced length is within the limit, so a peer can never make it allocate
//! more than `4 + max_message_bytes`.

/// Bytes of the length prefix.
pub(super) const PREFIX: usize = 4;
/// Initial buffer size (also the most one read can return at first).
const INITIAL: usize = 64 * 1024;
/// Compact before reading when less than this is free at the end.
const MIN_SPARE: usize = 4 * 1024;

/// A message announced a length above the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Oversized(pub(super) u32);

/// Reassembles length-prefixed messages from stream reads.
#[derive(Debug)]
pub(super) struct FrameReader {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte.
    start: usize,
    /// End of the received bytes.
    end: usize,
    max_message: usize,
}

impl FrameReader {
    pub(super) fn new(max_message: usize) -> FrameReader {
        let size = INITIAL.min(PREFIX + max_message);
        FrameReader {
            buf: vec![0; size],
            start: 0,
            end: 0,
            max_message,
        }
    }

    /// The free space to read into; never empty after [`Self::next_frame`] returned `Ok(None)`.
    pub(super) fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.buf.len() - self.end < MIN_SPARE {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if let Some(len) = self.pending_len() {
            // Validated against the limit by `next_frame`: the growth is bounded.
            let needed = self.start + PREFIX + len;
            if needed > self.buf.len() {
                if self.start > 0 {
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                }
                let needed = PREFIX + len;
                if needed > self.buf.len() {
                    self.buf.resize(needed, 0);
                }
            }
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` bytes were read into [`Self::spare`].
    pub(super) fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// The next complete message, `Ok(None)` if more bytes are needed, or the announced length
    /// if it is over the limit (the connection must then be closed).
    pub(super) fn next_frame(&mut self) -> Result<Option<&[u8]>, Oversized> {
        let Some(len) = self.announced_len() else {
            return Ok(None);
        };
        if len as usize > self.max_message {
            return Err(Oversized(len));
        }
        let len = len as usize;
        if self.end - self.start - PREFIX < len {
            return Ok(None);
        }
        let body = self.start + PREFIX;
        self.start = body + len;
        Ok(Some(&self.buf[body..body + len]))
    }

    /// True if bytes of an incomplete message are buffered.
    pub(super) fn has_partial(&self) -> bool {
        self.end > self.start
    }

    fn announced_len(&self) -> Option<u32> {
        let prefix = self.buf.get(self.start..self.start + PREFIX)?;
        if self.end - self.start < PREFIX {
            return None;
        }
        Some(u32::from_le_bytes(prefix.try_into().ok()?))
    }

    /// Length of the buffered incomplete message, if its prefix is complete and within limit.
    fn pending_len(&self) -> Option<usize> {
        self.announced_len()
            .map(|len| len as usize)
            .filter(|&len| len <= self.max_message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    /// Feeds `bytes` in chunks of `chunk` and collects the messages.
    fn feed(
        reader: &mut FrameReader,
        bytes: &[u8],
        chunk: usize,
    ) -> Result<Vec<Vec<u8>>, Oversized> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let spare = reader.spare();
            assert!(!spare.is_empty());
            let n = chunk.min(spare.len()).min(rest.len());
            spare[..n].copy_from_slice(&rest[..n]);
            reader.filled(n);
            rest = &rest[n..];
            while let Some(message) = reader.next_frame()? {
                out.push(message.to_vec());
            }
        }
        Ok(out)
    }

    #[test]
    fn several_messages_in_one_read() {
        let mut bytes = frame(b"a:1|c");
        bytes.extend(frame(b"b:2|c\nc:3|c"));
        bytes.extend(frame(b""));
        let mut reader = FrameReader::new(1024);
        let got = feed(&mut reader, &bytes, usize::MAX).unwrap();
        assert_eq!(
            got,
            vec![b"a:1|c".to_vec(), b"b:2|c\nc:3|c".to_vec(), Vec::new()]
        );
        assert!(!reader.has_partial());
    }

    #[test]
    fn one_message_split_byte_by_byte() {
        let body = vec![b'x'; 300];
        let mut reader = FrameReader::new(1024);
        let bytes = [frame(&body), frame(b"y:1|c")].concat();
        let got = feed(&mut reader, &bytes, 1).unwrap();
        assert_eq!(got, vec![body, b"y:1|c".to_vec()]);
    }

    #[test]
    fn large_messages_grow_the_buffer_up_to_the_limit_only() {
        let max = 200_000;
        let body = vec![b'z'; max];
        let mut reader = FrameReader::new(max);
        let bytes = [frame(b"s"), frame(&body), frame(b"t")].concat();
        let got = feed(&mut reader, &bytes, 10_000).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].len(), max);
        assert!(
            reader.buf.len() <= PREFIX + max,
            "buffer {} over the limit",
            reader.buf.len()
        );
    }

    #[test]
    fn oversized_is_reported_before_any_allocation() {
        let mut reader = FrameReader::new(100);
        let bytes = u32::MAX.to_le_bytes();
        assert_eq!(
            feed(&mut reader, &bytes, usize::MAX),
            Err(Oversized(u32::MAX))
        );
        assert!(reader.buf.len() <= PREFIX + 100);
        let mut reader = FrameReader::new(100);
        assert_eq!(
            feed(&mut reader, &frame(&[b'q'; 101]), usize::MAX),
            Err(Oversized(101))
        );
    }

    #[test]
    fn partial_prefix_and_body_are_reported() {
        let mut reader = FrameReader::new(100);
        assert!(feed(&mut reader, &[5, 0], usize::MAX).unwrap().is_empty());
        assert!(reader.has_partial());
        let mut reader = FrameReader::new(100);
        assert!(
            feed(&mut reader, &frame(b"abcdef")[..7], usize::MAX)
                .unwrap()
                .is_empty()
        );
        assert!(reader.has_partial());
    }

    #[test]
    fn many_messages_across_buffer_wraps() {
        // 100k small messages through a 64 KiB buffer in odd-sized reads.
        let mut bytes = Vec::new();
        for i in 0..100_000u32 {
            bytes.extend(frame(format!("m{i}:1|c").as_bytes()));
        }
        let mut reader = FrameReader::new(64 * 1024);
        let got = feed(&mut reader, &bytes, 7_777).unwrap();
        assert_eq!(got.len(), 100_000);
        assert_eq!(got[99_999], b"m99999:1|c");
    }
}
