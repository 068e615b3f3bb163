//! The ingest log's group commit: one thread makes appends durable. A request writes
//! its lines (a `write` into the page cache, on the caller's thread), asks for a sync up
//! to its end, and waits to be told: an async task awaits a [`Notify`], a blocking caller
//! a condition variable. The thread syncs whatever was asked for last, which covers every
//! append made before it, and wakes every waiter once per `fdatasync`; a request asking
//! while a sync runs is covered by the next. No request needs a thread of its own, so
//! the wait is one wake-up, however many requests share it.
//!
//! A seal syncs the active file itself before renaming it: it tells the group commit
//! that every append of the earlier generations is covered. Once a sync failed (the
//! thread's or a seal's), every waiter is told so, covered or not by what came after:
//! a writeback error is reported once per file, so a later sync's success says nothing
//! of the pages that were lost.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;

/// The group commit of one ingest log, with its thread.
pub(super) struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// The thread waits here for something to sync.
    work: Condvar,
    /// Blocking waiters wait here for a sync.
    done: Condvar,
    /// Async waiters wait here for a sync.
    synced: Notify,
    syncs: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The generation (see `IngestLog`'s seals) and the length synced.
    generation: u64,
    upto: u64,
    /// The furthest append asked to be synced, and its file.
    want: Option<(u64, u64, Arc<File>)>,
    /// A sync failed: after a failed fsync the file's state is unknown.
    failed: bool,
    stop: bool,
}

impl State {
    fn covers(&self, generation: u64, end: u64) -> bool {
        self.generation > generation || self.generation == generation && self.upto >= end
    }
}

impl GroupCommit {
    /// Starts the thread.
    pub(super) fn start() -> io::Result<GroupCommit> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            synced: Notify::new(),
            syncs: AtomicU64::new(0),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("cs-ingest-sync".into())
                .spawn(move || run(&shared))?
        };
        Ok(GroupCommit {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for the append that ended at `end` of `generation`, in `file`, to be synced.
    pub(super) fn request(&self, generation: u64, end: u64, file: &Arc<File>) {
        let mut state = self.shared.state.lock();
        let further = match &state.want {
            Some((g, e, _)) => (generation, end) > (*g, *e),
            None => true,
        };
        if further && !state.covers(generation, end) {
            state.want = Some((generation, end, Arc::clone(file)));
            self.shared.work.notify_one();
        }
    }

    /// Waits until the append that ended at `end` of `generation` is synced; `false` when
    /// a sync failed.
    pub(super) async fn wait(&self, generation: u64, end: u64) -> bool {
        loop {
            let notified = self.shared.synced.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.shared.state.lock();
                if state.failed {
                    return false;
                }
                if state.covers(generation, end) {
                    return true;
                }
            }
            notified.await;
        }
    }

    /// The same, blocking.
    pub(super) fn wait_blocking(&self, generation: u64, end: u64) -> bool {
        let mut state = self.shared.state.lock();
        loop {
            if state.failed {
                return false;
            }
            if state.covers(generation, end) {
                return true;
            }
            self.shared.done.wait(&mut state);
        }
    }

    /// A seal synced every append before `generation` began (not taken once a sync
    /// failed: the seal's own sync may have succeeded over pages an earlier failure lost).
    pub(super) fn sealed(&self, generation: u64) {
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        let mut state = self.shared.state.lock();
        if state.failed {
            return;
        }
        if generation > state.generation {
            state.generation = generation;
            state.upto = 0;
        }
        if state.want.as_ref().is_some_and(|(g, _, _)| *g < generation) {
            state.want = None;
        }
        drop(state);
        self.wake_waiters();
    }

    /// A sync made elsewhere (the seal's) failed: every waiter is told so, and every
    /// later one.
    pub(super) fn fail(&self) {
        self.shared.state.lock().failed = true;
        self.wake_waiters();
    }

    /// Whether a sync failed.
    pub(super) fn failed(&self) -> bool {
        self.shared.state.lock().failed
    }

    /// Fsyncs made.
    pub(super) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    fn wake_waiters(&self) {
        wake(&self.shared);
    }
}

fn wake(shared: &Shared) {
    shared.done.notify_all();
    shared.synced.notify_waiters();
}

/// The thread: syncs what was asked for last, until stopped.
fn run(shared: &Shared) {
    let mut state = shared.state.lock();
    loop {
        if state.stop {
            return;
        }
        let Some((generation, end, file)) = state.want.take() else {
            shared.work.wait(&mut state);
            continue;
        };
        if state.covers(generation, end) {
            continue;
        }
        drop(state);
        let synced = file.sync_data();
        state = shared.state.lock();
        match synced {
            Ok(()) => {
                shared.syncs.fetch_add(1, Ordering::Relaxed);
                if (generation, end) > (state.generation, state.upto) {
                    state.generation = generation;
                    state.upto = end;
                }
            }
            Err(error) => {
                tracing::error!(%error, "The ingest log could not be synced: durable requests are refused until a restart.");
                state.failed = true;
            }
        }
        wake(shared);
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
