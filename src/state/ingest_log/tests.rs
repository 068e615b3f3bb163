//! The ingest log's tests: appends, seals, the bound, kept keys and streams.
use super::*;

const RETENTION: Retention = Retention {
    window_secs: 600,
    max_keys: 4,
    max_streams: 4,
};

fn line(name: &str, delta: i64) -> Vec<u8> {
    let mut out = Vec::new();
    IngestEntry::write_line(&mut out, name, &[("k", "v")], delta, 7);
    out
}

#[test]
fn appends_are_read_back_from_the_sealed_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
    log.append(&line("a", 1)).unwrap();
    log.append(&line("b", -2)).unwrap();
    assert!(log.seal(3, 9).unwrap());
    assert!(
        !log.seal(3, 10).unwrap(),
        "an empty active file is not sealed"
    );
    let sealed = log.sealed().unwrap();
    assert_eq!(sealed.len(), 1);
    assert_eq!((sealed[0].incarnation, sealed[0].seq), (3, 9));
    let SealedContent {
        entries, unread, ..
    } = read_sealed_whole(&sealed[0].path).unwrap();
    assert_eq!(unread, 0);
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.name.as_str(), e.delta))
            .collect::<Vec<_>>(),
        [("a", 1), ("b", -2)]
    );
    assert_eq!(entries[0].tags, [("k".to_owned(), "v".to_owned())]);
    assert_eq!(entries[0].minute, 7);
    log.remove(&sealed[0].path).unwrap();
    assert_eq!(log.bytes(), 0);
}

/// A removal whose unlink went through and whose directory sync did not is done again:
/// the file already gone is no error, the directory is synced. (Its bytes stopped
/// counting at the unlink; a file unlinked by hand, as here, keeps its count.)
#[test]
fn removing_a_sealed_file_already_unlinked_completes_the_removal() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
    log.append(&line("a", 1)).unwrap();
    assert!(log.seal(3, 9).unwrap());
    let sealed = log.sealed().unwrap();
    assert!(log.bytes() > 0);
    // What a removal leaves when its directory sync fails: the file unlinked.
    fs::remove_file(&sealed[0].path).unwrap();
    log.remove(&sealed[0].path)
        .expect("a file already unlinked is removed");
    assert!(log.sealed().unwrap().is_empty());
}

#[test]
fn a_full_log_refuses_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let one = line("a", 1);
    // An append takes its lines and the line that begins its group.
    let appended = (one.len() + b"{\"g\":1}\n".len()) as u64;
    let log = IngestLog::open(dir.path(), appended * 2, 1, RETENTION).unwrap();
    log.append(&one).unwrap();
    log.append(&one).unwrap();
    assert!(matches!(log.append(&one), Err(AppendError::Full { .. })));
    assert_eq!(
        fs::metadata(dir.path().join(ACTIVE)).unwrap().len(),
        2 * appended
    );
    // Sealed files count against the bound until they are removed.
    log.seal(1, 1).unwrap();
    assert!(matches!(log.append(&one), Err(AppendError::Full { .. })));
}

#[test]
fn a_leftover_active_file_is_sealed_at_start_and_a_torn_line_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        log.append(&line("a", 5)).unwrap();
    }
    let mut torn = fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(ACTIVE))
        .unwrap();
    torn.write_all(b"{\"n\":\"b\",\"d\"").unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
    let sealed = log.sealed().unwrap();
    assert_eq!(
        sealed
            .iter()
            .map(|s| (s.incarnation, s.seq))
            .collect::<Vec<_>>(),
        [(2, 0)]
    );
    let content = read_sealed_whole(&sealed[0].path).unwrap();
    assert_eq!(
        (
            content.entries.len(),
            content.entries[0].delta,
            content.unread
        ),
        (1, 5, 1)
    );
    assert!(log.bytes() > 0);
}

