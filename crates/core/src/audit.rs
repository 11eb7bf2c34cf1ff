//! The audit trail as the core records it: who decided, edited or changed what, and when. Each
//! entry is an `Effect::Audit` that the runtime writes in the same write as the step's state, so a
//! trail entry exists exactly when what it records happened; nothing ever removes one.
//!
//! An `AuditEntry` is a time, who acted (`ActedBy`) and an `AuditEvent`: a decision with the
//! `ShownCommand` its card showed and who edited it, an approval counted toward a quorum, an
//! automatic approval and what gave it, an edit, a command not run and why, an expiry, policy
//! (the agent's and its server's) and budget changes, pause, resume and Continue, rules made and
//! revoked, memory changes, forks and rewinds. A `ShownCommand` cuts arguments to `AUDIT_ARGUMENTS_MAX` and keeps an
//! `arguments_digest` of them in full. `AuditEntry::line` is the one rendering `/agent audit` and
//! the export both print. A change made outside an agent's loop is appended by the service
//! (`Store::append_audit`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::budget::{format_usd, Micros};
use super::decision::Decision;
use super::reply::CommandCall;
use super::text::truncate_chars;

/// The arguments a person saw are kept up to this many characters: enough to read what was
/// approved; the full arguments are in the cycle's step, and `arguments_digest` binds the two.
pub const AUDIT_ARGUMENTS_MAX: usize = 2_000;
/// Feedback typed on a card is kept up to this many characters (the step keeps all of it).
pub const AUDIT_FEEDBACK_MAX: usize = 500;

/// One entry of an agent's audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub at: DateTime<Utc>,
    /// The person who acted, or what acted for them (`Approve ×N (3 left)`, `continuous mode`).
    pub by: crate::person::ActedBy,
    #[serde(flatten)]
    pub event: AuditEvent,
}

/// A command as a card showed it: its name, its arguments (cut to `AUDIT_ARGUMENTS_MAX`), a digest
/// of the arguments in full, and the card's revision (how many times people edited it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownCommand {
    pub command: String,
    pub arguments: String,
    pub arguments_digest: String,
    #[serde(default)]
    pub revision: u32,
}

impl ShownCommand {
    pub fn of(call: &CommandCall, revision: u32) -> ShownCommand {
        let full = Value::Object(call.args.clone()).to_string();
        ShownCommand {
            command: call.name.clone(),
            arguments: truncate_chars(&full, AUDIT_ARGUMENTS_MAX),
            arguments_digest: arguments_digest(&call.args),
            revision,
        }
    }
}

/// A short, stable fingerprint of a command's arguments (FNV-1a over their JSON, 64 bits, hex):
/// enough to tell whether the step that ran is the one a person saw, without keeping it twice.
pub fn arguments_digest(args: &Map<String, Value>) -> String {
    text_digest(&Value::Object(args.clone()).to_string())
}

