//! Approvals end to end, in Discord and in the console: Edit (a form prefilled with the
//! arguments, validated like a model's, the card naming who edited what, the edited command is the
//! one that runs), the diff a file command's card shows and the check that the file is still as
//! shown, and a quorum of distinct approvers.

use crate::support;

use serde_json::json;
use support::bot::{
    button, button_labels, card, ephemeral_text, message_containing, response_shown, start_agent,
    start_bot, Start,
};
use support::fake_discord::{FakeDiscord, ALICE, BOB, CAROL, GUILD, ROLE_TEAM};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

/// A bot against `openai` with `config`, and HaikuGPT started in a thread (shared with `share`):
/// the fakes, the bot, the thread and its first card.
pub(crate) async fn haiku_agent(
    openai: &FakeOpenAi,
    config: &str,
    share: Option<u64>,
) -> (
    TestEnv,
    FakeDiscord,
    support::Running,
    u64,
    serde_json::Value,
) {
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, config);
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a haiku",
            name: Some("HaikuGPT"),
            share_user: share,
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "HaikuGPT · cycle 1").await;
    (env, discord, bot, thread, first)
}

/// The model proposes to write `contents` into `filename`.
pub(crate) fn write_reply(filename: &str, contents: &str) -> String {
    agent_reply(
        "write_file",
        json!({"filename": filename, "contents": contents}),
    )
}

pub(crate) fn field<'a>(card: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    card["embeds"][0]["fields"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)?["value"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_command_is_shown_with_its_editor_and_runs_as_edited() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(write_reply("haiku.txt", "crab"));
    // The second proposal's text is longer than a card shows: it comes attached, with the diff.
    openai.push_content(write_reply(
        "poem.txt",
        &"a line of a long poem\n".repeat(150),
    ));
    let (_env, discord, bot, thread, first) = haiku_agent(&openai, "", None).await;
    assert_eq!(
        field(&first, "Changes to haiku.txt"),
        Some("```diff\n--- /dev/null\n+++ b/haiku.txt\n@@ -0,0 +1 @@\n+crab\n\\ No newline at end of file\n```")
    );
    assert_eq!(first["attachments"], json!([]), "nothing was cut");
    let edit = button(&first, "Edit");

    // Someone the agent is not shared with may not edit it.
    let refused = discord.click(BOB, &[], &first, &edit);
    let text = ephemeral_text(&discord, refused).await;
    assert!(text.starts_with("Only the agent's owner"), "{text}");

    // The form holds one input per argument, prefilled.
    let opened = discord.click(ALICE, &[], &first, &edit);
    let (_, inputs) = discord
        .wait_for("the edit form", support::bot::WAIT, |d| {
            d.opened_form(opened)
        })
        .await;
    let inputs: Vec<(String, String)> = inputs
        .into_iter()
        .map(|(id, label, value)| (format!("{id}|{label}"), value))
        .collect();
    assert_eq!(
        inputs,
        [
            ("arg:filename|filename".to_string(), "haiku.txt".to_string()),
            ("arg:contents|contents".to_string(), "crab".to_string()),
        ]
    );

    // An edit that does not validate is refused, privately, and changes nothing.
    let bad = discord.submit_form_fields(ALICE, thread, opened, &[("arg:filename", " ")]);
    let text = ephemeral_text(&discord, bad).await;
    assert!(
        text.contains("missing required argument 'filename'"),
        "{text}"
    );

    // A valid edit changes the card in place, which names the editor and keeps its buttons.
    let opened = discord.click(ALICE, &[], &first, &edit);
    discord
        .wait_for("the edit form", support::bot::WAIT, |d| {
            d.opened_form(opened)
        })
        .await;
    discord.submit_form_fields(
        ALICE,
        thread,
        opened,
        &[("arg:filename", "poem.txt"), ("arg:contents", "crab")],
    );
    let edited = discord
        .wait_for("the edited card", support::bot::WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| m["id"] == first["id"] && field(m, "✏️ Edited by").is_some())
        })
        .await;
    assert_eq!(field(&edited, "✏️ Edited by"), Some("alice (filename)"));
    assert!(
        field(&edited, "Changes to poem.txt").is_some(),
        "the diff follows the edit"
    );
    assert_eq!(edited["attachments"], json!([]), "nothing was cut");
    assert!(edited["embeds"][0]["fields"]
        .to_string()
        .contains("poem.txt"));
    // A click on the card as it was before the edit refers to other arguments: refused.
    assert_ne!(button(&edited, "Approve"), button(&first, "Approve"));
    let blind = discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let text = ephemeral_text(&discord, blind).await;
    assert!(text.starts_with("The command was edited since"), "{text}");

    // Approving runs the edited command.
    discord.click(ALICE, &[], &edited, &button(&edited, "Approve"));
    message_containing(
        &discord,
        thread,
        "File poem.txt has been written successfully.",
    )
    .await;
    let second = card(&discord, thread, "HaikuGPT · cycle 2").await;
    let attached: Vec<&str> = second["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        attached,
        ["cycle-2-changes.diff", "cycle-2-arguments.json"],
        "{second}"
    );
    assert!(second["attachments"][0]["text"]
        .as_str()
        .unwrap()
        .ends_with("+a line of a long poem\n"));

    // Edited down to a short text, the card drops the files it no longer needs.
    let opened = discord.click(ALICE, &[], &second, &button(&second, "Edit"));
    discord
        .wait_for("the edit form", support::bot::WAIT, |d| {
            d.opened_form(opened)
        })
        .await;
    discord.submit_form_fields(ALICE, thread, opened, &[("arg:contents", "short")]);
    let shortened = discord
        .wait_for("the shortened card", support::bot::WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| m["id"] == second["id"] && field(m, "✏️ Edited by").is_some())
        })
        .await;
    assert_eq!(shortened["attachments"], json!([]), "{shortened}");

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_edits_arguments_one_by_one() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(write_reply("a.txt", "alpha"));
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::new(&openai.base_url, "");
    let mut run = env.spawn(&[
        "console",
        "--task",
        "Write a file",
        "--name",
        "FileGPT",
        "--role",
        "a careful file clerk",
    ]);
    // `e`, then one answer per argument in the model's order (filename, contents): replace,
    // keep. A second `e` that changes nothing asks again; then approve, and approve the finish.
    run.type_lines(&["e", "b.txt", "", "e", "", "", "y", "y"])
        .await;
    let (ok, stdout, stderr) = run.finish(support::WAIT).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("filename [a.txt]: "), "{stdout}");
    // The card shows the change, and after the edit the change to the edited file.
    assert!(
        stdout.contains("CHANGES TO a.txt:\n  --- /dev/null"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "CHANGES TO b.txt:\n  --- /dev/null\n  +++ b/b.txt\n  @@ -0,0 +1 @@\n  +alpha"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("EDITED BY: "), "{stdout}");
    assert!(stdout.contains("(filename)"), "{stdout}");
    assert!(stdout.contains("Nothing changed."), "{stdout}");
    assert!(
        stdout.contains("File b.txt has been written successfully."),
        "{stdout}"
    );
    openai.assert_clean();
}

