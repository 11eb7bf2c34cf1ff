//! How a step is stored, decided in one place: `plan` maps the step (what caused it, its effects,
//! whether it reserved paid calls) and where it runs (whether the surface must store a proposal
//! before showing it, whether a drain holds new work back, which commands land with their result)
//! to one `StoragePlan`, which `Actor::persist` carries out before any effect becomes visible
//! (persist before you post). It is pure, names nothing but the core's vocabulary, and its tests
//! are one table of every kind of step on both surfaces.
//!
//! The ways to store a step, tried in this order:
//!
//! - `Nothing`, for a step that only shows an auto-approved proposal and starts a command that
//!   lands with its result (`CommandSpec::lands_with_result`, the file commands), on a surface
//!   that may show proposals before they are stored (`Surface::needs_stored_proposals` is false
//!   only for the console, since Discord's cards are posted exactly once), with no reservation to
//!   make durable. The command's change lands in the same write as its result, so a crash before
//!   that write loses the step whole and the restart asks the model again. Its trail entries wait
//!   in `Actor::unstored_audit` for the next write.
//! - `StartAlone`, when a person's approval is all the step changed: the command's journal entry
//!   and the approval's trail entries in one write (`Store::record_start`, see `store::started`),
//!   flushed; the agent's record stays as it was stored with the proposal. The step's cause says
//!   so (`Cause::Approval`: Approve or Approve ×N): such a step changes only who approved, the
//!   approvals counted, Approve ×N's count, the card's deadline, the phase and the time, each of
//!   which a restart that finds the start in the journal sets anew, as
//!   `core::step_tests::an_approval_that_changes_nothing_else_lets_the_journal_stand_for_the_step`
//!   proves. Approve & remember keeps a rule besides, so it is stored whole.
//! - `Nothing` too, for a step that only takes a recall's answer and holds nothing that must be
//!   durable: what a recall found only shapes the prompt of the call the step starts, and a
//!   restart recalls again.
//! - Otherwise `Commit`: the whole step in one `Store::commit` (the state, its episodes, the
//!   finished command's removal from the journal, its workspace changes, its trail entries, a
//!   server rule), with the `executing` journal record of a command it starts written before it
//!   (`Journal::Starts`) unless a drain holds the command back. It is flushed (`Flush::Now`) when
//!   it holds something a person or a restart relies on: an episode, a proposal, a command's
//!   start or result, a trail entry, a server rule, or the reservations of the step's memory
//!   calls and its model call (see `memory_calls`); otherwise a later flush takes it.

use crate::core::commands::CommandSet;
use crate::core::decision::Decision;
use crate::core::event::{Effect, Event};

/// What caused a step, as far as storing it goes; read from its event before `step` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A person's Approve or Approve ×N of the card awaiting a decision: when it starts the
    /// command, the approval is all the step changed.
    Approval,
    /// A command's result (`Event::CommandFinished`, stepped with the workspace changes it made).
    CommandResult,
    /// Memory's answer to a recall (`Event::Recalled`).
    RecallAnswer,
    /// Any other event.
    Other,
}

impl Cause {
    pub fn of(event: &Event) -> Cause {
        match event {
            Event::Decided {
                decision: Decision::Approve | Decision::ApproveN(_),
                ..
            } => Cause::Approval,
            Event::CommandFinished { .. } => Cause::CommandResult,
            Event::Recalled { .. } => Cause::RecallAnswer,
            _ => Cause::Other,
        }
    }
}

/// Whether the step reserved paid calls (its memory calls, the next model call) that its flush
/// must make durable before they are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservations {
    ToMakeDurable,
    None,
}

/// Whether the surface must have a proposal on disk before it shows it
/// (`Surface::needs_stored_proposals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalOrder {
    /// Discord: a card posted and then lost to a crash would be posted again.
    StoreThenShow,
    /// The console, which only prints: an auto-approved proposal may be shown first.
    ShowMayComeFirst,
}

/// Whether new work may start, or a drain holds it back until the restart (see `Drain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Starting {
    Allowed,
    HeldByDrain,
}

/// The step to store.
pub struct Step<'a> {
    pub cause: Cause,
    pub effects: &'a [Effect],
    pub reservations: Reservations,
}

/// Where the step runs.
pub struct Surroundings<'a> {
    pub proposals: ProposalOrder,
    pub starting: Starting,
    /// What the agent's commands are, for which of them land with their result.
    pub commands: &'a CommandSet,
}

/// How to store a step (see the module's documentation for each way and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoragePlan {
    /// No write now; the step's trail entries wait for the next write.
    Nothing,
    /// The start of the one command the step starts, as its journal entry with the step's trail
    /// entries, flushed; the agent's record is left as it was stored with the proposal.
    StartAlone,
    /// The whole step in one commit.
    Commit { journal: Journal, flush: Flush },
}

