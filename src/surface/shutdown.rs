//! The signal that ends a long-running surface (`run`'s Discord client, `serve`'s API): one
//! place, so that both surfaces stop on the same signals and neither imports the other.

/// Resolves with the signal's name at SIGTERM (a deploy, `docker stop`) or SIGINT (Ctrl+C).
pub(crate) async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for SIGTERM; only Ctrl+C shuts down gracefully");
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