/// An approval covers the change its card showed: when the file changes between showing and
/// running, the command is not run, the agent says why, and the card comes back with the new
/// diff; approved again, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_after_its_card_was_shown_is_shown_again_instead_of_written() {
    use autothread::core::event::Event;
    use autothread::store::{Commit, Store, WorkspaceOp};
    use std::sync::Arc;
    use support::inproc::{agent, deps, reply, Recorder, ScriptedModel};

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut config = autothread::config::Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    let model = Arc::new(ScriptedModel::new([
        reply(
            "write_file",
            json!({"filename": "haiku.txt", "contents": "crab\n"}),
        ),
        reply("finish", json!({"reason": "done"})),
    ]));
    let surface = Arc::new(Recorder::default());
    let writer = store.clone();
    *surface.on_first_card.lock().unwrap() = Some(Box::new(move |state| {
        writer
            .commit(&Commit {
                state: Some(state),
                workspace: vec![WorkspaceOp::Put {
                    path: "haiku.txt".into(),
                    contents: b"someone else's line\n".to_vec(),
                }],
                ..Default::default()
            })
            .unwrap();
    }));
    let deps = deps(&store, model, surface.clone(), config, None);
    let state = agent("stale0000001", "Write a haiku", "local-model", false);
    let (_handle, done) = autothread::runtime::start(state, Event::Start, deps);
    let state = tokio::time::timeout(support::WAIT, done)
        .await
        .expect("the agent finishes")
        .unwrap()
        .unwrap();

    let previews = surface.previews.lock().unwrap().clone();
    assert_eq!(
        previews,
        [
            "--- /dev/null\n+++ b/haiku.txt\n@@ -0,0 +1 @@\n+crab\n".to_string(),
            "--- a/haiku.txt\n+++ b/haiku.txt\n@@ -1 +1 @@\n-someone else's line\n+crab\n"
                .to_string(),
        ],
        "the card came back with the change as it then stood"
    );
    let notices = surface.notices.lock().unwrap().clone();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("haiku.txt changed after its card was shown")),
        "{notices:?}"
    );
    assert_eq!(
        store
            .read_file("stale0000001", "haiku.txt")
            .unwrap()
            .as_deref(),
        Some(&b"crab\n"[..]),
        "approved again, the command ran once"
    );
    assert_eq!(
        state.progress.episodes.len(),
        2,
        "{:?}",
        state.progress.episodes
    );
    assert!(
        state.progress.episodes[0]
            .outcome
            .text()
            .contains("has been written"),
        "{:?}",
        state.progress.episodes[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_class_waits_for_two_distinct_approvers_counted_by_id() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(write_reply("haiku.txt", "crab"));
    openai.push_content(agent_reply("read_file", json!({"filename": "haiku.txt"})));
    // Two approvals for writes, from members of the team role only.
    let config = format!(
        "[approvals.quorum]\nwrite = 2\n[approvals.guilds.\"{GUILD}\"]\napprovers_role = {ROLE_TEAM}\n"
    );
    let (_env, discord, bot, thread, first) = haiku_agent(&openai, &config, Some(BOB)).await;
    assert_eq!(field(&first, "Approvals"), Some("0 of 2 approvals"));
    let approve = button(&first, "Approve");

    // Bob may decide for this agent, but he is not an approver: his approval is refused.
    let outsider = discord.click(BOB, &[], &first, &approve);
    let text = ephemeral_text(&discord, outsider).await;
    assert!(
        text.starts_with("This command needs 2 approvals from members of"),
        "{text}"
    );

    // Alice's approval counts once; the card stays open and says so.
    discord.click(ALICE, &[ROLE_TEAM], &first, &approve);
    let counted = discord
        .wait_for("the card with one approval", support::bot::WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == first["id"] && field(m, "Approvals") == Some("1 of 2 approvals: alice")
            })
        })
        .await;
    assert_eq!(button(&counted, "Approve"), approve, "the buttons stay");
    // Alice renames herself: she is still one person, and her second click does not count.
    discord.rename(ALICE, "alicia");
    let again = discord.click(ALICE, &[ROLE_TEAM], &counted, &approve);
    let text = ephemeral_text(&discord, again).await;
    assert!(text.contains("already counts"), "{text}");

    // Bob's makes two: the command runs, and the card, closed, counts and names both.
    discord.click(BOB, &[ROLE_TEAM], &counted, &approve);
    card(&discord, thread, "HaikuGPT · cycle 2").await;
    let decided = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == first["id"])
        .unwrap();
    assert_eq!(
        field(&decided, "Approvals"),
        Some("2 of 2 approvals: alice, bob")
    );
    let status = field(&decided, "Status").unwrap_or_default().to_string();
    assert!(status.starts_with("✅ Approved by alice, bob"), "{status}");
    assert_eq!(button_labels(&decided), Vec::<String>::new(), "closed");
    message_containing(&discord, thread, "has been written successfully").await;

    // The trail names the same person, by id, for the counted approval and the decision.
    let asked = discord.slash(BOB, &[ROLE_TEAM], thread, "audit", json!([]), json!({}));
    let page = response_shown(&discord, thread, asked, 4).await;
    let trail = page["content"].as_str().unwrap();
    let alice = format!("alice (<@{ALICE}>)");
    let bob = format!("bob (<@{BOB}>)");
    assert!(
        trail.contains(&format!("{alice} · approved cycle 1 (1 of 2)")),
        "{trail}"
    );
    assert!(
        trail.contains(&format!("{alice}, {bob} · approved cycle 1")),
        "{trail}"
    );
    assert!(!trail.contains("alicia"), "{trail}");

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// A card of a class with a deadline shows it; nobody decides, so the server's approvers role is
/// called once (mentioned, and only it), the card stays open with its second deadline, and then
/// the agent parks and the card closes saying why. The trail records both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_card_calls_the_approvers_then_parks_the_agent() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(write_reply("haiku.txt", "crab"));
    let config = format!(
        "[approvals.expiry.write]\nafter_secs = 2\naction = \"escalate\"\n[approvals.guilds.\"{GUILD}\"]\napprovers_role = {ROLE_TEAM}\n"
    );
    let (_env, discord, bot, thread, first) = haiku_agent(&openai, &config, None).await;
    let deadline = field(&first, "⏰ Decide by")
        .unwrap_or_default()
        .to_string();
    assert!(
        deadline.starts_with("<t:") && deadline.ends_with("then the approvers are called"),
        "{deadline}"
    );

    let call = message_containing(&discord, thread, "calling the approvers").await;
    // The approvers role is notified, and nobody else.
    assert_eq!(
        call["allowed_mentions"]["roles"],
        json!([ROLE_TEAM.to_string()])
    );
    assert_eq!(call["allowed_mentions"]["parse"], json!([]));
    assert!(call["allowed_mentions"]["users"]
        .as_array()
        .is_none_or(Vec::is_empty));
    let content = call["content"].as_str().unwrap();
    assert!(
        content.starts_with(&format!("⏰ <@&{ROLE_TEAM}> Nobody decided on cycle 1")),
        "{content}"
    );
    let reopened = discord
        .wait_for("the card's second deadline", support::bot::WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == first["id"]
                    && field(m, "⏰ Decide by")
                        .is_some_and(|f| f.ends_with("then the agent is parked"))
            })
        })
        .await;
    assert_eq!(
        button(&reopened, "Approve"),
        button(&first, "Approve"),
        "still open"
    );

    let closed = discord
        .wait_for("the closed card", support::bot::WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == first["id"] && m["components"].as_array().is_some_and(Vec::is_empty)
            })
        })
        .await;
    let status = field(&closed, "Status").unwrap_or_default();
    assert!(
        status.starts_with("⏰ Nobody decided within 2 s: the agent is parked"),
        "{status}"
    );
    assert!(field(&closed, "⏰ Decide by").is_none());
    message_containing(&discord, thread, "nobody decided on cycle 1 within 2 s").await;

    let asked = discord.slash(ALICE, &[], thread, "audit", json!([]), json!({}));
    let trail = ephemeral_text(&discord, asked).await;
    assert!(
        trail.contains("the deadline · cycle 1's `write_file` expired undecided: agent parked"),
        "{trail}"
    );
    assert!(
        trail.contains("expired undecided: approvers called"),
        "{trail}"
    );

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// Re-post brings a buried card to the bottom of the thread: the old message points to the new
/// one and loses its buttons, a second click on the old card makes no second copy, and the
/// decision lands on the new card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buried_card_is_reposted_at_the_bottom_and_decided_there() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(write_reply("haiku.txt", "crab"));
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let (_env, discord, bot, thread, first) = haiku_agent(&openai, "", Some(BOB)).await;
    for n in 0..5 {
        discord.say(CAROL, &[], thread, &format!("chatter {n}"));
    }
    let repost = button(&first, "Re-post ↓");
    // Someone the agent is not shared with may not move it.
    let refused = discord.click(CAROL, &[], &first, &repost);
    let text = ephemeral_text(&discord, refused).await;
    assert!(text.starts_with("Only the agent's owner"), "{text}");

    let moved = discord.click(BOB, &[], &first, &repost);
    let again = discord.click(BOB, &[], &first, &repost);
    let texts = [
        ephemeral_text(&discord, moved).await,
        ephemeral_text(&discord, again).await,
    ];
    assert!(
        texts.contains(&"Moved to the bottom of the thread.".to_string()),
        "{texts:?}"
    );
    let newest = discord
        .wait_for("the re-posted card", support::bot::WAIT, |d| {
            // The live status message may be posted after the new card on a busy machine, so
            // the card is the newest card, not necessarily the thread's last message.
            d.messages_in(thread).into_iter().rev().find(|m| {
                m["id"] != first["id"] && m["embeds"].to_string().contains("HaikuGPT · cycle 1")
            })
        })
        .await;
    let copies = discord
        .messages_in(thread)
        .into_iter()
        .filter(|m| m["embeds"].to_string().contains("HaikuGPT · cycle 1"))
        .count();
    assert_eq!(copies, 1, "one card: the old one is a pointer now");
    let old = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == first["id"])
        .unwrap();
    let pointer = old["content"].as_str().unwrap();
    assert!(
        pointer.starts_with("⬇️ Cycle 1's card was moved to the bottom of the thread by bob: https://discord.com/channels/")
            && pointer.ends_with(newest["id"].as_str().unwrap()),
        "{pointer}"
    );
    assert_eq!(old["components"], json!([]));

    discord.click(ALICE, &[], &newest, &button(&newest, "Approve"));
    card(&discord, thread, "HaikuGPT · cycle 2").await;
    let decided = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == newest["id"])
        .unwrap();
    let status = field(&decided, "Status").unwrap_or_default().to_string();
    assert!(status.starts_with("✅ Approved by alice"), "{status}");

    discord.assert_clean();
    bot.kill().await;
}

