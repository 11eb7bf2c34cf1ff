//! The command policy: what each risk class does (run under Approve ×N, always ask, or refuse), set
//! per server in config and narrowed, never widened, per agent by its owner.
//!
//! `ClassAction` is ordered from loosest to strictest (auto, remember, ask, deny), so narrowing is
//! taking the maximum; remember asks like ask and also lets a person approve and remember the exact
//! command. A `Policy` maps each `Risk` to an action, and a class it does not name takes
//! `Risk::default_action`. `effective` counts an agent's override only where it is stricter than
//! the server's; `action_for` never denies `finish` (at most asks), so no policy can leave an agent
//! unable to end; `check_narrowing` refuses an owner's widening with a sentence for them; `denial`
//! is what the model is told. A denied class is also left out of the prompt and the reply schema.
//!
//! A server's admins (Manage Server) may change their server's policy too, within what the
//! operator's config allows: `AdminChoices` holds their choice per class, who made it and when, and
//! `Policy::with_admin_choices` lays the choices the operator allows over the operator's policy for
//! that server. The rule (`Policy::check_admin_choice`, `AdminLeeway`): an admin may make any class
//! stricter; may loosen one only to an action the operator's `server_admins_may_loosen_to` lists
//! (`remember` by default, never `auto` unless the operator says so); and never loosens a class the
//! operator denies. A choice the operator no longer allows (the config changed since) is kept but
//! not in force: the operator's action holds, and `describe_server` says so. Whatever the admins
//! choose, the taint rule still holds: after untrusted content nothing that can carry data out runs
//! or is remembered without a person.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::commands::{Risk, FINISH};
use super::person::Person;

/// What a risk class does when the model proposes one of its commands. Ordered from loosest to
/// strictest, so that narrowing is taking the maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassAction {
    /// Runs without a card under Approve ×N and continuous mode; otherwise a card as always.
    Auto,
    /// A card as with `Ask`, on which a person may also approve and remember the exact command
    /// (its exact arguments, a script's exact contents) so that it runs without one next time:
    /// for classes a server trusts its people to vet once (code, external tools, MCP).
    Remember,
    /// Always a card, even under Approve ×N and continuous mode.
    Ask,
    /// Never runs; the model is told why.
    Deny,
}

impl ClassAction {
    pub fn label(self) -> &'static str {
        match self {
            ClassAction::Auto => "auto",
            ClassAction::Remember => "remember",
            ClassAction::Ask => "ask",
            ClassAction::Deny => "deny",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ClassAction::Auto),
            "remember" => Some(ClassAction::Remember),
            "ask" => Some(ClassAction::Ask),
            "deny" => Some(ClassAction::Deny),
            _ => None,
        }
    }
}

/// Commands a policy never takes away: without `finish` an agent could never end.
pub const ALWAYS_OFFERED: &[&str] = &[FINISH];

pub const ALL_RISKS: [Risk; 5] = [
    Risk::Read,
    Risk::Write,
    Risk::Network,
    Risk::Control,
    Risk::External,
];

impl Risk {
    pub fn parse(text: &str) -> Option<Self> {
        ALL_RISKS
            .into_iter()
            .find(|risk| risk.label().eq_ignore_ascii_case(text.trim()))
    }
}

/// An agent's own narrowing of its server's policy, by class. Stored with the agent.
pub type PolicyOverrides = BTreeMap<Risk, ClassAction>;

/// What each risk class does, as a map keyed by class; a class the map leaves out has its
/// default action (`Risk::default_action`), so a new class needs no change here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Policy {
    actions: BTreeMap<Risk, ClassAction>,
}

impl Risk {
    /// Reading, writing the agent's own workspace and reading the web run under Approve ×N;
    /// steering the agent and effects outside the bot are always shown to a human.
    pub fn default_action(self) -> ClassAction {
        match self {
            Risk::Read | Risk::Write | Risk::Network => ClassAction::Auto,
            Risk::Control | Risk::External => ClassAction::Ask,
        }
    }
}

/// Why a class was narrowed to what it is: the server's (or console's) policy or the agent's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    Server,
    Agent,
}

