//! The Unix socket file rules: its mode, stale and live sockets, files that are not sockets, removal only while ours, nothing left by a failed start, no change in place.

use super::*;

#[test]
fn socket_file_mode_is_exactly_the_configured_one() {
    for bits in [0o600, 0o660, 0o622, 0o666] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = unix_only(dir.path());
        config.uds.mode = SocketMode::new(bits).unwrap();
        config.uds_stream.mode = SocketMode::new(bits).unwrap();
        let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
        for path in [
            receivers.path(Transport::UnixDatagram).unwrap(),
            receivers.path(Transport::UnixStream).unwrap(),
        ] {
            assert!(fs::symlink_metadata(path).unwrap().file_type().is_socket());
            assert_eq!(mode_of(path), bits, "{} right after start", path.display());
        }
        assert!(leftover_private_dirs(dir.path()).is_empty());
        receivers.shutdown();
    }
}

#[test]
fn stale_sockets_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let uds = config.uds.path.clone().unwrap();
    let stream = config.uds_stream.path.clone().unwrap();
    // Leave socket files nobody listens on, as a crashed process would.
    drop(UnixDatagram::bind(&uds).unwrap());
    drop(UnixListener::bind(&stream).unwrap());
    let old_inode = fs::symlink_metadata(&uds).unwrap().ino();

    let seen = Arc::new(Seen::default());
    let receivers = start(&config, recording(&seen)).unwrap();
    assert_ne!(fs::symlink_metadata(&uds).unwrap().ino(), old_inode);
    let sender = UnixDatagram::unbound().unwrap();
    sender.send_to(b"fresh:1|c", &uds).unwrap();
    UnixStream::connect(&stream)
        .unwrap()
        .write_all(&frame(b"fresh:2|c"))
        .unwrap();
    wait_until("both packets", || seen.count() == 2);
    receivers.shutdown();
}

#[test]
fn live_sockets_are_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("taken.sock");

    let live_dgram = UnixDatagram::bind(&path).unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::InUse {
                transport: Transport::UnixDatagram,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("taken.sock"), "{err}");
    // The live socket still works.
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"x", &path)
        .unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(live_dgram.recv(&mut buf).unwrap(), 1);
    drop(live_dgram);
    fs::remove_file(&path).unwrap();

    let _live_listener = UnixListener::bind(&path).unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds_stream.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::InUse {
                transport: Transport::UnixStream,
                ..
            }
        ),
        "{err}"
    );
    // A live stream socket at the datagram path is also "in use" (probe gets EPROTOTYPE).
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(matches!(&err, ListenError::InUse { .. }), "{err}");
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_socket());
    assert!(leftover_private_dirs(dir.path()).is_empty());
}

#[test]
fn non_socket_files_are_refused_and_never_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious.txt");
    fs::write(&path, b"do not delete").unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::NotASocket {
                kind: "regular file",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("precious.txt"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), b"do not delete");

    let sub = dir.path().join("a-directory");
    fs::create_dir(&sub).unwrap();
    config.uds.path = None;
    config.uds_stream.path = Some(sub.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::NotASocket {
                kind: "directory",
                ..
            }
        ),
        "{err}"
    );
    assert!(sub.is_dir());
}

#[test]
fn socket_files_are_removed_on_shutdown_only_if_still_ours() {
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let uds = config.uds.path.clone().unwrap();
    let stream = config.uds_stream.path.clone().unwrap();
    let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
    assert!(uds.exists() && stream.exists());
    // Someone replaced the stream socket file with their own file meanwhile.
    fs::remove_file(&stream).unwrap();
    fs::write(&stream, b"not ours").unwrap();
    receivers.shutdown();
    assert!(
        fs::symlink_metadata(&uds).is_err(),
        "our socket file must be removed"
    );
    assert_eq!(fs::read(&stream).unwrap(), b"not ours");
    assert!(leftover_private_dirs(dir.path()).is_empty());
}

#[test]
fn a_failed_start_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = unix_only(dir.path());
    let blocker = config.uds_stream.path.clone().unwrap();
    fs::write(&blocker, b"in the way").unwrap();
    config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    let seen = Arc::new(Seen::default());
    let err = start(&config, recording(&seen)).unwrap_err();
    assert!(matches!(err, ListenError::NotASocket { .. }), "{err}");
    // The UDP thread and the datagram socket file, set up before the failure, are gone.
    assert!(fs::symlink_metadata(config.uds.path.as_ref().unwrap()).is_err());
    assert!(leftover_private_dirs(dir.path()).is_empty());
    // Each started handler got its final idle() when its thread was stopped.
    assert_eq!(seen.handlers.load(Ordering::SeqCst), 2);
    assert!(seen.idles.load(Ordering::SeqCst) >= 2);
}

/// Every inotify event on the children of `dir` during `during`, as (name, flags).
fn directory_events(
    dir: &Path,
    during: impl FnOnce(),
) -> Vec<(String, rustix::fs::inotify::ReadFlags)> {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).unwrap();
    inotify::add_watch(
        &fd,
        dir,
        WatchFlags::CREATE | WatchFlags::ATTRIB | WatchFlags::MOVED_TO,
    )
    .unwrap();
    during();
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 64 * 1024];
    let mut reader = inotify::Reader::new(&fd, &mut buf);
    let mut events = Vec::new();
    while let Ok(event) = reader.next() {
        let name = event
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        events.push((name, event.events()));
    }
    events
}

#[test]
fn socket_file_appears_with_its_final_mode_and_is_never_changed_in_place() {
    use rustix::fs::inotify::ReadFlags;
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let mut receivers = None;
    let events = directory_events(dir.path(), || {
        receivers = Some(start(&config, recording(&Arc::new(Seen::default()))).unwrap());
    });
    for name in ["dsd.sock", "dsd-stream.sock"] {
        let seen: Vec<ReadFlags> = events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .collect();
        // Created (linked) once, already complete: no chmod, no bind at the visible path.
        assert_eq!(seen, vec![ReadFlags::CREATE], "{name}: {events:?}");
    }
    receivers.unwrap().shutdown();
}
