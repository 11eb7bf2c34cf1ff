//! The `autothread` binary: parses the command line, sets up logging, runs the chosen command.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than glibc's malloc: a cycle allocates and frees many short-lived buffers
/// (prompts, JSON, compressed records), and glibc spent about a tenth of the bot's time
/// consolidating free chunks (`cargo bench --bench cycle -- console` under `perf`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// No transparent huge pages for this process: mimalloc asks for them for its arenas, and the
/// bot's heap is small and scattered, so 2 MiB pages only inflated RSS (a 1,000-cycle console run
/// peaked at 118 MiB instead of 91) for no measurable speed.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: a process-wide flag with no pointers; failure leaves huge pages allowed, harmlessly.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

fn main() -> ExitCode {
    no_huge_pages();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_or_else(
            |error| {
                eprintln!("error: cannot start the async runtime: {error}");
                ExitCode::from(2)
            },
            |runtime| runtime.block_on(run()),
        )
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
