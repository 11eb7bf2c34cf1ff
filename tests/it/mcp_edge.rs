//! MCP results as real servers send them, against the small edge-case server in
//! `fixtures/mcp_edge_server.py` (the reference servers do not produce these on demand): an answer
//! over the transport's bound fails at once with its size and leaves the server running; content
//! blocks of an unknown kind are skipped with a note; progress extends the wait; a timeout cancels
//! the call (`notifications/cancelled`) and keeps a server that still answers; a server that exits
//! by itself is reaped at once; a tool that runs only as a task is left out, and `check` says so; a
//! result's image is saved in the workspace and named by its file; a changed list of tools
//! replaces the server's commands, and one no longer listed is refused. A URL server's answer over
//! the HTTP client's limit (against `support::fake_mcp`) fails at once too, as a JSON body or an
//! event stream.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_servers_answer_over_the_limit_fails_at_once_with_its_size_and_the_session_lives_on()
{
    let mcp = crate::support::fake_mcp::FakeMcpHttp::start_open().await;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"remote\"\nurl = \"{}/mcp\"\ntimeout_secs = 60\n",
        mcp.base_url
    ))
    .unwrap();
    let web = WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    };
    let server = McpServer::new(&config, &web).unwrap();
    server.commands().await.unwrap();
    for stream in [false, true] {
        let started = Instant::now();
        let failure = server
            .call(
                "big",
                json!({"bytes": 17_000_000, "stream": stream})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "it failed at once, not at the timeout (stream: {stream}): {:?}",
            started.elapsed()
        );
        assert!(
            failure.0.contains("remote.big was over 16.8 MB") && failure.0.contains("ask for less"),
            "stream: {stream}: {failure}"
        );
        assert!(!failure.0.contains("restart"), "{failure}");
        let small = server
            .call(
                "big",
                json!({"bytes": 1000, "stream": stream})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .await
            .unwrap();
        assert_eq!(texts(&small).join("").len(), 1000);
    }
    let sessions = mcp
        .seen()
        .iter()
        .filter(|seen| seen.rpc_method.as_deref() == Some("initialize"))
        .count();
    assert_eq!(sessions, 1, "the session was not started again");
}