/// An auto-approved command whose only effect is the file change it returns is stored once, with
/// its result, where a proposal may be shown before it is stored (the console): while it runs,
/// the store still holds the agent as it was thinking, with no journal entry, so a crash then
/// would leave nothing to undo or to run twice. The approval's trail entry lands with the result.
/// Where cards must be stored first (Discord), and for any other command, the proposal and the
/// journal's `executing` record are on disk before the command starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_command_that_lands_with_its_result_runs_before_its_proposal_is_stored() {
    use autothread::core::audit::AuditEvent;
    use autothread::core::event::Event;
    use autothread::core::state::Phase;
    use autothread::store::{JournalEntry, Store};
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};
    use support::inproc::{agent, deps, reply, Recorder, ScriptedModel};

    let cases = [
        ("write_file", true, false),
        ("write_file", false, true),
        ("list_agents", true, true),
    ];
    for (command, shows_unstored, stored_first) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut config = autothread::config::Config::default();
        config.llm.model = "local-model".into();
        config.budget.free_models = vec!["local-model".into()];
        let args = match command {
            "write_file" => json!({"filename": "haiku.txt", "contents": "crab\n"}),
            _ => json!({}),
        };
        let model = Arc::new(ScriptedModel::new([
            reply(command, args),
            reply("finish", json!({"reason": "done"})),
        ]));
        let surface = Arc::new(Recorder::default());
        surface
            .shows_unstored_proposals
            .store(shows_unstored, Ordering::SeqCst);
        let id = "lands0000001";
        // What the store held when the card was shown: phase, a pending proposal, the journal.
        type Stored = (Phase, bool, Option<JournalEntry>);
        let seen: Arc<Mutex<Option<Stored>>> = Arc::default();
        let (reader, seen_by_hook) = (store.clone(), seen.clone());
        *surface.on_first_card.lock().unwrap() = Some(Box::new(move |_| {
            let stored = reader.load_agent_record(id).unwrap().expect("stored agent");
            let journal = reader.journal_entry(id, 1).unwrap();
            *seen_by_hook.lock().unwrap() = Some((
                stored.progress.phase,
                stored.progress.pending.is_some(),
                journal,
            ));
        }));
        let deps = deps(&store, model, surface.clone(), config, None);
        let (_handle, done) = autothread::runtime::start(
            agent(id, "Write a haiku", "local-model", true),
            Event::Start,
            deps,
        );
        let state = tokio::time::timeout(support::WAIT, done)
            .await
            .expect("the agent finishes")
            .unwrap()
            .unwrap();

        let case = format!("{command}, shown before stored: {shows_unstored}");
        let (phase, pending, journal) = seen.lock().unwrap().take().expect("a card was shown");
        if stored_first {
            assert_eq!(phase, Phase::Executing, "{case}");
            assert!(pending, "{case}");
            assert!(
                matches!(journal, Some(JournalEntry::Executing { .. })),
                "{case}: {journal:?}"
            );
        } else {
            assert_ne!(phase, Phase::Executing, "{case}");
            assert!(!pending && journal.is_none(), "{case}: {journal:?}");
        }
        // Either way the command ran once, its result is recorded, and the trail has its approval
        // first, before the decision on `finish` (which always asks).
        assert!(
            state.progress.episodes.len() >= 2,
            "{case}: {:?}",
            state.progress.episodes
        );
        if command == "write_file" {
            assert_eq!(
                store.read_file(id, "haiku.txt").unwrap().as_deref(),
                Some(&b"crab\n"[..]),
                "{case}"
            );
        }
        let trail = store.audit_trail(id).unwrap();
        let approved: Vec<u64> = trail
            .iter()
            .filter_map(|entry| match &entry.event {
                AuditEvent::AutoApproved { cycle, .. } => Some(*cycle),
                _ => None,
            })
            .collect();
        assert_eq!(approved, [1], "{case}: {trail:?}");
        assert!(
            matches!(
                trail.first().map(|e| &e.event),
                Some(AuditEvent::AutoApproved { .. })
            ),
            "{case}: {trail:?}"
        );
        // The command finished: its result is the cycle's episode, and the journal, which holds
        // only commands under way, has let it go.
        assert_eq!(store.journal_entry(id, 1).unwrap(), None, "{case}");
    }
}

