//! Who calls the API: a bearer token from `[api.tokens]`, compared in constant time, becomes a
//! `Caller`, known by the token's name. The caller is the person who decides for the agents it
//! started and the spender they are charged to; a task of another caller does not exist for it.
//!
//! Tokens are kept as their SHA-256 digests, so every comparison is of 32 bytes whatever was
//! sent, and each known token is compared (`subtle::ConstantTimeEq`), matched or not.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{ApiConfig, ConfigError};
use crate::core::person::Person;
use crate::core::state::{AgentState, Spender};

/// The spender key of a caller's agents: their daily budget is the caller's.
const SPENDER_PREFIX: &str = crate::core::state::API_SPENDER_PREFIX;

/// One accepted token: who it is, its digest, and the Discord person owning its bound tasks.
struct Known {
    name: String,
    digest: [u8; 32],
    discord_user: Option<u64>,
}

/// The tokens the API accepts, by digest.
pub struct Tokens {
    known: Vec<Known>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.known.iter().map(|known| known.name.as_str()).collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// The configured tokens; refused when one is missing or too short.
    pub fn from_config(api: &ApiConfig) -> Result<Tokens, ConfigError> {
        api.check_tokens()?;
        let known = api
            .tokens
            .iter()
            .filter_map(|token| {
                let value = token.token.as_ref()?;
                Some(Known {
                    name: token.name.trim().to_string(),
                    digest: digest(value.expose()),
                    discord_user: token.discord_user,
                })
            })
            .collect();
        Ok(Tokens { known })
    }

    /// The caller an `Authorization` header names, if its bearer token is known.
    pub fn caller(&self, authorization: Option<&str>) -> Option<Caller> {
        let presented = authorization?.trim();
        let token = presented
            .strip_prefix("Bearer ")
            .or_else(|| presented.strip_prefix("bearer "))?
            .trim();
        let presented = digest(token);
        let mut found = None;
        for known in &self.known {
            if bool::from(known.digest.ct_eq(&presented)) {
                found = Some(Caller {
                    name: known.name.clone(),
                    discord_user: known.discord_user,
                });
            }
        }
        found
    }
}

/// An API caller, by its token's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    /// The Discord person (by id) who owns the tasks this caller binds to a Discord channel.
    pub discord_user: Option<u64>,
}

impl Caller {
    /// The caller as the audit trail, a quorum and a decision's compare-and-swap know it.
    pub fn person(&self) -> Person {
        Person::api(self.name.clone())
    }

    /// Who pays for the caller's agents.
    pub fn spender(&self) -> Spender {
        Spender {
            user: Some(format!("{SPENDER_PREFIX}{}", self.name)),
            guild: None,
        }
    }

    /// Whether the caller started `agent` (and so may see and drive it): one it pays for, or
    /// one it bound to a Discord thread, which a Discord person pays for.
    pub fn owns(&self, agent: &AgentState) -> bool {
        agent.money.spender == self.spender()
            || agent.brief.api_caller.as_deref() == Some(self.name.as_str())
    }
}

/// Whether `agent` was started over the API, by any caller.
pub fn started_over_the_api(agent: &AgentState) -> bool {
    agent
        .money
        .spender
        .user
        .as_deref()
        .is_some_and(|user| user.starts_with(SPENDER_PREFIX))
        && agent.money.spender.guild.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApiToken, Secret};

    fn tokens() -> Tokens {
        let token = |name: &str, value: &str| ApiToken {
            name: name.into(),
            token_env: "X".into(),
            discord_user: (name == "ci").then_some(42),
            token: Some(Secret::new(value)),
        };
        let api = ApiConfig {
            tokens: vec![
                token("ci", "ci-token-0123456789"),
                token("dash", "dash-token-0123456789"),
            ],
            ..ApiConfig::default()
        };
        Tokens::from_config(&api).unwrap()
    }

    #[test]
    fn a_bearer_token_names_its_caller_and_anything_else_names_nobody() {
        let tokens = tokens();
        let ci = tokens.caller(Some("Bearer ci-token-0123456789")).unwrap();
        assert_eq!(ci.name, "ci");
        assert_eq!(ci.discord_user, Some(42));
        assert_eq!(ci.person(), Person::api("ci"));
        assert_eq!(
            tokens
                .caller(Some("Bearer dash-token-0123456789"))
                .unwrap()
                .name,
            "dash"
        );
        for wrong in [
            None,
            Some(""),
            Some("ci-token-0123456789"),
            Some("Bearer ci-token-012345678"),
            Some("Basic ci-token-0123456789"),
            Some("Bearer "),
        ] {
            assert_eq!(tokens.caller(wrong), None, "{wrong:?}");
        }
        assert!(!format!("{tokens:?}").contains("token-0123"));
    }

    #[test]
    fn a_caller_owns_the_agents_it_pays_for_only() {
        let ci = Caller {
            name: "ci".into(),
            discord_user: None,
        };
        let dash = Caller {
            name: "dash".into(),
            discord_user: None,
        };
        let mut agent = AgentState::for_test("a");
        assert!(!ci.owns(&agent) && !started_over_the_api(&agent));
        agent.money.spender = ci.spender();
        assert!(ci.owns(&agent) && started_over_the_api(&agent));
        assert!(!dash.owns(&agent));
        // A task bound to Discord: a Discord person pays, the caller that made it drives it, and
        // `serve` alone does not resume it.
        agent.money.spender = Spender {
            user: Some("42".into()),
            guild: Some("7".into()),
        };
        agent.brief.api_caller = Some("ci".into());
        assert!(ci.owns(&agent) && !dash.owns(&agent) && !started_over_the_api(&agent));
    }
}