/// FNV-1a over `text`, 64 bits, in hex: a fingerprint, not a secret-proof hash.
pub fn text_digest(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// What happened, as the trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// People decided a card: approved (all the approvers in `by`), denied, gave feedback or asked
    /// for a self-critique.
    Decided {
        cycle: u64,
        decision: String,
        #[serde(flatten)]
        shown: ShownCommand,
        /// Who edited the arguments before the decision, oldest first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        edited_by: Vec<crate::person::Person>,
        /// The feedback typed instead of a decision (cut to `AUDIT_FEEDBACK_MAX`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
    },
    /// One approval toward a quorum that is not reached yet.
    ApprovalCounted {
        cycle: u64,
        progress: String,
        #[serde(flatten)]
        shown: ShownCommand,
    },
    /// A command ran without a person's click: `by` names what approved it.
    AutoApproved {
        cycle: u64,
        command: String,
    },
    /// A person changed the pending command's arguments (the new ones are `shown`).
    Edited {
        cycle: u64,
        changed: Vec<String>,
        #[serde(flatten)]
        shown: ShownCommand,
    },
    /// Nobody decided on the card in time: what happened (`action`: park, deny, escalate).
    Expired {
        cycle: u64,
        command: String,
        action: String,
    },
    /// An approved command was not run, and why.
    NotRun {
        cycle: u64,
        command: String,
        why: String,
    },
    PolicyChanged {
        class: String,
        action: String,
    },
    /// A server admin set a class for the whole server (`chosen`), or gave it back to the
    /// operator's config (`None`); `in_force` is the server's action for it afterwards.
    ServerPolicyChanged {
        class: String,
        chosen: Option<String>,
        in_force: String,
    },
    BudgetChanged {
        budget: Micros,
    },
    Paused,
    /// A pause asked for while a command ran: it takes effect when the command returns.
    PauseRequested,
    /// A person ended the agent's task.
    Finished,
    /// A person asked to end the task while a command ran: it ends when the command returns.
    FinishRequested,
    Resumed,
    /// A parked agent was let go on from its card, with a new budget when one was given.
    Continued {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<Micros>,
    },
    /// A person made an approve-and-remember rule (`scope` as people read it).
    RuleCreated {
        rule: String,
        scope: String,
        reach: String,
        until: String,
    },
    RuleRevoked {
        rule: String,
        scope: String,
    },
    /// A person added a note for this agent or its thread (its text is kept in memory only).
    MemoryAdded {
        memory: u64,
        scope: crate::memory::MemoryScope,
        digest: String,
    },
    MemoryPinned {
        memory: u64,
    },
    MemoryUnpinned {
        memory: u64,
    },
    /// The text is not kept (forgetting is often for what should not be kept): a digest of it
    /// tells which text it was to someone who has it.
    MemoryForgotten {
        memory: u64,
        digest: String,
    },
    /// This agent began as a fork of another, as it was when `cycle` closed.
    ForkedFrom {
        agent: String,
        name: String,
        cycle: u64,
    },
    /// A fork of this agent was started from `cycle`: the agent `fork`.
    Forked {
        fork: String,
        cycle: u64,
    },
    /// The agent was rewound in place to how it was after `cycle`: `steps` later steps undone.
    Rewound {
        cycle: u64,
        steps: usize,
    },
    /// A file was put into the agent's workspace from outside it (an Agent Protocol upload):
    /// its path, size and the SHA-256 of its bytes.
    FileUploaded {
        path: String,
        bytes: u64,
        digest: String,
    },
}

impl AuditEvent {
    /// The command a card showed, for the events that have one.
    pub fn shown(&self) -> Option<&ShownCommand> {
        match self {
            AuditEvent::Decided { shown, .. }
            | AuditEvent::ApprovalCounted { shown, .. }
            | AuditEvent::Edited { shown, .. } => Some(shown),
            _ => None,
        }
    }

    /// The event of a person's decision on a card showing `shown`.
    pub fn decided(
        cycle: u64,
        decision: &Decision,
        shown: ShownCommand,
        edited_by: Vec<crate::person::Person>,
    ) -> AuditEvent {
        let feedback = match decision {
            Decision::Feedback(text) => Some(truncate_chars(text.trim(), AUDIT_FEEDBACK_MAX)),
            _ => None,
        };
        AuditEvent::Decided {
            cycle,
            decision: decision_label(decision),
            shown,
            edited_by,
            feedback,
        }
    }
}

/// A decision as the trail names it, read before "cycle N".
pub fn decision_label(decision: &Decision) -> String {
    match decision {
        Decision::Approve => "approved".into(),
        Decision::ApproveN(n) => format!("approved ×{n}"),
        Decision::Deny => "denied".into(),
        Decision::Feedback(_) => "gave feedback on".into(),
        Decision::SelfCritique => "asked for a self-critique of".into(),
        Decision::Edit(_) => "edited".into(),
        Decision::Remember(_) => "approved and remembered".into(),
        Decision::Rethink => "asked for a rethink of".into(),
        Decision::Skip => "skipped".into(),
    }
}

