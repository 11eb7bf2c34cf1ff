//! Edit, then approve, in the pure core: an edited command is validated like a model's, replaces
//! the proposal's, is shown again with who changed what, and is what runs once approved; a
//! command whose file changed after its card was shown is shown again instead of run.

use super::person::{ActedBy, Person};
use serde_json::json;

use super::decision::Decision;
use super::event::{Effect, Event};
use super::history::Outcome;
use super::state::Phase;
use super::step_tests::{executes, proposal_of, reply_json, Harness};

fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().unwrap().clone()
}

fn edit(h: &mut Harness, by: &str, value: serde_json::Value) -> Vec<Effect> {
    let cycle = h.state.progress.cycle;
    h.step(Event::Decided {
        cycle,
        decision: Decision::Edit(Box::new(args(value))),
        by: by.into(),
    })
}

#[test]
fn an_edited_command_is_shown_again_and_runs_as_edited() {
    let mut h = Harness::started();
    h.think(&reply_json(
        "write_file",
        json!({"filename": "notes.txt", "contents": "x"}),
    ));
    let fx = edit(
        &mut h,
        "bob",
        json!({"filename": "report.txt", "contents": "x"}),
    );
    let shown = proposal_of(&fx);
    assert_eq!(shown.command.args["filename"], "report.txt");
    assert_eq!(shown.editors().as_deref(), Some("bob (filename)"));
    assert_eq!(shown.revision, 1, "the card's buttons name the new version");
    assert!(matches!(
        fx[..],
        [Effect::ShowProposal {
            auto_approved: false,
            ..
        }]
    ));
    assert_eq!(h.state.progress.phase, Phase::AwaitingDecision);

    let fx = h.decide(Decision::Approve);
    let run = executes(&fx).expect("the edited command runs");
    assert_eq!(run.args["filename"], "report.txt");
    h.finish_command(Outcome::Success("Wrote report.txt".into()));
    let episode = h.state.last_episode().unwrap();
    assert_eq!(episode.command.args["filename"], "report.txt");
    assert_eq!(
        episode.decided_by.as_ref().map(|by| by.names()).as_deref(),
        Some("alice")
    );
    assert_eq!(episode.edited_by, [Person::from("bob")]);
}

#[test]
fn an_edit_that_does_not_validate_or_changes_nothing_is_refused_and_loses_nothing() {
    let mut h = Harness::started();
    h.think(&reply_json(
        "write_file",
        json!({"filename": "notes.txt", "contents": "x"}),
    ));
    let before = h.state.progress.pending.clone();
    for (value, why) in [
        (
            json!({"contents": "x"}),
            "missing required argument 'filename'",
        ),
        (
            json!({"filename": "notes.txt", "contents": "x", "mode": "rm"}),
            "unknown argument 'mode'",
        ),
        (
            json!({"filename": "notes.txt", "contents": "x"}),
            "changes no argument",
        ),
    ] {
        let fx = edit(&mut h, "bob", value);
        assert!(
            matches!(&fx[..], [Effect::Rejected(text)] if text.contains(why)),
            "{fx:?}"
        );
        assert_eq!(h.state.progress.pending, before);
        assert_eq!(h.state.progress.phase, Phase::AwaitingDecision);
    }
    // An edit of a card that is no longer pending changes nothing either.
    h.decide(Decision::Approve);
    let fx = edit(
        &mut h,
        "bob",
        json!({"filename": "late.txt", "contents": "x"}),
    );
    assert!(matches!(&fx[..], [Effect::Rejected(_)]));
    assert_eq!(h.state.progress.phase, Phase::Executing);
    assert_eq!(
        h.state.progress.pending.as_ref().unwrap().command.args["filename"],
        "notes.txt"
    );
}

#[test]
fn an_edit_ends_approve_n_and_edits_are_kept_bounded() {
    let mut h = Harness::started();
    h.think(&reply_json(
        "write_file",
        json!({"filename": "0", "contents": "x"}),
    ));
    h.state.safety.auto_approvals_left = 3;
    for i in 1..=8 {
        edit(
            &mut h,
            &format!("editor{i}"),
            json!({"filename": i.to_string(), "contents": "x"}),
        );
    }
    assert_eq!(h.state.safety.auto_approvals_left, 0);
    let pending = h.state.progress.pending.as_ref().unwrap();
    assert_eq!(pending.edits.len(), crate::state::MAX_EDITS_KEPT);
    assert_eq!(pending.edits.last().unwrap().by.name, "editor8");
}

