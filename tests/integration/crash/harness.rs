//! A store that outlives its writers, and `countersink serve` as a child process that a
//! test kills (SIGKILL) at a chosen step or at a random moment, then starts again on the
//! same state directory.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use countersink::ingest::client::{Client, Target};

use super::check::Model;
use crate::common::{BIN, FaultProxy, Store, config, start_cqlsim, start_store};

/// Settings of the serve runs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) interval: &'static str,
    pub(crate) requeue_max_age: &'static str,
    pub(crate) shutdown_deadline: &'static str,
    pub(crate) request_timeout: &'static str,
    pub(crate) max_spill_bytes: u64,
    pub(crate) max_log_bytes: u64,
    /// `limits.max_pending_bytes`: a quarter of it bounds one drain chunk's writes.
    pub(crate) max_pending_bytes: u64,
    /// Requests a flush keeps in flight.
    pub(crate) max_in_flight: usize,
    /// Whether the views family keeps exact totals (the delta ledger).
    pub(crate) exact: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: "150ms",
            requeue_max_age: "10m",
            shutdown_deadline: "2s",
            request_timeout: "1s",
            max_spill_bytes: 1 << 30,
            max_log_bytes: 64 << 20,
            max_pending_bytes: 256 << 20,
            max_in_flight: 64,
            exact: false,
        }
    }
}

/// The store, the state directory, the model of what was fed, and the kills so far.
pub(crate) struct Rig {
    store: RigStore,
    pub(crate) state: PathBuf,
    pub(crate) model: Model,
    /// Sum of the lost-at-crash figures (minute, day) the starts after each kill report.
    pub(crate) lost_bound: [i128; 2],
    pub(crate) kills: u64,
    /// A minute 40 minutes before the test began: client timestamps from here to now stay
    /// inside the accepted window (an hour back).
    pub(crate) base: i64,
    socket: PathBuf,
    config_file: PathBuf,
    contact: String,
    /// The rig's directory; kept after the test when `CRASH_KEEP` is set (its
    /// `serve.log` holds every run's log), to look into a failure.
    _dir: Option<tempfile::TempDir>,
}

/// The store a rig's runs write to.
enum RigStore {
    /// cqlsim, for its faults and request log (the checker reads it).
    Cqlsim(cqlsim::Server),
    /// The store the test run chose (a real node too), reached through a fault proxy.
    Proxied {
        store: Box<Store>,
        proxy: FaultProxy,
    },
}

/// One `countersink serve` process.
pub(crate) struct Serve {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
    /// The metrics endpoint, once its log line was read (it binds port 0: a port picked
    /// free beforehand can be taken by a test running beside this one before it binds).
    metrics: Option<SocketAddr>,
    fed: u64,
    /// The delta sum this run accepted, and when the last of it was seen accepted: rows
    /// accepted after the last `status.json` write are pending in memory without being in
    /// its figure (the product says so: "and whatever it received after").
    fed_sum: i128,
    accepted_at: Option<std::time::SystemTime>,
}

