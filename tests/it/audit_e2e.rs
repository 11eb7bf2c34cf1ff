//! The audit trail end to end: decisions made in Discord (a quorum's approvals one by one, a
//! deny) and pauses and resumes are in `/agent audit`, newest first, paged with buttons that
//! turn the page in place, for the agent's deciders only; the export attaches the whole trail.
//! In the console, an edit and its approval are in `autothread audit` and in the exported
//! `audit.md`.

use crate::support;

use serde_json::json;
use support::bot::{
    answer, button, card, ephemeral_text, response_shown, start_agent, start_bot, Start, WAIT,
};
use support::fake_discord::{FakeDiscord, ALICE, BOB, CAROL};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_decisions_and_changes_are_in_a_paged_private_audit_and_the_export() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "crab"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "haiku.txt"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "[approvals.quorum]\nwrite = 2\n");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a haiku",
            name: Some("HaikuGPT"),
            share_user: Some(BOB),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "HaikuGPT · cycle 1").await;
    let approve = button(&first, "Approve");
    discord.click(ALICE, &[], &first, &approve);
    discord
        .wait_for("one approval", WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == first["id"] && m.to_string().contains("1 of 2 approvals: alice")
            })
        })
        .await;
    discord.click(BOB, &[], &first, &approve);
    let second = card(&discord, thread, "HaikuGPT · cycle 2").await;
    let denied = discord.click(BOB, &[], &second, &button(&second, "Deny"));
    discord
        .wait_for("the deny", WAIT, |d| {
            (!d.callbacks(denied).is_empty()).then_some(())
        })
        .await;
    // Three resumes and pauses, each answered before the next: nine entries in all, two pages.
    // The answer ("Pausing.") comes as the agent is told, so the audit is asked for once the
    // agent has said three times that alice paused it (Bob's deny pauses it too, in other words).
    let pauses_by_alice = |d: &FakeDiscord| {
        d.messages_in(thread)
            .iter()
            .filter(|m| {
                let text = m["content"].as_str().unwrap_or("");
                text.starts_with("⏸️") && text.contains("paused by alice")
            })
            .count()
    };
    for sub in ["resume", "pause", "resume", "pause", "resume", "pause"] {
        let sent = discord.slash(ALICE, &[], thread, sub, json!([]), json!({}));
        answer(&discord, sent, true).await;
    }
    discord
        .wait_for("alice's three pauses", WAIT, |d| {
            (pauses_by_alice(d) == 3).then_some(())
        })
        .await;

    let asked = discord.slash(ALICE, &[], thread, "audit", json!([]), json!({}));
    let page = response_shown(&discord, thread, asked, 4).await;
    assert_eq!(page["flags"], 64, "private: {page}");
    let text = page["content"].as_str().unwrap().to_string();
    assert!(
        text.contains("page 1 of 2, 9 entries, newest first"),
        "{text}"
    );
    assert!(
        text.contains(&format!("alice (<@{ALICE}>) · paused the agent")),
        "{text}"
    );
    assert!(
        text.find(&format!("bob (<@{BOB}>) · denied cycle 2: `read_file`"))
            .unwrap()
            > text
                .find(&format!("alice (<@{ALICE}>) · resumed the agent"))
                .unwrap(),
        "newest first: {text}"
    );
    assert_eq!(text.matches("\n- ").count(), 8, "{text}");
    assert!(text.chars().count() <= 2000);

    let older = discord.click(ALICE, &[], &page, &button(&page, "Older ▶"));
    let page2 = response_shown(&discord, thread, older, 7).await;
    let text2 = page2["content"].as_str().unwrap();
    assert!(text2.contains("page 2 of 2"), "{text2}");
    assert!(
        text2.contains(&format!(
            "alice (<@{ALICE}>) · approved cycle 1 (1 of 2): `write_file`"
        )),
        "{text2}"
    );
    let newer = discord.click(ALICE, &[], &page2, &button(&page2, "◀ Newer"));
    let back = response_shown(&discord, thread, newer, 7).await;
    assert_eq!(back["content"], page["content"]);

    // Someone the agent is not shared with sees nothing, by the command or by a button.
    let outsider = discord.slash(CAROL, &[], thread, "audit", json!([]), json!({}));
    let refused = ephemeral_text(&discord, outsider).await;
    assert!(refused.starts_with("Only the agent's owner"), "{refused}");
    let peek = discord.click(CAROL, &[], &page, &button(&page, "Older ▶"));
    let refused = ephemeral_text(&discord, peek).await;
    assert!(refused.starts_with("Only the agent's owner"), "{refused}");

    let export = discord.slash(ALICE, &[], thread, "export", json!([]), json!({}));
    let attached = discord
        .wait_for("the export", WAIT, |d| {
            d.followups_for(export).first().cloned()
        })
        .await;
    let audit = attached["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["filename"].as_str().unwrap().ends_with("-audit.md"))
        .expect("the export attaches the audit trail");
    let trail = audit["text"].as_str().unwrap();
    assert!(trail.contains("9 entries, oldest first"), "{trail}");
    assert!(
        trail.contains(&format!(
            r#"alice (<@{ALICE}>), bob (<@{BOB}>) · approved cycle 1: `write_file` {{"filename":"haiku.txt","contents":"crab"}} (digest "#
        )),
        "{trail}"
    );

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_edit_and_approval_are_in_the_audit_command_and_the_export() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "alpha"}),
    ));
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::new(&openai.base_url, "");
    let mut command = env.command(&[
        "console",
        "--task",
        "Write a file",
        "--name",
        "FileGPT",
        "--role",
        "a clerk",
    ]);
    // The console names the person at the keyboard after $USER.
    command.env("USER", "dana");
    let mut run = support::Running::new_public(command.spawn().unwrap());
    run.type_lines(&["e", "b.txt", "", "y", "y"]).await;
    let (ok, stdout, stderr) = run.finish(support::WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    let id = support::created_agent_id(&stdout);

    let (ok, out, err) = env.run(&["audit", &id]).await;
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].ends_with("· dana · approved cycle 2: `finish` {\"reason\":\"done\"}"),
        "{out}"
    );
    assert!(
        lines[1].contains("· dana · approved cycle 1: `write_file`"),
        "{out}"
    );
    assert!(lines[1].contains("(arguments edited by dana)"), "{out}");
    assert!(
        lines[2]
            .contains("· dana · edited cycle 1 (filename): `write_file` {\"filename\":\"b.txt\""),
        "{out}"
    );
    let (ok, out, _) = env.run(&["audit", &id, "--page", "2"]).await;
    assert!(ok && out.contains("There is no page 2"), "{out}");

    let dir = env.dir.path().join("export");
    let (ok, out, err) = env
        .run(&["export", &id, "--out", dir.to_str().unwrap()])
        .await;
    assert!(ok, "{out}{err}");
    let trail = std::fs::read_to_string(dir.join("audit.md")).unwrap();
    assert!(trail.contains("3 entries, oldest first"), "{trail}");
    assert!(
        trail.contains("dana · edited cycle 1 (filename)"),
        "{trail}"
    );
    openai.assert_clean();
}
