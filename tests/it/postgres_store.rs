//! The store in PostgreSQL (`AUTOTHREAD_STORE_URL`), through the real binary against the scripted
//! fake model: a console agent's steps, journal and workspace live in the database, a SIGKILL
//! loses nothing and runs nothing twice, `migrate` and `check` work, and no line of any output
//! shows the database's password, at the most verbose log level.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind, Reply};
use support::postgres::fresh_database;
use support::{created_agent_id, TestEnv, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_agent_lives_in_postgres_across_a_sigkill_and_no_output_shows_the_password() {
    let Some((url, password)) = fresh_database().await else {
        return;
    };
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    let mut env = TestEnv::new(&fake.base_url, "");
    env.env.push(("AUTOTHREAD_STORE_URL".into(), url));
    env.env.push(("RUST_LOG".into(), "trace".into()));
    let mut everything = String::new();

    let (ok, stdout, stderr) = env.run(&["migrate"]).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("schema"), "{stdout}");
    everything.push_str(&(stdout + &stderr));

    fake.push_content(agent_reply(
        "append_to_file",
        json!({"filename": "log.txt", "text": "a\n"}),
    ));
    // The next reply never comes in time: the process is killed while it waits.
    fake.push(Reply::Delay(
        Duration::from_secs(30),
        Box::new(Reply::Content(agent_reply("do_nothing", json!({})))),
    ));
    let mut run = env.spawn(&[
        "console",
        "--continuous",
        "--task",
        "Log a line",
        "--name",
        "LogGPT",
    ]);
    run.type_lines(&[]).await;
    run.wait_for("SYSTEM: Command append_to_file returned", 1, WAIT)
        .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.requests(Kind::Cycle).len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second cycle never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = created_agent_id(&run.stdout());
    everything.push_str(&(run.stdout() + &run.stderr()));
    run.kill().await;

    fake.push_content(agent_reply("read_file", json!({"filename": "log.txt"})));
    fake.push_content(agent_reply("finish", json!({"reason": "logged"})));
    let mut run = env.spawn(&["console", "--resume", &id, "--continuous"]);
    run.type_lines(&["y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    everything.push_str(&(stdout.clone() + &stderr));
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("cycle 2, 1 steps so far"), "{stdout}");
    assert!(
        stdout.contains("SYSTEM: Command read_file returned: a\n"),
        "the append ran exactly once: {stdout}"
    );

    let (ok, stdout, stderr) = env.run(&["list"]).await;
    assert!(ok && stdout.contains("LogGPT"), "{stdout}{stderr}");
    everything.push_str(&(stdout + &stderr));
    let (_, stdout, stderr) = env.run(&["check"]).await;
    assert!(
        stdout.contains("opens in the PostgreSQL database of store.url (1 agents)"),
        "{stdout}{stderr}"
    );
    everything.push_str(&(stdout + &stderr));

    // Nothing of the store is in the data directory: sled never opened there.
    assert!(!env.data_dir().join("conf").exists());
    assert!(!env.data_dir().join("db").exists());
    assert!(
        everything.len() > 10_000,
        "trace logging was on: {} bytes",
        everything.len()
    );
    assert!(
        !everything.contains(&password),
        "the database's password reached the output"
    );
}
