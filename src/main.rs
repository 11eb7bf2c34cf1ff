//! The `autothread` binary: sets the allocator up, parses the command line, sets up logging, builds
//! the tokio runtime and runs the chosen command (`cli::run`); an error exits with code 2.
//!
//! On Linux with glibc, before any thread starts, the mmap threshold is fixed at 1 MiB (glibc
//! otherwise raises it as large blocks are freed, and sled's 8 MiB log-segment buffers then came
//! from the threads' heap arenas) and the arenas at one per core (at least two). A `heap-trim`
//! thread then hands free pages back every few seconds, since glibc returns only the top of each
//! heap by itself. The runtime has one thread for `console` (`Cli::serves_one_agent`) and one per
//! core otherwise. Logs go to stderr, filtered by `RUST_LOG`.

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

/// How often the heap's free pages are handed back to the system (see `hand_back_free_pages`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

fn main() -> ExitCode {
    // Set before any thread starts: mallopt is not meant to race with allocation in other threads.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // glibc gives each thread that finds the arenas busy a new one, up to eight per core,
        // and memory freed in one arena serves only that arena's threads. The runtime's worker
        // and blocking threads allocate and free the same kinds of objects, so one arena per
        // core (at least two) keeps the heap's free memory where it is used again.
        let arenas = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        // SAFETY: mallopt only changes allocator parameters; no thread exists yet to allocate.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
            libc::mallopt(
                libc::M_ARENA_MAX,
                libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX),
            );
        }
        hand_back_free_pages();
    }
    let cli = autothread::cli::Cli::parse();
    let mut runtime = if cli.serves_one_agent() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::from(2)
        }
    }
}

/// glibc returns free memory to the system only from the top of each heap, so pages freed in
/// the middle stay resident however long they are unused: heaptrack saw the bot's live heap stay
/// flat while its resident memory grew. `malloc_trim` releases every arena's free pages; a thread
/// does so every `HEAP_TRIM_EVERY`, which costs a few milliseconds of one core a time. With this
/// and the arena limit, a 30-minute soak of 300 agents held 222 MiB on average against 236.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn hand_back_free_pages() {
    let spawned = std::thread::Builder::new()
        .name("heap-trim".into())
        .spawn(|| loop {
            std::thread::sleep(HEAP_TRIM_EVERY);
            // SAFETY: malloc_trim only releases free memory; it is safe with other threads.
            unsafe {
                libc::malloc_trim(0);
            }
        });
    if let Err(error) = spawned {
        eprintln!("warning: cannot start the heap trimmer: {error}");
    }
}

async fn run(cli: autothread::cli::Cli) -> ExitCode {
    // Logs go to stderr so the console's own output on stdout stays readable and scriptable.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    // Colours only for a person at a terminal; a file or a log collector gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // Every line goes through the redacting writer: the libraries name a URL MCP server's
        // whole address (and its key) in their own lines, at every level (see `config::redact`).
        .with_writer(|| autothread::config::redact::Redacting::new(std::io::stderr()));
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