/// Whether a commit is preceded by the journal's `executing` records of the commands it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journal {
    Starts,
    /// The step starts no command, or a drain holds it back (a restart finds it not started).
    NothingStarts,
}

/// Whether a commit is flushed before the step's effects are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    Now,
    /// Nothing in it is relied on yet: a later flush takes it, and a crash before then loses only
    /// what a restart does again.
    Later,
}

/// How `step` is stored where it runs.
pub fn plan(step: &Step<'_>, around: &Surroundings<'_>) -> StoragePlan {
    let draining = around.starting == Starting::HeldByDrain;
    let result = step.cause == Cause::CommandResult;
    let reserved = step.reservations == Reservations::ToMakeDurable;
    if !result
        && !reserved
        && !draining
        && around.proposals == ProposalOrder::ShowMayComeFirst
        && only_starts_what_lands_with_its_result(step.effects, around.commands)
    {
        return StoragePlan::Nothing;
    }
    if !result && !draining && step.cause == Cause::Approval && only_starts(step.effects) {
        return StoragePlan::StartAlone;
    }
    let starts = !draining && step.effects.iter().any(is_start);
    // A decision or a change people made is on disk before anyone is told it happened.
    let durable = result
        || starts
        || reserved
        || step.effects.iter().any(|effect| {
            matches!(
                effect,
                Effect::EpisodeRecorded { .. }
                    | Effect::SaveServerRule(_)
                    | Effect::Audit(_)
                    | Effect::ShowProposal { .. }
            )
        });
    if step.cause == Cause::RecallAnswer && !durable {
        // The state is stored with the reply instead, a record less per cycle.
        return StoragePlan::Nothing;
    }
    StoragePlan::Commit {
        journal: match starts {
            true => Journal::Starts,
            false => Journal::NothingStarts,
        },
        flush: match durable {
            true => Flush::Now,
            false => Flush::Later,
        },
    }
}

fn is_start(effect: &Effect) -> bool {
    matches!(effect, Effect::Execute { .. })
}

/// Whether the step only shows an auto-approved proposal and starts its command, a command whose
/// one effect is the workspace change it returns (besides its trail entries).
fn only_starts_what_lands_with_its_result(effects: &[Effect], commands: &CommandSet) -> bool {
    let (mut shown, mut started) = (false, false);
    for effect in effects {
        match effect {
            Effect::ShowProposal {
                auto_approved: true,
                ..
            } => shown = true,
            Effect::Execute { call, .. }
                if commands
                    .get(&call.name)
                    .is_some_and(|spec| spec.lands_with_result) =>
            {
                started = true
            }
            Effect::Audit(_) => {}
            _ => return false,
        }
    }
    shown && started
}

