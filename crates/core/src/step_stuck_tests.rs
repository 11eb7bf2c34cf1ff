//! The stuck panel in the pure core: an agent whose last results all failed, or that circles back
//! to a command it ran twice in five steps, or that repeats its last step after the watchdog's
//! rethink, is shown to a person whatever would have run it unattended; Rethink asks the model
//! again (the stronger one) saying why, a hint is feedback, Skip goes on without the command.

use serde_json::json;

use super::audit::AuditEvent;
use super::decision::Decision;
use super::event::CallPurpose;
use super::history::Outcome;
use super::state::Phase;
use super::step_tests::{executes, main_call, proposal_of, reply_json, Harness};

fn read(file: &str) -> String {
    reply_json("read_file", json!({ "filename": file }))
}

/// An agent under Approve ×10 whose first three reads fail.
fn failing_three_times() -> Harness {
    let mut h = Harness::started();
    h.think(&read("a.txt"));
    h.decide(Decision::ApproveN(10));
    h.finish_command(Outcome::Error("Failure: no such file".into()));
    for file in ["b.txt", "c.txt"] {
        assert!(executes(&h.think(&read(file))).is_some());
        h.finish_command(Outcome::Error("Failure: no such file".into()));
    }
    h
}

#[test]
fn three_failures_in_a_row_stop_approve_n_at_the_stuck_panel() {
    let mut h = failing_three_times();
    let fx = h.think(&read("d.txt"));
    assert!(executes(&fx).is_none(), "Approve ×N does not cover it");
    assert_eq!(h.state.progress.phase, Phase::AwaitingDecision);
    assert_eq!(h.state.safety.auto_approvals_left, 0);
    let stuck = proposal_of(&fx).stuck.clone().expect("the stuck panel");
    assert_eq!(stuck.why, "its last 3 steps failed");
    assert!(stuck.smart);

    // Rethink: no step is recorded, and the stronger model is asked, told why.
    let cycle = h.state.progress.cycle;
    let fx = h.decide(Decision::Rethink);
    assert_eq!(h.state.progress.cycle, cycle);
    assert_eq!(h.state.progress.episodes.len(), 3);
    assert_eq!(h.state.progress.phase, Phase::Thinking);
    let call = main_call(&fx);
    assert_eq!(call.purpose, CallPurpose::Rethink);
    assert!(call.smart);
    assert!(call.messages.iter().any(|m| m
        .content
        .contains("You are not making progress: its last 3 steps failed")));
    assert!(h.audits.iter().any(|a| matches!(
        &a.event,
        AuditEvent::Decided { decision, .. } if decision == "asked for a rethink of"
    )));
    // The fresh proposal is an ordinary card at the next revision (a click on the panel is stale),
    // and waits for the person who asked, even in continuous mode.
    h.state.brief.settings.continuous = true;
    let fx = h.reply(CallPurpose::Rethink, &read("README.md"));
    let card = proposal_of(&fx);
    assert!(card.stuck.is_none());
    assert_eq!(card.revision, 1);
    assert!(executes(&fx).is_none());
    h.state.brief.settings.continuous = false;

    // A hint is feedback: it breaks the run of failures.
    h.decide(Decision::Feedback("the files are under docs/".into()));
    let fx = h.think(&read("docs/a.txt"));
    assert!(proposal_of(&fx).stuck.is_none());
}

#[test]
fn circling_back_to_a_command_shows_the_panel_even_in_continuous_mode() {
    let mut h = Harness::started();
    h.state.brief.settings.continuous = true;
    for file in ["a.txt", "b.txt", "a.txt", "b.txt"] {
        assert!(executes(&h.think(&read(file))).is_some(), "{file}");
        h.finish_command(Outcome::Success("text".into()));
    }
    let fx = h.think(&read("a.txt"));
    assert!(executes(&fx).is_none());
    let why = proposal_of(&fx).stuck.clone().unwrap().why;
    assert!(why.contains("third time in 5 steps"), "{why}");
    // Skip: not run, the model reads why, and the next cycle begins.
    let fx = h.decide(Decision::Skip);
    assert_eq!(main_call(&fx).purpose, CallPurpose::Think);
    let last = h.state.progress.episodes.last().unwrap();
    assert!(
        matches!(&last.outcome, Outcome::HumanFeedback(t) if t.contains("the command was not run")),
        "{last:?}"
    );
    // Approve anyway runs it.
    let fx = h.think(&read("b.txt"));
    assert!(proposal_of(&fx).stuck.is_some());
    assert!(executes(&h.decide(Decision::Approve)).is_some());
}

#[test]
fn a_rethink_holds_through_a_restart_while_the_model_thinks() {
    let mut h = failing_three_times();
    h.think(&read("d.txt"));
    h.decide(Decision::Rethink);
    h.state.brief.settings.continuous = true;
    // The bot restarts before the reply: the cycle is asked afresh, and is still the person's.
    let fx = h.step(super::event::Event::Recovered { interrupted: false });
    assert_eq!(main_call(&fx).purpose, CallPurpose::Think);
    let fx = h.think(&read("README.md"));
    let card = proposal_of(&fx);
    assert_eq!(card.revision, 1, "a click on the panel stays stale");
    assert!(executes(&fx).is_none(), "nothing approves it unattended");
    assert_eq!(h.state.safety.rethink_requested, None);
}
