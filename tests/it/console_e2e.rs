//! End to end: the real `autothread console` binary, driven through stdin, against the scripted
//! fake OpenAI server. Covers a 10-cycle task, every console answer, resume, follow-ups, crashes.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{agent_reply, progress_of, Check, Expect, FakeOpenAi, Kind, Reply};
use support::{created_agent_id, TestEnv};

use support::WAIT;

async fn fake() -> FakeOpenAi {
    FakeOpenAi::start(Expect::test_model()).await
}

fn expect_progress(needles: &'static [&'static str]) -> Option<Check> {
    Some(Box::new(move |body: &Value| {
        let progress = progress_of(body);
        for needle in needles {
            if !progress.contains(needle) {
                return Err(format!("Progress lacks {needle:?}:\n{progress}"));
            }
        }
        Ok(())
    }))
}

fn step(fake: &FakeOpenAi, command: &str, args: Value) {
    fake.push_content(agent_reply(command, args));
}

fn step_checked(fake: &FakeOpenAi, command: &str, args: Value, check: Option<Check>) {
    fake.push_checked(Reply::Content(agent_reply(command, args)), check);
}

async fn export(env: &TestEnv, id: &str) -> std::path::PathBuf {
    let out = env.dir.path().join("export");
    let (ok, stdout, stderr) = env
        .run(&["export", id, "--out", out.to_str().unwrap()])
        .await;
    assert!(ok, "export failed: {stdout}{stderr}");
    out
}

