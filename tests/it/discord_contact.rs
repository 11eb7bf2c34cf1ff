//! Discord first contact, the real bot against the fake Discord (which applies Discord's rule
//! that the first follow-up of a deferred interaction keeps the deferral's visibility): refusals
//! stay private, cards get through Discord's bad moments exactly once and with their buttons,
//! `/agent help` explains the buttons and commands, and a channel whose permissions would break
//! the cards refuses a start, which `autothread check` warns of beforehand.

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, button, card, start_agent, start_bot, title, Start, WAIT};
use support::fake_discord::{
    FakeDiscord, Overwrite, ALICE, BOT_ROLE, BOT_ROLE_B, CHANNEL, EMBED_LINKS, EVERYONE_PERMS,
    GUILD, GUILD_B, OVERWRITE_ROLE,
};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

/// A test environment whose bot re-posts missing cards every second.
fn env_with_fast_reposts(openai: &FakeOpenAi) -> TestEnv {
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        path,
        format!("{config}\n[discord]\nrepost_interval_secs = 1\n"),
    )
    .unwrap();
    env
}

/// The cards for `cycle` in `thread` (there must be exactly one).
fn cards_for(discord: &FakeDiscord, thread: u64, wanted: &str) -> Vec<Value> {
    discord
        .messages_in(thread)
        .into_iter()
        .filter(|m| title(m) == wanted)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_after_the_deferral_is_still_private() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;

    // The bot's role may not create threads here: Discord refuses with 403 only after the
    // command was deferred. The refusal says what to fix, and only Alice sees it.
    discord.forbid_threads(true);
    let start = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "Write a haiku"}]),
        json!({}),
    );
    let text = answer(&discord, start, true).await;
    assert!(
        text.contains("Create Public Threads"),
        "the refusal names the missing permission: {text}"
    );
    assert_eq!(discord.callbacks(start)[0].kind, 5, "deferred first");
    assert!(discord.threads().is_empty());

    // With the permission back, the start works, and its answer is private too.
    discord.forbid_threads(false);
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let (options, resolved) = Start {
        task: "Write a haiku",
        name: Some("HaikuGPT"),
        continuous: None,
        ..Start::default()
    }
    .options();
    let started = discord.slash(ALICE, &[], CHANNEL, "start", options, resolved);
    let text = answer(&discord, started, true).await;
    assert!(text.starts_with("Started agent"), "{text}");
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_get_through_discords_bad_moments_once_and_with_their_buttons() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for cycle in 1..=3 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("n{cycle}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = env_with_fast_reposts(&openai);
    let bot = start_bot(&env, &discord).await;

    // Cycle 1: Discord stores the card but answers 500, then rate limits. The retries carry the
    // card's nonce, so Discord hands back the stored card instead of a second one.
    discord.fail_card_posts(1, 500, true);
    let thread = start_agent(
        &discord,
        Start {
            task: "Write three notes",
            name: Some("NoteGPT"),
            continuous: None,
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "NoteGPT · cycle 1").await;
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 1").len(), 1);

    // Cycle 2: a 429 and a 503 in a row are retried with backoff.
    discord.fail_card_posts(1, 429, false);
    discord.fail_card_posts(1, 503, false);
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "NoteGPT · cycle 2").await;
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 2").len(), 1);

    // Cycle 3: Discord is down for longer than a post's retries (six failures, four tries a
    // post). The card is posted again when Discord is back, once, with its buttons.
    discord.fail_card_posts(6, 503, false);
    discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    let third = card(&discord, thread, "NoteGPT · cycle 3").await;
    assert_eq!(discord.failing_posts_left(), 0);
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 3").len(), 1);
    let approve = button(&third, "Approve");
    assert!(!button(&third, "Deny").is_empty());

    // The re-posted card works: approving it runs the command, and the agent goes on.
    openai.push_content(agent_reply("finish", json!({"reason": "three notes"})));
    discord.click(ALICE, &[], &third, &approve);
    let last = card(&discord, thread, "NoteGPT · cycle 4").await;
    discord.click(ALICE, &[], &last, &button(&last, "Approve"));
    discord
        .wait_for("the finish", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| title(m) == "NoteGPT finished")
        })
        .await;
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_explains_the_buttons_and_every_command_privately() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let asked = discord.slash(ALICE, &[], CHANNEL, "help", json!([]), json!({}));
    // The help is one private embed.
    let text = discord
        .wait_for("the help", WAIT, |d| {
            d.callbacks(asked)
                .into_iter()
                .find(|c| c.kind == 4)
                .map(|c| {
                    assert_eq!(c.data["flags"], 64, "the help is private");
                    c.data["embeds"][0]["description"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
        })
        .await;
    for expected in [
        "**Approve**",
        "**Approve ×N…**",
        "**Feedback…**",
        "**Self-critique**",
        "**Deny**",
        "**Approve & remember…**",
        "**Edit…**",
        "`/agent rules` — ",
        "`/agent start` — Start an agent on a task, in a new thread.",
        "`/agent status` — ",
        "`/agent budget show|set|chart` — ",
        "`/memory add|search|list|writers` — ",
        "`/agent models show|allow|remove` — ",
        "`/agent help` — ",
        "`/agent finish` — ",
        "`/agent archive` — ",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    discord.assert_clean();
    bot.kill().await;
}

/// An @everyone overwrite of the test channel that takes Embed Links away.
fn no_embeds_for_everyone() -> Overwrite {
    Overwrite {
        id: GUILD,
        kind: OVERWRITE_ROLE,
        allow: 0,
        deny: EMBED_LINKS,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_without_embed_links_refuses_a_start_naming_it_until_a_role_grants_it() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    // A server admin took Embed Links from everyone in the channel: a card would arrive there
    // with its buttons and without its text.
    discord.set_overwrites(CHANNEL, vec![no_embeds_for_everyone()]);
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;

    let start = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "Write a haiku"}, {"name": "budget", "type": 10, "value": 0.5}]),
        json!({}),
    );
    let text = answer(&discord, start, true).await;
    assert!(
        text.contains("lacks Embed Links here") && text.contains("Discord drops every embed"),
        "the refusal names the permission and what it breaks: {text}"
    );
    // Refused before anything else: no thread, no agent, no model call, nothing reserved.
    assert!(discord.threads().is_empty());
    assert_eq!(discord.callbacks(start)[0].kind, 4, "answered at once");

    // The bot's role is given Embed Links in the channel: the start goes through, and the card
    // keeps its text.
    discord.set_overwrites(
        CHANNEL,
        vec![
            no_embeds_for_everyone(),
            Overwrite {
                id: BOT_ROLE,
                kind: OVERWRITE_ROLE,
                allow: EMBED_LINKS,
                deny: 0,
            },
        ],
    );
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "old pond"}),
    ));
    let (options, resolved) = Start {
        task: "Write a haiku",
        name: Some("HaikuGPT"),
        ..Start::default()
    }
    .options();
    // The channel's update reaches the bot's cache through the gateway: a start sent before it
    // arrived is refused again, and tried anew.
    let mut text = String::new();
    for _ in 0..50 {
        let started = discord.slash(
            ALICE,
            &[],
            CHANNEL,
            "start",
            options.clone(),
            resolved.clone(),
        );
        text = answer(&discord, started, true).await;
        if !text.contains("Embed Links") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(text.starts_with("Started agent"), "{text}");
    let thread: u64 = discord.threads()[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let first = card(&discord, thread, "HaikuGPT · cycle 1").await;
    assert!(
        first["embeds"].as_array().is_some_and(|e| !e.is_empty()),
        "{first}"
    );
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// `autothread check` with the bot's token, against the fake Discord.
async fn check(env: &TestEnv, discord: &FakeDiscord) -> (bool, String) {
    let mut cmd = env.command(&["check"]);
    cmd.env("DISCORD_TOKEN", "fake-token")
        .env("DISCORD_API_BASE", &discord.base_url)
        .env("DISCORD_MESSAGE_CONTENT_INTENT", "false")
        .env("OPENAI_API_KEY", "sk-check-secret");
    let (ok, out, _) = support::Running::new_public(cmd.spawn().unwrap())
        .finish(WAIT)
        .await;
    (ok, out)
}

fn line_starting<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_the_permissions_the_bot_lacks_by_name_and_what_breaks_without_each() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{config}\n[web]\nenabled = false\n")).unwrap();

    // As invited: every permission agents use, in both servers.
    let (ok, out) = check(&env, &discord).await;
    assert!(ok, "{out}");
    line_starting(&out, "✓ discord permissions: Fake Guild (server ");
    line_starting(&out, "✓ discord permissions: Second Guild (server ");

    // The test channel takes Embed Links away; the second server's bot role lost its own
    // permissions (pinning, archiving).
    discord.set_overwrites(CHANNEL, vec![no_embeds_for_everyone()]);
    discord.set_role_permissions(GUILD_B, BOT_ROLE_B, 0);
    let (ok, out) = check(&env, &discord).await;
    assert!(
        ok,
        "what is missing here still lets agents run elsewhere: {out}"
    );
    let channel = line_starting(&out, "! discord permissions: Fake Guild (server ");
    let named = format!("in #general (channel {CHANNEL}) the bot also lacks Embed Links");
    for expected in [
        named.as_str(),
        "Discord drops every embed: cards, profiles and results arrive without their text",
        "/agent start is refused there",
    ] {
        assert!(channel.contains(expected), "{expected:?} in {channel}");
    }
    let server = line_starting(&out, "! discord permissions: Second Guild (server ");
    for expected in [
        "the bot's roles lack Pin Messages (the live status message stays unpinned)",
        "Manage Threads (/agent archive cannot archive",
    ] {
        assert!(server.contains(expected), "{expected:?} in {server}");
    }

    // A server whose roles leave out what every card needs fails the check.
    discord.set_role_permissions(GUILD_B, GUILD_B, EVERYONE_PERMS & !EMBED_LINKS);
    let (ok, out) = check(&env, &discord).await;
    assert!(!ok, "{out}");
    let server = line_starting(&out, "✗ discord permissions: Second Guild (server ");
    assert!(server.contains("lack Embed Links"), "{server}");
    assert!(!out.contains("fake-token"), "no secret is printed");
}
