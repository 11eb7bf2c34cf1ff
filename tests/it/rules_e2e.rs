//! Approve & remember end to end in Discord: a card's menu of rules worked out from its command
//! (server-wide ones for admins only), the rule approving later commands it covers and nothing
//! else, `/agent rules` listing them with Revoke buttons for those who may revoke, and the trail
//! recording each rule made, used and revoked.

use crate::approvals_e2e::{field, haiku_agent, write_reply};
use crate::support;

use serde_json::{json, Value};
use support::bot::{button, card, ephemeral_text, response_shown};
use support::fake_discord::{FakeDiscord, ADMIN_PERMS, ALICE, BOB, MEMBER_PERMS};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};

/// The menu's custom id and the values of its options.
fn menu(message: &Value) -> (String, Vec<String>) {
    let select = &message["components"][0]["components"][0];
    assert_eq!(select["type"], 3, "{message}");
    let values = select["options"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| o["value"].as_str().unwrap_or("").to_string())
        .collect();
    (select["custom_id"].as_str().unwrap().to_string(), values)
}

/// `/agent rules` as a member with `permissions`: the private list, ready for a click.
async fn rules_list(discord: &FakeDiscord, thread: u64, permissions: &str) -> Value {
    let asked = discord.slash_with(ALICE, permissions, thread, "rules");
    response_shown(discord, thread, asked, 4).await
}

/// A message's text and its embed's description.
fn text(message: &Value) -> String {
    format!(
        "{}\n{}",
        message["content"].as_str().unwrap_or(""),
        message["embeds"][0]["description"].as_str().unwrap_or("")
    )
}

/// Waits until the card of `cycle` is shown, and returns it.
async fn cycle_card(discord: &FakeDiscord, thread: u64, cycle: u64) -> Value {
    card(discord, thread, &format!("HaikuGPT · cycle {cycle}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_rule_approves_what_it_covers_until_it_is_revoked() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for reply in [
        write_reply("notes/a.md", "one"),
        write_reply("notes/b.md", "two"),
        write_reply("other/x.md", "three"),
        write_reply("notes/c.md", "four"),
        write_reply("drafts/z.md", "five"),
        agent_reply("read_file", json!({"filename": "notes/a.md"})),
    ] {
        openai.push_content(reply);
    }
    let (_env, discord, bot, thread, first) = haiku_agent(&openai, "", None).await;
    let remember = button(&first, "Approve & remember");

    // Someone the agent is not shared with may not make a rule.
    let refused = discord.click(BOB, &[], &first, &remember);
    let refusal = ephemeral_text(&discord, refused).await;
    assert!(refusal.starts_with("Only the agent's owner"), "{refusal}");

    // The owner's private menu: three scopes, for this agent only (she is no admin), three lives.
    let opened = discord.click(ALICE, &[], &first, &remember);
    let shown = response_shown(&discord, thread, opened, 4).await;
    assert_eq!(shown["flags"], 64, "the menu is private");
    let (menu_id, values) = menu(&shown);
    assert_eq!(values.len(), 9, "{values:?}");
    assert!(values.iter().all(|v| v.contains(".a.")), "{values:?}");
    let choice = discord.select(ALICE, MEMBER_PERMS, &shown, &menu_id, "1.a.r");
    let chosen = response_shown(&discord, thread, choice, 7).await;
    assert!(
        text(&chosen).contains("remembering: `write_file` with any filename under `notes/`"),
        "{chosen}"
    );

    // The covered command runs without asking and says which rule approved it.
    let second = cycle_card(&discord, thread, 2).await;
    let status = field(&second, "Status").unwrap_or_default().to_string();
    assert!(
        status.starts_with("Approved automatically by rule ") && status.contains("under `notes/`"),
        "{status}"
    );
    let decided = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == first["id"])
        .unwrap();
    let status = field(&decided, "Status").unwrap_or_default();
    assert!(
        status.starts_with("✅ Approved and remembered: `write_file` with any filename under `notes/` for this agent, until revoked by alice"),
        "{status}"
    );

    // Another folder is not covered: its card waits.
    let third = cycle_card(&discord, thread, 3).await;
    assert_eq!(field(&third, "Status"), Some("Waiting for a decision"));

    // `/agent rules` lists the rule and its use; Revoke takes it away.
    let list = rules_list(&discord, thread, MEMBER_PERMS).await;
    assert!(
        text(&list).contains(&format!("1. `write_file` with any filename under `notes/` — for this agent, by alice (<@{ALICE}>), until revoked; used 1×")),
        "{}",
        text(&list)
    );
    let revoked = discord.click(ALICE, &[], &list, &button(&list, "Revoke 1"));
    let after = response_shown(&discord, thread, revoked, 7).await;
    assert!(
        text(&after).starts_with("Revoked rule "),
        "{}",
        text(&after)
    );
    assert!(text(&after).contains("None."), "{}", text(&after));
    assert!(after["components"].as_array().is_some_and(Vec::is_empty));

    // So the next command in notes/ waits for a person again.
    discord.click(ALICE, &[], &third, &button(&third, "Approve"));
    let fourth = cycle_card(&discord, thread, 4).await;
    assert_eq!(field(&fourth, "Status"), Some("Waiting for a decision"));

    // An admin is offered rules for every agent of the server; a member's choice of one is
    // refused and decides nothing.
    let remember = button(&fourth, "Approve & remember");
    let opened = discord.click_with(ALICE, ADMIN_PERMS, &fourth, &remember);
    let shown = response_shown(&discord, thread, opened, 4).await;
    let (menu_id, values) = menu(&shown);
    assert_eq!(values.len(), 18, "{values:?}");
    let server_wide = "2.s.d";
    assert!(values.contains(&server_wide.to_string()));
    let refused = discord.select(ALICE, MEMBER_PERMS, &shown, &menu_id, server_wide);
    let refusal = ephemeral_text(&discord, refused).await;
    assert!(refusal.starts_with("Only the server's admins"), "{refusal}");
    discord.select(ALICE, ADMIN_PERMS, &shown, &menu_id, server_wide);

    // The server's rule covers any write of any agent there, and nothing else.
    let fifth = cycle_card(&discord, thread, 5).await;
    let status = field(&fifth, "Status").unwrap_or_default();
    assert!(
        status.starts_with("Approved automatically by rule ")
            && status.contains("with any arguments"),
        "{status}"
    );
    let sixth = cycle_card(&discord, thread, 6).await;
    assert_eq!(field(&sixth, "Status"), Some("Waiting for a decision"));

    // A member sees the server's rule without a Revoke button; an admin revokes it.
    let list = rules_list(&discord, thread, MEMBER_PERMS).await;
    assert!(text(&list).contains("used 1×"), "{}", text(&list));
    assert!(list["components"].as_array().is_some_and(Vec::is_empty));
    let list = rules_list(&discord, thread, ADMIN_PERMS).await;
    let revoked = discord.click_with(ALICE, ADMIN_PERMS, &list, &button(&list, "Revoke 1"));
    let after = response_shown(&discord, thread, revoked, 7).await;
    assert!(
        text(&after).starts_with("Revoked rule "),
        "{}",
        text(&after)
    );

    // The trail has each rule made, used and revoked.
    let asked = discord.slash(ALICE, &[], thread, "audit", json!([]), json!({}));
    let trail = ephemeral_text(&discord, asked).await;
    for wanted in [
        format!("alice (<@{ALICE}>) · made rule ").as_str(),
        "approve `write_file` with any arguments for every agent in this server, until ",
        "without asking",
        format!("alice (<@{ALICE}>) · revoked rule ").as_str(),
    ] {
        assert!(trail.contains(wanted), "{wanted}: {trail}");
    }

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// The console's `r`: a numbered choice of the card's scopes and how long, then the covered
/// command runs without asking while another still asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_remembers_a_rule_with_r() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for reply in [
        write_reply("notes/a.md", "one"),
        write_reply("notes/b.md", "two"),
        write_reply("c.md", "three"),
        agent_reply("finish", json!({"reason": "done"})),
    ] {
        openai.push_content(reply);
    }
    let env = support::TestEnv::new(&openai.base_url, "");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Keep notes",
        "--name",
        "NoteGPT",
        "--role",
        "a note keeper",
    ]);
    // `r`, an answer out of range (nothing chosen, asked again), then `r`, scope 2, one day; the
    // second write runs unasked; the third and the finish are approved by hand.
    run.type_lines(&["r", "9", "r", "2", "2", "y", "y"]).await;
    let (ok, stdout, stderr) = run.finish(support::WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("'r' to approve and remember a rule"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  2) `write_file` with any filename under `notes/`"),
        "{stdout}"
    );
    assert!(stdout.contains("Nothing chosen."), "{stdout}");
    assert!(
        stdout.contains("(approved automatically by rule "),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("has been written successfully").count(),
        3,
        "{stdout}"
    );
    openai.assert_clean();
}