impl Rig {
    /// A rig on cqlsim, whose request log the checker reads.
    pub(crate) async fn new(settings: Settings) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = config(dir.path());
        config.families[0].exact = settings.exact;
        let server = start_cqlsim(
            &mut config,
            "kills serve and checks the store's request log",
        )
        .await
        .into_sim();
        server.enable_request_log();
        let contact = config.store.contact_points[0].clone();
        let example = Self::example(&settings);
        Self::with_store(RigStore::Cqlsim(server), contact, example, dir)
    }

    /// A rig on the store the test run chose (the real node too), its `serve` runs
    /// connected through a [`FaultProxy`]; the configuration file names this test's
    /// keyspaces. No request log: [`super::check::check`] needs [`Rig::new`].
    pub(crate) async fn on_any_store(settings: Settings) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = config(dir.path());
        config.families[0].exact = settings.exact;
        let store = start_store(&mut config).await;
        let proxy = FaultProxy::start(store.contact_point()).await;
        let example = store.config_file(&Self::example(&settings));
        let contact = proxy.addr();
        Self::with_store(
            RigStore::Proxied {
                store: Box::new(store),
                proxy,
            },
            contact,
            example,
            dir,
        )
    }

    /// The example configuration with the settings' values.
    fn example(settings: &Settings) -> String {
        include_str!("../../../examples/countersink.toml")
            .replace(
                "request_timeout = \"10s\"",
                &format!("request_timeout = \"{}\"", settings.request_timeout),
            )
            .replace(
                "interval = \"5s\"",
                &format!("interval = \"{}\"", settings.interval),
            )
            .replace("jitter = \"500ms\"", "jitter = \"0s\"")
            .replace(
                "requeue_max_age = \"10m\"",
                &format!("requeue_max_age = \"{}\"", settings.requeue_max_age),
            )
            .replace(
                "shutdown_deadline = \"20s\"",
                &format!("shutdown_deadline = \"{}\"", settings.shutdown_deadline),
            )
            .replace(
                "max_spill_bytes = 1073741824",
                &format!("max_spill_bytes = {}", settings.max_spill_bytes),
            )
            .replace(
                "max_pending_bytes = 268435456",
                &format!("max_pending_bytes = {}", settings.max_pending_bytes),
            )
            .replace(
                "max_in_flight = 64",
                &format!("max_in_flight = {}", settings.max_in_flight),
            )
            .replace(
                "max_log_bytes = 67108864",
                &format!("max_log_bytes = {}", settings.max_log_bytes),
            )
            .replace(
                "compares them.\nexact = false",
                &format!("compares them.\nexact = {}", settings.exact),
            )
    }

    fn with_store(
        store: RigStore,
        contact: String,
        example: String,
        dir: tempfile::TempDir,
    ) -> Rig {
        let config_file = dir.path().join("serve.toml");
        std::fs::write(&config_file, example).expect("config");
        Rig {
            contact,
            store,
            state: dir.path().join("state"),
            model: Model::default(),
            lost_bound: [0, 0],
            kills: 0,
            base: {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_secs() as i64;
                now - now % 60 - 40 * 60
            },
            socket: dir.path().join("stream.sock"),
            config_file,
            _dir: if std::env::var_os("CRASH_KEEP").is_some() {
                eprintln!(
                    "CRASH_KEEP: the rig's directory is kept: {}",
                    dir.keep().display()
                );
                None
            } else {
                Some(dir)
            },
        }
    }

    /// cqlsim, of a rig made with [`Rig::new`].
    pub(crate) fn server(&self) -> &cqlsim::Server {
        match &self.store {
            RigStore::Cqlsim(server) => server,
            RigStore::Proxied { .. } => panic!("a rig on any store has no cqlsim"),
        }
    }

    /// The store and the proxy the runs go through, of a rig made with
    /// [`Rig::on_any_store`].
    pub(crate) fn proxied(&self) -> (&Store, &FaultProxy) {
        match &self.store {
            RigStore::Proxied { store, proxy } => (store, proxy),
            RigStore::Cqlsim(_) => panic!("a cqlsim rig has no proxy"),
        }
    }

    /// Drops this test's keyspaces (on a shared node) and stops the store.
    pub(crate) async fn shutdown(self) {
        match self.store {
            RigStore::Cqlsim(server) => server.shutdown().await.expect("cqlsim stops"),
            RigStore::Proxied { store, .. } => store.shutdown().await,
        }
    }

    /// The configuration file the runs share.
    pub(crate) fn config_file(&self) -> &Path {
        &self.config_file
    }

    /// Starts `serve` (stopping at `crash_point` if given) and waits until it is
    /// connected and its recovery is done.
    pub(crate) fn start(&self, crash_point: Option<&str>) -> Serve {
        self.start_until(crash_point, "Connected to the store")
    }

    /// Starts `serve` and waits for a log line containing `until`.
    pub(crate) fn start_until(&self, crash_point: Option<&str>, until: &str) -> Serve {
        let mut command = Command::new(BIN);
        command
            .arg("serve")
            .arg("--config")
            .arg(&self.config_file)
            .args(["--udp", "off", "--uds-stream"])
            .arg(&self.socket)
            .args(["--metrics", "127.0.0.1:0"])
            .args(["--contact-point", &self.contact])
            .arg("--state-dir")
            .arg(&self.state)
            .env("COUNTERSINK_LOG", "info")
            .stderr(Stdio::piped());
        match crash_point {
            Some(point) => command.env("COUNTERSINK_CRASH_POINT", point),
            None => command.env_remove("COUNTERSINK_CRASH_POINT"),
        };
        let mut child = command.spawn().expect("serve spawns");
        let stderr = child.stderr.take().expect("stderr");
        let (send, lines) = mpsc::channel();
        // Every run's log, one file (for a failure kept with `CRASH_KEEP`).
        let mut kept = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.config_file.with_file_name("serve.log"))
            .ok();
        if let Some(file) = &mut kept {
            let _ = writeln!(file, "==> serve, crash point {crash_point:?}");
        }
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if let Some(file) = &mut kept {
                    let _ = writeln!(file, "{line}");
                }
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut serve = Serve {
            child,
            lines,
            log: Vec::new(),
            metrics: None,
            fed: 0,
            fed_sum: 0,
            accepted_at: None,
        };
        serve.wait_for(until, Duration::from_secs(20));
        serve
    }

    /// Sends increments `(page, unix time, delta)` over the Unix stream socket, adds them
    /// to the model, and waits until the process accepted all of them.
    pub(crate) fn feed(&mut self, serve: &mut Serve, increments: &[(u32, i64, i64)]) {
        let mut client = Client::connect(Target::UnixStream(self.socket.clone())).expect("connect");
        let lines: Vec<String> = increments
            .iter()
            .map(|(page, at, delta)| format!("page.views:{delta}|c|#page_id:p{page}|T{at}"))
            .collect();
        client
            .send_lines(lines.iter().map(String::as_str))
            .expect("send");
        for (page, at, delta) in increments {
            self.model.feed(*page, *at, *delta);
        }
        serve.fed += increments.len() as u64;
        serve.fed_sum += increments
            .iter()
            .map(|(_, _, d)| i128::from(*d))
            .sum::<i128>();
        let want = serve.fed;
        serve.wait_metric(|text| {
            metric(text, "countersink_increments_accepted_total") == Some(want as f64)
        });
        serve.accepted_at = Some(std::time::SystemTime::now());
    }

    /// SIGKILL, then reads the lost-at-crash figure the next start will report.
    pub(crate) fn kill(&mut self, mut serve: Serve) {
        serve.child.kill().expect("SIGKILL");
        serve.child.wait().expect("reaped");
        self.kills += 1;
        let path = self.state.join("status.json");
        let status: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("status.json")).expect("status");
        assert_eq!(status["clean"], false, "a killed run is unclean");
        // What this run accepted after its last status write is in memory and not in the
        // figure: at most everything it was fed (an upper bound; the rows' own checks stay
        // exact).
        let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let unreported = match (written, serve.accepted_at) {
            (Some(written), Some(accepted)) if written < accepted => serve.fed_sum,
            _ => 0,
        };
        for (i, field) in ["pending_sum", "pending_day_sum"].into_iter().enumerate() {
            let sum: i128 = status[field].as_str().unwrap_or("0").parse().unwrap_or(0);
            self.lost_bound[i] += sum + unreported;
        }
    }

    /// After a stop that was not a kill but left `status.json` unclean (a final flush that
    /// lost rows): adds its figure to the bound, as the next start reports it.
    pub(crate) fn account_unclean_stop(&mut self) {
        let status: serde_json::Value = serde_json::from_slice(
            &std::fs::read(self.state.join("status.json")).expect("status.json"),
        )
        .expect("status");
        assert_eq!(status["clean"], false);
        for (i, field) in ["pending_sum", "pending_day_sum"].into_iter().enumerate() {
            let sum: i128 = status[field].as_str().unwrap_or("0").parse().unwrap_or(0);
            self.lost_bound[i] += sum;
        }
    }

    /// Waits until nothing is pending and the spill is replayed, then SIGTERM; the stop
    /// must be clean.
    pub(crate) fn settle_and_stop(&mut self, mut serve: Serve) {
        serve.wait_metric(|text| {
            metric(text, "countersink_pending_rows") == Some(0.0)
                && metric(text, "countersink_spill_bytes") == Some(0.0)
                && metric(text, "countersink_flushes_total").is_some_and(|n| n >= 3.0)
        });
        self.terminate(serve);
    }

    /// SIGTERM and a clean exit.
    pub(crate) fn terminate(&mut self, serve: Serve) {
        self.terminate_any(serve);
        let status: serde_json::Value = serde_json::from_slice(
            &std::fs::read(self.state.join("status.json")).expect("status.json"),
        )
        .expect("status");
        assert_eq!(
            status["clean"], true,
            "a stop with nothing pending is clean"
        );
    }

    /// SIGTERM and exit code 0, whatever the status.
    pub(crate) fn terminate_any(&mut self, mut serve: Serve) {
        let pid = serve.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        let status = serve.child.wait().expect("waits");
        serve.drain();
        assert!(
            status.success(),
            "serve exited {status}:\n{}",
            serve.log.join("\n")
        );
    }

    /// The state directory's path.
    pub(crate) fn state(&self) -> &Path {
        &self.state
    }
}

