//! The `autothread` binary: parses the command line, sets up logging, runs the chosen command.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
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
