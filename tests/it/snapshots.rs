//! Snapshots of what people and the model read: the assembled cycle prompt, the profile prompt, a
//! Discord card's embed and the console's card. A wording change shows as a diff of the files in
//! `tests/it/snapshots/`; accept an intended one with `UPDATE_EXPECT=1 cargo test snapshots`.

use autothread::core::budget::Micros;
use chrono::{DateTime, TimeZone, Utc};
use expect_test::expect_file;
use serde_json::json;

use autothread::config::AgentConfig;
use autothread::core::budget::SpendNote;
use autothread::core::commands::Risk;
use autothread::core::history::{Episode, Outcome};
use autothread::core::message::Message;
use autothread::core::prompt::{
    build_cycle_prompt, profile_messages, ContextLimits, PromptExtras, PromptInputs,
};
use autothread::core::reply::{CommandCall, Thoughts};
use autothread::core::state::{AgentSettings, AgentState, Phase, Profile, Proposal};
use autothread::llm::tokens::TiktokenCounter;
use autothread::runtime::ShownAs;
use autothread::surface::console::proposal_text;
use autothread::surface::discord::cards::proposal_card;
use autothread::tools::Registry;

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

fn call(name: &str, args: serde_json::Value) -> CommandCall {
    CommandCall {
        name: name.into(),
        args: args.as_object().cloned().unwrap(),
    }
}

/// An agent three steps into a file task, with a profile, a follow-up and one summary.
fn agent() -> AgentState {
    let mut state = AgentState::new(
        "snap00000001".into(),
        "Write a haiku about Rust into haiku.txt, then finish".into(),
        Some(Profile {
            name: "PoetGPT".into(),
            role: "an AI that writes short poems into files".into(),
            best_practices: vec!["Check the file after writing it.".into()],
            constraints: vec!["Write only inside the workspace.".into()],
        }),
        AgentSettings {
            model: "gpt-4o-mini".into(),
            continuous: false,
            cycle_limit: 0,
            budget: None,
            policy: Default::default(),
            endpoint: None,
            prompt_budget_tokens: None,
        },
        at(),
    );
    state.brief.follow_ups.push("Add a title line.".into());
    let episodes = [
        (
            call(
                "write_file",
                json!({"filename": "haiku.txt", "text": "Borrow checker hums"}),
            ),
            Outcome::Success("File written to successfully.".into()),
            Some("Wrote the first line of the haiku to haiku.txt.".to_string()),
        ),
        (
            call("read_file", json!({"filename": "haiku.txt"})),
            Outcome::Success("Borrow checker hums".into()),
            None,
        ),
        (
            call(
                "append_to_file",
                json!({"filename": "haiku.txt", "text": "\nlifetimes"}),
            ),
            Outcome::HumanFeedback("Make the second line longer.".into()),
            None,
        ),
    ];
    for (cycle, (command, outcome, summary)) in episodes.into_iter().enumerate() {
        state.progress.episodes.push(Episode {
            cycle: cycle as u64 + 1,
            command,
            reasoning: "The task asks for a haiku in a file.".into(),
            outcome,
            summary,
            decided_by: Some(autothread::core::person::ActedBy::person(
                autothread::core::person::Person::discord(1, "alice"),
            )),
            edited_by: Vec::new(),
            cost: autothread::core::budget::Micros::ZERO,
        });
    }
    state.progress.cycle = 4;
    state.progress.phase = Phase::AwaitingDecision;
    state
}

fn proposal() -> Proposal {
    Proposal {
        cycle: 4,
        thoughts: Thoughts {
            observations: "The file has two lines; the human wants a longer second line.".into(),
            text: "Rewrite the second line with more syllables.".into(),
            reasoning: "A haiku's second line has seven syllables.".into(),
            self_criticism: "I should have counted syllables before writing.".into(),
            plan: "- rewrite line two\n- read the file back\n- finish".into(),
            speak: "I will fix the second line.".into(),
        },
        command: call(
            "write_file",
            json!({"filename": "haiku.txt", "contents": "Borrow checker hums\nlifetimes align like the stars"}),
        ),
        risk: Risk::Write,
        interrupted: false,
        approved_by: None,
        spend: Some(SpendNote {
            next_step_likely: Micros(1_200),
            next_step_worst: Micros(4_500),
            remaining: Micros(1_870_000),
            agent_limit: Micros(2_000_000),
            agent_used: Micros(130_000),
            limited_by: None,
        }),
        auto_stop: None,
        paced: None,
        edits: vec![autothread::core::state::ArgumentEdit {
            by: autothread::core::person::Person::discord(2, "bob"),
            arguments: vec!["contents".into()],
        }],
        approvals: vec![autothread::core::person::Person::discord(3, "carol")],
        approvals_needed: 2,
        outgoing: None,
        deadline: None,
        remember: Vec::new(),
        stuck: None,
        script_check: None,
        revision: 1,
    }
}

fn render(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| format!("--- {:?}\n{}\n", m.role, m.content))
        .collect()
}

#[test]
fn the_cycle_prompt() {
    let state = agent();
    let commands = Registry::standard(&AgentConfig::default())
        .command_set()
        .clone();
    let counter = TiktokenCounter::for_model("gpt-4o-mini");
    let extras = PromptExtras {
        memories: vec!["Cycle 1: the user prefers haiku about systems languages.".into()],
        budget: Some("Your remaining API budget is $1.87".into()),
    };
    let built = build_cycle_prompt(&PromptInputs {
        state: &state,
        commands: &commands,
        now: at(),
        limits: ContextLimits {
            context_tokens: 8192,
            max_tokens: 1000,
        },
        extras: &extras,
        full_steps: 2,
        step_lines: autothread::core::prompt::DEFAULT_STEP_LINES,
        counter: &counter,
        // A priced model's prompt: the compact schema states the format, so the prompt does not.
        format_in_prompt: false,
        schema_tokens: autothread::core::message::TokenCounter::count(
            &counter,
            &commands.compact_reply_schema().to_string(),
        ),
    });
    expect_file!["snapshots/cycle_prompt.txt"].assert_eq(&render(&built.messages));
}

#[test]
fn the_profile_prompt() {
    let messages = profile_messages("Write a haiku about Rust into haiku.txt, then finish");
    expect_file!["snapshots/profile_prompt.txt"].assert_eq(&render(&messages));
}

#[test]
fn a_discord_card() {
    let embed = proposal_card("PoetGPT", &proposal(), None, "Waiting for a decision").fitted();
    let fields: String = embed
        .fields
        .iter()
        .map(|(name, value)| format!("## {name}\n{value}\n"))
        .collect();
    let text = format!(
        "# {}\n{}\n{fields}-- {}\n",
        embed.title, embed.description, embed.footer
    );
    expect_file!["snapshots/discord_card.txt"].assert_eq(&text);
}

#[test]
fn the_console_card() {
    expect_file!["snapshots/console_card.txt"].assert_eq(&proposal_text(
        &agent(),
        &proposal(),
        ShownAs::AwaitingDecision,
    ));
}
