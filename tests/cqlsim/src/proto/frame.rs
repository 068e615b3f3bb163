//! Frame header codec (S §2). Check-then-parse: [`parse_header`] looks at a read buffer and
//! says whether a whole frame is there, so several frames in one TCP read are handled and a
//! frame split across reads waits for the rest.

use super::wire::{put_i32, put_u8};

/// Bytes in a v3/v4 header.
pub(crate) const HEADER_LEN: usize = 9;

/// Largest body accepted. Cassandra's default `native_transport_max_frame_size` is 16 MiB in
/// 4.x and 256 MiB in 3.x; the larger one keeps big test batches working.
pub(crate) const MAX_BODY: usize = 256 * 1024 * 1024;

/// Header flag: the body is compressed. We never offer compression, so a client setting it is
/// broken.
pub(crate) const FLAG_COMPRESSION: u8 = 0x01;

/// Request opcodes (S §2.4).
pub(crate) mod opcode {
    pub(crate) const ERROR: u8 = 0x00;
    pub(crate) const STARTUP: u8 = 0x01;
    pub(crate) const READY: u8 = 0x02;
    pub(crate) const OPTIONS: u8 = 0x05;
    pub(crate) const SUPPORTED: u8 = 0x06;
    pub(crate) const QUERY: u8 = 0x07;
    pub(crate) const RESULT: u8 = 0x08;
    pub(crate) const PREPARE: u8 = 0x09;
    pub(crate) const EXECUTE: u8 = 0x0A;
    pub(crate) const REGISTER: u8 = 0x0B;
    pub(crate) const EVENT: u8 = 0x0C;
    pub(crate) const BATCH: u8 = 0x0D;
    pub(crate) const AUTH_RESPONSE: u8 = 0x0F;
}

/// A parsed request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Protocol version, direction bit removed.
    pub(crate) version: u8,
    /// Header flags.
    pub(crate) flags: u8,
    /// Stream id; responses echo it.
    pub(crate) stream: i16,
    /// Request opcode.
    pub(crate) opcode: u8,
    /// Body length.
    pub(crate) length: usize,
}

/// What a read buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Peek {
    /// Not a whole frame yet.
    Incomplete,
    /// A whole frame: the header, and the total frame size (header + body).
    Frame(Header, usize),
    /// A header that cannot be honoured. The stream id is kept so the error can be addressed.
    /// The connection must be closed after answering: framing is lost.
    Fatal { stream: i16, message: String },
}

/// Looks at the start of `buf`.
///
/// A version other than 3 or 4 is *not* fatal here: the header layout of v3+ is the same, so the
/// caller reads the stream id and answers with the "unsupported protocol version" error the
/// Python driver waits for during negotiation (research §2.1).
pub(crate) fn parse_header(buf: &[u8]) -> Peek {
    // v1/v2 headers are 8 bytes with a one-byte stream: answer them without waiting for a
    // ninth byte that may never come.
    if buf.len() >= HEADER_LEN - 1 && (buf[0] & 0x7f) < 3 {
        return Peek::Fatal {
            stream: i16::from(buf[2] as i8),
            message: format!(
                "Invalid or unsupported protocol version ({}); supported versions are (3/v3, 4/v4)",
                buf[0] & 0x7f
            ),
        };
    }
    if buf.len() < HEADER_LEN {
        return Peek::Incomplete;
    }
    let version = buf[0];
    let stream = i16::from_be_bytes([buf[2], buf[3]]);
    if version & 0x80 != 0 {
        return Peek::Fatal {
            stream,
            message: "Invalid frame: a response frame was sent to the server".into(),
        };
    }
    let length = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) as usize;
    if length > MAX_BODY {
        return Peek::Fatal {
            stream,
            message: format!(
                "Request is too big: length {length} exceeds maximum allowed length {MAX_BODY}."
            ),
        };
    }
    let header = Header {
        version,
        flags: buf[1],
        stream,
        opcode: buf[4],
        length,
    };
    if buf.len() < HEADER_LEN + length {
        return Peek::Incomplete;
    }
    Peek::Frame(header, HEADER_LEN + length)
}

/// Appends one response frame. `body` writes the body after the header; the length is patched.
pub(crate) fn write_frame(
    out: &mut Vec<u8>,
    version: u8,
    stream: i16,
    opcode: u8,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    put_u8(out, 0x80 | version);
    put_u8(out, 0);
    out.extend_from_slice(&stream.to_be_bytes());
    put_u8(out, opcode);
    put_i32(out, 0);
    body(out);
    let len = out.len() - start - HEADER_LEN;
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out[start + 5..start + 9].copy_from_slice(&len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_until_the_whole_body_is_there() {
        let frame = [4u8, 0, 0, 7, opcode::OPTIONS, 0, 0, 0, 2, 0xAA, 0xBB];
        assert_eq!(parse_header(&frame[..5]), Peek::Incomplete);
        assert_eq!(parse_header(&frame[..10]), Peek::Incomplete);
        match parse_header(&frame) {
            Peek::Frame(h, n) => {
                assert_eq!(
                    (h.version, h.stream, h.opcode, h.length, n),
                    (4, 7, 5, 2, 11)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn old_protocol_versions_are_answered_from_an_eight_byte_header() {
        let v2_options = [2u8, 0, 5, opcode::OPTIONS, 0, 0, 0, 0];
        match parse_header(&v2_options) {
            Peek::Fatal { stream, message } => {
                assert_eq!(stream, 5);
                assert!(
                    message.contains("unsupported protocol version (2)"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oversized_and_response_frames_are_fatal() {
        let big = [4u8, 0, 0, 1, 7, 0x7f, 0xff, 0xff, 0xff];
        assert!(matches!(parse_header(&big), Peek::Fatal { stream: 1, .. }));
        let resp = [0x84u8, 0, 0, 1, 7, 0, 0, 0, 0];
        assert!(matches!(parse_header(&resp), Peek::Fatal { .. }));
    }
}
