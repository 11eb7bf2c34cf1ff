//! The audit trail the core emits: every decision with what its card showed (and who edited it),
//! each approval toward a quorum, what approved a command automatically, a command not run and
//! why, and the policy, budget, pause and resume changes people make; nothing for a refused event.

use serde_json::json;

use super::audit::AuditEvent;
use super::budget::Micros;
use super::commands::Risk;
use super::decision::Decision;
use super::event::Event;
use super::history::Outcome;
use super::person::Person;
use super::policy::ClassAction;
use super::step_tests::{reply_json, Harness};

fn decide_as(h: &mut Harness, by: &str, decision: Decision) {
    let cycle = h.state.progress.cycle;
    h.step(Event::Decided {
        cycle,
        decision,
        by: by.into(),
    });
}

/// The trail as people read it, oldest first, with the test's people (each a Discord user whose
/// id the trail shows beside their name) written by name alone.
fn lines(h: &Harness) -> Vec<String> {
    h.audits
        .iter()
        .map(|entry| {
            let line = entry.line(200).split_once(" UTC · ").unwrap().1.to_string();
            ["alice", "bob", "carol", "admin"]
                .into_iter()
                .fold(line, |line, name| {
                    line.replace(&Person::from(name).to_string(), name)
                })
        })
        .collect()
}

#[test]
fn a_decision_is_recorded_with_the_card_it_was_made_on_and_its_editors() {
    let mut h = Harness::started();
    h.quorum = crate::quorum::Quorum::default().with(Risk::Write, 2);
    h.think(&reply_json(
        "write_file",
        json!({"filename": "notes.txt", "contents": "x"}),
    ));
    decide_as(&mut h, "alice", Decision::Approve);
    // The same person again counts nothing, and the trail says nothing.
    decide_as(&mut h, "alice", Decision::Approve);
    let cycle = h.state.progress.cycle;
    h.step(Event::Decided {
        cycle,
        decision: Decision::Edit(Box::new(
            json!({"filename": "b.txt", "contents": "x"})
                .as_object()
                .unwrap()
                .clone(),
        )),
        by: "carol".into(),
    });
    decide_as(&mut h, "alice", Decision::Approve);
    decide_as(&mut h, "bob", Decision::Approve);
    assert_eq!(
        lines(&h),
        [
            r#"alice · approved cycle 1 (1 of 2): `write_file` {"filename":"notes.txt","contents":"x"}"#,
            r#"carol · edited cycle 1 (filename): `write_file` {"filename":"b.txt","contents":"x"}, revision 1"#,
            r#"alice · approved cycle 1 (1 of 2): `write_file` {"filename":"b.txt","contents":"x"}, revision 1"#,
            r#"alice, bob · approved cycle 1: `write_file` {"filename":"b.txt","contents":"x"}, revision 1 (arguments edited by carol)"#,
        ]
    );
    let Some(AuditEvent::Decided { shown, .. }) = h.audits.last().map(|e| &e.event) else {
        panic!("{:?}", h.audits.last());
    };
    let ran = &h.state.progress.pending.as_ref().unwrap().command;
    assert_eq!(
        shown.arguments_digest,
        super::audit::arguments_digest(&ran.args),
        "the digest names the arguments that run"
    );
    assert!(h.audits.iter().all(|e| e.at == h.state.updated_at));
}

#[test]
fn automatic_approvals_denials_feedback_and_stale_commands_are_recorded() {
    let mut h = Harness::started();
    h.think(&reply_json("read_file", json!({"filename": "a.txt"})));
    decide_as(&mut h, "alice", Decision::ApproveN(2));
    h.finish_command(Outcome::Success("a".into()));
    h.think(&reply_json("read_file", json!({"filename": "b.txt"})));
    h.finish_command(Outcome::Success("b".into()));
    h.think(&reply_json("read_file", json!({"filename": "c.txt"})));
    decide_as(
        &mut h,
        "bob",
        Decision::Feedback("read d.txt instead".into()),
    );
    h.think(&reply_json(
        "write_file",
        json!({"filename": "d.txt", "contents": "x"}),
    ));
    decide_as(&mut h, "alice", Decision::Approve);
    let cycle = h.state.progress.cycle;
    h.step(Event::CommandStale {
        cycle,
        why: "d.txt changed after its card was shown.".into(),
    });
    decide_as(&mut h, "bob", Decision::Deny);
    assert_eq!(
        lines(&h),
        [
            r#"alice · approved ×2 cycle 1: `read_file` {"filename":"a.txt"}"#,
            "Approve ×N (0 left) · ran cycle 2's `read_file` without asking",
            r#"bob · gave feedback on cycle 3: `read_file` {"filename":"c.txt"}, saying: read d.txt instead"#,
            r#"alice · approved cycle 4: `write_file` {"filename":"d.txt","contents":"x"}"#,
            "file check · cycle 4's `write_file` was not run: d.txt changed after its card was shown.",
            r#"bob · denied cycle 4: `write_file` {"filename":"d.txt","contents":"x"}"#,
        ]
    );
}

#[test]
fn changes_people_make_are_recorded_and_refused_ones_are_not() {
    let mut h = Harness::started();
    h.step(Event::SetPolicy {
        risk: Risk::Write,
        action: Some(ClassAction::Deny),
        by: "alice".into(),
    });
    h.step(Event::SetBudget {
        budget: Micros(2_500_000),
        by: "admin".into(),
    });
    h.step(Event::Pause { by: "bob".into() });
    // Already paused: refused, so not in the trail.
    h.step(Event::Pause { by: "bob".into() });
    h.step(Event::Resume {
        by: "carol".into(),
        follow_up: None,
    });
    assert_eq!(
        lines(&h),
        [
            "alice · set write commands to `deny`",
            "admin · set the agent's budget to $2.50",
            "bob · paused the agent",
            "carol · resumed the agent",
        ]
    );
}
