//! The stuck panel end to end in Discord: an agent running unattended whose steps keep failing is
//! stopped at a panel (Rethink, Give a hint…, Skip this step, Stop, Approve anyway); Rethink asks
//! the model again saying why, and its fresh proposal is an ordinary card.

use crate::approvals_e2e::field;
use crate::support;

use serde_json::json;
use support::bot::{button, card, start_agent, start_bot, Start, WAIT};
use support::fake_discord::{FakeDiscord, ALICE};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_steps_stop_at_the_stuck_panel_and_rethink_asks_the_model_again() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for file in ["a.txt", "b.txt", "c.txt", "d.txt", "README.md"] {
        openai.push_content(agent_reply("read_file", json!({ "filename": file })));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(&openai.base_url, "", "guild_calls_per_minute = 0\n");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Find the notes",
            name: Some("LostGPT"),
            continuous: Some(20),
            ..Start::default()
        },
    )
    .await;

    // Three reads of files that do not exist ran unattended; the fourth waits on the panel.
    let panel = card(&discord, thread, "LostGPT · cycle 4").await;
    assert_eq!(
        field(&panel, "🧭 Stuck"),
        Some("The agent seems stuck: its last 3 steps failed. Rethink, give it a hint, skip this step, stop it, or approve the command anyway.")
    );
    for label in [
        "Rethink",
        "Give a hint…",
        "Skip this step",
        "Stop",
        "Approve anyway",
        "Edit…",
    ] {
        button(&panel, label);
    }
    assert_eq!(openai.requests(Kind::Cycle).len(), 4);

    // Rethink: the model is asked again for the same cycle, told why; its fresh proposal takes
    // the panel's place as an ordinary card.
    discord.click(ALICE, &[], &panel, &button(&panel, "Rethink"));
    let fresh = discord
        .wait_for("the rethought card", WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == panel["id"]
                    && field(m, "🧭 Stuck").is_none()
                    && m.to_string().contains("README.md")
            })
        })
        .await;
    let asked = openai.requests(Kind::Cycle);
    assert_eq!(asked.len(), 5);
    assert!(
        asked[4]
            .to_string()
            .contains("You are not making progress: its last 3 steps failed"),
        "{}",
        asked[4]
    );
    assert_eq!(field(&fresh, "Status"), Some("Waiting for a decision"));
    button(&fresh, "Approve ×");
    let trail = discord.slash(ALICE, &[], thread, "audit", json!([]), json!({}));
    let trail = support::bot::ephemeral_text(&discord, trail).await;
    assert!(
        trail.contains(&format!(
            "alice (<@{ALICE}>) · asked for a rethink of cycle 4: `read_file`"
        )),
        "{trail}"
    );

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}
