//! `[api]`: the Agent Protocol listener (`autothread serve`, and `run` when `listen` is set), the
//! bearer tokens that may call it, how long a step waits for the agent, and how big a request
//! may be.
//!
//! A token is a caller: its `name` identifies it wherever a person would be named (the approver
//! of a command, the audit trail, a quorum) and is the spender its agents are charged to, so the
//! daily budget per person applies to each token. The token's value is a secret and is read only
//! from the environment variable the entry names (`token_env`), at `Config::apply_env`; it never
//! appears in `Debug` output. `validate` requires unique names of letters, digits, `-`, `_` and
//! `.`; `check_tokens` (called when a listener starts) that every token is set and long enough.
//! A token may name a `discord_user`: the person who owns, on Discord, the agents the caller
//! binds to a Discord channel (see `surface::api::threads`).

use serde::Deserialize;

use super::{invalid, ConfigError, Secret};

/// The shortest token accepted: a guessable token would be no lock at all.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Where `serve` listens when `api.listen` is empty: this machine only, on AutoGPT's port.
pub const SERVE_DEFAULT_LISTEN: &str = "127.0.0.1:8000";

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Where the Agent Protocol is served: `run` serves it beside Discord only when this is set,
    /// `serve` falls back to `127.0.0.1:8000`. Also AUTOTHREAD_API_LISTEN. Port 0 picks a free
    /// port (the log says which).
    pub listen: String,
    /// How long a step request waits for the agent to propose its next command, finish or
    /// pause; past it, the step says what the agent is doing and a later step continues.
    pub step_wait_secs: u64,
    /// The largest request body accepted, uploads included (an upload is also held to
    /// `workspace.max_file_bytes`).
    pub max_body_bytes: usize,
    /// The most items a list answers with in one page.
    pub max_page_size: usize,
    pub tokens: Vec<ApiToken>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: String::new(),
            step_wait_secs: 60,
            max_body_bytes: 2 * 1024 * 1024,
            max_page_size: 100,
            tokens: Vec::new(),
        }
    }
}

/// One caller of the API.
#[derive(Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Who the caller is: the approver, the author in the audit trail, and the spender.
    pub name: String,
    /// The environment variable holding the token's value.
    pub token_env: String,
    /// The Discord user (by id) who owns the agents this caller binds to a Discord channel
    /// (`additional_input.discord_channel`): their server's rights, caps and budgets apply as if
    /// they had started the agent. Without it, this caller's tasks stay off Discord.
    #[serde(default)]
    pub discord_user: Option<u64>,
    /// The value, read from `token_env` when the config is loaded.
    #[serde(skip)]
    pub token: Option<Secret>,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("token_env", &self.token_env)
            .field("discord_user", &self.discord_user)
            .field("token", &self.token.as_ref().map(|_| "[set]"))
            .finish()
    }
}

impl ApiConfig {
    /// The address `serve` listens on.
    pub fn serve_listen(&self) -> &str {
        match self.listen.trim() {
            "" => SERVE_DEFAULT_LISTEN,
            listen => listen,
        }
    }

    /// Reads every token's value from its variable.
    pub(super) fn read_tokens(&mut self, env: super::EnvLookup<'_>) {
        for token in &mut self.tokens {
            if let Some(value) = env(&token.token_env) {
                token.token = Some(Secret::new(value));
            }
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.step_wait_secs == 0 {
            return Err(invalid("api.step_wait_secs", "must be at least 1"));
        }
        if self.max_page_size == 0 {
            return Err(invalid("api.max_page_size", "must be at least 1"));
        }
        if self.max_body_bytes < 1024 {
            return Err(invalid("api.max_body_bytes", "must be at least 1024"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for token in &self.tokens {
            let name = token.name.trim();
            let usable = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !usable {
                return Err(invalid(
                    "api.tokens.name",
                    format!("{name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"),
                ));
            }
            if !seen.insert(name) {
                return Err(invalid(
                    "api.tokens.name",
                    format!("{name:?} is listed twice"),
                ));
            }
            if token.discord_user == Some(0) {
                return Err(invalid(
                    "api.tokens.discord_user",
                    format!("token {name:?} names user 0, which is no Discord user"),
                ));
            }
            if token.token_env.trim().is_empty() {
                return Err(invalid(
                    "api.tokens.token_env",
                    format!("token {name:?} names no environment variable"),
                ));
            }
        }
        Ok(())
    }

    /// Before a listener starts: at least one token, each set in its variable and long enough.
    pub fn check_tokens(&self) -> Result<(), ConfigError> {
        if self.tokens.is_empty() {
            return Err(invalid(
                "api.tokens",
                "the API needs at least one token ([[api.tokens]] with a name and token_env)",
            ));
        }
        for token in &self.tokens {
            match &token.token {
                None => {
                    return Err(invalid(
                        "api.tokens.token_env",
                        format!(
                            "{} (token {:?}) is not set in the environment",
                            token.token_env, token.name
                        ),
                    ))
                }
                Some(secret) if secret.expose().chars().count() < MIN_TOKEN_CHARS => {
                    return Err(invalid(
                        "api.tokens.token_env",
                        format!(
                            "the token in {} (token {:?}) is shorter than {MIN_TOKEN_CHARS} characters",
                            token.token_env, token.name
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token(name: &str, env: &str) -> ApiConfig {
        ApiConfig {
            tokens: vec![ApiToken {
                name: name.into(),
                token_env: env.into(),
                discord_user: None,
                token: None,
            }],
            ..ApiConfig::default()
        }
    }

    #[test]
    fn tokens_are_read_from_the_environment_checked_and_never_shown() {
        let mut config = with_token("ci", "CI_TOKEN");
        assert!(config.validate().is_ok());
        let unset = config.check_tokens().unwrap_err().to_string();
        assert!(
            unset.contains("CI_TOKEN") && unset.contains("not set"),
            "{unset}"
        );
        config.read_tokens(&|name| (name == "CI_TOKEN").then(|| "short".to_string()));
        let short = config.check_tokens().unwrap_err().to_string();
        assert!(short.contains("shorter than 16"), "{short}");
        let secret = "a-long-enough-secret-value";
        config.read_tokens(&|_| Some(secret.to_string()));
        assert!(config.check_tokens().is_ok());
        let shown = format!("{config:?}");
        assert!(
            !shown.contains(secret) && shown.contains("[set]"),
            "{shown}"
        );
    }

    #[test]
    fn names_must_be_plain_and_unique_and_the_numbers_sensible() {
        assert!(with_token("ci bot", "X").validate().is_err());
        assert!(with_token("", "X").validate().is_err());
        assert!(with_token("ci", " ").validate().is_err());
        let mut nobody = with_token("ci", "X");
        nobody.tokens[0].discord_user = Some(0);
        let error = nobody.validate().unwrap_err().to_string();
        assert!(error.contains("api.tokens.discord_user"), "{error}");
        let mut twice = with_token("ci", "X");
        twice.tokens.push(twice.tokens[0].clone());
        let error = twice.validate().unwrap_err().to_string();
        assert!(error.contains("listed twice"), "{error}");
        let no_wait = ApiConfig {
            step_wait_secs: 0,
            ..ApiConfig::default()
        };
        assert!(no_wait.validate().is_err());
        assert!(ApiConfig::default().check_tokens().is_err());
        assert_eq!(ApiConfig::default().serve_listen(), SERVE_DEFAULT_LISTEN);
    }
}
