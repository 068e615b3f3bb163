//! Raw-socket behaviour: the version negotiation the Python drivers rely on, several frames in
//! one write and one frame over several writes, and malformed input answered with a protocol
//! error (or a close), never a crash.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::start;

fn frame(version: u8, stream: i16, opcode: u8, body: &[u8]) -> Vec<u8> {
    let mut f = vec![version, 0];
    f.extend_from_slice(&stream.to_be_bytes());
    f.push(opcode);
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

fn startup() -> Vec<u8> {
    let mut b = vec![0, 1];
    for s in ["CQL_VERSION", "3.4.4"] {
        b.extend_from_slice(&(s.len() as u16).to_be_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    frame(4, 1, 0x01, &b)
}

/// Reads one response frame: (version, stream, opcode, body).
async fn read_frame(s: &mut TcpStream) -> Option<(u8, i16, u8, Vec<u8>)> {
    let mut h = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut h))
        .await
        .ok()?
        .ok()?;
    let len = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.ok()?;
    Some((h[0], i16::from_be_bytes([h[2], h[3]]), h[4], body))
}

fn error_of(body: &[u8]) -> (i32, String) {
    let code = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let n = u16::from_be_bytes([body[4], body[5]]) as usize;
    (code, String::from_utf8_lossy(&body[6..6 + n]).into_owned())
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "current_thread")]
async fn unsupported_versions_get_the_negotiation_error() {
    let server = start().await;
    for v in [0x42u8, 0x41, 0x05] {
        let mut s = TcpStream::connect(server.local_addr())
            .await
            .expect("connect");
        s.write_all(&frame(v, 3, 0x05, &[])).await.expect("write");
        let (ver, stream, op, body) = read_frame(&mut s).await.expect("an answer");
        assert_eq!((ver, stream, op), (0x84, 3, 0x00));
        let (code, msg) = error_of(&body);
        assert_eq!(code, 0x000A);
        assert!(msg.contains("unsupported protocol version"), "{msg}");
        assert!(closed(&mut s).await, "connection closed after the refusal");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn coalesced_and_split_frames() {
    let server = start().await;
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    // OPTIONS, STARTUP and a QUERY in one write.
    let mut q = Vec::new();
    let text = b"SELECT release_version FROM system.local";
    q.extend_from_slice(&(text.len() as u32).to_be_bytes());
    q.extend_from_slice(text);
    q.extend_from_slice(&[0, 1, 0]);
    let mut all = frame(4, 0, 0x05, &[]);
    all.extend(startup());
    all.extend(frame(4, 2, 0x07, &q));
    s.write_all(&all).await.expect("write");
    let ops: Vec<(i16, u8)> = [
        read_frame(&mut s).await.expect("1"),
        read_frame(&mut s).await.expect("2"),
        read_frame(&mut s).await.expect("3"),
    ]
    .into_iter()
    .map(|(_, st, op, _)| (st, op))
    .collect();
    assert_eq!(
        ops,
        vec![(0, 0x06), (1, 0x02), (2, 0x08)],
        "SUPPORTED, READY, RESULT on their streams"
    );
    // One frame dribbled a few bytes at a time.
    let f = frame(4, 9, 0x07, &q);
    for chunk in f.chunks(5) {
        s.write_all(chunk).await.expect("write");
        s.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (_, stream, op, body) = read_frame(&mut s).await.expect("answer");
    assert_eq!((stream, op), (9, 0x08));
    assert!(String::from_utf8_lossy(&body).contains("3.11.17"));
}

#[tokio::test(flavor = "current_thread")]
async fn malformed_input_gets_protocol_errors() {
    let server = start().await;
    let mut s = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    // A QUERY before STARTUP.
    s.write_all(&frame(4, 1, 0x07, &[0, 0, 0, 0, 0, 1, 0]))
        .await
        .expect("write");
    let (_, _, op, body) = read_frame(&mut s).await.expect("answer");
    assert_eq!((op, error_of(&body).0), (0x00, 0x000A));
    s.write_all(&startup()).await.expect("write");
    assert_eq!(read_frame(&mut s).await.expect("ready").2, 0x02);
    // Truncated bodies, unknown opcodes, bad flags: an error on the same stream, and the
    // connection keeps working.
    for (stream, op, body) in [
        (5i16, 0x07u8, vec![0, 0, 0, 50, b'x']),
        (6, 0x0A, vec![0, 16, 1, 2]),
        (7, 0x0D, vec![9, 0, 0]),
        (8, 0x33, vec![]),
        (9, 0x07, vec![0, 0, 0, 1, b'x', 0, 1, 0x80]),
    ] {
        s.write_all(&frame(4, stream, op, &body))
            .await
            .expect("write");
        let (_, st, rop, rbody) = read_frame(&mut s).await.expect("answer");
        assert_eq!(
            (st, rop, error_of(&rbody).0),
            (stream, 0x00, 0x000A),
            "opcode {op:#x}"
        );
    }
    // Unknown prepared id: UNPREPARED with the id.
    let mut ex = vec![0, 4, 1, 2, 3, 4];
    ex.extend_from_slice(&[0, 1, 0]);
    s.write_all(&frame(4, 10, 0x0A, &ex)).await.expect("write");
    let (_, _, _, body) = read_frame(&mut s).await.expect("answer");
    assert_eq!(error_of(&body).0, 0x2500);
    assert!(body.ends_with(&[0, 4, 1, 2, 3, 4]), "the id comes back");
    // A frame claiming 1 GiB: error, then close (framing is lost).
    s.write_all(&[4, 0, 0, 11, 0x07, 0x40, 0, 0, 0])
        .await
        .expect("write");
    let (_, _, _, body) = read_frame(&mut s).await.expect("answer");
    assert_eq!(error_of(&body).0, 0x000A);
    assert!(closed(&mut s).await);
    // The server still serves others.
    let mut t = TcpStream::connect(server.local_addr())
        .await
        .expect("connect");
    t.write_all(&frame(4, 0, 0x05, &[])).await.expect("write");
    assert_eq!(read_frame(&mut t).await.expect("supported").2, 0x06);
}