fn read(path: std::path::PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_ten_cycle_task_with_every_console_answer() {
    let fake = fake().await;
    fake.push_profile(
        json!({"name": "HaikuGPT", "description": "a poet who writes haiku into files.",
               "directives": {"best_practices": ["Count syllables."], "constraints": ["Write only haiku.txt and notes.txt."]}})
        .to_string(),
    );
    let haiku = "Ferris scuttles on\nborrowed memory returns\nno data races";
    // 1: approved with y.
    step(
        &fake,
        "write_file",
        json!({"filename": "haiku.txt", "contents": haiku}),
    );
    // 2: a fenced reply (repaired), approved with y -3.
    fake.push_checked(
        Reply::Content(format!(
            "Here is my answer:\n```json\n{}\n```",
            agent_reply("read_file", json!({"filename": "haiku.txt"}))
        )),
        expect_progress(&["### Step 1: `write_file("]),
    );
    // 3: a plain-text 429 first (retried), then the reply; runs automatically.
    fake.push(Reply::Status(429, "text/plain", "Too Many Requests".into()));
    step_checked(
        &fake,
        "append_to_file",
        json!({"filename": "haiku.txt", "text": "\n(by HaikuGPT)"}),
        expect_progress(&["Ferris scuttles on"]),
    );
    // 4: malformed, then re-asked with the parse error; the answer runs automatically.
    fake.push(Reply::Content("I will now list the folder.".into()));
    fake.push_checked(
        Reply::Content(agent_reply("list_folder", json!({}))),
        Some(Box::new(|body: &Value| {
            let last = body["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string();
            if last.contains("could not be used") {
                Ok(())
            } else {
                Err(format!("the re-ask does not quote the error: {last}"))
            }
        })),
    );
    // 5: answered with feedback instead.
    step(
        &fake,
        "write_file",
        json!({"filename": "notes.txt", "contents": "draft"}),
    );
    // 6: self-critique.
    step_checked(
        &fake,
        "write_file",
        json!({"filename": "notes.txt", "contents": "a longer draft"}),
        expect_progress(&["interrupted_by_human", "make the notes longer"]),
    );
    fake.push_critique("Write the notes in one go and check the haiku's syllables first.");
    // 7, 8, 9, 10: approved one by one (9 asks the user a question).
    step_checked(
        &fake,
        "write_file",
        json!({"filename": "notes.txt", "contents": "long notes"}),
        expect_progress(&["self_critique", "syllables"]),
    );
    step(&fake, "read_file", json!({"filename": "notes.txt"}));
    step(
        &fake,
        "ask_user",
        json!({"question": "What title should the haiku have?"}),
    );
    step_checked(
        &fake,
        "finish",
        json!({"reason": "The haiku is in haiku.txt."}),
        expect_progress(&["The user's answer: Crab"]),
    );

    let env = TestEnv::new(&fake.base_url, "");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Write a haiku about Rust into haiku.txt, then finish",
    ]);
    run.type_lines(&[
        "y",
        "y -3",
        "make the notes longer",
        "s",
        "y",
        "y",
        "y",
        "Crab",
        "y",
    ])
    .await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "console failed\n{stdout}\n{stderr}");
    fake.assert_clean();
    assert_eq!(fake.remaining_cycle_steps(), 0);

    for needle in [
        "NAME: HaikuGPT",
        "ROLE: a poet who writes haiku into files",
        "BEST PRACTICES:",
        "CONSTRAINTS:",
        "THOUGHTS: I will use write_file",
        "REASONING: write_file moves the task forward",
        "PLAN:",
        "CRITICISM: keep it short",
        "SPEAK: Running write_file",
        "OBSERVATIONS: what I saw",
        "NEXT ACTION: COMMAND = write_file  ARGUMENTS = {\"filename\":\"haiku.txt\",\"contents\"",
        "approved automatically: 1 more without asking",
        "approved automatically: 0 more without asking",
        "SYSTEM: Human feedback: make the notes longer",
        "SELF-CRITIQUE: Write the notes in one go",
        "QUESTION from HaikuGPT: What title should the haiku have?",
        "finished: The haiku is in haiku.txt.",
    ] {
        assert!(stdout.contains(needle), "stdout lacks {needle:?}\n{stdout}");
    }
    assert_eq!(stdout.matches("Input: ").count(), 8, "{stdout}");
    // Ten cycles, plus one retried 429 and one re-ask.
    assert_eq!(fake.requests(Kind::Cycle).len(), 12);
    assert!(!fake.requests(Kind::Summary).is_empty());

    let id = created_agent_id(&stdout);
    let out = export(&env, &id).await;
    assert_eq!(
        read(out.join("workspace/haiku.txt")),
        format!("{haiku}\n(by HaikuGPT)")
    );
    assert_eq!(read(out.join("workspace/notes.txt")), "long notes");
    let transcript = read(out.join("transcript.md"));
    assert!(
        transcript.contains("### Cycle 10: `finish("),
        "{transcript}"
    );
    assert!(transcript.contains("*Status:* interrupted_by_human"));
    assert!(transcript.contains("*Decided by:*"));
    let (ok, list, _) = env.run(&["list"]).await;
    assert!(ok);
    assert!(
        list.contains(&id) && list.contains("finished") && list.contains("HaikuGPT"),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_stops_and_resume_continues_with_history_then_a_follow_up() {
    let fake = fake().await;
    let env = TestEnv::new(&fake.base_url, "");
    step(
        &fake,
        "write_file",
        json!({"filename": "a.txt", "contents": "alpha"}),
    );
    step(&fake, "read_file", json!({"filename": "a.txt"}));
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Write a.txt",
        "--name",
        "FileGPT",
        "--role",
        "a careful file clerk",
    ]);
    run.type_lines(&["y", "n"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("stopped by"), "{stdout}");
    assert!(stdout.contains("NAME: FileGPT"));
    assert!(
        fake.requests(Kind::Profile).is_empty(),
        "a given profile is not generated"
    );
    let id = created_agent_id(&stdout);

    // Resume: the denied proposal comes back without a new model call, and history is intact.
    step_checked(
        &fake,
        "finish",
        json!({"reason": "done"}),
        expect_progress(&[
            "### Step 1: `write_file(",
            "### Step 2: `read_file(",
            "alpha",
        ]),
    );
    let mut run = env.spawn(&["console", "--resume", &id[..6]]);
    run.type_lines(&["y", "y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "Resuming agent {id} (FileGPT), cycle 2, 1 steps so far."
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("SYSTEM: Command read_file returned: alpha"),
        "{stdout}"
    );
    assert_eq!(fake.requests(Kind::Cycle).len(), 3);

    // A finished agent takes a follow-up task.
    fake.push_checked(
        Reply::Content(agent_reply(
            "write_file",
            json!({"filename": "b.txt", "contents": "beta"}),
        )),
        Some(Box::new(|body: &Value| {
            let task = body
                .pointer("/messages/1/content")
                .and_then(Value::as_str)
                .unwrap_or("");
            if task.contains("Follow-up task 1: Also write b.txt") {
                Ok(())
            } else {
                Err(format!("the task lacks the follow-up: {task}"))
            }
        })),
    );
    step(&fake, "finish", json!({"reason": "both written"}));
    let mut run = env.spawn(&["console", "--resume", &id, "--task", "Also write b.txt"]);
    run.type_lines(&["y", "y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    fake.assert_clean();
    let out = export(&env, &id).await;
    assert_eq!(read(out.join("workspace/b.txt")), "beta");
    assert_eq!(read(out.join("workspace/a.txt")), "alpha");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_thinking_keeps_acknowledged_steps_and_runs_nothing_twice() {
    let fake = fake().await;
    let env = TestEnv::new(&fake.base_url, "");
    step(
        &fake,
        "append_to_file",
        json!({"filename": "log.txt", "text": "a\n"}),
    );
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
    run.kill().await;

    step_checked(
        &fake,
        "read_file",
        json!({"filename": "log.txt"}),
        expect_progress(&["### Step 1: `append_to_file("]),
    );
    step(&fake, "finish", json!({"reason": "logged"}));
    let mut run = env.spawn(&["console", "--resume", &id, "--continuous"]);
    run.type_lines(&["y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("cycle 2, 1 steps so far"), "{stdout}");
    assert!(
        stdout.contains("SYSTEM: Command read_file returned: a\n"),
        "{stdout}"
    );
    let out = export(&env, &id).await;
    assert_eq!(
        read(out.join("workspace/log.txt")),
        "a\n",
        "the append ran exactly once"
    );
    let transcript = read(out.join("transcript.md"));
    assert_eq!(
        transcript.matches("### Cycle 1: `append_to_file(").count(),
        1,
        "{transcript}"
    );
    assert!(
        !transcript.contains("### Cycle 2: `append_to_file("),
        "{transcript}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_command_asks_again_instead_of_rerunning() {
    let fake = fake().await;
    let env = TestEnv::new(&fake.base_url, "");
    step(&fake, "ask_user", json!({"question": "Which colour?"}));
    let mut run = env.spawn(&["console", "--task", "Pick a colour", "--name", "ColourGPT"]);
    run.type_lines(&["y"]).await;
    run.wait_for("QUESTION from ColourGPT: Which colour?", 1, WAIT)
        .await;
    let id = created_agent_id(&run.stdout());
    run.kill().await;

    step_checked(
        &fake,
        "finish",
        json!({"reason": "blue it is"}),
        expect_progress(&["The user's answer: blue"]),
    );
    let mut run = env.spawn(&["console", "--resume", &id]);
    run.type_lines(&["y", "blue", "y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    let note = stdout
        .find("interrupted before it finished and was not re-run")
        .unwrap_or_else(|| panic!("no interruption note\n{stdout}"));
    let question = stdout.find("QUESTION from ColourGPT").unwrap();
    let first_prompt = stdout.find("Input: ").unwrap();
    assert!(
        note < first_prompt && first_prompt < question,
        "asked before re-running\n{stdout}"
    );
    assert_eq!(stdout.matches("QUESTION from").count(), 1);
    assert_eq!(
        fake.requests(Kind::Cycle).len(),
        2,
        "the interrupted cycle needed no new model call"
    );
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_replies_and_a_dead_endpoint_pause_with_a_clear_message_and_resume() {
    let fake = fake().await;
    let env = TestEnv::new(&fake.base_url, "");
    for garbage in [
        "no json here",
        "{\"thoughts\": {\"text\": \"hm\"}}",
        "still nothing",
    ] {
        fake.push(Reply::Content(garbage.into()));
    }
    let run = env.spawn(&["console", "--task", "Do it", "--name", "BadGPT"]);
    let (ok, stdout, _) = run.finish(WAIT).await;
    assert!(!ok, "a paused-by-error agent exits non-zero");
    assert!(
        stdout.contains("paused after 3 invalid replies from the model in a row"),
        "{stdout}"
    );
    let id = created_agent_id(&stdout);

    // The endpoint now fails every attempt: the agent pauses, the cycle is kept.
    for _ in 0..3 {
        fake.push(Reply::Status(503, "text/plain", "upstream down".into()));
    }
    let run = env.spawn(&["console", "--resume", &id]);
    let (ok, stdout, _) = run.finish(WAIT).await;
    assert!(!ok);
    assert!(
        stdout.contains("paused because the model endpoint failed"),
        "{stdout}"
    );
    assert!(stdout.contains("503"), "{stdout}");

    // Back up: a path outside the workspace is refused with a clear result, then it finishes.
    step(
        &fake,
        "write_file",
        json!({"filename": "../../etc/passwd", "contents": "x"}),
    );
    step_checked(
        &fake,
        "finish",
        json!({"reason": "done"}),
        expect_progress(&["leaves the workspace"]),
    );
    let mut run = env.spawn(&["console", "--resume", &id]);
    run.type_lines(&["y", "y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("cycle 1, 0 steps so far"), "{stdout}");
    assert!(
        stdout.contains("failed: Invalid path: '../../etc/passwd' leaves the workspace"),
        "{stdout}"
    );
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_and_unknown_agents_are_clear_errors() {
    let env = TestEnv::new("ftp://nowhere", "");
    let (ok, _, stderr) = env.run(&["console", "--task", "x"]).await;
    assert!(!ok);
    assert!(stderr.contains("config field `llm.base_url`"), "{stderr}");
    let env = TestEnv::new("http://127.0.0.1:9/v1", "");
    let (ok, _, stderr) = env.run(&["console", "--resume", "nope"]).await;
    assert!(!ok);
    assert!(stderr.contains("no agent matches \"nope\""), "{stderr}");
    let (ok, stdout, _) = env.run(&["list"]).await;
    assert!(ok);
    assert!(stdout.contains("No saved agents."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_policy_flags_narrow_and_a_denied_command_is_refused_with_the_reason() {
    let fake = fake().await;
    let env = TestEnv::with_budget(
        &fake.base_url,
        "",
        "guild_calls_per_minute = 0\n\n[policy]\nwrite = \"ask\"\n",
    );
    // Looser than the config, or an unknown class: refused before anything runs.
    let (ok, _, stderr) = env
        .run(&["console", "--task", "x", "--policy", "write=auto"])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "The server's policy for write commands is `ask`; an agent can only be made stricter"
        ),
        "{stderr}"
    );
    let (ok, _, stderr) = env
        .run(&["console", "--task", "x", "--policy", "shell=deny"])
        .await;
    assert!(!ok);
    assert!(stderr.contains("unknown class \"shell\""), "{stderr}");

    // The model names a denied command anyway: it is not run, and it learns why.
    fake.push(Reply::Content(agent_reply(
        "web_search",
        json!({"query": "weather"}),
    )));
    step_checked(
        &fake,
        "finish",
        json!({"reason": "done"}),
        expect_progress(&["network commands are denied by this agent's policy"]),
    );
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Look up the weather",
        "--name",
        "NoNetGPT",
        "--continuous",
        "--policy",
        "network=deny",
    ]);
    run.type_lines(&["y"]).await;
    let (ok, stdout, stderr) = run.finish(WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("WARNING: continuous mode runs read commands without asking."),
        "{stdout}"
    );
    assert!(
        stdout.contains("`web_search` was not run: its class (network) is denied by policy."),
        "{stdout}"
    );
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_model_are_shown_escaped_in_the_terminal() {
    let fake = fake().await;
    // ESC sequences that would hide text (SGR 8), move the cursor and retitle the terminal, a
    // carriage return that would overwrite the line, and BEL.
    let hostile = "\u{1b}[8mhidden\u{1b}[0m\rrewritten\u{7}\u{1b}]0;pwned\u{7}";
    fake.push_content(
        json!({
            "thoughts": {"observations": hostile, "text": hostile, "reasoning": "r",
                         "self_criticism": "c", "plan": "- p", "speak": hostile},
            "command": {"name": "write_file", "args": {"filename": "a.txt", "contents": hostile}}
        })
        .to_string(),
    );
    let env = TestEnv::new(&fake.base_url, "");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Say hello",
        "--name",
        "EscGPT",
        "--role",
        "a tester",
    ]);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["n"]).await;
    let (_, stdout, stderr) = run.finish(WAIT).await;
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}') && !stdout.contains('\r'),
        "raw control characters reached the terminal:\n{stdout:?}\n{stderr}"
    );
    assert!(
        stdout.contains("SPEAK: \\x{1b}[8mhidden\\x{1b}[0m\\x{0d}rewritten\\x{07}"),
        "{stdout}"
    );
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agent_keeps_its_endpoint_unless_base_url_moves_it() {
    // The agent is created against `own`; the config names `other`, which must see nothing
    // until --base-url moves the agent there. Feedback makes each run ask the model once more.
    let own = fake().await;
    let other = fake().await;
    let read = |file: &str| agent_reply("read_file", json!({ "filename": file }));
    own.push_content(read("a.txt"));
    own.push_content(read("b.txt"));
    let env = TestEnv::new(&other.base_url, "");
    let create = [
        "console",
        "--task",
        "Read files",
        "--name",
        "HomeGPT",
        "--role",
        "a tester",
    ];
    let with_url = [&create[..], &["--base-url", own.base_url.as_str()]].concat();
    let run_until_denied = |args: Vec<String>| {
        let env = &env;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut run = env.spawn(&args);
            run.wait_for("Input:", 1, WAIT).await;
            run.type_lines(&["read another file"]).await;
            run.wait_for("Input:", 2, WAIT).await;
            run.type_lines(&["n"]).await;
            let (_, stdout, stderr) = run.finish(WAIT).await;
            format!("{stdout}\n--- stderr ---\n{stderr}")
        }
    };
    let owned = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let output = run_until_denied(owned(&with_url)).await;
    let id = created_agent_id(&output);
    assert!(output.contains("b.txt"), "{output}");

    own.push_content(read("c.txt"));
    let output = run_until_denied(owned(&["console", "--resume", &id])).await;
    assert!(
        output.contains(&format!(
            "Using this agent's saved model endpoint {}",
            own.base_url
        )),
        "{output}"
    );
    assert!(output.contains("c.txt"), "{output}");
    assert_eq!(own.requests(Kind::Cycle).len(), 3);
    other.assert_clean();
    assert!(
        other.requests(Kind::Cycle).is_empty() && other.requests(Kind::Summary).is_empty(),
        "the config's endpoint was called"
    );

    other.push_content(read("d.txt"));
    let moved = owned(&["console", "--resume", &id, "--base-url", &other.base_url]);
    let output = run_until_denied(moved).await;
    assert!(
        output.contains("WARNING: --base-url") && output.contains("the agent moves to"),
        "{output}"
    );
    assert!(output.contains("d.txt"), "{output}");
    assert_eq!(other.requests(Kind::Cycle).len(), 1);
    own.assert_clean();
    other.assert_clean();
}

/// A workspace may hold a file and a folder of the same name (they are keys in the store); the
/// export keeps both, renames the file, and says so; a name with a direction override is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_keeps_a_file_named_like_a_folder_and_spoofing_names_are_refused() {
    let fake = fake().await;
    step(
        &fake,
        "write_file",
        json!({"filename": "clash", "contents": "the file"}),
    );
    step(
        &fake,
        "write_file",
        json!({"filename": "clash/inner.txt", "contents": "inside"}),
    );
    step(
        &fake,
        "write_file",
        json!({"filename": "report\u{202E}txt.exe", "contents": "spoof"}),
    );
    step(&fake, "finish", json!({"reason": "written"}));
    let env = TestEnv::new(&fake.base_url, "");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Write",
        "--name",
        "ClashGPT",
        "--role",
        "r",
        "--continuous",
    ]);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("U+202E, an invisible or direction-changing character"),
        "{out}"
    );
    let id = created_agent_id(&out);
    let dir = env.dir.path().join("export");
    let (ok, shown, err) = env
        .run(&["export", &id, "--out", dir.to_str().unwrap()])
        .await;
    assert!(ok, "{shown}{err}");
    // Said on stderr and in the export's notes.
    let renamed =
        "workspace/clash is written as workspace/clash (file): a folder has the same name.";
    assert!(err.contains(renamed), "{err}");
    assert!(read(dir.join("EXPORT-NOTES.md")).contains(renamed));
    assert_eq!(read(dir.join("workspace/clash (file)")), "the file");
    assert_eq!(read(dir.join("workspace/clash/inner.txt")), "inside");
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_runs_sandboxed_once_approved_and_its_file_lands_in_the_workspace() {
    if support::needs::needs(support::needs::code_execution()).is_none() {
        return;
    }
    let fake = fake().await;
    fake.push_checked(
        Reply::Content(agent_reply(
            "write_file",
            json!({"filename": "data.txt", "contents": "3 4 5"}),
        )),
        Some(Box::new(|body: &Value| {
            let prompt = body.to_string();
            match prompt.contains("execute_python") && !prompt.contains("execute_shell") {
                true => Ok(()),
                false => Err("the prompt offers execute_python and, by default, no shell".into()),
            }
        })),
    );
    step(
        &fake,
        "execute_python",
        json!({"code": "n = open('data.txt').read().split()\nopen('sum.txt', 'w').write(str(sum(map(int, n))))\nprint('sum written')"}),
    );
    step_checked(
        &fake,
        "finish",
        json!({"reason": "summed"}),
        expect_progress(&["sum written", "Files changed: sum.txt (2 bytes)"]),
    );
    let env = TestEnv::new(&fake.base_url, "");
    // Code execution is in the external class: asked for even in continuous mode (as `finish`
    // is, in the control class).
    let (ok, out, err) = env.console_approving("Sum the numbers", "SumGPT", 2).await;
    assert!(out.contains("execute_python"), "{out}");
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);
    let dir = export(&env, &id).await;
    assert_eq!(read(dir.join("workspace/sum.txt")), "12");
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_generated_paid_for_and_saved_in_the_workspace() {
    let fake = fake().await;
    fake.push_checked(
        Reply::Content(agent_reply(
            "generate_image",
            json!({"prompt": "A red fox in snow"}),
        )),
        Some(Box::new(|body: &Value| {
            let prompt = body.to_string();
            match prompt.contains("generate_image(prompt, size?)")
                && prompt.contains("Generating images from descriptions")
            {
                true => Ok(()),
                false => Err("the prompt offers generate_image and names the ability".into()),
            }
        })),
    );
    step(
        &fake,
        "generate_image",
        json!({"prompt": "A second fox", "size": "640x480"}),
    );
    step_checked(
        &fake,
        "finish",
        json!({"reason": "drawn"}),
        expect_progress(&[
            "Saved a 1024x1024 image as images/1-a-red-fox-in-snow.png",
            "(25 bytes, $0.040)",
            "The model drew: A red fox in snow, drawn",
            "Size '640x480' is not offered; use one of: 1024x1024, 1024x1792, 1792x1024",
        ]),
    );
    let env = TestEnv::new(&fake.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str("\n[images]\nmodel = \"dall-e-3\"\n");
    std::fs::write(&path, config).unwrap();
    let (ok, out, err) = env
        .run(&[
            "console",
            "--task",
            "Draw a fox",
            "--name",
            "FoxGPT",
            "--role",
            "r",
            "--continuous",
            "--limit",
            "3",
        ])
        .await;
    assert!(ok, "{out}{err}");
    // One image asked for, in base64; the refused size cost nothing.
    let requested = fake.images_requested();
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert_eq!(requested[0]["model"], "dall-e-3");
    assert_eq!(requested[0]["size"], "1024x1024");
    assert_eq!(requested[0]["response_format"], "b64_json");
    let id = created_agent_id(&out);
    let dir = export(&env, &id).await;
    assert_eq!(
        std::fs::read(dir.join("workspace/images/1-a-red-fox-in-snow.png")).unwrap(),
        support::fake_openai::fake_image("A red fox in snow")
    );
    let (ok, shown, _) = env.run(&["status", &id]).await;
    assert!(ok && shown.contains("$0.04"), "{shown}");
    fake.assert_clean();
}