impl Serve {
    /// SIGTERM, without waiting: the final flush runs (a test then waits for a crash
    /// point in it).
    pub(crate) fn request_stop(&self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
    }

    /// Waits for a line of the log containing `needle`.
    pub(crate) fn wait_for(&mut self, needle: &str, timeout: Duration) {
        if self.log.iter().any(|l| l.contains(needle)) {
            return;
        }
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!(
                    "`{needle}` never appeared in the log:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// Whether the log so far (read without waiting) contains `needle`.
    pub(crate) fn logged(&mut self, needle: &str) -> bool {
        self.drain();
        self.log.iter().any(|l| l.contains(needle))
    }

    /// The metrics endpoint's address, from its log line once it was written.
    fn metrics_addr(&mut self) -> Option<SocketAddr> {
        if self.metrics.is_none() {
            self.drain();
            self.metrics = self
                .log
                .iter()
                .filter(|l| l.contains("Serving metrics"))
                .find_map(|l| {
                    l.split("address=")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                });
        }
        self.metrics
    }

    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
    }

    /// Polls `/metrics` until `done` holds (10 s at most).
    pub(crate) fn wait_metric(&mut self, done: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        for _ in 0..400 {
            if let Some(addr) = self.metrics_addr()
                && let Ok(body) = scrape(addr)
            {
                if done(&body) {
                    return body;
                }
                text = body;
            }
            self.drain();
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "metrics never reached the state:\n{text}\nlog:\n{}",
            self.log.join("\n")
        );
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of an unlabelled metric (or the first series whose line starts with `name`).
pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default())
}
