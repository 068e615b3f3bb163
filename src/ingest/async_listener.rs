//! A request-based receiver's thread (the OTLP listeners, the HTTP increment API): an
//! async runtime of a given number of worker threads serving a TCP listener until the
//! receivers' stop flag is raised, then finishing the requests in flight for at most
//! [`SHUTDOWN_GRACE`], so that their increments reach the final flush and a stuck client
//! never holds the shutdown. Dropping the runtime at the end joins its workers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::IDLE_INTERVAL;
use super::worker::StopFlag;
use crate::vocabulary::Transport;

/// Longest wait, after the stop, for requests in flight to finish; what is still
/// unanswered then is cut off with its connection.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Completes once the stop flag is raised: the server's graceful-shutdown signal.
pub(super) type Stopped = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs `server` on `listener` until the stop, as described above, on a runtime of
/// `workers` threads named `worker_name`.
pub(super) fn serve<F, Fut>(
    transport: Transport,
    listener: std::net::TcpListener,
    stop: StopFlag,
    (workers, worker_name): (usize, &str),
    server: F,
) where
    F: FnOnce(tokio::net::TcpListener, Stopped) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name(worker_name)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "The {} receiver could not start its runtime.", transport.title());
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "The {} receiver could not register its socket.", transport.title());
                return;
            }
        };
        let (raised_tx, raised) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while !stop.is_raised() {
                tokio::time::sleep(IDLE_INTERVAL).await;
            }
            let _ = raised_tx.send(true);
        });
        let stopped: Stopped = {
            let mut raised = raised.clone();
            Box::pin(async move {
                let _ = raised.wait_for(|r| *r).await;
            })
        };
        let deadline = async move {
            let mut raised = raised;
            let _ = raised.wait_for(|r| *r).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            result = server(listener, stopped) => {
                if let Err(error) = result {
                    tracing::error!(%error, "The {} receiver failed.", transport.title());
                }
            }
            () = deadline => {
                tracing::warn!(
                    "The {} receiver stopped with requests still in flight after {:?}; their clients see the connection close.",
                    transport.title(),
                    SHUTDOWN_GRACE
                );
            }
        }
    });
}

/// Binds `addr` for an async listener (`SO_REUSEADDR`, as the standard library sets
/// it; non-blocking).
pub(super) fn bind(
    transport: Transport,
    addr: std::net::SocketAddr,
) -> Result<std::net::TcpListener, super::ListenError> {
    use super::Step;
    let fail = |step| move |e| super::ListenError::io(transport, addr.to_string(), step, e);
    let listener = std::net::TcpListener::bind(addr).map_err(fail(Step::Bind))?;
    listener
        .set_nonblocking(true)
        .map_err(fail(Step::SetOption("O_NONBLOCK")))?;
    Ok(listener)
}
