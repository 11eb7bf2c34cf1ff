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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::commands::{Risk, FINISH};

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

    #[test]
    fn parsing_accepts_labels() {
        assert_eq!(Risk::parse(" Network"), Some(Risk::Network));
        assert_eq!(Risk::parse("shell"), None);
        assert_eq!(ClassAction::parse("DENY"), Some(ClassAction::Deny));
        assert_eq!(ClassAction::parse("maybe"), None);
    }
}
