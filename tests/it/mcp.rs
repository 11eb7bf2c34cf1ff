//! MCP tools against a server nobody here wrote: the reference time server, installed from the
//! Python package registry by `scripts/mcp-test-servers.sh` (which `.ci/run` runs). Its tools
//! become commands; a server that dies or hangs fails the call clearly and is restarted; a URL
//! goes through the web guard; an agent in the console uses a tool once approved.

use std::time::Duration;

use autothread::config::{McpServerConfig, WebConfig};
use autothread::mcp::McpServer;
use serde_json::{json, Value};

use crate::support;
use support::fake_openai::{agent_reply, progress_of, Expect, FakeOpenAi, Reply};
use support::TestEnv;

/// The time server's path: from MCP_TIME_SERVER, or where the script installs it. `None` (the
/// test says why and returns) outside CI; under CI=true a missing server fails the test.
fn time_server() -> Option<String> {
    let installed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/mcp-venv/bin/mcp-server-time"
    );
    let found = std::env::var("MCP_TIME_SERVER")
        .ok()
        .filter(|path| !path.is_empty())
        .or_else(|| {
            std::path::Path::new(installed)
                .exists()
                .then(|| installed.to_string())
        });
    if found.is_none() {
        crate::support::needs::unmet(
            "the MCP time server is not installed (run scripts/mcp-test-servers.sh; .ci/run does)",
        );
    }
    found
}

fn server_config(program: &str, more: &str) -> McpServerConfig {
    // Unconfined: this machine's time server runs on an interpreter under root's private home,
    // which a server's own user cannot reach (mcp_box tests the confinement).
    toml::from_str(&format!(
        "name = \"time\"\ncommand = \"{program}\"\nconfine = false\nnetwork = \"open\"\n{more}"
    ))
    .unwrap()
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Processes started by this test process whose command line holds `marker`.
fn children_with(marker: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let after = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let running = fields.first() != Some(&"Z");
            (running
                && fields.get(1) == Some(&me.as_str())
                && String::from_utf8_lossy(&cmdline).contains(marker))
            .then_some(pid)
        })
        .collect()
}