/// An owner's attempt to make a class of commands looser for an agent than the server's policy;
/// its text is shown to the person who tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("The server's policy for {risk} commands is `{server}`; an agent can only be made stricter (allowed: {allowed}).")]
pub struct Widening {
    /// The class's label.
    pub risk: &'static str,
    /// The server's action for the class.
    pub server: &'static str,
    /// The actions the owner may choose, each in backquotes.
    pub allowed: String,
}

impl Policy {
    pub fn action(&self, risk: Risk) -> ClassAction {
        self.actions
            .get(&risk)
            .copied()
            .unwrap_or_else(|| risk.default_action())
    }

    /// This policy with one class set, used to build a server's policy from its overrides.
    pub fn with(mut self, risk: Risk, action: ClassAction) -> Self {
        self.actions.insert(risk, action);
        self
    }

    /// This policy with every class `changes` names set as it says.
    pub fn with_all(self, changes: &BTreeMap<Risk, ClassAction>) -> Self {
        changes
            .iter()
            .fold(self, |policy, (risk, action)| policy.with(*risk, *action))
    }

    /// The effective action for a class, and who decided it: the agent's override counts only
    /// where it is stricter than the server's, so an agent can never widen what its server allows.
    pub fn effective(
        &self,
        overrides: &PolicyOverrides,
        risk: Risk,
    ) -> (ClassAction, PolicySource) {
        let server = self.action(risk);
        match overrides.get(&risk) {
            Some(&own) if own > server => (own, PolicySource::Agent),
            _ => (server, PolicySource::Server),
        }
    }

    /// The action for one command: the class's effective action, except that `finish` is never
    /// denied (at most asked), so that no policy can leave an agent unable to end.
    pub fn action_for(
        &self,
        overrides: &PolicyOverrides,
        command: &str,
        risk: Risk,
    ) -> ClassAction {
        let (action, _) = self.effective(overrides, risk);
        if action == ClassAction::Deny && ALWAYS_OFFERED.contains(&command) {
            return ClassAction::Ask;
        }
        action
    }

    /// Checks that an agent's owner may set `action` for `risk`: only as strict as the server's
    /// policy or stricter. The error is shown to the person who tried.
    pub fn check_narrowing(&self, risk: Risk, action: ClassAction) -> Result<(), Widening> {
        let server = self.action(risk);
        if action < server {
            return Err(Widening {
                risk: risk.label(),
                server: server.label(),
                allowed: stricter_or_equal(server)
                    .iter()
                    .map(|a| format!("`{}`", a.label()))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(())
    }

    /// One line per class for status displays: `network: ask (this agent)`.
    pub fn describe(&self, overrides: &PolicyOverrides) -> Vec<String> {
        ALL_RISKS
            .into_iter()
            .map(|risk| {
                let (action, source) = self.effective(overrides, risk);
                let note = match source {
                    PolicySource::Agent => " (narrowed for this agent)",
                    PolicySource::Server => "",
                };
                format!("{}: {}{note}", risk.label(), action.label())
            })
            .collect()
    }

    /// What the model reads when it proposes a command of a denied class.
    pub fn denial(&self, overrides: &PolicyOverrides, command: &str, risk: Risk) -> Option<String> {
        let (_, source) = self.effective(overrides, risk);
        (self.action_for(overrides, command, risk) == ClassAction::Deny).then(|| {
            let whose = match source {
                PolicySource::Server => "this server's policy",
                PolicySource::Agent => "this agent's policy, set by its owner",
            };
            format!(
                "Command '{command}' was not run: {} commands are denied by {whose}. Do not try it again; choose another command.",
                risk.label()
            )
        })
    }
}

/// Every action, loosest first.
pub const ALL_ACTIONS: [ClassAction; 4] = [
    ClassAction::Auto,
    ClassAction::Remember,
    ClassAction::Ask,
    ClassAction::Deny,
];

/// One server admin's choice for a class: the action, who chose it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminChoice {
    pub action: ClassAction,
    pub by: Person,
    pub at: DateTime<Utc>,
}

/// What a server's admins chose, at most one choice per class, so the record stays as small as
/// the list of classes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AdminChoices {
    classes: BTreeMap<Risk, AdminChoice>,
}

impl AdminChoices {
    pub fn get(&self, risk: Risk) -> Option<&AdminChoice> {
        self.classes.get(&risk)
    }

