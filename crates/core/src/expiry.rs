//! Cards that wait too long: each risk class may have a deadline and an action on expiry (park the
//! agent, deny the command, or escalate once to the server's approvers and then park). The rules
//! come from config, which gives every class `DEFAULT_DEADLINE_SECS` and parking unless told
//! otherwise (a rule of 0 seconds waits for ever); the core sets a proposal's deadline when it is
//! shown and applies the action when the runtime's timer says the deadline passed
//! (`Event::DeadlinePassed`).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::commands::Risk;

/// Who the trail and the transcript name for what a deadline did (a step it denied was no
/// failure of the agent's: the stuck panel does not count it).
pub const DEADLINE: &str = "the deadline";

/// The longest deadline a class may have: a week (Discord keeps a card's buttons, but nobody
/// remembers a card older than that).
pub const MAX_EXPIRY_SECS: u64 = 7 * 24 * 3600;

/// How long a card waits for a person when the config says nothing: a day, long enough for a
/// person in any time zone to see it, short enough that an agent nobody answers is parked (and
/// stops counting as running) instead of waiting for ever.
pub const DEFAULT_DEADLINE_SECS: u64 = 24 * 3600;

/// What happens to a card nobody decided in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpiryAction {
    /// The agent pauses with the proposal kept; a resume shows it again.
    Park,
    /// The command is not run; the agent is told and thinks again.
    Deny,
    /// The server's approvers are called once, with a second deadline as long; then it parks.
    Escalate,
}

impl ExpiryAction {
    pub fn label(self) -> &'static str {
        match self {
            ExpiryAction::Park => "park",
            ExpiryAction::Deny => "deny",
            ExpiryAction::Escalate => "escalate",
        }
    }

    /// What the card says happens at the deadline.
    pub fn then(self, escalated: bool) -> &'static str {
        match self {
            ExpiryAction::Deny => "the command is not run",
            ExpiryAction::Escalate if !escalated => "the approvers are called",
            ExpiryAction::Park | ExpiryAction::Escalate => "the agent is parked",
        }
    }
}

/// One class's rule: decide within `after_secs`, or `action` happens (parking, unless said);
/// `after_secs = 0`: its cards wait for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpiryRule {
    pub after_secs: u64,
    #[serde(default = "park")]
    pub action: ExpiryAction,
}

fn park() -> ExpiryAction {
    ExpiryAction::Park
}

impl ExpiryRule {
    /// The rule a class has when the config gives it none.
    pub const DEFAULT: ExpiryRule = ExpiryRule {
        after_secs: DEFAULT_DEADLINE_SECS,
        action: ExpiryAction::Park,
    };
}

/// The rules in force for an agent, by class (a class without one waits for ever).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiry {
    rules: BTreeMap<Risk, ExpiryRule>,
}

impl Expiry {
    /// These rules, with `more` replacing the ones for the classes it names.
    pub fn with_all(mut self, more: &BTreeMap<Risk, ExpiryRule>) -> Expiry {
        self.rules
            .extend(more.iter().map(|(risk, rule)| (*risk, *rule)));
        self
    }

    /// These rules, with `rule` for every class.
    pub fn for_every_class(rule: ExpiryRule) -> Expiry {
        Expiry {
            rules: super::policy::ALL_RISKS
                .iter()
                .map(|risk| (*risk, rule))
                .collect(),
        }
    }

    /// The deadline of a card of class `risk` shown at `now`, if the class has one (a rule of 0
    /// seconds is none).
    pub fn deadline(&self, risk: Risk, now: DateTime<Utc>) -> Option<Deadline> {
        let rule = self.rules.get(&risk).filter(|rule| rule.after_secs > 0)?;
        Some(Deadline {
            at: now + seconds(rule.after_secs),
            after_secs: rule.after_secs,
            action: rule.action,
            escalated: false,
        })
    }
}

fn seconds(secs: u64) -> Duration {
    Duration::seconds(i64::try_from(secs.min(MAX_EXPIRY_SECS)).unwrap_or(0))
}

/// When a shown proposal expires, and what happens then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadline {
    pub at: DateTime<Utc>,
    pub after_secs: u64,
    pub action: ExpiryAction,
    /// The approvers were called already: the next expiry parks.
    #[serde(default)]
    pub escalated: bool,
}

impl Deadline {
    /// The same wait again from `now`, after the approvers were called.
    pub fn escalate(self, now: DateTime<Utc>) -> Deadline {
        Deadline {
            at: now + seconds(self.after_secs),
            escalated: true,
            ..self
        }
    }

    /// "1 h", "90 s", "2 d": the wait, for people.
    pub fn waited(&self) -> String {
        human_secs(self.after_secs)
    }
}

/// A wait in whole seconds, minutes, hours or days, as people say it.
pub fn human_secs(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 && s > 0 => format!("{} d", s / 86_400),
        s if s % 3_600 == 0 && s > 0 => format!("{} h", s / 3_600),
        s if s % 60 == 0 && s > 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_class_s_rule_sets_the_deadline_and_a_server_s_rule_replaces_it() {
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap();
        let bot = BTreeMap::from([(
            Risk::Write,
            ExpiryRule {
                after_secs: 3_600,
                action: ExpiryAction::Deny,
            },
        )]);
        let server = BTreeMap::from([(
            Risk::Write,
            ExpiryRule {
                after_secs: 90,
                action: ExpiryAction::Escalate,
            },
        )]);
        let bot_wide = Expiry::default().with_all(&bot);
        let deadline = bot_wide.deadline(Risk::Write, now).unwrap();
        assert_eq!(deadline.at, now + Duration::hours(1));
        assert_eq!(deadline.waited(), "1 h");
        assert_eq!(bot_wide.deadline(Risk::Read, now), None);
        let here = bot_wide
            .with_all(&server)
            .deadline(Risk::Write, now)
            .unwrap();
        assert_eq!((here.after_secs, here.action), (90, ExpiryAction::Escalate));
        let again = here.escalate(now + Duration::seconds(90));
        assert!(again.escalated);
        assert_eq!(again.at, now + Duration::seconds(180));
        assert_eq!(human_secs(90), "90 s");
        assert_eq!(human_secs(2 * 86_400), "2 d");
    }

    #[test]
    fn every_class_may_have_a_rule_and_a_rule_of_zero_seconds_waits_for_ever() {
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap();
        let daily = Expiry::for_every_class(ExpiryRule::DEFAULT);
        for risk in crate::policy::ALL_RISKS {
            let deadline = daily.deadline(risk, now).unwrap();
            assert_eq!(deadline.at, now + Duration::days(1), "{risk:?}");
            assert_eq!(deadline.action, ExpiryAction::Park);
        }
        let never = BTreeMap::from([(
            Risk::External,
            ExpiryRule {
                after_secs: 0,
                action: ExpiryAction::Deny,
            },
        )]);
        let daily_but_external = daily.with_all(&never);
        assert_eq!(daily_but_external.deadline(Risk::External, now), None);
        assert!(daily_but_external.deadline(Risk::Write, now).is_some());
    }
}