/// Waits until the server's process under this test process is exactly one, and returns it.
async fn the_server_process(marker: &str, not: Option<i32>) -> i32 {
    for _ in 0..200 {
        let found: Vec<i32> = children_with(marker)
            .into_iter()
            .filter(|pid| Some(*pid) != not)
            .collect();
        if found.len() == 1 {
            return found[0];
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no single server process for {marker}: {:?}",
        children_with(marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_servers_tools_become_commands_and_answer() {
    let Some(program) = time_server() else { return };
    // The time zone argument tells this test's server process from the other tests'.
    let config = server_config(
        &program,
        "args = [\"--local-timezone\", \"Europe/Paris\"]\nenv = { MCP_TEST_ONLY = \"given\" }\n",
    );
    let server = McpServer::new(&config, &WebConfig::default()).unwrap();
    let commands = server.commands().await.unwrap();
    let mut names: Vec<String> = commands.iter().map(|c| c.spec().name).collect();
    names.sort();
    assert_eq!(names, ["time.convert_time", "time.get_current_time"]);
    let current = commands
        .iter()
        .map(|c| c.spec())
        .find(|s| s.name == "time.get_current_time")
        .unwrap();
    assert_eq!(current.risk, autothread::core::commands::Risk::External);
    assert!(current.reads_untrusted);
    assert_eq!(current.args.len(), 1);
    assert!(current.args[0].required);
    assert!(
        current.description.contains("timezone: IANA timezone name"),
        "{}",
        current.description
    );
    // Its own schema goes into the reply schema, for a decoder that follows it.
    assert_eq!(
        current.args_schema()["properties"]["timezone"]["type"],
        json!("string")
    );
    assert_eq!(
        current.prompt_line().split(':').next(),
        Some("time.get_current_time(timezone)")
    );

    let answer = server
        .call(
            "get_current_time",
            json!({"timezone": "Etc/UTC"}).as_object().unwrap().clone(),
        )
        .await
        .unwrap();
    let text = text_of(&answer);
    let parsed: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(parsed["timezone"], "Etc/UTC", "{text}");
    assert_ne!(answer.is_error, Some(true));
    // A wrong argument is the server's error, told as one; the server lives on.
    let wrong = server
        .call(
            "get_current_time",
            json!({"timezone": "Mars/Olympus"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await;
    match wrong {
        Ok(result) => {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            assert!(text_of(&result).contains("Mars/Olympus"), "{result:?}");
        }
        Err(failure) => assert!(failure.0.contains("refused the call"), "{failure}"),
    }
    // Its environment is the operator's and what it needs to run: nothing else of the bot's.
    let pid = the_server_process("Europe/Paris", None).await;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut keys: Vec<String> = String::from_utf8_lossy(&environ)
        .split('\0')
        .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_string()))
        .collect();
    keys.sort();
    // (A confined program with the default guarded network is also given the egress proxy.)
    keys.retain(|k| {
        !["HOME", "LANG", "PATH", "TMPDIR", "NODE_USE_ENV_PROXY"].contains(&k.as_str())
            && !k.to_ascii_uppercase().ends_with("_PROXY")
    });
    assert_eq!(keys, ["MCP_TEST_ONLY"], "the server's environment");

    // The deny list hides a tool; the allow list keeps only those it names.
    for more in [
        "deny = [\"convert_time\"]\n",
        "allow = [\"get_current_time\"]\n",
    ] {
        let config = server_config(&program, more);
        let listed = McpServer::new(&config, &WebConfig::default())
            .unwrap()
            .commands()
            .await
            .unwrap();
        let names: Vec<String> = listed.iter().map(|c| c.spec().name).collect();
        assert_eq!(names, ["time.get_current_time"], "{more}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_or_hangs_fails_the_call_clearly_and_is_restarted() {
    let Some(program) = time_server() else { return };
    let marker = "Europe/Lisbon";
    let config = server_config(
        &program,
        "args = [\"--local-timezone\", \"Europe/Lisbon\"]\ntimeout_secs = 3\n",
    );
    let server = McpServer::new(&config, &WebConfig::default()).unwrap();
    server.commands().await.unwrap();
    let utc = || json!({"timezone": "Etc/UTC"}).as_object().unwrap().clone();
    let first = the_server_process(marker, None).await;

    // Killed: the call after it either finds the server gone and starts it again, or fails
    // saying it was restarted; the one after that is answered.
    // SAFETY: a signal to a child process of this test.
    unsafe { libc::kill(first, libc::SIGKILL) };
    match server.call("get_current_time", utc()).await {
        Ok(answer) => assert!(text_of(&answer).contains("Etc/UTC")),
        Err(failure) => assert!(failure.0.contains("it was restarted"), "{failure}"),
    }
    let answer = server.call("get_current_time", utc()).await.unwrap();
    assert!(text_of(&answer).contains("Etc/UTC"));
    let second = the_server_process(marker, Some(first)).await;

    // Hung (stopped): the call ends at the timeout, says so, and a new server answers next.
    // SAFETY: as above.
    unsafe { libc::kill(second, libc::SIGSTOP) };
    let started = std::time::Instant::now();
    let failure = server.call("get_current_time", utc()).await.unwrap_err();
    assert!(
        failure.0.contains("did not answer within 3 s") && failure.0.contains("it was restarted"),
        "{failure}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let answer = server.call("get_current_time", utc()).await.unwrap();
    assert!(text_of(&answer).contains("Etc/UTC"));
    // The hung one is ended, not left behind.
    for _ in 0..300 {
        if !children_with(marker).contains(&second) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !children_with(&program).contains(&second),
        "the hung server still runs"
    );
}

#[tokio::test]
async fn a_url_on_a_private_address_needs_the_web_allow_list() {
    let config: McpServerConfig =
        toml::from_str("name = \"local\"\nurl = \"http://127.0.0.1:9/mcp?key=hunter2\"\n").unwrap();
    let refused = McpServer::new(&config, &WebConfig::default())
        .err()
        .expect("a private address is refused")
        .to_string();
    assert!(refused.contains("web.allow_hosts"), "{refused}");
    assert!(!refused.contains("hunter2"), "{refused}");
    // Allowed, it is tried, and a server that is not there is a clear failure.
    let web: WebConfig = toml::from_str("allow_hosts = [\"127.0.0.1\"]\n").unwrap();
    let server = McpServer::new(&config, &web).unwrap();
    let failed = server
        .commands()
        .await
        .err()
        .expect("nothing listens there")
        .to_string();
    assert!(failed.contains("the MCP server 'local'"), "{failed}");
    assert!(!failed.contains("hunter2"), "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_in_the_console_uses_an_mcp_tool_once_approved() {
    let Some(program) = time_server() else { return };
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    fake.push_checked(
        Reply::Content(agent_reply(
            "time.get_current_time",
            json!({"timezone": "Asia/Tokyo"}),
        )),
        Some(Box::new(|body: &Value| {
            let prompt = body.to_string();
            match prompt.contains("time.get_current_time(timezone)")
                && prompt.contains("The tools of the MCP server time")
            {
                true => Ok(()),
                false => Err("the prompt lists the MCP tool and names the server".into()),
            }
        })),
    );
    fake.push_checked(
        Reply::Content(agent_reply("finish", json!({"reason": "told the time"}))),
        Some(Box::new(|body: &Value| {
            let progress = progress_of(body);
            match progress.contains("Asia/Tokyo") && progress.contains("untrusted") {
                true => Ok(()),
                false => Err(format!("the tool's answer is in the history:\n{progress}")),
            }
        })),
    );
    let env = TestEnv::new(&fake.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n[[mcp.servers]]\nname = \"time\"\ncommand = \"{program}\"\nconfine = false\nnetwork = \"open\"\n"
    ));
    std::fs::write(&path, config).unwrap();
    // An MCP tool is in the external class: asked for even in continuous mode.
    let (ok, out, err) = env
        .console_approving("What time is it in Tokyo?", "ClockGPT", 2)
        .await;
    assert!(out.contains("time.get_current_time"), "{out}");
    assert!(ok, "{out}{err}");
    fake.assert_clean();
}

/// A URL server's key, in its query and in a header, is in no line of the log even at trace level,
/// where the MCP library and the HTTP client name the whole URL (the fake fails the event stream,
/// so the library writes its ERROR line with the address), while the server gets both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_trace_level_no_log_line_shows_a_url_servers_query_token_or_header_value() {
    let (query_token, header_token) = ("qs-secret-51b2e8", "hdr-secret-7f3a9c");
    let authorization = format!("Bearer {header_token}");
    let mcp = support::fake_mcp::FakeMcpHttp::start(&authorization).await;
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n[web]\nenabled = false\nallow_hosts = [\"127.0.0.1\"]\n\n[[mcp.servers]]\nname = \"notes\"\nurl = \"{}/mcp?token={query_token}\"\nheaders = {{ Authorization = \"NOTES_MCP_AUTH\" }}\n",
        mcp.base_url
    ));
    std::fs::write(&path, config).unwrap();
    let mut command = env.command(&["check"]);
    command
        .env("RUST_LOG", "trace")
        .env("NOTES_MCP_AUTH", &authorization);
    let (_, out, err) = support::Running::new_public(command.spawn().unwrap())
        .finish(support::WAIT)
        .await;
    // The server was reached with both, and listed its tool.
    assert!(out.contains("notes.echo"), "{out}");
    let seen = mcp.seen();
    assert!(
        seen.iter()
            .any(|s| s.rpc_method.as_deref() == Some("tools/list")
                && s.authorization.as_deref() == Some(authorization.as_str())
                && s.query.as_deref() == Some(&format!("token={query_token}"))),
        "{seen:?}"
    );
    assert!(seen.iter().any(|s| s.http_method == "GET"), "{seen:?}");
    // The log was at trace, the libraries' lines included, and named the server's address.
    assert!(err.contains("TRACE") && err.contains("rmcp"), "{err}");
    assert!(err.contains(&mcp.base_url), "{err}");
    // A line would have shown a key, and shows `[redacted]` in its place.
    assert!(err.contains("[redacted]"), "{err}");
    for secret in [query_token, header_token] {
        assert!(!out.contains(secret), "{secret} in stdout:\n{out}");
        assert!(!err.contains(secret), "{secret} in the log");
    }
}
