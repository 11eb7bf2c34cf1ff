//! End to end: a task created over the Agent Protocol and bound to a Discord channel
//! (`additional_input.discord_channel`), with the real `autothread run` serving the API beside
//! the fake Discord: its cards appear in its thread, a click and a step decide the same proposal
//! and the first to land wins, exactly once, and a binding that cannot be made is a 422 that
//! creates nothing.

use std::time::Duration;

use crate::support;

use serde_json::{json, Value};
use support::bot::{button, card, ephemeral_text, start_bot_serving_api, title};
use support::fake_discord::{
    FakeDiscord, Overwrite, BOB, BOT_ROLE_B, CAROL, CHANNEL, CHANNEL_B, OVERWRITE_ROLE,
    SEND_MESSAGES_IN_THREADS,
};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::TestEnv;

const CI_TOKEN: &str = "ci-token-for-the-bound-tests-1";
const DASH_TOKEN: &str = "dash-token-for-the-bound-tests-2";
const STRANGER_TOKEN: &str = "stranger-token-for-the-tests-3";
/// A Discord user who is in none of the fake's servers.
const NOT_A_MEMBER: u64 = 4_000_000_000_000_000_099;

/// The bot serving the API, with three callers: `ci` (owned on Discord by Bob), `dash` (no
/// Discord user) and `stranger` (a user in no server).
async fn bot_with_api(env: &TestEnv, discord: &FakeDiscord) -> (support::Running, Api) {
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n[api]\nlisten = \"127.0.0.1:0\"\nstep_wait_secs = 20\n\n\
         [[api.tokens]]\nname = \"ci\"\ntoken_env = \"TEST_API_TOKEN_CI\"\ndiscord_user = {BOB}\n\n\
         [[api.tokens]]\nname = \"dash\"\ntoken_env = \"TEST_API_TOKEN_DASH\"\n\n\
         [[api.tokens]]\nname = \"stranger\"\ntoken_env = \"TEST_API_TOKEN_STRANGER\"\ndiscord_user = {NOT_A_MEMBER}\n"
    ));
    std::fs::write(&path, config).unwrap();
    let (bot, base) = start_bot_serving_api(
        env,
        discord,
        &[
            ("TEST_API_TOKEN_CI", CI_TOKEN),
            ("TEST_API_TOKEN_DASH", DASH_TOKEN),
            ("TEST_API_TOKEN_STRANGER", STRANGER_TOKEN),
        ],
    )
    .await;
    let api = Api {
        base,
        http: reqwest::Client::new(),
    };
    (bot, api)
}

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    /// A POST as `token`: the status and the JSON answer.
    async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/ap/v1/agent{path}", self.base))
            .header("Authorization", format!("Bearer {token}"))
            .json(&body)
            .send()
            .await
            .expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, token: &str, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}/ap/v1/agent{path}", self.base))
            .header("Authorization", format!("Bearer {token}"))
            .send()
            .await
            .expect("the API answers");
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    /// A step with no input (an approval of what the caller was shown), answered with 200.
    async fn step(&self, task: &str) -> Value {
        let (status, step) = self
            .post(CI_TOKEN, &format!("/tasks/{task}/steps"), json!({}))
            .await;
        assert_eq!(status, 200, "{step}");
        step
    }

    /// The completed step of `cycle` in the task's list.
    async fn completed(&self, task: &str, cycle: u64) -> Value {
        let steps = self
            .get(CI_TOKEN, &format!("/tasks/{task}/steps?page_size=100"))
            .await;
        steps["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["step_id"].as_str() == Some(&*cycle.to_string()) && s["status"] == "completed"
            })
            .unwrap_or_else(|| panic!("no completed step {cycle} in {steps}"))
            .clone()
    }
}