/// Process `pid`'s state letter (`Z` for a zombie), or `None` once it is gone (reaped).
fn process_state(pid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    after.trim_start().chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_by_itself_is_reaped_at_once_and_leaves_no_zombie() {
    let Some(server) = edge_server("") else {
        return;
    };
    server.commands().await.unwrap();
    let pid = pid_of(&server).await;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let parent = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    assert_eq!(
        parent,
        std::process::id().to_string(),
        "the server is this process's child"
    );
    let said = server.call("exit_soon", no_arguments()).await.unwrap();
    assert_eq!(texts(&said), ["bye"]);
    // Nothing uses the server again: it is reaped all the same, within a bounded wait.
    let waited = Instant::now();
    while let Some(state) = process_state(&pid) {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "process {pid} is still there ({state}) {:?} after it exited",
            waited.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_runs_only_as_a_task_is_left_out_and_check_says_why() {
    let Some(server) = edge_server("") else {
        return;
    };
    let names: Vec<String> = server
        .commands()
        .await
        .unwrap()
        .iter()
        .map(|c| c.spec().name)
        .collect();
    assert!(names.contains(&"edge.pid".to_string()), "{names:?}");
    assert!(!names.contains(&"edge.research".to_string()), "{names:?}");
    let why = server.left_out().join("\n");
    assert!(
        why.contains("the tool research is left out: it must be run as a task"),
        "{why}"
    );
    // A URL server's listing, answered as a JSON body, is read the same way.
    let mcp = crate::support::fake_mcp::FakeMcpHttp::start_open().await;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"remote\"\nurl = \"{}/mcp\"\n",
        mcp.base_url
    ))
    .unwrap();
    let web = WebConfig {
        allow_hosts: vec!["127.0.0.1".into()],
        ..WebConfig::default()
    };
    let remote = McpServer::new(&config, &web).unwrap();
    let names: Vec<String> = remote
        .commands()
        .await
        .unwrap()
        .iter()
        .map(|c| c.spec().name)
        .collect();
    assert!(names.contains(&"remote.echo".to_string()), "{names:?}");
    assert!(!names.contains(&"remote.research".to_string()), "{names:?}");
    // `check` lists what agents get, and says why the rest is left out.
    let openai = crate::support::fake_openai::FakeOpenAi::start(
        crate::support::fake_openai::Expect::test_model(),
    )
    .await;
    let env = crate::support::TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut bot = std::fs::read_to_string(&path).unwrap();
    bot.push_str(&format!(
        "\n[[mcp.servers]]\nname = \"edge\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\n{UNCONFINED}"
    ));
    std::fs::write(&path, bot).unwrap();
    let (_, out, err) = env.run(&["check"]).await;
    let line = out
        .lines()
        .find(|l| l.contains("edge (the program python3"))
        .unwrap_or_else(|| panic!("no line for the server:\n{out}\n{err}"));
    let offered = line
        .split_once("tools offered (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(names, _)| names)
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        offered.contains("edge.pid") && !offered.contains("edge.research"),
        "{line}"
    );
    assert!(
        line.contains("the tool research is left out: it must be run as a task"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_list_of_tools_replaces_the_commands_and_a_removed_tool_is_refused_in_words() {
    let Some(server) = edge_server("") else {
        return;
    };
    let commands = server.commands().await.unwrap();
    let registry = std::sync::Arc::new(autothread::tools::Registry::new(commands.clone(), &[]));
    let weak = std::sync::Arc::downgrade(&registry);
    server.on_tools_changed(std::sync::Arc::new(
        move |fresh: Vec<std::sync::Arc<dyn autothread::tools::Command>>| {
            if let Some(registry) = weak.upgrade() {
                registry.replace_family("edge.", fresh, &[]);
            }
        },
    ));
    let names = || registry.command_set().names();
    assert!(names().contains(&"edge.mixed".to_string()), "{:?}", names());
    assert!(
        !names().contains(&"edge.added".to_string()),
        "{:?}",
        names()
    );
    let mixed = commands
        .iter()
        .find(|c| c.spec().name == "edge.mixed")
        .unwrap()
        .clone();
    let said = server.call("change_tools", no_arguments()).await.unwrap();
    assert_eq!(texts(&said), ["changed"]);
    // The server says its list changed; the bot lists it again, without being asked.
    let waited = Instant::now();
    while !names().contains(&"edge.added".to_string()) {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the new tool never came: {:?}",
            names()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !names().contains(&"edge.mixed".to_string()),
        "{:?}",
        names()
    );
    assert!(names().contains(&"edge.pid".to_string()), "{:?}", names());
    // A command made before the change, of a tool no longer listed, is refused in words.
    let dir = tempfile::tempdir().unwrap();
    let store = autothread::store::Store::open(dir.path()).unwrap();
    let agent = autothread::core::state::AgentState::for_test("a1");
    let outcome =
        crate::support::inproc::run_command(&store, mixed.as_ref(), &agent, json!({})).await;
    let autothread::core::history::Outcome::Error(refused) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        refused.contains("no longer offers the tool 'mixed'"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_in_a_result_is_saved_in_the_workspace_and_the_result_names_its_file() {
    let Some(server) = edge_server("") else {
        return;
    };
    let commands = server.commands().await.unwrap();
    let mixed = commands
        .iter()
        .find(|c| c.spec().name == "edge.mixed")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = autothread::store::Store::open(dir.path()).unwrap();
    let mut agent = autothread::core::state::AgentState::for_test("a1");
    agent.progress.cycle = 3;
    let output =
        crate::support::inproc::run_command_output(&store, mixed.as_ref(), &agent, json!({})).await;
    let autothread::core::history::Outcome::Success(text) = &output.outcome else {
        panic!("{output:?}");
    };
    let path = "images/3-edge-mixed-1.png";
    assert!(
        text.contains("[an image (image/png, ") && text.contains(&format!("saved as {path}]")),
        "{text}"
    );
    let [autothread::store::WorkspaceOp::Put {
        path: saved,
        contents,
    }] = output.ops.as_slice()
    else {
        panic!("{:?}", output.ops);
    };
    assert_eq!(saved, path);
    assert!(contents.starts_with(b"\x89PNG"), "{contents:?}");
}
