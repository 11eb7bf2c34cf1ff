//! The command policy in Discord, through the real bot: a server's policy from config (bot-wide
//! and per guild), an owner narrowing it with `/agent policy set`, refusals for people without
//! the right and for widening, and the next prompt no longer offering a denied command.

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, card, message_containing, start_agent, start_bot, Start};
use support::fake_discord::{FakeDiscord, ALICE, BOB, GUILD, MEMBER_PERMS};
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
