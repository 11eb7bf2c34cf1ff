//! The `autothread` binary: parses the command line, sets up logging, runs the chosen command.

use std::process::ExitCode;

use clap::Parser;

/// Large allocations at or above this size are always mapped and unmapped on their own.
///
/// glibc raises its mmap threshold each time such a block is freed, up to 32 MiB. sled allocates
/// one buffer the size of a log segment (8 MiB) for every segment it writes, so after the first
/// one was freed the later ones came from the threads' heap arenas, which need not give freed
/// pages back. Fixing the threshold stops the raising, so each buffer goes back to the system
/// when sled drops it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: libc::c_int = 1 << 20;

fn main() -> ExitCode {
    // Set before any thread starts: mallopt is not meant to race with allocation in other threads.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; no thread exists yet to allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> ExitCode {
    let cli = autothread::cli::Cli::parse();
    // Logs go to stderr so the console's own output on stdout stays readable and scriptable.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    // Colours only for a person at a terminal; a file or a log collector gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        autothread::cli::LogFormat::Json => logs.json().init(),
        autothread::cli::LogFormat::Text => logs.init(),
    }
    match autothread::cli::run(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