    /// Sets (`Some`) or removes (`None`) the admins' choice for a class.
    pub fn set(&mut self, risk: Risk, choice: Option<AdminChoice>) {
        match choice {
            Some(choice) => self.classes.insert(risk, choice),
            None => self.classes.remove(&risk),
        };
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }
}

/// How far the operator lets server admins loosen the operator's policy: the actions they may
/// choose for a class that the operator sets stricter (never for a class the operator denies).
/// Making a class stricter needs no leeway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminLeeway {
    loosen_to: BTreeSet<ClassAction>,
}

impl Default for AdminLeeway {
    /// `remember` only: admins may let their people remember exact commands, but not make a
    /// class run unattended that the operator has a person look at.
    fn default() -> Self {
        AdminLeeway::new([ClassAction::Remember])
    }
}

impl AdminLeeway {
    /// `deny` is never a loosening, so it is left out whatever the list says.
    pub fn new(actions: impl IntoIterator<Item = ClassAction>) -> Self {
        AdminLeeway {
            loosen_to: actions
                .into_iter()
                .filter(|a| *a != ClassAction::Deny)
                .collect(),
        }
    }

    /// The actions admins may loosen a class to, loosest first.
    pub fn actions(&self) -> impl Iterator<Item = ClassAction> + '_ {
        self.loosen_to.iter().copied()
    }

    /// Whether an admin may set a class whose operator action is `operator` to `chosen`.
    pub fn allows(&self, operator: ClassAction, chosen: ClassAction) -> bool {
        chosen >= operator || (operator != ClassAction::Deny && self.loosen_to.contains(&chosen))
    }
}

/// Why a server admin's choice was refused; its text is shown to the admin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminChoiceRefused {
    /// The operator denies the class here: admins cannot allow it.
    #[error("The bot's operator denies {risk} commands here; server admins can keep them denied but not allow them.")]
    OperatorDenies { risk: &'static str },
    /// The choice would loosen the operator's action further than the operator allows.
    #[error("The bot's operator sets {risk} commands to `{operator}` here and lets server admins choose only {allowed} for them.")]
    TooLoose {
        risk: &'static str,
        operator: &'static str,
        /// The actions the admin may choose, each in backquotes.
        allowed: String,
    },
}

/// Where a server's action for a class comes from, for `/agent policy show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSource {
    /// The operator's config (bot-wide or for this server), or the class's default.
    Operator,
    /// The server's admins, within what the operator allows.
    Admins(AdminChoice),
    /// The admins chose something the operator no longer allows: the operator's action holds.
    AdminsOverruled(AdminChoice),
}

impl Policy {
    /// A server's policy: this (the operator's policy for the server) with each of its admins'
    /// choices that the operator allows now.
    pub fn with_admin_choices(&self, choices: &AdminChoices, leeway: &AdminLeeway) -> Policy {
        ALL_RISKS.into_iter().fold(self.clone(), |policy, risk| {
            match self.server_action(choices, leeway, risk) {
                (action, ServerSource::Admins(_)) => policy.with(risk, action),
                _ => policy,
            }
        })
    }

    /// A server's action for one class and where it comes from (see `with_admin_choices`).
    pub fn server_action(
        &self,
        choices: &AdminChoices,
        leeway: &AdminLeeway,
        risk: Risk,
    ) -> (ClassAction, ServerSource) {
        let operator = self.action(risk);
        match choices.get(risk) {
            Some(choice) if leeway.allows(operator, choice.action) => {
                (choice.action, ServerSource::Admins(choice.clone()))
            }
            Some(choice) => (operator, ServerSource::AdminsOverruled(choice.clone())),
            None => (operator, ServerSource::Operator),
        }
    }