#[test]
fn concurrent_appends_share_syncs_and_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(IngestLog::open(dir.path(), 1 << 24, 1, RETENTION).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0..50 {
                    log.append(&line(&format!("t{t}"), i)).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(log.syncs() <= 400, "never more than one sync per append");
    log.seal(1, 1).unwrap();
    let content = read_sealed_whole(&log.sealed().unwrap()[0].path).unwrap();
    assert_eq!((content.entries.len(), content.unread), (400, 0));
    let sum: i64 = content.entries.iter().map(|e| e.delta).sum();
    assert_eq!(sum, 8 * (0..50).sum::<i64>());
}

fn key(name: &str, at: i64) -> KeyLine {
    KeyLine {
        key: name.into(),
        body_hash: 42,
        status: 200,
        answer: format!("{{\"accepted\":{at}}}"),
        at,
    }
}

#[test]
fn answered_keys_outlive_a_restart_within_the_window_and_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let now = unix_now();
    let seed = {
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        // Carried out of a moved file: an old key, one inside the window, and keys
        // past the bound.
        log.carry_keys(&[key("expired", now - 601), key("a", now - 10)])
            .unwrap();
        for i in 0..4 {
            log.carry_keys(&[key(&format!("b{i}"), now - 5 + i)])
                .unwrap();
        }
        // Still in the active file when the process dies: written with its request.
        let mut lines = line("x", 1);
        key("in-log", now).write_line(&mut lines);
        key("a", now - 1).write_line(&mut lines);
        log.append(&lines).unwrap();
        log.seed()
    };
    let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
    assert_eq!(log.seed(), seed, "the seed is kept with the keys");
    let keys = log.take_recovered_keys();
    let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
    // The newest four, oldest first, each once (`a` with its later answer).
    assert_eq!(names, ["b2", "b3", "a", "in-log"], "{keys:?}");
    assert_eq!(keys[2].at, now - 1);
    assert!(log.take_recovered_keys().is_empty(), "taken once");
    // The file was rewritten with what was kept.
    let (_, on_disk) = read_keys(&dir.path().join(KEYS)).unwrap();
    assert_eq!(on_disk, keys);
}

#[test]
fn the_keys_file_is_compacted_past_twice_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let now = unix_now();
    let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
    // RETENTION keeps 4 keys: the file is rewritten once it holds more than 8 lines.
    for i in 0..8 {
        log.carry_keys(&[key(&format!("k{i}"), now - 20 + i)])
            .unwrap();
    }
    assert_eq!(read_keys(&dir.path().join(KEYS)).unwrap().1.len(), 8);
    log.carry_keys(&[key("k8", now)]).unwrap();
    let (seed, kept) = read_keys(&dir.path().join(KEYS)).unwrap();
    assert_eq!(seed, Some(log.seed()), "the seed survives the rewrite");
    let names: Vec<&str> = kept.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(
        names,
        ["k5", "k6", "k7", "k8"],
        "the newest four, oldest first"
    );
}

fn stream(id: u128, time: u64, value: i64) -> StreamLine {
    StreamLine {
        stream: id,
        start: 1,
        time,
        value,
    }
}

/// A start reads back every stream's latest point, whether it was carried to the
/// stream file or is still in a sealed file, or in the active file a kill left.
#[test]
fn stream_points_outlive_a_restart_wherever_they_are() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        assert_eq!(log.take_recovered_streams(), RecoveredStreams::default());
        let mut lines = line("a", 1);
        stream(1, 10, 5).write_line(&mut lines);
        stream(2, 10, 7).write_line(&mut lines);
        log.append(&lines).unwrap();
        assert!(log.seal(1, 1).unwrap());
        // Moved: its stream lines go to the stream file, then it goes.
        let sealed = log.sealed().unwrap();
        let content = read_sealed_whole(&sealed[0].path).unwrap();
        assert_eq!(content.entries.len(), 1);
        assert_eq!(content.streams.len(), 2);
        log.carry_streams(&content.streams).unwrap();
        log.remove(&sealed[0].path).unwrap();
        // Sealed, not moved yet: stream 1 moved on.
        let mut lines = Vec::new();
        stream(1, 20, 9).write_line(&mut lines);
        log.append(&lines).unwrap();
        assert!(log.seal(1, 2).unwrap());
        // Left in the active file by a kill: stream 3, and an older point of 2 that a
        // slower request wrote after the newer one.
        let mut lines = Vec::new();
        stream(3, 30, 1).write_line(&mut lines);
        stream(2, 5, 6).write_line(&mut lines);
        log.append(&lines).unwrap();
    }
    let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
    let recovered = log.take_recovered_streams();
    let mut points: Vec<(u128, u64, i64)> = recovered
        .lines
        .iter()
        .map(|l| (l.stream, l.time, l.value))
        .collect();
    points.sort_unstable();
    assert_eq!(points, [(1, 20, 9), (2, 10, 7), (3, 30, 1)]);
    assert!(recovered.complete_since.is_some(), "the file's mark");
    assert!(log.take_recovered_streams().lines.is_empty(), "taken once");
}