impl AuditEntry {
    /// One line for people: when, who, what (Markdown, as both `/agent audit` and the export
    /// show it; the arguments are cut further, to `arguments_max` characters).
    pub fn line(&self, arguments_max: usize) -> String {
        let when = self.at.format("%Y-%m-%d %H:%M:%S UTC");
        let shown_text = |shown: &ShownCommand| {
            let revision = match shown.revision {
                0 => String::new(),
                n => format!(", revision {n}"),
            };
            format!(
                "`{}` {}{revision}",
                shown.command,
                truncate_chars(&shown.arguments, arguments_max)
            )
        };
        let what = match &self.event {
            AuditEvent::Decided {
                cycle,
                decision,
                shown,
                edited_by,
                feedback,
            } => {
                let edited = match edited_by.as_slice() {
                    [] => String::new(),
                    people => format!(
                        " (arguments edited by {})",
                        crate::person::ActedBy::People(people.to_vec())
                    ),
                };
                let feedback = feedback
                    .as_deref()
                    .map_or(String::new(), |text| format!(", saying: {text}"));
                format!(
                    "{decision} cycle {cycle}: {}{edited}{feedback}",
                    shown_text(shown)
                )
            }
            AuditEvent::ApprovalCounted {
                cycle,
                progress,
                shown,
            } => format!("approved cycle {cycle} ({progress}): {}", shown_text(shown)),
            AuditEvent::AutoApproved { cycle, command } => {
                format!("ran cycle {cycle}'s `{command}` without asking")
            }
            AuditEvent::Edited {
                cycle,
                changed,
                shown,
            } => format!(
                "edited cycle {cycle} ({}): {}",
                changed.join(", "),
                shown_text(shown)
            ),
            AuditEvent::NotRun {
                cycle,
                command,
                why,
            } => format!("cycle {cycle}'s `{command}` was not run: {why}"),
            AuditEvent::Expired {
                cycle,
                command,
                action,
            } => format!("cycle {cycle}'s `{command}` expired undecided: {action}"),
            AuditEvent::PolicyChanged { class, action } => {
                format!("set {class} commands to `{action}`")
            }
            AuditEvent::ServerPolicyChanged {
                class,
                chosen: Some(chosen),
                in_force,
            } => {
                format!("set this server's {class} commands to `{chosen}` (in force: `{in_force}`)")
            }
            AuditEvent::ServerPolicyChanged {
                class,
                chosen: None,
                in_force,
            } => format!(
                "gave this server's {class} commands back to the operator's config (`{in_force}`)"
            ),
            AuditEvent::BudgetChanged { budget } => {
                format!("set the agent's budget to {}", format_usd(*budget))
            }
            AuditEvent::Paused => "paused the agent".into(),
            AuditEvent::PauseRequested => {
                "asked the agent to pause once its running command returns".into()
            }
            AuditEvent::Finished => "finished the agent's task".into(),
            AuditEvent::FinishRequested => {
                "asked the agent to finish once its running command returns".into()
            }
            AuditEvent::Resumed => "resumed the agent".into(),
            AuditEvent::Continued { budget: None } => "let the parked agent go on".into(),
            AuditEvent::Continued {
                budget: Some(budget),
            } => format!(
                "let the parked agent go on with a budget of {}",
                format_usd(*budget)
            ),
            AuditEvent::RuleCreated {
                rule,
                scope,
                reach,
                until,
            } => format!("made rule {rule}: approve {scope} for {reach}, {until}"),
            AuditEvent::RuleRevoked { rule, scope } => {
                format!("revoked rule {rule} ({scope})")
            }
            AuditEvent::MemoryAdded {
                memory,
                scope,
                digest,
            } => format!(
                "added {} note #{memory} (text digest {digest})",
                match scope {
                    crate::memory::MemoryScope::Thread => "a thread",
                    _ => "an agent",
                }
            ),
            AuditEvent::MemoryPinned { memory } => format!("pinned memory #{memory}"),
            AuditEvent::MemoryUnpinned { memory } => format!("unpinned memory #{memory}"),
            AuditEvent::MemoryForgotten { memory, digest } => {
                format!("forgot memory #{memory} (text digest {digest})")
            }
            AuditEvent::ForkedFrom { agent, name, cycle } => {
                format!("forked this agent from {name} (`{agent}`) as it was after cycle {cycle}")
            }
            AuditEvent::Forked { fork, cycle } => {
                format!("forked this agent after cycle {cycle} into `{fork}`")
            }
            AuditEvent::Rewound { cycle, steps } => {
                format!("rewound the agent to after cycle {cycle}, undoing {steps} steps")
            }
            AuditEvent::FileUploaded {
                path,
                bytes,
                digest,
            } => format!(
                "uploaded `{}` ({bytes} bytes, sha256 {})",
                truncate_chars(path, arguments_max),
                truncate_chars(digest, 16)
            ),
        };
        format!("{when} · {} · {what}", self.by)
    }
}

