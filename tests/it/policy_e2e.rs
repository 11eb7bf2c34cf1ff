//! The command policy in Discord, through the real bot: a server's policy from config (bot-wide
//! and per guild), an owner narrowing it with `/agent policy set`, refusals for people without
//! the right and for widening, and the next prompt no longer offering a denied command; a server
//! admin changing their own server's policy with `/agent policy server-set|server-reset`, within
//! what the operator allows, audited, kept across a restart and felt by that server's agents only.

use crate::support;

use serde_json::{json, Value};
use support::bot::{
    answer, button, button_labels, card, message_containing, start_agent, start_bot, Start,
};
use support::fake_discord::{
    FakeDiscord, ADMIN_PERMS, ALICE, BOB, CHANNEL, CHANNEL_B, GUILD, MEMBER_PERMS,
};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::TestEnv;

fn field_names(card: &Value) -> Vec<String> {
    card["embeds"][0]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["name"].as_str().unwrap_or("").to_string())
        .collect()
}

fn policy_set(discord: &FakeDiscord, user: u64, thread: u64, class: u64, action: u64) -> u64 {
    discord.slash_group(
        user,
        &[],
        MEMBER_PERMS,
        thread,
        "policy",
        "set",
        json!([{"name": "class", "type": 4, "value": class}, {"name": "action", "type": 4, "value": action}]),
        json!({}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_narrows_the_server_policy_and_the_model_stops_seeing_denied_commands() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply("read_file", json!({"filename": "a.txt"})));
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(
        &openai.base_url,
        "",
        &format!("guild_calls_per_minute = 0\n\n[policy]\nwrite = \"ask\"\n\n[policy.guilds.\"{GUILD}\"]\nexternal = \"deny\"\n"),
    );
    let _bot = start_bot(&env, &discord).await;
    let start = Start {
        task: "Read a.txt",
        name: Some("PolicyGPT"),
        continuous: None,
        ..Start::default()
    };
    let thread = start_agent(&discord, start).await;
    let first = card(&discord, thread, "PolicyGPT · cycle 1").await;
    assert!(
        field_names(&first).contains(&"Proposed command: read_file (read class)".to_string()),
        "{:?}",
        field_names(&first)
    );

    // Classes: 0 read, 1 write, 2 network, 3 control, 4 external. Actions: 0 auto, 1 ask,
    // 2 deny, 3 server default.
    let refused = policy_set(&discord, BOB, thread, 2, 2);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner and moderators"));
    let widened = policy_set(&discord, ALICE, thread, 1, 0);
    assert_eq!(
        answer(&discord, widened, true).await,
        "The server's policy for write commands is `ask`; an agent can only be made stricter (allowed: `ask`, `deny`)."
    );
    let narrowed = policy_set(&discord, ALICE, thread, 2, 2);
    assert_eq!(
        answer(&discord, narrowed, true).await,
        "Network commands are now `deny` for this agent."
    );
    message_containing(
        &discord,
        thread,
        "set network commands to `deny` for this agent.",
    )
    .await;
    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    let text = answer(&discord, status, true).await;
    assert!(
        text.contains("Policy: read: auto, write: ask, network: deny (narrowed for this agent), control: ask, external: deny"),
        "{text}"
    );

    // The next prompt offers neither network command; the first one did.
    let cycles = openai.requests(Kind::Cycle);
    let system = |request: &Value| {
        request["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(system(&cycles[0]).contains("web_search("));
    assert!(cycles[0].to_string().contains("\"const\":\"web_search\""));
    discord.click(ALICE, &[], &first, &support::bot::button(&first, "Approve"));
    card(&discord, thread, "PolicyGPT · cycle 2").await;
    let cycles = openai.requests(Kind::Cycle);
    let second = cycles.last().unwrap();
    assert!(!system(second).contains("web_search("));
    assert!(!system(second).contains("read_webpage("));
    assert!(system(second).contains("read_file("));
    assert!(!second.to_string().contains("\"const\":\"web_search\""));
    discord.assert_clean();
}

/// The control class among `/agent policy server-set`'s classes (read, write, network, control,
/// external), and the external one.
const CONTROL: u64 = 3;
const EXTERNAL: u64 = 4;
/// `server-set`'s actions: auto, remember, ask, deny.
const AUTO: u64 = 0;
const REMEMBER: u64 = 1;

/// `/agent policy server-set class action` typed in `channel` by a member with `permissions`.
fn server_set(
    discord: &FakeDiscord,
    (user, permissions): (u64, &str),
    channel: u64,
    class: u64,
    action: u64,
) -> u64 {
    discord.slash_group(
        user,
        &[],
        permissions,
        channel,
        "policy",
        "server-set",
        json!([{"name": "class", "type": 4, "value": class}, {"name": "action", "type": 4, "value": action}]),
        json!({}),
    )
}

/// `/agent policy show` in `channel` by an ordinary member: the private answer.
async fn policy_shown(discord: &FakeDiscord, channel: u64) -> String {
    let asked = discord.slash_group(
        BOB,
        &[],
        MEMBER_PERMS,
        channel,
        "policy",
        "show",
        json!([]),
        json!({}),
    );
    answer(discord, asked, true).await
}

fn offers_to_remember(card: &Value) -> bool {
    button_labels(card)
        .iter()
        .any(|label| label.starts_with("Approve & remember"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_admin_lets_control_commands_be_remembered_in_their_server_alone() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply("read_file", json!({"filename": "a.txt"})));
    openai.push_content(agent_reply("do_nothing", json!({})));
    openai.push_content(agent_reply("do_nothing", json!({})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(
        &openai.base_url,
        &format!("[policy.guilds.\"{GUILD}\"]\nexternal = \"deny\"\n"),
    );
    let bot = start_bot(&env, &discord).await;
    let start = Start {
        task: "Wait",
        name: Some("IdleGPT"),
        ..Start::default()
    };
    let thread = start_agent(&discord, start).await;
    let first = card(&discord, thread, "IdleGPT · cycle 1").await;
    let admin = (ALICE, ADMIN_PERMS);

    // A member without Manage Server is refused, privately, and nothing changes.
    let refused = server_set(&discord, (BOB, MEMBER_PERMS), CHANNEL, CONTROL, REMEMBER);
    assert_eq!(
        answer(&discord, refused, true).await,
        "Only server admins can change this server's command policy: it needs the Manage Server permission, which you do not have here. Nothing changed."
    );
    // So is an admin's choice the operator does not allow: auto where the config asks, and
    // anything looser than a class the config denies here.
    let too_loose = server_set(&discord, admin, CHANNEL, CONTROL, AUTO);
    assert_eq!(
        answer(&discord, too_loose, true).await,
        "The bot's operator sets control commands to `ask` here and lets server admins choose only `remember`, `ask`, `deny` for them. Nothing changed."
    );
    let denied = server_set(&discord, admin, CHANNEL, EXTERNAL, REMEMBER);
    assert_eq!(
        answer(&discord, denied, true).await,
        "The bot's operator denies external commands here; server admins can keep them denied but not allow them. Nothing changed."
    );
    // A class that is not among the command's choices is refused as such.
    let unknown = server_set(&discord, admin, CHANNEL, 9, REMEMBER);
    assert!(answer(&discord, unknown, true)
        .await
        .starts_with("That is not one of this command's choices"),);
    let shown = policy_shown(&discord, CHANNEL).await;
    assert!(
        shown.contains("- control: ask — the operator's config\n"),
        "{shown}"
    );

    // The admin lets control commands be remembered here.
    let set = server_set(&discord, admin, CHANNEL, CONTROL, REMEMBER);
    assert_eq!(
        answer(&discord, set, true).await,
        "Control commands are now `remember` in this server, from each agent's next proposal on (an agent's owner may still make them stricter for their agent)."
    );
    let shown = policy_shown(&discord, thread).await;
    assert!(
        shown.contains("- control: remember\n")
            && shown.contains(&format!(
                "- control: remember — set by server admin alice (<@{ALICE}>) on "
            )),
        "{shown}"
    );

    // The running agent's next card offers to remember its control command.
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "IdleGPT · cycle 2").await;
    assert!(
        field_names(&second).contains(&"Proposed command: do_nothing (control class)".to_string()),
        "{:?}",
        field_names(&second)
    );
    assert!(offers_to_remember(&second), "{second}");

    // An agent in the other server proposes the same and is offered no rule.
    let (options, resolved) = Start {
        task: "Wait",
        name: Some("ElsewhereGPT"),
        ..Start::default()
    }
    .options();
    let started = discord.slash(ALICE, &[], CHANNEL_B, "start", options, resolved);
    answer(&discord, started, false).await;
    let thread_b: u64 = discord.threads().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let elsewhere = card(&discord, thread_b, "ElsewhereGPT · cycle 1").await;
    assert!(
        field_names(&elsewhere)
            .contains(&"Proposed command: do_nothing (control class)".to_string()),
        "{:?}",
        field_names(&elsewhere)
    );
    assert!(!offers_to_remember(&elsewhere), "{elsewhere}");
    assert!(policy_shown(&discord, CHANNEL_B)
        .await
        .contains("- control: ask — the operator's config\n"));

    // The change is on the agent's trail, by the admin's id.
    let audit = discord.slash_with(ALICE, MEMBER_PERMS, thread, "audit");
    let trail = answer(&discord, audit, true).await;
    assert!(
        trail.contains(&format!(
            "<@{ALICE}>) · set this server's control commands to `remember` (in force: `remember`)"
        )),
        "{trail}"
    );

    // The setting survives a restart; giving the class back to the config ends it.
    bot.wait_for_log("card remembered", 3, support::WAIT).await;
    bot.kill().await;
    let bot = start_bot(&env, &discord).await;
    discord
        .wait_for("a second IDENTIFY", support::WAIT, |d| {
            (d.identifies() >= 2).then_some(())
        })
        .await;
    let shown = policy_shown(&discord, CHANNEL).await;
    assert!(
        shown.contains(&format!(
            "- control: remember — set by server admin alice (<@{ALICE}>) on "
        )),
        "{shown}"
    );
    let reset = discord.slash_group(
        ALICE,
        &[],
        ADMIN_PERMS,
        CHANNEL,
        "policy",
        "server-reset",
        json!([{"name": "class", "type": 4, "value": CONTROL}]),
        json!({}),
    );
    assert_eq!(
        answer(&discord, reset, true).await,
        "Control commands are back to the operator's config: `ask` in this server, from each agent's next proposal on (an agent's owner may still make them stricter for their agent)."
    );
    assert!(policy_shown(&discord, CHANNEL)
        .await
        .contains("- control: ask — the operator's config\n"));
    discord.assert_clean();
    bot.kill().await;
}
