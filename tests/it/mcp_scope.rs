//! Scoped MCP server instances (`scope = "bot" | "server" | "agent"`), driven through the commands
//! agents run (`McpTool::run` with the context the runtime gives, which names the agent and where
//! it was started): the memory server from the npm registry keeps one Discord server's graph from
//! another's, and one agent's from another's under `agent`; against the edge-case server, a stuck
//! instance is restarted without touching a call in flight on another, idle instances stop, and
//! their number stays within `max_instances`.

use std::sync::Arc;
use std::time::Duration;

use autothread::config::{McpServerConfig, SandboxConfig, WebConfig};
use autothread::core::history::Outcome;
use autothread::core::state::{AgentState, GuildId, Spender};
use autothread::mcp::{McpServer, StateRoot};
use autothread::store::Store;
use autothread::tools::Command;
use serde_json::json;

use crate::support;
use support::inproc::run_command;

const EDGE_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/mcp_edge_server.py"
);

/// An agent `id` started in Discord server `guild` (or in the console when `None`).
fn agent(id: &str, guild: Option<u64>) -> AgentState {
    let mut state = AgentState::for_test(id);
    state.money.spender = Spender {
        user: Some(if guild.is_some() { "7" } else { "console" }.into()),
        guild: guild.map(GuildId::from),
    };
    state
}

/// The server's commands by name.
struct Tools(Vec<Arc<dyn Command>>);

impl Tools {
    fn get(&self, name: &str) -> &dyn Command {
        self.0
            .iter()
            .find(|c| c.spec().name == name)
            .unwrap_or_else(|| panic!("no command {name}"))
            .as_ref()
    }
}

/// What a command answered, success or failure, and which it was.
fn said(outcome: &Outcome) -> (bool, String) {
    match outcome {
        Outcome::Success(text) => (true, text.clone()),
        Outcome::Error(text) => (false, text.clone()),
        other => (false, format!("{other:?}")),
    }
}

/// The memory server configured with `more`, its instances' directories under `root`.
async fn memory_server(
    program: &str,
    more: &str,
    root: &std::path::Path,
) -> (Arc<McpServer>, Tools) {
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"memory\"\ncommand = \"{program}\"\nenv = {{ MEMORY_FILE_PATH = \"{{instance_dir}}/memory.jsonl\" }}\n{more}"
    ))
    .unwrap();
    let server = McpServer::open(
        &config,
        &WebConfig::default(),
        &SandboxConfig::default(),
        StateRoot::Kept(root.to_path_buf()),
    )
    .unwrap();
    let tools = Tools(server.commands().await.unwrap());
    (server, tools)
}

fn memory_program() -> Option<String> {
    crate::mcp_registry::npm_server("MCP_MEMORY_SERVER", "mcp-server-memory")
}

/// `by` stores an entity; returns what each of `readers` then reads of the graph.
async fn remembered_by(
    store: &Store,
    tools: &Tools,
    by: &AgentState,
    readers: &[&AgentState],
) -> Vec<String> {
    let created = run_command(
        store,
        tools.get("memory.create_entities"),
        by,
        json!({"entities": [{"name": "launch", "entityType": "plan", "observations": ["the launch code is 0420"]}]}),
    )
    .await;
    assert!(said(&created).0, "{created:?}");
    let mut read = Vec::new();
    for reader in readers {
        let graph = run_command(store, tools.get("memory.read_graph"), reader, json!({})).await;
        let (ok, text) = said(&graph);
        assert!(ok, "{text}");
        read.push(text);
    }
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_scoped_per_discord_server_keeps_each_servers_memory_graph_apart() {
    let Some(program) = memory_program() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // As a data directory is: only the bot's user may enter it. A confined server running as a
    // user of its own (the bot is root) still reaches its instance's directory below it.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let root = dir.path().join("mcp");
    // A program is scoped per Discord server when the config says nothing.
    let (server, tools) = memory_server(&program, "", &root).await;
    assert_eq!(
        server.config().scope(),
        autothread::config::McpScope::Server
    );
    let (alice, bob, carol, console) = (
        agent("alice1", Some(1)),
        agent("bob2", Some(2)),
        agent("carol1", Some(1)),
        agent("dave", None),
    );
    let read = remembered_by(&store, &tools, &alice, &[&bob, &carol, &console, &alice]).await;
    assert!(
        !read[0].contains("0420"),
        "another server's agent: {}",
        read[0]
    );
    assert!(
        read[1].contains("0420"),
        "the same server's agent: {}",
        read[1]
    );
    assert!(
        !read[2].contains("0420"),
        "the console's agent: {}",
        read[2]
    );
    assert!(read[3].contains("0420"), "{}", read[3]);
    // The listing's instance, and one per place: Discord servers 1 and 2, the console.
    assert_eq!(server.running_instances(), 4);
    let graph_of =
        |place: &str| std::fs::read_to_string(root.join("memory").join(place).join("memory.jsonl"));
    assert!(graph_of("server-1").unwrap().contains("0420"));
    assert!(!graph_of("server-2").unwrap_or_default().contains("0420"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_scoped_per_agent_shares_nothing_between_two_agents_of_one_server() {
    let Some(program) = memory_program() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let (server, tools) =
        memory_server(&program, "scope = \"agent\"\n", &dir.path().join("mcp")).await;
    let (alice, carol) = (agent("alice1", Some(1)), agent("carol1", Some(1)));
    let read = remembered_by(&store, &tools, &alice, &[&carol, &alice]).await;
    assert!(
        !read[0].contains("0420"),
        "another agent of the same server: {}",
        read[0]
    );
    assert!(read[1].contains("0420"), "{}", read[1]);
    assert_eq!(server.running_instances(), 3);
}

/// The edge server with `more` in its config, or `None` (said why) without python3.
async fn edge_server(more: &str) -> Option<(Arc<McpServer>, Tools)> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    crate::support::needs::needs(python)?;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"edge\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\n{UNCONFINED}{more}",
        UNCONFINED = crate::mcp_edge::UNCONFINED
    ))
    .unwrap();
    let server = McpServer::new(&config, &WebConfig::default()).unwrap();
    let tools = Tools(server.commands().await.unwrap());
    Some((server, tools))
}

/// The process id of `agent`'s instance of the edge server.
async fn pid_of(store: &Store, tools: &Tools, agent: &AgentState) -> i32 {
    let (ok, text) = said(&run_command(store, tools.get("edge.pid"), agent, json!({})).await);
    assert!(ok, "{text}");
    text.lines().last().unwrap().trim().parse().unwrap()
}

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, after)| after.trim_start().starts_with('Z')),
    }
}