/// The stream file is folded past twice its bound, and what the bound drops moves
/// the mark forward (their next point is a baseline, never counted whole).
#[test]
fn the_stream_file_is_compacted_and_a_dropped_stream_moves_the_mark() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
    log.rewrite_streams(&RecoveredStreams {
        complete_since: Some(50),
        lines: Vec::new(),
    })
    .unwrap();
    // RETENTION keeps 4 streams: past 8 lines the file is folded.
    for i in 0..8u64 {
        log.carry_streams(&[stream(u128::from(i % 2), 10 + i, 1)])
            .unwrap();
    }
    assert_eq!(streams::read(dir.path()).unwrap().1.len(), 8);
    log.carry_streams(&[stream(7, 100, 1)]).unwrap();
    let (mark, lines) = streams::read(dir.path()).unwrap();
    assert_eq!(lines.len(), 3, "two streams folded, one new: {lines:?}");
    assert_eq!(mark, Some(50), "nothing dropped: the mark stays");
    let many: Vec<StreamLine> = (10..20u64).map(|i| stream(u128::from(i), i, 1)).collect();
    log.carry_streams(&many).unwrap();
    let (mark, lines) = streams::read(dir.path()).unwrap();
    assert_eq!(lines.len(), 4);
    assert!(mark.unwrap() > 1_000_000, "moved to now: {mark:?}");
    log.remove_streams().unwrap();
    assert_eq!(streams::read(dir.path()).unwrap(), (None, Vec::new()));
}

