//! The `countersink` command: sidecar, dev mode and operator tools (see `countersink --help`).

fn main() -> std::process::ExitCode {
    countersink::cli::main()
}