/// Where the server lets people remember external commands, the console remembers a script run
/// by its exact contents: the same script runs unasked, and once the agent has changed it the
/// rule no longer covers it and the person is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_script_runs_unasked_until_the_agent_changes_it() {
    if support::needs::needs(support::needs::code_execution()).is_none() {
        return;
    }
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let run_job = || agent_reply("execute_python_file", json!({"filename": "tools/job.py"}));
    for reply in [
        write_reply("tools/job.py", "print('job one')"),
        run_job(),
        agent_reply("read_file", json!({"filename": "tools/job.py"})),
        run_job(),
        write_reply("tools/job.py", "print('job two')"),
        agent_reply("read_file", json!({"filename": "tools/job.py"})),
        write_reply("notes.txt", "ran it twice"),
        run_job(),
        agent_reply("finish", json!({"reason": "done"})),
    ] {
        openai.push_content(reply);
    }
    let env = support::TestEnv::new(&openai.base_url, "[policy]\nexternal = \"remember\"\n");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Run the job",
        "--name",
        "JobGPT",
        "--role",
        "a job runner",
    ]);
    // The write by hand; the first run remembered (its one scope, until revoked); a read by hand
    // (the same command twice in a row is the watchdog's to question); the second run unasked;
    // the rewrite, a read and a note by hand (so that the third run is not one of two in five
    // steps, which the watchdog would show as circling); the changed script asked for again
    // and approved; the finish.
    run.type_lines(&["y", "r", "1", "3", "y", "y", "y", "y", "y", "y"])
        .await;
    let (ok, stdout, stderr) = run.finish(support::WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("  1) `execute_python_file` exactly as"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("(approved automatically by rule ").count(),
        2,
        "the unchanged run, and the changed one before its check: {stdout}"
    );
    assert!(
        stdout.contains("tools/job.py changed since rule"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("STDOUT:\njob one").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("STDOUT:\njob two").count(), 1, "{stdout}");
    openai.assert_clean();
}