/// An append cut short inside its `write` (a SIGKILL between two pages) is skipped
/// whole: its increments are not taken without the key written after them. Lines of
/// a log an earlier version wrote, without groups, are taken one by one.
#[test]
fn an_append_cut_short_is_skipped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(sealed_name(1, 1));
    let mut whole = line("a", 1);
    key("k1", 5).write_line(&mut whole);
    let mut cut = line("b", 2);
    cut.extend(line("c", 3));
    key("k2", 6).write_line(&mut cut);
    let mut bytes = b"{\"g\":2}\n".to_vec();
    bytes.extend(&whole);
    bytes.extend(b"{\"g\":3}\n");
    // The cut append: its increments whole, its key line missing.
    bytes.extend(&cut[..line("b", 2).len() + line("c", 3).len()]);
    std::fs::write(&path, &bytes).unwrap();
    let content = read_sealed_whole(&path).unwrap();
    assert_eq!(
        content.entries.iter().map(|e| e.delta).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(content.keys.len(), 1);
    assert_eq!(content.unread, 2, "the cut append's two lines");
    // Cut inside its last line, the key's: still none of its lines is taken (the
    // increments without the key would be counted again by the retry the key stops).
    let mut inside = b"{\"g\":2}\n".to_vec();
    inside.extend(&whole);
    inside.extend(b"{\"g\":3}\n");
    inside.extend(&cut[..cut.len() - 5]);
    std::fs::write(&path, &inside).unwrap();
    let content = read_sealed_whole(&path).unwrap();
    assert_eq!(
        content.entries.iter().map(|e| e.delta).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(content.keys.len(), 1);
    assert_eq!(content.unread, 3, "the cut append's three lines");
    // A line outside the groups of a file that has them is damage.
    let mut damaged = b"{\"g\":2}\n".to_vec();
    damaged.extend(&whole);
    damaged.extend(line("d", 4));
    std::fs::write(&path, &damaged).unwrap();
    let content = read_sealed_whole(&path).unwrap();
    assert_eq!((content.entries.len(), content.unread), (1, 1));
    // An append whole in length with a line that does not read: none of it is taken
    // (its increment without its key would be counted again by the retry).
    let mut garbled = b"{\"g\":2}\n".to_vec();
    garbled.extend(line("e", 5));
    garbled.extend(b"{not a line\n");
    std::fs::write(&path, &garbled).unwrap();
    let content = read_sealed_whole(&path).unwrap();
    assert_eq!((content.entries.len(), content.unread), (0, 2));
    // Without groups (an earlier version's file) every whole line counts.
    let mut legacy = whole.clone();
    legacy.extend(&cut);
    std::fs::write(&path, &legacy).unwrap();
    let content = read_sealed_whole(&path).unwrap();
    assert_eq!(content.entries.len(), 3);
    assert_eq!(content.keys.len(), 2);
    assert_eq!(content.unread, 0);
}

/// What `append` writes reads back as whole groups.
#[test]
fn appends_are_groups() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
    let mut lines = line("a", 1);
    key("k", 5).write_line(&mut lines);
    log.append(&lines).unwrap();
    log.append(&line("b", 2)).unwrap();
    let text = std::fs::read_to_string(dir.path().join(ACTIVE)).unwrap();
    assert!(text.starts_with("{\"g\":2}\n"), "{text}");
    assert!(text.contains("\n{\"g\":1}\n"), "{text}");
    assert!(log.seal(1, 2).unwrap());
    let content = read_sealed_whole(&log.sealed().unwrap()[0].path).unwrap();
    assert_eq!(
        (content.entries.len(), content.keys.len(), content.unread),
        (2, 1, 0)
    );
}

/// A carry whose append failed (it may have left part of a line) makes the next
/// carry rewrite the file whole: a torn line never swallows the next key or point.
#[test]
fn a_failed_carry_is_followed_by_a_rewrite_not_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let now = unix_now();
    let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
    log.carry_keys(&[key("k1", now)]).unwrap();
    log.rewrite_streams(&RecoveredStreams {
        complete_since: Some(50),
        lines: vec![stream(1, 10, 5)],
    })
    .unwrap();
    // What a failed append leaves: part of a line, no newline.
    for file in [KEYS, streams::FILE] {
        let mut handle = options().append(true).open(dir.path().join(file)).unwrap();
        handle.write_all(b"{\"torn").unwrap();
    }
    *log.key_lines.lock() = FORCE_REWRITE;
    log.streams_file.lock().lines = FORCE_REWRITE;
    log.carry_keys(&[key("k2", now)]).unwrap();
    log.carry_streams(&[stream(2, 11, 6)]).unwrap();
    let (_, keys) = read_keys(&dir.path().join(KEYS)).unwrap();
    let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(names, ["k1", "k2"]);
    let (mark, points) = streams::read(dir.path()).unwrap();
    assert_eq!(mark, Some(50));
    assert_eq!(points, [stream(1, 10, 5), stream(2, 11, 6)]);
}

/// A log whose sync failed (its last appends may not be on disk) seals nothing and
/// takes nothing more: its file stays where a restart reads it, and a seal's sync,
/// which would succeed over the lost pages, confirms no append still waiting.
#[test]
fn a_failed_log_seals_nothing_and_confirms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
    log.append(&line("a", 1)).unwrap();
    let waiting = log.write_lines(&line("b", 2)).unwrap();
    log.fail();
    assert!(!log.seal(3, 9).unwrap());
    assert!(log.sealed().unwrap().is_empty(), "nothing is sealed");
    assert!(dir.path().join(ACTIVE).exists());
    assert!(matches!(
        log.append(&line("c", 3)),
        Err(AppendError::Failed)
    ));
    log.commit.sealed(waiting.generation + 1);
    assert!(
        !log.commit.wait_blocking(waiting.generation, waiting.end),
        "an append waiting when the log failed is told it failed"
    );
}