    /// Checks that a server admin may set `risk` to `action`, this being the operator's policy
    /// for their server. The error is shown to the admin.
    pub fn check_admin_choice(
        &self,
        risk: Risk,
        action: ClassAction,
        leeway: &AdminLeeway,
    ) -> Result<(), AdminChoiceRefused> {
        let operator = self.action(risk);
        if leeway.allows(operator, action) {
            return Ok(());
        }
        if operator == ClassAction::Deny {
            return Err(AdminChoiceRefused::OperatorDenies { risk: risk.label() });
        }
        Err(AdminChoiceRefused::TooLoose {
            risk: risk.label(),
            operator: operator.label(),
            allowed: ALL_ACTIONS
                .into_iter()
                .filter(|a| leeway.allows(operator, *a))
                .map(|a| format!("`{}`", a.label()))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// One line per class for `/agent policy show`: the server's action and where it comes from,
    /// this being the operator's policy for the server.
    pub fn describe_server(&self, choices: &AdminChoices, leeway: &AdminLeeway) -> Vec<String> {
        ALL_RISKS
            .into_iter()
            .map(|risk| {
                let (action, source) = self.server_action(choices, leeway, risk);
                let operator = self.action(risk).label();
                let from = match source {
                    ServerSource::Operator => "the operator's config".to_string(),
                    ServerSource::Admins(choice) => format!(
                        "set by server admin {} on {} (the operator's: `{operator}`)",
                        choice.by,
                        choice.at.format("%Y-%m-%d")
                    ),
                    ServerSource::AdminsOverruled(choice) => format!(
                        "the operator's config; `{}`, set by server admin {}, is not allowed by the operator now",
                        choice.action.label(),
                        choice.by
                    ),
                };
                format!("{}: {} — {from}", risk.label(), action.label())
            })
            .collect()
    }
}

fn stricter_or_equal(action: ClassAction) -> Vec<ClassAction> {
    [
        ClassAction::Auto,
        ClassAction::Remember,
        ClassAction::Ask,
        ClassAction::Deny,
    ]
    .into_iter()
    .filter(|a| *a >= action)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_can_narrow_but_never_widen() {
        let server = Policy::default().with(Risk::Network, ClassAction::Ask);
        let mut own = PolicyOverrides::new();
        own.insert(Risk::Network, ClassAction::Auto);
        own.insert(Risk::Write, ClassAction::Deny);
        assert_eq!(
            server.effective(&own, Risk::Network),
            (ClassAction::Ask, PolicySource::Server)
        );
        assert_eq!(
            server.effective(&own, Risk::Write),
            (ClassAction::Deny, PolicySource::Agent)
        );
        assert!(server
            .check_narrowing(Risk::Network, ClassAction::Auto)
            .unwrap_err()
            .to_string()
            .contains("`ask`, `deny`"));
        assert!(server
            .check_narrowing(Risk::Network, ClassAction::Deny)
            .is_ok());
        assert!(server
            .check_narrowing(Risk::Read, ClassAction::Auto)
            .is_ok());
    }

    #[test]
    fn denial_says_whose_policy() {
        let server = Policy::default().with(Risk::External, ClassAction::Deny);
        let mut own = PolicyOverrides::new();
        own.insert(Risk::Network, ClassAction::Deny);
        let text = server.denial(&own, "web_search", Risk::Network).unwrap();
        assert!(
            text.contains("network commands are denied by this agent's policy"),
            "{text}"
        );
        let text = server.denial(&own, "tweet", Risk::External).unwrap();
        assert!(text.contains("this server's policy"), "{text}");
        assert_eq!(server.denial(&own, "read_file", Risk::Read), None);
    }

    #[test]
    fn a_class_left_out_has_its_default_action() {
        let policy = Policy::default().with(Risk::Read, ClassAction::Deny);
        assert_eq!(policy.action(Risk::Read), ClassAction::Deny);
        for risk in ALL_RISKS.into_iter().filter(|r| *r != Risk::Read) {
            assert_eq!(policy.action(risk), risk.default_action(), "{risk:?}");
        }
        assert_eq!(Risk::Network.default_action(), ClassAction::Auto);
        assert_eq!(Risk::Control.default_action(), ClassAction::Ask);
    }

    fn choice(action: ClassAction) -> AdminChoice {
        AdminChoice {
            action,
            by: Person::discord(42, "admin"),
            at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
        }
    }

    #[test]
    fn server_admins_tighten_freely_and_loosen_only_as_far_as_the_operator_allows() {
        let operator = Policy::default()
            .with(Risk::Network, ClassAction::Ask)
            .with(Risk::Read, ClassAction::Deny);
        let leeway = AdminLeeway::default();
        // Stricter is always allowed, whatever the leeway.
        for action in [ClassAction::Remember, ClassAction::Ask, ClassAction::Deny] {
            assert_eq!(
                operator.check_admin_choice(Risk::Write, action, &AdminLeeway::new([])),
                Ok(())
            );
        }
        // Looser only to what the leeway lists: remember by default, not auto.
        assert_eq!(
            operator.check_admin_choice(Risk::External, ClassAction::Remember, &leeway),
            Ok(())
        );
        assert_eq!(
            operator
                .check_admin_choice(Risk::External, ClassAction::Auto, &leeway)
                .unwrap_err()
                .to_string(),
            "The bot's operator sets external commands to `ask` here and lets server admins choose only `remember`, `ask`, `deny` for them."
        );
        assert_eq!(
            operator
                .check_admin_choice(Risk::External, ClassAction::Remember, &AdminLeeway::new([]))
                .unwrap_err()
                .to_string(),
            "The bot's operator sets external commands to `ask` here and lets server admins choose only `ask`, `deny` for them."
        );
        let generous = AdminLeeway::new([ClassAction::Auto, ClassAction::Remember]);
        assert_eq!(
            operator.check_admin_choice(Risk::Network, ClassAction::Auto, &generous),
            Ok(())
        );
        // A class the operator denies stays denied, however generous the leeway.
        assert_eq!(
            operator.check_admin_choice(Risk::Read, ClassAction::Ask, &generous),
            Err(AdminChoiceRefused::OperatorDenies { risk: "read" })
        );
        assert_eq!(
            operator.check_admin_choice(Risk::Read, ClassAction::Deny, &generous),
            Ok(())
        );
        // Deny in the list is no loosening.
        assert!(!AdminLeeway::new([ClassAction::Deny])
            .actions()
            .any(|a| a == ClassAction::Deny));
    }

    #[test]
    fn the_server_policy_lays_allowed_admin_choices_over_the_operators() {
        let operator = Policy::default().with(Risk::Read, ClassAction::Deny);
        let leeway = AdminLeeway::default();
        let mut choices = AdminChoices::default();
        choices.set(Risk::Control, Some(choice(ClassAction::Remember)));
        choices.set(Risk::Network, Some(choice(ClassAction::Deny)));
        // Allowed when it was chosen, not by the operator's config now.
        choices.set(Risk::Read, Some(choice(ClassAction::Auto)));
        let server = operator.with_admin_choices(&choices, &leeway);
        assert_eq!(server.action(Risk::Control), ClassAction::Remember);
        assert_eq!(server.action(Risk::Network), ClassAction::Deny);
        assert_eq!(server.action(Risk::Read), ClassAction::Deny);
        assert_eq!(server.action(Risk::Write), ClassAction::Auto);
        assert_eq!(server.action(Risk::External), ClassAction::Ask);
        assert!(matches!(
            operator.server_action(&choices, &leeway, Risk::Read),
            (ClassAction::Deny, ServerSource::AdminsOverruled(_))
        ));
        // An agent narrows the server's policy as it would the operator's, never widening it.
        let mut own = PolicyOverrides::new();
        own.insert(Risk::Control, ClassAction::Auto);
        assert_eq!(
            server.effective(&own, Risk::Control),
            (ClassAction::Remember, PolicySource::Server)
        );
        let lines = operator.describe_server(&choices, &leeway);
        assert_eq!(
            lines[3],
            "control: remember — set by server admin admin (<@42>) on 2027-01-15 (the operator's: `ask`)"
        );
        assert_eq!(lines[1], "write: auto — the operator's config");
        assert_eq!(
            lines[0],
            "read: deny — the operator's config; `auto`, set by server admin admin (<@42>), is not allowed by the operator now"
        );
        // Taking a choice away leaves the operator's action.
        choices.set(Risk::Control, None);
        assert_eq!(
            operator
                .with_admin_choices(&choices, &leeway)
                .action(Risk::Control),
            ClassAction::Ask
        );
    }

    #[test]
    fn parsing_accepts_labels() {
        assert_eq!(Risk::parse(" Network"), Some(Risk::Network));
        assert_eq!(Risk::parse("shell"), None);
        assert_eq!(ClassAction::parse("DENY"), Some(ClassAction::Deny));
        assert_eq!(ClassAction::parse("maybe"), None);
    }
}
