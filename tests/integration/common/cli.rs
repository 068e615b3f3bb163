//! Running the `countersink` binary the way scripts and operators do.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_countersink");

/// Runs `countersink ARGS...` to completion.
pub(crate) fn run_cli<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(BIN).args(args).output().expect("runs")
}

/// Runs `countersink ARGS...`, asserts it succeeded, and returns its stdout.
pub(crate) fn cli_stdout<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = run_cli(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `countersink get` of counter `name` with tag `tag` (`key:value`) on `day`, reading
/// with the configuration `file` (and `contact` as its contact point, when given), then
/// `extra` flags: its stdout.
pub(crate) fn cli_get(
    file: &str,
    contact: Option<&str>,
    (name, tag, day): (&str, &str, &str),
    extra: &[&str],
) -> String {
    let mut args = vec!["get", "--config", file];
    if let Some(contact) = contact {
        args.extend(["--contact-point", contact]);
    }
    args.extend([name, "--tag", tag, "--day", day]);
    args.extend_from_slice(extra);
    cli_stdout(args)
}

/// `countersink serve ARGS...` running as a child process.
pub(crate) struct Serve {
    child: Child,
    stderr: Lines<BufReader<ChildStderr>>,
}

impl Serve {
    /// Starts `countersink serve ARGS...` and waits until it logged that it connected to
    /// the store (its log goes to stderr).
    pub(crate) fn start<I, S>(args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(args)
            // The log filter is the file's: the tests read its lines.
            .env_remove("COUNTERSINK_LOG")
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawns");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        for line in stderr.by_ref() {
            let line = line.expect("stderr line");
            if line.contains("Connected to the store") {
                return Serve { child, stderr };
            }
            seen.push(line);
        }
        let status = child.wait().expect("waits");
        panic!(
            "serve exited ({status}) before connecting:\n{}",
            seen.join("\n")
        );
    }

    /// Sends it `signal` (`HUP`, `TERM`, ...) without waiting for anything.
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .expect("kill runs")
                .success()
        );
    }

    /// Reads its log until a line contains `text`, and returns that line.
    pub(crate) fn log_until(&mut self, text: &str) -> String {
        for line in self.stderr.by_ref() {
            let line = line.expect("stderr line");
            if line.contains(text) {
                return line;
            }
        }
        panic!("serve's log ended without a line containing {text:?}");
    }

    /// Kills it with SIGKILL (a crash: no shutdown runs) and waits for it to be gone.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("waits");
    }

    /// Sends SIGTERM and waits for the exit: the status, and how long it took.
    pub(crate) fn terminate(mut self) -> (ExitStatus, Duration) {
        let pid = self.child.id().to_string();
        let sent = Instant::now();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .expect("kill runs")
                .success()
        );
        // Keep reading its log so that it never blocks on a full pipe.
        for _ in self.stderr.by_ref() {}
        let status = self.child.wait().expect("waits");
        (status, sent.elapsed())
    }
}

/// A test that fails half-way must not leave a sidecar behind.
impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