fn status_of(message: &Value) -> String {
    message["embeds"][0]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["name"] == "Status")
        .and_then(|f| f["value"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Messages in `thread` whose text contains `needle`.
fn count_containing(discord: &FakeDiscord, thread: u64, needle: &str) -> usize {
    discord
        .messages_in(thread)
        .iter()
        .filter(|m| m["content"].as_str().unwrap_or("").contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_task_is_decided_from_discord_or_the_api_and_a_race_decides_once() {
    const ROUNDS: u64 = 20;
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    // Cycle n writes file n.txt; two cycles before the race, then the race's rounds.
    for cycle in 1..=ROUNDS + 3 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{cycle}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let (bot, api) = bot_with_api(&env, &discord).await;

    let (status, task) = api
        .post(
            CI_TOKEN,
            "/tasks",
            json!({"input": "Write files", "additional_input": {
                "name": "BoundGPT", "role": "writes files", "discord_channel": CHANNEL.to_string()}}),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let task_id = task["task_id"].as_str().unwrap().to_string();
    let thread: u64 = task["additional_input"]["discord_thread"]
        .as_str()
        .expect("the task names its thread")
        .parse()
        .unwrap();
    assert_eq!(
        task["additional_input"]["discord_channel"],
        CHANNEL.to_string()
    );
    let opened = discord
        .threads()
        .into_iter()
        .find(|t| t["id"].as_str() == Some(&*thread.to_string()))
        .expect("the thread was opened");
    assert_eq!(opened["parent_id"], CHANNEL.to_string());
    assert_eq!(opened["name"], "BoundGPT");

    // The first card appears in the thread; Bob, the token's Discord user, owns the agent and
    // approves it there.
    let first = card(&discord, thread, "BoundGPT · cycle 1").await;
    discord.click(BOB, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "BoundGPT · cycle 2").await;

    // The API's next step reports where Discord's approval took the agent; it decides nothing
    // itself, since the caller had not been shown that proposal.
    let shown = api.step(&task_id).await;
    assert_eq!(shown["step_id"], "2", "{shown}");
    assert_eq!(shown["additional_output"]["command"]["name"], "write_file");
    let decided = api.completed(&task_id, 1).await;
    assert_eq!(
        decided["additional_output"]["decided_by"], "bob",
        "{decided}"
    );
    assert_eq!(
        count_containing(&discord, thread, "File 1.txt has been written"),
        1
    );

    // Carol has no rights on Bob's agent: her click is refused, and the API still approves.
    let refused = discord.click(CAROL, &[], &second, &button(&second, "Approve"));
    let told = ephemeral_text(&discord, refused).await;
    assert!(told.starts_with("Only the agent's owner"), "{told}");
    let next = api.step(&task_id).await;
    assert_eq!(next["step_id"], "3", "{next}");
    card(&discord, thread, "BoundGPT · cycle 3").await;
    let decided = api.completed(&task_id, 2).await;
    assert_eq!(
        decided["additional_output"]["decided_by"], "ci",
        "{decided}"
    );
    let edited = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == second["id"])
        .unwrap();
    assert!(
        status_of(&edited).contains("by ci"),
        "{}",
        status_of(&edited)
    );

    // The race: Bob's click and the API's approval, round after round: sent at once, or one
    // with a head start, so that each side wins some rounds and loses others.
    let (mut by_discord, mut by_api) = (0, 0);
    let head_start = Duration::from_millis(300);
    for cycle in 3..3 + ROUNDS {
        let shown = card(&discord, thread, &format!("BoundGPT · cycle {cycle}")).await;
        let approve = button(&shown, "Approve");
        let (click, step) = match cycle % 3 {
            0 => {
                let click = discord.click(BOB, &[], &shown, &approve);
                tokio::time::sleep(head_start).await;
                (click, api.step(&task_id).await)
            }
            1 => {
                let late_click = async {
                    tokio::time::sleep(head_start).await;
                    discord.click(BOB, &[], &shown, &approve)
                };
                let (step, click) = tokio::join!(api.step(&task_id), late_click);
                (click, step)
            }
            _ => {
                let click = discord.click(BOB, &[], &shown, &approve);
                (click, api.step(&task_id).await)
            }
        };
        assert_eq!(
            step["step_id"],
            (cycle + 1).to_string(),
            "cycle {cycle}: {step}"
        );
        card(&discord, thread, &format!("BoundGPT · cycle {}", cycle + 1)).await;

        // One decision: one result, one card for the next cycle, one decider named.
        let written = format!("File {cycle}.txt has been written");
        assert_eq!(
            count_containing(&discord, thread, &written),
            1,
            "cycle {cycle}"
        );
        let cards = discord
            .messages_in(thread)
            .iter()
            .filter(|m| title(m) == format!("BoundGPT · cycle {cycle}"))
            .count();
        assert_eq!(cards, 1, "cycle {cycle}: its card was posted {cards} times");
        let decided = api.completed(&task_id, cycle).await;
        let decider = decided["additional_output"]["decided_by"]
            .as_str()
            .unwrap()
            .to_string();
        let edited = discord
            .messages_in(thread)
            .into_iter()
            .find(|m| m["id"] == shown["id"])
            .unwrap();
        assert!(
            status_of(&edited).contains(&format!("by {decider}")),
            "cycle {cycle}: the card says {:?}, the step {decider}",
            status_of(&edited)
        );
        match decider.as_str() {
            "bob" => by_discord += 1,
            "ci" => {
                // The click came second and is told who decided.
                let told = ephemeral_text(&discord, click).await;
                assert_eq!(
                    told, "This proposal is no longer pending: already decided by ci.",
                    "cycle {cycle}"
                );
                by_api += 1;
            }
            other => panic!("cycle {cycle}: decided by {other:?}"),
        }
    }
    assert_eq!(by_discord + by_api, ROUNDS);
    assert!(
        by_discord > 0 && by_api > 0,
        "each side should win some rounds: Discord {by_discord}, the API {by_api}"
    );
    // Each cycle asked the model once: no command ran twice and no cycle was repeated.
    assert_eq!(
        openai.requests(Kind::Cycle).len() as u64,
        ROUNDS + 3,
        "one model call per cycle"
    );
    let files = api
        .get(
            CI_TOKEN,
            &format!("/tasks/{task_id}/artifacts?page_size=100"),
        )
        .await;
    assert_eq!(files["pagination"]["total_items"], ROUNDS + 2, "{files}");
    for cycle in 1..ROUNDS + 3 {
        let name = format!("{cycle}.txt");
        assert!(
            files["artifacts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["file_name"] == name),
            "{name} was not written"
        );
    }
    // The other caller cannot see the task.
    let (status, _) = api
        .post(DASH_TOKEN, &format!("/tasks/{task_id}/steps"), json!({}))
        .await;
    assert_eq!(status, 404);
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_that_cannot_be_made_is_a_422_saying_why_and_creates_nothing() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    // In the second server the bot's role may not post in threads of its channel.
    discord.set_overwrites(
        CHANNEL_B,
        vec![Overwrite {
            id: BOT_ROLE_B,
            kind: OVERWRITE_ROLE,
            allow: 0,
            deny: SEND_MESSAGES_IN_THREADS,
        }],
    );
    let env = TestEnv::new(&openai.base_url, "");
    let (bot, api) = bot_with_api(&env, &discord).await;
    let bound_to = |channel: &str| json!({"input": "Write files", "additional_input": {"name": "Nope", "discord_channel": channel}});
    for (token, channel, why) in [
        (DASH_TOKEN, CHANNEL.to_string(), "has no discord_user"),
        (STRANGER_TOKEN, CHANNEL.to_string(), "is not a member"),
        (
            CI_TOKEN,
            "12345".to_string(),
            "is not a text channel of a server",
        ),
        (CI_TOKEN, CHANNEL_B.to_string(), "Send Messages in Threads"),
        (CI_TOKEN, "general".to_string(), "string of digits"),
    ] {
        let (status, answer) = api.post(token, "/tasks", bound_to(&channel)).await;
        assert_eq!(status, 422, "{channel}: {answer}");
        let message = answer["message"].as_str().unwrap_or("");
        assert!(message.contains(why), "{channel}: {message}");
    }
    // Nothing was made: no thread, no task for any caller.
    assert!(discord.threads().is_empty(), "{:?}", discord.threads());
    for token in [CI_TOKEN, DASH_TOKEN, STRANGER_TOKEN] {
        let tasks = api.get(token, "/tasks").await;
        assert_eq!(tasks["pagination"]["total_items"], 0, "{tasks}");
    }
    assert!(openai.requests(Kind::Cycle).is_empty());
    bot.kill().await;
}