/// Whether the step starts exactly one command and stores nothing but its start and trail
/// entries: no proposal shown, no episode, no server rule.
fn only_starts(effects: &[Effect]) -> bool {
    let mut starts = 0;
    for effect in effects {
        match effect {
            Effect::Execute { .. } => starts += 1,
            Effect::ShowProposal { .. }
            | Effect::EpisodeRecorded { .. }
            | Effect::SaveServerRule(_) => return false,
            _ => {}
        }
    }
    starts == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::{AuditEntry, AuditEvent};
    use crate::core::commands::{CommandSpec, Risk};
    use crate::core::event::{CallPurpose, ModelCall};
    use crate::core::reply::CommandCall;
    use crate::core::rules::{ApprovalRule, RuleDraft, RuleLife, RuleReach, RuleScope};
    use crate::core::state::{PauseReason, Proposal};
    use chrono::TimeZone;

    const WRITE: &str = "write_file";
    const SHELL: &str = "execute_shell";

    fn commands() -> CommandSet {
        CommandSet {
            specs: vec![
                CommandSpec::new(WRITE, "Write a file", Risk::Write).lands_with_result(),
                CommandSpec::new(SHELL, "Run a shell command", Risk::External),
            ],
        }
    }

    fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::Utc.with_ymd_and_hms(2026, 11, 29, 3, 0, 0).unwrap()
    }

    fn think() -> Effect {
        Effect::CallModel(ModelCall {
            seq: 1,
            purpose: CallPurpose::Think,
            messages: Vec::new(),
            max_tokens: 100,
            json_schema: None,
            smart: false,
        })
    }

    fn proposal(command: &str) -> Proposal {
        serde_json::from_value(serde_json::json!({
            "cycle": 3,
            "thoughts": {"text": "do it"},
            "command": {"name": command, "args": {}},
            "risk": "write",
            "interrupted": false,
            "approved_by": null,
        }))
        .unwrap()
    }

    fn asks(command: &str) -> Effect {
        Effect::ShowProposal {
            proposal: proposal(command),
            auto_approved: false,
        }
    }

    fn shown_approved(command: &str) -> Effect {
        Effect::ShowProposal {
            proposal: proposal(command),
            auto_approved: true,
        }
    }

    fn starts(command: &str) -> Effect {
        Effect::Execute {
            cycle: 3,
            call: CommandCall {
                name: command.into(),
                args: Default::default(),
            },
            risk: Risk::Write,
        }
    }

    fn trail() -> Effect {
        Effect::Audit(AuditEntry {
            at: now(),
            by: "alice".into(),
            event: AuditEvent::PauseRequested,
        })
    }

    fn server_rule() -> Effect {
        let draft = RuleDraft {
            scope: RuleScope::Exact {
                command: WRITE.into(),
                arguments: "{}".into(),
                digest: "d".into(),
            },
            reach: RuleReach::Server,
            life: RuleLife::Day,
        };
        Effect::SaveServerRule(ApprovalRule::from_draft(
            "a1",
            3,
            draft,
            &"alice".into(),
            now(),
        ))
    }

    fn episode() -> Effect {
        Effect::EpisodeRecorded { cycle: 3 }
    }

    fn notice() -> Effect {
        Effect::Notify("Approved this step only.".into())
    }

    fn remembers() -> Effect {
        Effect::Remember {
            cycle: 3,
            text: "wrote it".into(),
        }
    }

    fn recall() -> Effect {
        Effect::Recall {
            seq: 1,
            query: "what was written".into(),
        }
    }

    fn paused_by_alice() -> Effect {
        Effect::Paused(PauseReason::ByUser { by: "alice".into() })
    }

    const NOTHING: StoragePlan = StoragePlan::Nothing;
    const START_ALONE: StoragePlan = StoragePlan::StartAlone;
    const COMMIT_NOW: StoragePlan = StoragePlan::Commit {
        journal: Journal::NothingStarts,
        flush: Flush::Now,
    };
    const COMMIT_LATER: StoragePlan = StoragePlan::Commit {
        journal: Journal::NothingStarts,
        flush: Flush::Later,
    };
    const JOURNAL_AND_COMMIT: StoragePlan = StoragePlan::Commit {
        journal: Journal::Starts,
        flush: Flush::Now,
    };

    /// One kind of step: what it is, and its plan on the console and on Discord.
    struct Case {
        what: &'static str,
        cause: Cause,
        effects: Vec<Effect>,
        reservations: Reservations,
        starting: Starting,
        console: StoragePlan,
        discord: StoragePlan,
    }

    fn case(what: &'static str, cause: Cause, effects: Vec<Effect>) -> Case {
        Case {
            what,
            cause,
            effects,
            reservations: Reservations::None,
            starting: Starting::Allowed,
            console: COMMIT_NOW,
            discord: COMMIT_NOW,
        }
    }

    impl Case {
        fn reserved(self) -> Case {
            Case {
                reservations: Reservations::ToMakeDurable,
                ..self
            }
        }

        fn draining(self) -> Case {
            Case {
                starting: Starting::HeldByDrain,
                ..self
            }
        }

        fn on_both(self, plan: StoragePlan) -> Case {
            Case {
                console: plan,
                discord: plan,
                ..self
            }
        }

        fn on_console(self, plan: StoragePlan) -> Case {
            Case {
                console: plan,
                ..self
            }
        }
    }

    #[test]
    fn every_kind_of_step_is_stored_as_its_plan_says_on_each_surface() {
        use Cause::{Approval, CommandResult, Other, RecallAnswer};
        let cases = [
            case("a step that changes nothing to show", Other, vec![]).on_both(COMMIT_LATER),
            case("a model call asked again", Other, vec![think()]).on_both(COMMIT_LATER),
            case("a model call reserved ahead", Other, vec![think()]).reserved(),
            case("a recall's answer", RecallAnswer, vec![think()]).on_both(NOTHING),
            case(
                "a recall's answer reserving the call",
                RecallAnswer,
                vec![think()],
            )
            .reserved(),
            case(
                "a recall's answer with a trail entry",
                RecallAnswer,
                vec![trail(), think()],
            ),
            case("a thought asking for a recall", Other, vec![recall()]).on_both(COMMIT_LATER),
            case("a proposal awaiting a decision", Other, vec![asks(SHELL)]),
            case(
                "an auto-approved command that lands with its result",
                Other,
                vec![trail(), shown_approved(WRITE), starts(WRITE)],
            )
            .on_both(JOURNAL_AND_COMMIT)
            .on_console(NOTHING),
            case(
                "an auto-approved command that lands with its result, reserving",
                Other,
                vec![trail(), shown_approved(WRITE), starts(WRITE)],
            )
            .reserved()
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "an auto-approved command that lands with its result, during a drain",
                Other,
                vec![trail(), shown_approved(WRITE), starts(WRITE)],
            )
            .draining(),
            case(
                "an auto-approved command that lands with its result, with a notice",
                Other,
                vec![notice(), shown_approved(WRITE), starts(WRITE)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "an auto-approved command that does not land with its result",
                Other,
                vec![trail(), shown_approved(SHELL), starts(SHELL)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "a person's approval",
                Approval,
                vec![trail(), starts(WRITE)],
            )
            .on_both(START_ALONE),
            case(
                "a person's approval of a command that does not land with its result",
                Approval,
                vec![trail(), starts(SHELL)],
            )
            .on_both(START_ALONE),
            case(
                "Approve ×N at the soft cap, with its notice",
                Approval,
                vec![trail(), notice(), starts(SHELL)],
            )
            .on_both(START_ALONE),
            case(
                "a person's approval with reservations to make durable",
                Approval,
                vec![trail(), starts(SHELL)],
            )
            .reserved()
            .on_both(START_ALONE),
            case(
                "a person's approval during a drain",
                Approval,
                vec![trail(), starts(SHELL)],
            )
            .draining(),
            case(
                "a person's approval that keeps a server rule",
                Approval,
                vec![trail(), server_rule(), starts(SHELL)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "a person's approval starting two commands",
                Approval,
                vec![trail(), starts(SHELL), starts(WRITE)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "a person's approval that starts nothing (short of a quorum)",
                Approval,
                vec![trail(), asks(SHELL)],
            ),
            case(
                "approve & remember, keeping the agent's rule",
                Other,
                vec![trail(), trail(), starts(SHELL)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "a command started again after a restart found no start",
                Other,
                vec![starts(SHELL)],
            )
            .on_both(JOURNAL_AND_COMMIT),
            case(
                "a command's result",
                CommandResult,
                vec![remembers(), episode(), think()],
            ),
            case(
                "a command's result ending in a card shown again",
                CommandResult,
                vec![asks(WRITE)],
            ),
            case(
                "a command's result with nothing else",
                CommandResult,
                vec![],
            ),
            case("a summary", Other, vec![episode(), remembers()]),
            case("a server rule", Other, vec![server_rule()]),
            case(
                "a pause a person asked for",
                Other,
                vec![trail(), paused_by_alice()],
            ),
            case(
                "a pause nobody asked for",
                Other,
                vec![Effect::Paused(PauseReason::ModelError {
                    message: "down".into(),
                })],
            )
            .on_both(COMMIT_LATER),
        ];
        let commands = commands();
        for case in &cases {
            let step = Step {
                cause: case.cause,
                effects: &case.effects,
                reservations: case.reservations,
            };
            for (surface, proposals, expected) in [
                ("console", ProposalOrder::ShowMayComeFirst, case.console),
                ("discord", ProposalOrder::StoreThenShow, case.discord),
            ] {
                let around = Surroundings {
                    proposals,
                    starting: case.starting,
                    commands: &commands,
                };
                assert_eq!(
                    plan(&step, &around),
                    expected,
                    "{} on the {surface}",
                    case.what
                );
            }
        }
    }

    #[test]
    fn only_approve_and_approve_n_are_approvals_that_may_leave_the_record_as_it_was() {
        let decided = |decision| Event::Decided {
            cycle: 3,
            decision,
            by: "alice".into(),
        };
        let remember = Decision::Remember(Box::new(RuleDraft {
            scope: RuleScope::Exact {
                command: WRITE.into(),
                arguments: "{}".into(),
                digest: "d".into(),
            },
            reach: RuleReach::Agent,
            life: RuleLife::Day,
        }));
        let cases = [
            (decided(Decision::Approve), Cause::Approval),
            (decided(Decision::ApproveN(3)), Cause::Approval),
            (decided(remember), Cause::Other),
            (decided(Decision::Deny), Cause::Other),
            (decided(Decision::Feedback("no".into())), Cause::Other),
            (
                Event::CommandFinished {
                    cycle: 3,
                    outcome: crate::core::history::Outcome::Success("ok".into()),
                },
                Cause::CommandResult,
            ),
            (
                Event::Recalled {
                    seq: 1,
                    hits: Vec::new(),
                },
                Cause::RecallAnswer,
            ),
            (Event::Start, Cause::Other),
        ];
        for (event, cause) in cases {
            assert_eq!(Cause::of(&event), cause, "{event:?}");
        }
    }
}