#[test]
fn a_stale_command_is_shown_again_for_a_new_decision() {
    let mut h = Harness::started();
    h.think(&reply_json(
        "write_file",
        json!({"filename": "notes.txt", "contents": "x"}),
    ));
    h.state.safety.auto_approvals_left = 2;
    h.decide(Decision::ApproveN(3));
    assert_eq!(h.state.progress.phase, Phase::Executing);
    let cycle = h.state.progress.cycle;
    // A report for another cycle changes nothing.
    assert!(h
        .step(Event::CommandStale {
            cycle: cycle + 1,
            why: "x".into()
        })
        .is_empty());
    let fx = h.step(Event::CommandStale {
        cycle,
        why: "notes.txt changed after its card was shown.".into(),
    });
    assert!(matches!(
        &fx[..],
        [Effect::Notify(text), Effect::ShowProposal { auto_approved: false, .. }]
            if text.contains("was not run: notes.txt changed")
    ));
    assert_eq!(h.state.progress.phase, Phase::AwaitingDecision);
    assert_eq!(h.state.safety.auto_approvals_left, 0);
    assert_eq!(h.state.progress.pending.as_ref().unwrap().approved_by, None);
    assert!(
        h.state.progress.episodes.is_empty(),
        "nothing was recorded as run"
    );
}

fn decide_as(h: &mut Harness, by: &str, decision: Decision) -> Vec<Effect> {
    let cycle = h.state.progress.cycle;
    h.step(Event::Decided {
        cycle,
        decision,
        by: by.into(),
    })
}

#[test]
fn a_quorum_class_runs_after_k_distinct_approvals_and_one_deny_ends_it() {
    let mut h = Harness::started();
    h.quorum = crate::quorum::Quorum::default().with(crate::commands::Risk::Write, 2);
    h.think(&reply_json(
        "write_file",
        json!({"filename": "notes.txt", "contents": "x"}),
    ));
    assert_eq!(
        h.state.progress.pending.as_ref().unwrap().approvals_needed,
        2
    );

    let fx = decide_as(&mut h, "alice", Decision::Approve);
    assert!(executes(&fx).is_none());
    assert_eq!(
        proposal_of(&fx).approval_progress().as_deref(),
        Some("1 of 2 approvals: alice")
    );
    let fx = decide_as(&mut h, "alice", Decision::ApproveN(5));
    assert!(
        matches!(&fx[..], [Effect::Rejected(t)] if t.contains("already counts")),
        "{fx:?}"
    );
    // An edit starts the count again: the approval was for other arguments.
    edit(
        &mut h,
        "carol",
        json!({"filename": "b.txt", "contents": "x"}),
    );
    assert!(h
        .state
        .progress
        .pending
        .as_ref()
        .unwrap()
        .approvals
        .is_empty());
    decide_as(&mut h, "alice", Decision::Approve);
    let fx = decide_as(&mut h, "bob", Decision::Approve);
    assert!(executes(&fx).is_some(), "{fx:?}");
    h.finish_command(Outcome::Success("ok".into()));
    let episode = h.state.last_episode().unwrap();
    assert_eq!(
        episode.decided_by,
        Some(ActedBy::People(vec!["alice".into(), "bob".into()]))
    );
    assert_eq!(episode.edited_by, [Person::from("carol")]);

    // One deny ends a proposal whatever approvals it has.
    h.think(&reply_json(
        "write_file",
        json!({"filename": "c.txt", "contents": "x"}),
    ));
    decide_as(&mut h, "alice", Decision::Approve);
    decide_as(&mut h, "bob", Decision::Deny);
    assert!(
        matches!(h.state.progress.phase, Phase::Paused(_)),
        "{:?}",
        h.state.progress.phase
    );
    assert!(
        h.state
            .progress
            .pending
            .as_ref()
            .unwrap()
            .approvals
            .is_empty(),
        "a resumed proposal gathers its approvals anew"
    );
}

#[test]
fn approve_n_never_stands_in_for_a_quorum() {
    let mut h = Harness::started();
    h.quorum = crate::quorum::Quorum::default().with(crate::commands::Risk::Write, 2);
    h.think(&reply_json("read_file", json!({"filename": "a.txt"})));
    assert!(executes(&decide_as(&mut h, "bob", Decision::ApproveN(5))).is_some());
    h.finish_command(Outcome::Success("a".into()));
    // A read runs unattended under Approve ×N; a write, which needs two people, asks.
    let fx = h.think(&reply_json("read_file", json!({"filename": "b.txt"})));
    assert!(executes(&fx).is_some());
    h.finish_command(Outcome::Success("b".into()));
    let fx = h.think(&reply_json(
        "write_file",
        json!({"filename": "c.txt", "contents": "x"}),
    ));
    assert!(executes(&fx).is_none(), "{fx:?}");
    assert_eq!(h.state.progress.phase, Phase::AwaitingDecision);
}