/// Waits until every one of `pids` has ended, or fails after `within`.
async fn until_ended(pids: &[i32], within: Duration) {
    let started = std::time::Instant::now();
    while !pids.iter().all(|pid| ended(*pid)) {
        assert!(
            started.elapsed() < within,
            "still running after {within:?}: {:?}",
            pids.iter().filter(|pid| !ended(**pid)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_instance_is_restarted_without_touching_a_call_in_flight_on_another() {
    let Some((_server, tools)) = edge_server("scope = \"agent\"\ntimeout_secs = 2\n").await else {
        return;
    };
    let tools = Arc::new(tools);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let (stuck, busy) = (agent("stuck", Some(1)), agent("busy", Some(1)));
    let (stuck_pid, busy_pid) = (
        pid_of(&store, &tools, &stuck).await,
        pid_of(&store, &tools, &busy).await,
    );
    assert_ne!(stuck_pid, busy_pid, "an instance each");
    // A ten-second call on one instance, kept alive by its progress.
    let in_flight = {
        let (store, tools, busy) = (store.clone(), tools.clone(), busy.clone());
        tokio::spawn(async move {
            run_command(
                &store,
                tools.get("edge.slow"),
                &busy,
                json!({"seconds": 10}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The other instance stops reading: its call times out, it fails a ping, and it is restarted.
    let (ok, failed) =
        said(&run_command(&store, tools.get("edge.freeze"), &stuck, json!({})).await);
    assert!(!ok && failed.contains("restarted"), "{failed}");
    assert!(
        !in_flight.is_finished(),
        "the restart came before the other call ended"
    );
    let (ok, text) = said(&in_flight.await.unwrap());
    assert!(ok && text.contains("done after 10.0 s"), "{text}");
    assert_eq!(
        pid_of(&store, &tools, &busy).await,
        busy_pid,
        "not restarted"
    );
    assert_ne!(pid_of(&store, &tools, &stuck).await, stuck_pid, "restarted");
    until_ended(&[stuck_pid], Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_instances_stop_and_their_number_stays_within_the_bound() {
    let Some((server, tools)) =
        edge_server("scope = \"agent\"\nidle_secs = 2\nmax_instances = 2\n").await
    else {
        return;
    };
    let tools = Arc::new(tools);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let (a, b, c) = (
        agent("a", Some(1)),
        agent("b", Some(1)),
        agent("c", Some(1)),
    );
    // The listing's instance and a's fill the two places; b's takes the place of the listing's,
    // idle the longest.
    assert_eq!(server.running_instances(), 1);
    let a_pid = pid_of(&store, &tools, &a).await;
    assert_eq!(server.running_instances(), 2);
    let b_pid = pid_of(&store, &tools, &b).await;
    assert_eq!(server.running_instances(), 2);
    assert_eq!(
        pid_of(&store, &tools, &a).await,
        a_pid,
        "a's instance was kept"
    );
    // Both in a call: c is refused at once, saying why, and nothing is stopped.
    let slow = |who: &AgentState| {
        let (store, tools, who) = (store.clone(), tools.clone(), who.clone());
        tokio::spawn(async move {
            run_command(&store, tools.get("edge.slow"), &who, json!({"seconds": 2})).await
        })
    };
    let (a_call, b_call) = (slow(&a), slow(&b));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let (ok, refused) = said(&run_command(&store, tools.get("edge.pid"), &c, json!({})).await);
    assert!(
        !ok && refused.contains("already runs 2 instances"),
        "{refused}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "it did not wait"
    );
    assert!(said(&a_call.await.unwrap()).0 && said(&b_call.await.unwrap()).0);
    assert!(!ended(a_pid) && !ended(b_pid));
    // Two seconds without a call, and both stop.
    until_ended(&[a_pid, b_pid], Duration::from_secs(10)).await;
    assert_eq!(server.running_instances(), 0);
    // The next call starts its agent's instance again.
    assert_ne!(pid_of(&store, &tools, &a).await, a_pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_shows_each_servers_scope() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    if crate::support::needs::needs(python).is_none() {
        return;
    }
    let openai =
        support::fake_openai::FakeOpenAi::start(support::fake_openai::Expect::test_model()).await;
    let env = support::TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n[[mcp.servers]]\nname = \"edge\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\n\n[[mcp.servers]]\nname = \"mine\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\nscope = \"agent\"\n"
    ));
    std::fs::write(&path, config).unwrap();
    let (_, out, err) = env.run(&["check"]).await;
    let line = |name: &str| -> String {
        out.lines()
            .find(|l| l.contains(&format!("{name} (the program python3")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}\n{err}"))
            .to_string()
    };
    let edge = line("edge");
    assert!(
        edge.contains("scope server: an instance per Discord server"),
        "{edge}"
    );
    assert!(
        line("mine").contains("scope agent: an instance per agent"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_a_dying_server_runs_again_only_when_its_tool_only_reads() {
    let dir = tempfile::tempdir().unwrap();
    // The markers' folder is the one the confined server may write, as its own user when the
    // bot is root.
    let markers = dir.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    std::fs::set_permissions(
        &markers,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let more = format!("scope = \"agent\"\npaths = [\"{}\"]\n", markers.display());
    let Some((server, tools)) = edge_server(&more).await else {
        return;
    };
    let store = Store::open(&dir.path().join("store")).unwrap();
    let reader = agent("reader", Some(1));
    let first = pid_of(&store, &tools, &reader).await;
    // The read-only tool kills its server the first time: it is run again on the restarted
    // instance, and the agent gets its answer.
    let marker = markers.join("read-marker");
    let marker_arg = json!({"marker": marker.display().to_string()});
    let (ok, text) =
        said(&run_command(&store, tools.get("edge.read_or_die"), &reader, marker_arg).await);
    assert!(ok && text.contains("ran with"), "{text}");
    let second = pid_of(&store, &tools, &reader).await;
    assert_ne!(second, first, "restarted");
    // The other kills it too, and is not run again: the agent is told it may not have run.
    let marker = markers.join("write-marker");
    let (ok, text) = said(
        &run_command(
            &store,
            tools.get("edge.write_or_die"),
            &reader,
            json!({"marker": marker.display().to_string()}),
        )
        .await,
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains("it was restarted") && text.contains("Whether the call ran"),
        "{text}"
    );
    assert!(marker.exists());
    assert_ne!(pid_of(&store, &tools, &reader).await, second, "restarted");
    // The listing's instance and the reader's: a restart starts no other.
    assert_eq!(server.running_instances(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_agent_ends_its_own_instance_and_removes_its_directory_only() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    if crate::support::needs::needs(python).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let root = dir.path().join("mcp");
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"edge\"\ncommand = \"python3\"\nargs = [\"{EDGE_SERVER}\"]\nscope = \"agent\"\n{UNCONFINED}",
        UNCONFINED = crate::mcp_edge::UNCONFINED
    ))
    .unwrap();
    let server = McpServer::open(
        &config,
        &WebConfig::default(),
        &SandboxConfig::default(),
        StateRoot::Kept(root.clone()),
    )
    .unwrap();
    let tools = Tools(server.commands().await.unwrap());
    let (alice, bob) = (agent("alice1", Some(1)), agent("bob2", Some(1)));
    let alice_pid = pid_of(&store, &tools, &alice).await;
    let bob_pid = pid_of(&store, &tools, &bob).await;
    let own = |id: &str| root.join("edge").join(format!("agent-{id}"));
    std::fs::write(own("alice1").join("notes.txt"), "alice's state").unwrap();
    // An agent whose instance is not running (the bot restarted since) still has its directory.
    std::fs::create_dir_all(own("olga3")).unwrap();
    server.forget_agent("alice1").await.unwrap();
    server.forget_agent("olga3").await.unwrap();
    until_ended(&[alice_pid], Duration::from_secs(10)).await;
    assert!(!own("alice1").exists(), "alice's directory is removed");
    assert!(!own("olga3").exists(), "olga's directory is removed");
    // Bob's instance runs on, with its directory, in the same process.
    assert!(own("bob2").exists());
    assert!(!ended(bob_pid));
    assert_eq!(pid_of(&store, &tools, &bob).await, bob_pid);
    // Forgetting an agent with nothing left is no error.
    server.forget_agent("alice1").await.unwrap();
}