/// A rule's entries in the trail live with the trail's vocabulary, so that rules need not know it.
impl crate::rules::ApprovalRule {
    /// The trail's entry for this rule being made.
    pub fn created_event(&self) -> AuditEvent {
        AuditEvent::RuleCreated {
            rule: self.id.clone(),
            scope: self.scope.label(),
            reach: self.reach.label().into(),
            until: self.until(),
        }
    }

    pub fn revoked_event(&self) -> AuditEvent {
        AuditEvent::RuleRevoked {
            rule: self.id.clone(),
            scope: self.scope.label(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::person::{ActedBy, Person};
    use chrono::TimeZone;
    use serde_json::json;

    fn call(args: Value) -> CommandCall {
        CommandCall {
            name: "write_file".into(),
            args: args.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn a_shown_command_keeps_a_digest_of_arguments_too_long_to_keep() {
        let long = call(json!({"filename": "a.txt", "contents": "x".repeat(10_000)}));
        let shown = ShownCommand::of(&long, 2);
        assert!(shown.arguments.chars().count() <= AUDIT_ARGUMENTS_MAX);
        assert_eq!(shown.arguments_digest, arguments_digest(&long.args));
        let other = call(json!({"filename": "a.txt", "contents": "x".repeat(10_001)}));
        assert_ne!(shown.arguments_digest, arguments_digest(&other.args));
        assert_eq!(shown.revision, 2);
    }

    #[test]
    fn an_entry_reads_as_one_line_and_survives_a_round_trip() {
        let entry = AuditEntry {
            at: Utc.with_ymd_and_hms(2026, 11, 25, 9, 30, 0).unwrap(),
            by: ActedBy::People(vec![Person::discord(1, "alice"), Person::discord(2, "bob")]),
            event: AuditEvent::decided(
                4,
                &Decision::Approve,
                ShownCommand::of(&call(json!({"filename": "b.txt", "contents": "hi"})), 1),
                vec![Person::discord(3, "carol")],
            ),
        };
        let line = entry.line(100);
        assert!(
            line.starts_with(
                "2026-11-25 09:30:00 UTC · alice (<@1>), bob (<@2>) · approved cycle 4"
            ),
            "{line}"
        );
        assert!(line.contains("`write_file`") && line.contains("revision 1"));
        assert!(line.contains("edited by carol (<@3>)"), "{line}");
        let json = serde_json::to_string(&entry).unwrap();
        assert!(json.contains("\"event\":\"decided\""), "{json}");
        assert_eq!(serde_json::from_str::<AuditEntry>(&json).unwrap(), entry);
    }

    #[test]
    fn an_entry_stored_before_ids_reads_back_with_its_names_marked() {
        let old = r#"{"at":"2026-11-25T09:30:00Z","by":"alice, bob","event":"decided","cycle":4,
            "decision":"approved","command":"finish","arguments":"{}","arguments_digest":"0",
            "edited_by":["carol (text)"]}"#;
        let entry: AuditEntry = serde_json::from_str(old).unwrap();
        assert_eq!(entry.by, ActedBy::Recorded("alice, bob".into()));
        let line = entry.line(100);
        assert!(
            line.contains("· alice, bob (name only) · approved cycle 4"),
            "{line}"
        );
        assert!(
            line.contains("edited by carol (text) (name only)"),
            "{line}"
        );
    }
}
