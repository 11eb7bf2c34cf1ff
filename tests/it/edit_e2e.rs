//! Edit, then approve, end to end in Discord and in the console: the Edit button's form is
//! prefilled with the arguments, an edit is validated like a model's, the card says who edited
//! what, and the edited command is the one that runs.

use crate::support;

use serde_json::json;
use support::bot::{
    button, card, ephemeral_text, message_containing, start_agent, start_bot, Start,
};
use support::fake_discord::{FakeDiscord, ALICE, BOB};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

fn field<'a>(card: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    card["embeds"][0]["fields"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)?["value"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_command_is_shown_with_its_editor_and_runs_as_edited() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "crab"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "poem.txt"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a haiku",
            name: Some("HaikuGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "HaikuGPT · cycle 1").await;
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
    assert!(edited["embeds"][0]["fields"]
        .to_string()
        .contains("poem.txt"));
    assert_eq!(button(&edited, "Approve"), button(&first, "Approve"));

    // Approving runs the edited command.
    discord.click(ALICE, &[], &edited, &button(&edited, "Approve"));
    message_containing(
        &discord,
        thread,
        "File poem.txt has been written successfully.",
    )
    .await;
    card(&discord, thread, "HaikuGPT · cycle 2").await;

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_edits_arguments_one_by_one() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "alpha"}),
    ));
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
    assert!(stdout.contains("EDITED BY: "), "{stdout}");
    assert!(stdout.contains("(filename)"), "{stdout}");
    assert!(stdout.contains("Nothing changed."), "{stdout}");
    assert!(
        stdout.contains("File b.txt has been written successfully."),
        "{stdout}"
    );
    openai.assert_clean();
}
