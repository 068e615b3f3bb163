//! Moving the ingest log into the spill, through a flusher on the in-memory sink.

use std::sync::Arc;

use crate::bucket;
use crate::config::Config;
use crate::engine::Engine;
use crate::flush::Flusher;
use crate::sink::MemorySink;
use crate::state::ingest_log::IngestEntry;
use crate::vocabulary::Granularity;

/// Logs one durable increment of `delta` to `name` in this minute.
fn log_increment(flusher: &Flusher<MemorySink>, name: &str, delta: i64) {
    let now = bucket::unix_secs(std::time::SystemTime::now());
    let minute = bucket::Minute::from_unix_secs(now).unwrap().0;
    let mut line = Vec::new();
    IngestEntry::write_line(&mut line, name, &[("k", "v")], delta, minute);
    flusher
        .ingest_log()
        .expect("durable")
        .append(&line)
        .unwrap();
}

/// A sealed file unlinked by a round whose directory sync then failed (a full or failing
/// disk) is no longer listed, so that round's retry never came: the replay waited for
/// its removal until a restart, and every increment logged after it stayed on disk. The
/// next round completes the removal and the replay goes on.
#[tokio::test]
async fn a_removal_left_unfinished_is_completed_and_the_replay_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.state.dir = dir.path().to_owned();
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    let mut flusher = Flusher::open(engine, Arc::new(sink.clone()), &config).unwrap();
    log_increment(&flusher, "before", 3);
    for _ in 0..3 {
        flusher.flush_now().await;
    }
    assert_eq!(sink.total(Granularity::Minute), 3);

    // What such a round leaves: the file's path kept as not removed, the file gone.
    let gone = dir.path().join("ingest.0000000001.000000000001.sealed");
    assert!(!gone.exists());
    flusher.ingest_unremoved.insert(gone);
    log_increment(&flusher, "after", 4);
    for _ in 0..3 {
        flusher.flush_now().await;
    }
    assert!(
        flusher.ingest_unremoved.is_empty(),
        "the removal is completed"
    );
    assert_eq!(
        sink.total(Granularity::Minute),
        7,
        "the increments logged after it are replayed"
    );
}