/// An append written before the log's sync failed is told its lines may be on disk
/// (`NotSynced`: the client must not send it again), one made after it that nothing
/// was written (`Failed`: a retry after a restart counts once).
#[test]
fn an_append_written_before_a_failed_sync_is_not_synced_and_a_later_one_failed() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
    let waiting = log.write_lines(&line("b", 2)).unwrap();
    log.fail();
    log.commit.sealed(waiting.generation + 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert!(matches!(
            log.synced(waiting).await,
            Err(AppendError::NotSynced)
        ));
        assert!(matches!(
            log.append_async(&line("c", 3)).await,
            Err(AppendError::Failed)
        ));
    });
}

/// A log whose write failed (the file may end in part of an append) takes no more
/// appends, but still seals what it answered: the flush moves it on.
#[test]
fn a_log_whose_write_failed_still_seals_what_it_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
    log.append(&line("a", 1)).unwrap();
    log.failed.store(true, Ordering::Relaxed);
    assert!(matches!(
        log.append(&line("b", 2)),
        Err(AppendError::Failed)
    ));
    assert!(log.seal(3, 9).unwrap());
    let sealed = log.sealed().unwrap();
    let content = read_sealed_whole(&sealed[0].path).unwrap();
    assert_eq!(content.entries.len(), 1);
}

/// A stream file a kill cut inside its last line (a carry cut short) is rewritten by the
/// next carry, not appended to: appended, the first line carried would be glued to the
/// fragment and its point lost.
#[test]
fn a_stream_file_cut_inside_a_line_is_rewritten_by_the_next_carry() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        log.carry_streams(&[stream(1, 10, 5)]).unwrap();
    }
    let path = dir.path().join(streams::FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut cut = Vec::new();
    stream(2, 10, 7).write_line(&mut cut);
    bytes.extend(&cut[..cut.len() / 2]);
    std::fs::write(&path, &bytes).unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
    log.carry_streams(&[stream(3, 20, 9)]).unwrap();
    drop(log);
    let (_, lines) = streams::read(dir.path()).unwrap();
    let mut points: Vec<(u128, u64, i64)> =
        lines.iter().map(|l| (l.stream, l.time, l.value)).collect();
    points.sort_unstable();
    assert_eq!(points, [(1, 10, 5), (3, 20, 9)]);
}

/// A sealed file of many appends for few rows is read one append at a time: the callback
/// sees one request's lines each time, never the file's, so what grows with the file is
/// only what the caller keeps (here two sums). Cut and garbled appends are still counted
/// and skipped whole.
#[test]
fn a_sealed_file_is_read_one_append_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = IngestLog::open(dir.path(), 1 << 24, 1, RETENTION).unwrap();
    let now = unix_now();
    const APPENDS: i64 = 500;
    for i in 0..APPENDS {
        let mut lines = Vec::new();
        for j in 0..4 {
            lines.extend(line(if j % 2 == 0 { "a" } else { "b" }, i + j));
        }
        key(&format!("k{i}"), now).write_line(&mut lines);
        log.append(&lines).unwrap();
    }
    assert!(log.seal(1, 1).unwrap());
    let path = log.sealed().unwrap()[0].path.clone();
    // A whole-length append with a line that does not read (valid JSON, not an
    // increment), then an append cut inside its last line.
    let mut tail = b"{\"g\":2}\n".to_vec();
    tail.extend(line("a", 1000));
    tail.extend(b"{\"n\":1,\"d\":2,\"m\":3}\n");
    tail.extend(b"{\"g\":2}\n");
    tail.extend(line("b", 1000));
    tail.extend(b"{\"n\":\"b\",\"d\"");
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&tail)
        .unwrap();
    let mut sums = std::collections::BTreeMap::<String, i64>::new();
    let (mut calls, mut keys) = (0_i64, 0_usize);
    let unread = read_sealed(&path, |append| {
        calls += 1;
        assert_eq!(
            (append.entries.len(), append.keys.len()),
            (4, 1),
            "one request's lines at a time"
        );
        keys += append.keys.len();
        for entry in append.entries.drain(..) {
            *sums.entry(entry.name).or_default() += entry.delta;
        }
    })
    .unwrap();
    assert_eq!(calls, APPENDS);
    assert_eq!(keys, APPENDS as usize);
    assert_eq!(
        unread,
        2 + 2,
        "the garbled append's two lines, the cut one's two"
    );
    let (a, b): (i64, i64) = (0..APPENDS)
        .map(|i| (2 * i + 2, 2 * i + 4))
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    assert_eq!(sums.len(), 2);
    assert_eq!((sums["a"], sums["b"]), (a, b));
}

