//! The driver wrapper's cost per call (criterion; `cargo bench --bench wrapper`).
//!
//! Three variants, one counter increment per call, 100 distinct rows, with 1 and 2 threads
//! (figures are per call, per thread):
//!
//! - `recorder_incr`: `Recorder::incr` with a name and one tag (the in-process baseline),
//!   into a memory sink;
//! - `wrapped_execute`: `CounterSession::execute_unpaged` on a prepared counter UPDATE of
//!   an application table, wrapping a session to cqlsim: buffered, nothing sent;
//! - `plain_execute`: the plain driver's `Session::execute_unpaged` of the same statement
//!   to the same cqlsim in this process: what every call costs without pre-aggregation.
//!
//! Neither the recorder nor the wrapper flushes while measuring (the interval is set
//! beyond the run). A buffered call completes when first polled, so the wrapper's calls
//! are polled once in place, as an `.await` in a task would; the plain driver's calls run
//! on a multi-threaded runtime, each thread blocking on its own sequence of awaits.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlDate};

use countersink::config::Config;
use countersink::sink::memory::MemorySink;
use countersink::{CounterSession, Recorder};

type Op = Arc<dyn Fn(usize, u64) + Send + Sync>;

const ROWS: usize = 128;

/// Runs `ops` calls of `op` on each of `threads` threads; returns the wall time.
fn run_threads(threads: usize, ops: u64, op: &Op) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (barrier, op) = (barrier.clone(), op.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..ops {
                    op(t, i);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("thread");
    }
    start.elapsed()
}

/// Polls `future` once in place; a buffered call is ready then. Blocks on `runtime` if not.
fn poll_once_or_block<F: Future>(runtime: &tokio::runtime::Handle, future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => runtime.block_on(future),
    }
}

fn pages() -> Arc<Vec<String>> {
    Arc::new((0..ROWS).map(|i| format!("p{i:04}")).collect())
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    store: cqlsim::Server,
    _state: [tempfile::TempDir; 2],
    recorder: Recorder,
    wrapped: Arc<CounterSession>,
    plain: Arc<Session>,
    wrapped_update: PreparedStatement,
    plain_update: PreparedStatement,
}

fn setup() -> Setup {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let state = [
        tempfile::tempdir().expect("state dir"),
        tempfile::tempdir().expect("state dir"),
    ];
    let config = |dir: &std::path::Path| {
        let mut config = Config::default();
        config.state.dir = dir.to_owned();
        config.flush.interval = Duration::from_secs(24 * 3600);
        config
    };
    let parts = runtime.block_on(async {
        let store = cqlsim::Server::start(cqlsim::Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            ..Default::default()
        })
        .await
        .expect("cqlsim");
        store
            .execute_script(
                None,
                "CREATE KEYSPACE app WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
                 CREATE TABLE app.views_by_minute (page_id text, day date, minute smallint,
                     views counter, PRIMARY KEY ((page_id, day), minute));",
            )
            .expect("schema");
        let builder = SessionBuilder::new().known_node(store.local_addr().to_string());
        let text = "UPDATE app.views_by_minute SET views = views + ? WHERE page_id = ? AND day = ? AND minute = ?";
        let plain = Arc::new(builder.build().await.expect("session"));
        let plain_update = plain.prepare(text).await.expect("prepare");
        let wrapped = CounterSession::new(builder.build().await.expect("session"), &config(state[0].path()))
            .await
            .expect("wrapper");
        let wrapped_update = wrapped.prepare(text).await.expect("prepare");
        let recorder = Recorder::start(&config(state[1].path()), MemorySink::new())
            .await
            .expect("recorder");
        (store, recorder, wrapped, plain, wrapped_update, plain_update)
    });
    let (store, recorder, wrapped, plain, wrapped_update, plain_update) = parts;
    Setup {
        runtime,
        store,
        _state: state,
        recorder,
        wrapped: Arc::new(wrapped),
        plain,
        wrapped_update,
        plain_update,
    }
}

fn wrapper(c: &mut Criterion) {
    let s = setup();
    let pages = pages();
    let day = CqlDate((1 << 31) + 20_787);
    let handle = s.runtime.handle().clone();
    let mut group = c.benchmark_group("wrapper");
    for threads in [1, 2] {
        group.throughput(Throughput::Elements(threads as u64));
        let recorder_incr: Op = {
            let (recorder, pages) = (s.recorder.clone(), pages.clone());
            Arc::new(move |t, i| {
                let page = &pages[(i as usize * 7 + t) & (ROWS - 1)];
                let _ = recorder.incr("page.views", &[("page_id", page)], 1);
            })
        };
        let wrapped_execute: Op = {
            let (session, update, pages, handle) = (
                s.wrapped.clone(),
                s.wrapped_update.clone(),
                pages.clone(),
                handle.clone(),
            );
            Arc::new(move |t, i| {
                let page = &pages[(i as usize * 7 + t) & (ROWS - 1)];
                let call = session.execute_unpaged(&update, (Counter(1), page, day, 1_i16));
                poll_once_or_block(&handle, call).expect("buffered");
            })
        };
        let plain_execute: Op = {
            let (session, update, pages, handle) = (
                s.plain.clone(),
                s.plain_update.clone(),
                pages.clone(),
                handle.clone(),
            );
            Arc::new(move |t, i| {
                let page = &pages[(i as usize * 7 + t) & (ROWS - 1)];
                handle
                    .block_on(session.execute_unpaged(&update, (Counter(1), page, day, 1_i16)))
                    .expect("sent");
            })
        };
        for (name, op) in [
            ("recorder_incr", &recorder_incr),
            ("wrapped_execute", &wrapped_execute),
            ("plain_execute", &plain_execute),
        ] {
            group.bench_function(format!("{name}_{threads}t"), |b| {
                b.iter_custom(|iters| run_threads(threads, iters, op));
            });
        }
    }
    group.finish();
    let stats = s.wrapped.stats();
    assert_eq!(
        stats.passed_through_total(),
        0,
        "every wrapped call was buffered: {stats:?}"
    );
    let Setup {
        runtime,
        store,
        recorder,
        wrapped,
        ..
    } = s;
    runtime.block_on(async {
        recorder.shutdown().await;
        if let Ok(wrapped) = Arc::try_unwrap(wrapped) {
            wrapped.shutdown().await;
        }
        store.shutdown().await.expect("cqlsim stops");
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = wrapper
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