/// With nothing in the config about deadlines, a card nobody answers waits a day and then parks
/// its agent, saying so, and the agent holds no reservation of the budget: on the fake clock, a
/// minute before the day the card still waits, and just after it the agent is parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_card_parks_its_agent_after_a_day_by_default() {
    use autothread::clock::Clock;
    use autothread::core::expiry::ExpiryAction;
    use autothread::core::state::{PauseReason, Phase};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;
    use support::inproc::{agent, deps, reply, FakeClock, Recorder, ScriptedModel};

    let dir = tempfile::tempdir().unwrap();
    let store = autothread::store::Store::open(dir.path()).unwrap();
    let mut config = autothread::config::Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    let clock = FakeClock::default();
    let model = Arc::new(ScriptedModel::new([reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "crab"}),
    )]));
    let surface = Arc::new(Recorder::default());
    surface
        .leaves_cards_unanswered
        .store(true, Ordering::SeqCst);
    let mut deps = deps(&store, model, surface.clone(), config, None);
    deps.clock = Arc::new(clock.clone());
    let budgets = deps.budgets.clone();
    // Not continuous: the write class's "auto" still shows a card.
    let mut state = agent("unanswered01", "Write a haiku", "local-model", false);
    state.created_at = clock.now();
    state.updated_at = clock.now();
    let (_handle, done) =
        autothread::runtime::start(state, autothread::core::event::Event::Start, deps);

    let stored = || store.load_agent("unanswered01").unwrap().unwrap();
    for _ in 0..500 {
        let phase = store
            .load_agent("unanswered01")
            .unwrap()
            .map(|s| s.progress.phase);
        if phase == Some(Phase::AwaitingDecision) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waiting = stored();
    assert_eq!(waiting.progress.phase, Phase::AwaitingDecision);
    let deadline = waiting.progress.pending.as_ref().unwrap().deadline.unwrap();
    assert_eq!(deadline.at, clock.now() + chrono::Duration::days(1));
    assert_eq!(deadline.action, ExpiryAction::Park);
    assert!(budgets.ledger().open_reservations().unwrap().is_empty());

    clock.advance(Duration::from_secs(24 * 3600 - 60));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stored().progress.phase,
        Phase::AwaitingDecision,
        "not yet a day"
    );
    assert!(!done.is_finished());

    clock.advance(Duration::from_secs(120));
    let parked = tokio::time::timeout(Duration::from_secs(10), done)
        .await
        .expect("the parked agent's actor stops")
        .unwrap()
        .unwrap();
    assert_eq!(
        parked.progress.phase,
        Phase::Paused(PauseReason::Unanswered {
            cycle: 1,
            waited: "1 d".into()
        })
    );
    assert_eq!(stored().progress.phase, parked.progress.phase);
    // The proposal is kept for a resume, and nothing of the budget stays reserved.
    assert_eq!(
        parked.progress.pending.as_ref().unwrap().command.name,
        "write_file"
    );
    assert!(budgets.ledger().open_reservations().unwrap().is_empty());
    let notices = surface.notices.lock().unwrap().clone();
    assert!(
        notices.iter().any(|n| n
            == "Nobody decided within 1 d: the agent is parked; `/agent resume` shows this card again."),
        "{notices:?}"
    );
}
