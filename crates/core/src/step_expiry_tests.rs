//! Card deadlines in the pure core: a card of a class with a rule gets a deadline; at the
//! deadline (and not before, and not after a decision) the class's action happens: deny (the
//! command is not run and the agent thinks again), escalate (the approvers are called once with a
//! second deadline, then the agent parks) or park.

use std::collections::BTreeMap;

use chrono::Duration;
use serde_json::json;

use super::commands::Risk;
use super::decision::Decision;
use super::event::{Effect, Event};
use super::expiry::{Expiry, ExpiryAction, ExpiryRule};
use super::history::Outcome;
use super::state::{PauseReason, Phase};
use super::step_tests::{executes, proposal_of, reply_json, Harness};

fn with_rule(action: ExpiryAction) -> Harness {
    let mut h = Harness::started();
    h.expiry = Expiry::default().with_all(&BTreeMap::from([(
        Risk::Write,
        ExpiryRule {
            after_secs: 60,
            action,
        },
    )]));
    h
}

fn write(h: &mut Harness) -> Vec<Effect> {
    h.think(&reply_json(
        "write_file",
        json!({"filename": "a.txt", "contents": "x"}),
    ))
}

fn deadline_passed(h: &mut Harness, after_secs: i64) -> Vec<Effect> {
    h.now += Duration::seconds(after_secs);
    let cycle = h.state.progress.cycle;
    h.step(Event::DeadlinePassed { cycle })
}

fn expired(fx: &[Effect]) -> Option<(&str, bool)> {
    fx.iter().find_map(|e| match e {
        Effect::Expired { text, escalate, .. } => Some((text.as_str(), *escalate)),
        _ => None,
    })
}

#[test]
fn an_undecided_card_is_denied_at_its_deadline_and_the_agent_thinks_again() {
    let mut h = with_rule(ExpiryAction::Deny);
    let start = h.now;
    let fx = write(&mut h);
    assert_eq!(
        proposal_of(&fx).deadline.map(|d| d.at),
        Some(start + Duration::seconds(60))
    );
    assert!(deadline_passed(&mut h, 59).is_empty(), "not yet");
    let fx = deadline_passed(&mut h, 1);
    assert_eq!(
        expired(&fx),
        Some((
            "Nobody decided within 1 min: `write_file` was not run.",
            false
        ))
    );
    let episode = h.state.last_episode().unwrap();
    assert!(matches!(&episode.outcome, Outcome::Error(t) if t.contains("within 1 min")));
    assert_eq!(
        episode.decided_by.as_ref().map(|by| by.names()).as_deref(),
        Some("the deadline")
    );
    assert_eq!(
        h.state.progress.phase,
        Phase::Thinking,
        "the agent thinks again"
    );
    assert!(h
        .audits
        .last()
        .unwrap()
        .line(80)
        .ends_with("the deadline · cycle 1's `write_file` expired undecided: not run"));
}

#[test]
fn an_escalated_card_calls_the_approvers_once_then_parks() {
    let mut h = with_rule(ExpiryAction::Escalate);
    write(&mut h);
    let fx = deadline_passed(&mut h, 60);
    assert!(matches!(expired(&fx), Some((t, true)) if t.contains("calling the approvers")));
    let again = proposal_of(&fx).deadline.unwrap();
    assert!(again.escalated);
    assert_eq!(again.at, h.now + Duration::seconds(60));
    assert_eq!(
        h.state.progress.phase,
        Phase::AwaitingDecision,
        "the card stays open"
    );
    // The first timer's twin, late: the deadline moved, so nothing happens.
    let cycle = h.state.progress.cycle;
    assert!(h.step(Event::DeadlinePassed { cycle }).is_empty());

    let fx = deadline_passed(&mut h, 60);
    assert!(matches!(expired(&fx), Some((t, false)) if t.contains("parked")));
    assert!(matches!(
        &h.state.progress.phase,
        Phase::Paused(PauseReason::Unanswered { cycle: 1, waited }) if waited == "1 min"
    ));
    // Resumed, the card is shown again with a deadline of its own.
    let resumed_at = h.now;
    let fx = h.step(Event::Resume {
        by: "alice".into(),
        follow_up: None,
    });
    let fresh = proposal_of(&fx).deadline.unwrap();
    assert!(!fresh.escalated);
    assert_eq!(fresh.at, resumed_at + Duration::seconds(60));
}

#[test]
fn a_decision_in_time_leaves_nothing_for_the_deadline() {
    let mut h = with_rule(ExpiryAction::Park);
    write(&mut h);
    assert!(executes(&h.decide(Decision::Approve)).is_some());
    assert!(deadline_passed(&mut h, 600).is_empty());
    assert_eq!(h.state.progress.phase, Phase::Executing);
}

#[test]
fn a_card_shown_again_after_a_deny_gets_a_fresh_deadline() {
    let mut h = with_rule(ExpiryAction::Deny);
    write(&mut h);
    h.now += Duration::seconds(30);
    h.decide(Decision::Deny);
    assert_eq!(h.state.progress.pending.as_ref().unwrap().deadline, None);
    // Resumed long after the first deadline: the card is not expired at once.
    h.now += Duration::seconds(3_600);
    let resumed_at = h.now;
    let fx = h.step(Event::Resume {
        by: "alice".into(),
        follow_up: None,
    });
    assert_eq!(
        proposal_of(&fx).deadline.map(|d| d.at),
        Some(resumed_at + Duration::seconds(60))
    );
    let cycle = h.state.progress.cycle;
    assert!(h.step(Event::DeadlinePassed { cycle }).is_empty());
}