/// A start keeps the keys of the appends the flusher takes, and only those: the
/// increments are parsed as the flusher parses them (then dropped), so an append with a
/// line that is JSON but no increment gives no key, which would otherwise answer a retry
/// whose increments the flusher skipped.
#[test]
fn a_start_keeps_no_key_of_an_append_the_flusher_skips() {
    let dir = tempfile::tempdir().unwrap();
    let now = unix_now();
    let mut bytes = b"{\"g\":2}\n".to_vec();
    bytes.extend(line("a", 1));
    key("taken", now).write_line(&mut bytes);
    bytes.extend(b"{\"g\":2}\n");
    bytes.extend(b"{\"n\":1,\"d\":2,\"m\":3}\n");
    key("skipped", now).write_line(&mut bytes);
    fs::write(dir.path().join(sealed_name(1, 1)), &bytes).unwrap();
    let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
    let keys = log.take_recovered_keys();
    assert_eq!(
        keys.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(),
        ["taken"]
    );
    let content = read_sealed_whole(&log.sealed().unwrap()[0].path).unwrap();
    assert_eq!(
        (content.entries.len(), content.keys.len(), content.unread),
        (1, 1, 2)
    );
}

/// Keys bounded as they are read keep what `retain` keeps of them all: duplicates, ties
/// of time, expired keys and more keys than the bound, in any number of steps.
#[test]
fn keys_bounded_as_they_come_keep_what_retain_keeps_of_them_all() {
    let now = unix_now();
    let all: Vec<KeyLine> = (0..200_i64)
        .map(|i| {
            // 20 names, each back with the same time and another answer (a tie the
            // later answer wins), times shared across names, some long expired.
            let at = if i % 11 == 0 {
                now - 700
            } else {
                now - 300 + i % 10
            };
            KeyLine {
                answer: format!("{i}"),
                ..key(&format!("k{}", i % 20), at)
            }
        })
        .collect();
    let mut bounded = Vec::new();
    for key in &all {
        bounded.push(key.clone());
        bound_keys(&mut bounded, RETENTION);
        assert!(bounded.len() <= 2 * RETENTION.max_keys + 1);
    }
    assert_eq!(retain(bounded, RETENTION, now), retain(all, RETENTION, now));
}

/// A sealed file's stream lines kept one per stream fold as all of them do: resets,
/// ties, points out of order.
#[test]
fn stream_lines_kept_one_per_stream_fold_as_all_of_them() {
    let lines: Vec<StreamLine> = (0..300_u64)
        .map(|i| StreamLine {
            start: 1 + i % 5 / 4,
            ..stream(u128::from(i % 7), (i * 13) % 40, i as i64)
        })
        .collect();
    let held = RecoveredStreams {
        complete_since: Some(1),
        lines: vec![stream(3, 39, -1), stream(9, 2, -2)],
    };
    let mut whole = held.clone();
    whole.fold(lines.clone(), 6, 100);
    let mut latest = std::collections::HashMap::new();
    for line in lines {
        streams::keep_latest(&mut latest, line);
    }
    assert_eq!(latest.len(), 7);
    let mut kept = held;
    kept.fold(latest.into_values(), 6, 100);
    assert_eq!(kept, whole);
}
