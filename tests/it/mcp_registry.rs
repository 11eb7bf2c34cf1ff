//! MCP against servers from the npm registry, installed by `scripts/mcp-test-servers.sh` (which
//! `.ci/run` runs): the protocol's reference server (`@modelcontextprotocol/server-everything`)
//! and a stateful one (`@modelcontextprotocol/server-memory`). Outside CI a missing server skips
//! the test saying why; under CI=true it fails it.

use std::time::{Duration, Instant};

use autothread::config::{McpServerConfig, WebConfig};
use autothread::mcp::McpServer;
use serde_json::json;

/// The installed server `bin`: from `variable`, or where the script installs it.
pub(crate) fn npm_server(variable: &str, bin: &str) -> Option<String> {
    let installed = format!(
        "{}/target/mcp-npm/node_modules/.bin/{bin}",
        env!("CARGO_MANIFEST_DIR")
    );
    let found = std::env::var(variable)
        .ok()
        .filter(|path| !path.is_empty())
        .or_else(|| {
            std::path::Path::new(&installed)
                .exists()
                .then_some(installed)
        });
    crate::support::needs::needs(found.ok_or_else(|| {
        format!("{bin} is not installed (run scripts/mcp-test-servers.sh; .ci/run does)")
    }))
}

fn server(name: &str, program: &str, more: &str) -> std::sync::Arc<McpServer> {
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"{name}\"\ncommand = \"{program}\"\n{more}"
    ))
    .unwrap();
    McpServer::new(&config, &WebConfig::default()).unwrap()
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_tools_show_their_choices_and_its_progress_extends_the_wait() {
    let Some(program) = npm_server("MCP_EVERYTHING_SERVER", "mcp-server-everything") else {
        return;
    };
    let everything = server(
        "everything",
        &program,
        "args = [\"stdio\"]\ntimeout_secs = 2\n",
    );
    let commands = everything.commands().await.unwrap();
    let specs: Vec<_> = commands.iter().map(|c| c.spec()).collect();
    let annotated = specs
        .iter()
        .find(|s| s.name == "everything.get-annotated-message")
        .unwrap_or_else(|| panic!("{:?}", specs.iter().map(|s| &s.name).collect::<Vec<_>>()));
    // The model reads the allowed values and the default in the tool's line.
    assert!(
        annotated.description.contains("one of error|success|debug"),
        "{}",
        annotated.description
    );
    assert!(
        annotated.description.contains("default false"),
        "{}",
        annotated.description
    );
    let echoed = everything
        .call(
            "echo",
            json!({"message": "hello from autothread"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    assert!(
        text_of(&echoed).contains("hello from autothread"),
        "{echoed:?}"
    );
    // Five seconds of work against a two-second timeout, kept alive by its progress notifications.
    let started = Instant::now();
    let long = everything
        .call(
            "trigger-long-running-operation",
            json!({"duration": 5, "steps": 10})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(started.elapsed() >= Duration::from_secs(4), "{long:?}");
    assert_ne!(long.is_error, Some(true), "{long:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_server_keeps_what_an_agent_tells_it() {
    let Some(program) = npm_server("MCP_MEMORY_SERVER", "mcp-server-memory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The confined server writes only where its config says, as its own user when the bot is root.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let file = dir.path().join("memory.jsonl");
    let memory = server(
        "memory",
        &program,
        &format!(
            "env = {{ MEMORY_FILE_PATH = \"{}\" }}\npaths = [\"{}\"]\n",
            file.display(),
            dir.path().display()
        ),
    );
    let names: Vec<String> = memory
        .commands()
        .await
        .unwrap()
        .iter()
        .map(|c| c.spec().name)
        .collect();
    assert!(
        names.contains(&"memory.create_entities".to_string()),
        "{names:?}"
    );
    memory
        .call(
            "create_entities",
            json!({"entities": [{"name": "autothread", "entityType": "bot", "observations": ["runs agents in threads"]}]})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    let graph = memory
        .call("read_graph", serde_json::Map::new())
        .await
        .unwrap();
    assert!(
        text_of(&graph).contains("runs agents in threads"),
        "{graph:?}"
    );
    assert!(file.exists(), "the graph is in the file the config gave it");
}
