//! MCP results as real servers send them, against the small edge-case server in
//! `fixtures/mcp_edge_server.py` (the reference servers do not produce these on demand): an answer
//! over the transport's bound fails at once with its size and leaves the server running; content
//! blocks of an unknown kind are skipped with a note; progress extends the wait; a timeout cancels
//! the call (`notifications/cancelled`) and keeps a server that still answers.

use std::time::{Duration, Instant};

use autothread::config::{McpServerConfig, WebConfig};
use autothread::mcp::McpServer;
use serde_json::{json, Value};

/// The edge server runs unconfined: it tests the protocol's edge cases and dies on purpose, and
/// its exits must not leave zombies of the sandbox's users while the sandbox's own tests count
/// theirs (mcp_box tests the confinement).
pub const UNCONFINED: &str = "confine = false\nnetwork = \"open\"\n";

const EDGE_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/mcp_edge_server.py"
);

/// The edge server as configured with `more`, or `None` (said why) without python3.
fn edge_server(more: &str) -> Option<std::sync::Arc<McpServer>> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    crate::support::needs::needs(python)?;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"edge\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\n{UNCONFINED}{more}"
    ))
    .unwrap();
    Some(McpServer::new(&config, &WebConfig::default()).unwrap())
}

fn no_arguments() -> serde_json::Map<String, Value> {
    serde_json::Map::new()
}

fn texts(result: &rmcp::model::CallToolResult) -> Vec<String> {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect()
}

async fn pid_of(server: &McpServer) -> String {
    texts(&server.call("pid", no_arguments()).await.unwrap()).join("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_transports_bound_fails_at_once_with_its_size_and_the_server_lives_on() {
    let Some(server) = edge_server("timeout_secs = 60\n") else {
        return;
    };
    server.commands().await.unwrap();
    let before = pid_of(&server).await;
    let started = Instant::now();
    let failure = server
        .call(
            "big",
            json!({"bytes": 17_000_000}).as_object().unwrap().clone(),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it failed at once, not at the timeout: {:?}",
        started.elapsed()
    );
    assert!(failure.0.contains("edge.big was 17.0 MB"), "{failure}");
    assert!(failure.0.contains("ask for less"), "{failure}");
    assert!(!failure.0.contains("restarted"), "{failure}");
    // The same process answers the next call, whole.
    assert_eq!(pid_of(&server).await, before);
    let small = server
        .call("big", json!({"bytes": 1000}).as_object().unwrap().clone())
        .await
        .unwrap();
    assert_eq!(texts(&small).join("").len(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_of_an_unknown_kind_are_skipped_with_a_note_and_the_readable_ones_kept() {
    let Some(server) = edge_server("") else {
        return;
    };
    server.commands().await.unwrap();
    let before = pid_of(&server).await;
    let result = server.call("mixed", no_arguments()).await.unwrap();
    let shown = texts(&result);
    assert!(shown.contains(&"readable text".to_string()), "{shown:?}");
    assert!(
        shown
            .iter()
            .any(|t| t.contains("'hologram'") && t.contains("skipped")),
        "{shown:?}"
    );
    assert!(
        result.content.iter().any(|b| b.as_image().is_some()),
        "the image is kept: {result:?}"
    );
    assert_ne!(result.is_error, Some(true));
    assert_eq!(
        pid_of(&server).await,
        before,
        "the server was not restarted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_extends_the_wait_and_a_timeout_cancels_the_call_without_a_restart() {
    let Some(server) = edge_server("timeout_secs = 2\n") else {
        return;
    };
    server.commands().await.unwrap();
    let before = pid_of(&server).await;
    // Four seconds against a two-second timeout: the progress every half second keeps it alive.
    let slow = server
        .call("slow", json!({"seconds": 4}).as_object().unwrap().clone())
        .await
        .unwrap();
    assert_eq!(texts(&slow), ["done after 4.0 s"]);
    // A call that never ends is cancelled at the timeout; the server, which still answers, runs on.
    let failure = server.call("hang", no_arguments()).await.unwrap_err();
    assert!(
        failure.0.contains("did not answer within 2 s")
            && failure.0.contains("cancelled")
            && failure.0.contains("still runs"),
        "{failure}"
    );
    assert!(!failure.0.contains("restarted"), "{failure}");
    let told = texts(&server.call("cancelled", no_arguments()).await.unwrap()).join("");
    let cancelled: Vec<Value> = serde_json::from_str(&told).unwrap();
    assert_eq!(
        cancelled.len(),
        1,
        "the server was told of the cancellation: {told}"
    );
    assert_eq!(
        pid_of(&server).await,
        before,
        "the server was not restarted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_at_start_says_why_with_its_last_words_and_no_type_names() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    if crate::support::needs::needs(python).is_none() {
        return;
    }
    let config: McpServerConfig = toml::from_str(
        "name = \"broken\"\ncommand = \"python3\"\nconfine = false\nnetwork = \"open\"\nargs = [\"-c\", \"import sys; sys.stderr.write('ModuleNotFoundError: frobnicate\\\\n'); sys.exit(3)\"]\n",
    )
    .unwrap();
    let failed = McpServer::new(&config, &WebConfig::default())
        .unwrap()
        .commands()
        .await
        .err()
        .expect("the server exits at once")
        .to_string();
    assert!(
        failed.contains("the MCP server 'broken' did not start"),
        "{failed}"
    );
    assert!(
        failed.contains("it last wrote: ModuleNotFoundError: frobnicate"),
        "{failed}"
    );
    assert!(
        !failed.contains("Some(") && !failed.contains("{ "),
        "no Rust values in the reason: {failed}"
    );
}
