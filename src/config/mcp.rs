//! `[[mcp.servers]]`: the MCP servers whose tools agents may use, how each is reached, which of its
//! tools are offered and in which risk class.
//!
//! Each server has a name, a program (with its arguments and its whole environment) or a
//! streamable-HTTP URL, allow and deny lists of tools, a risk class, whether it reaches the
//! network, a timeout and a result cap, and its `scope`: whom one running instance serves (`bot`,
//! each Discord `server`, or each `agent`; by default `server` for a program, which may keep state
//! between calls, and `bot` for a URL), with how long an idle instance lives (`idle_secs`) and how
//! many may run at once (`max_instances`). `validate` requires unique names usable as a command's
//! first part and exactly one of program and URL; a URL server's `headers` name the environment
//! variables their values are read from (by `mcp`, which also registers them, and the URL's query,
//! with `config::redact` so that no log line shows them). The `Debug` output leaves out the environment's
//! values and the URL's query, which may hold keys.
//!
//! A program is confined (`confine`, true unless the operator writes `false`; see `mcp::confined`)
//! and reaches the network as `network` says: `none`, `guarded` (through the egress proxy, the
//! default for a program) or `open`. It may write only its private home and `paths`, and read the
//! system, its program and `read_paths` besides. For a URL server, which runs elsewhere, `network`
//! only says what it reaches (`open` unless `none` is written), for the taint rule. The old
//! `network = true | false` still reads, as `open` and `none`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::core::commands::Risk;

use super::{invalid, ConfigError};

/// The MCP servers the operator lists; none by default.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    pub servers: Vec<McpServerConfig>,
}

/// One MCP server: a program spoken to over its stdin and stdout, or a streamable-HTTP URL.
#[derive(Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The first part of its commands' names (`time` gives `time.get_current_time`).
    pub name: String,
    /// The program to start (a name looked up in PATH, or a path).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// The program's whole environment besides PATH, LANG and its private HOME and TMPDIR: it never
    /// sees the bot's own (where the Discord token and API keys are). Values may be secrets; they are never shown.
    #[serde(default, serialize_with = "names_only")]
    pub env: BTreeMap<String, String>,
    /// A streamable-HTTP endpoint instead of a program; reached through the web guard, so a
    /// private address must be in `web.allow_hosts`.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers sent to a URL server with every request (`Authorization`, say), each naming the
    /// environment variable that holds its value: a value is never written in the config, and the
    /// log never shows it.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Only these tools are offered (all when empty).
    #[serde(default)]
    pub allow: Vec<String>,
    /// These tools are never offered.
    #[serde(default)]
    pub deny: Vec<String>,
    /// The risk class of its tools, which the approval policy is written in.
    #[serde(default = "external")]
    pub risk: Risk,
    /// Where each tool's class comes from: `server` (all in `risk`), or `hints`, the tool's own
    /// annotations (`readOnlyHint`, `destructiveHint`, `openWorldHint`), `risk` for a tool without
    /// any. Hints are the server's word, so they are followed only for a server the operator trusts.
    #[serde(default)]
    pub classes: ToolClasses,
    /// A class for a tool by name, over both.
    #[serde(default)]
    pub tool_risks: BTreeMap<String, Risk>,
    /// How the server reaches a network (see `network()` for the default). A tool's arguments may
    /// carry data out through a server that can, so a tainted agent's call of it needs a person
    /// (see `core::taint`); `none` says the server, and whatever it calls, stays on the bot's
    /// machine, and for a program the confinement makes it so.
    #[serde(default)]
    pub network: Option<McpNetwork>,
    /// Whether a program runs confined (see `mcp::confined`): true unless written `false`, which
    /// runs it as the bot's own user with the bot's reach, as before confinement existed.
    #[serde(default = "confined_by_default")]
    pub confine: bool,
    /// Folders (or files) a confined program may read and write, besides its private home.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Folders (or files) a confined program may read, besides the system's and its own.
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// How long a call (and the start of the server) may take; progress notifications push a
    /// call's back (see `mcp`).
    #[serde(default = "thirty")]
    pub timeout_secs: u64,
    /// Characters of a result kept for the agent.
    #[serde(default = "result_chars")]
    pub max_result_chars: usize,
    /// Whom one running instance of the server serves; `McpServerConfig::scope` gives the
    /// default when unset.
    #[serde(default)]
    pub scope: Option<McpScope>,
    /// Seconds an instance of a `server` or `agent` scope lives without a call before it is
    /// stopped (a `bot` server's one instance runs for as long as the bot).
    #[serde(default = "ten_minutes")]
    pub idle_secs: u64,
    /// Instances of the server running at once at most; when all are taken, the one idle longest
    /// is stopped for a new one, and a call fails when none is idle.
    #[serde(default = "thirty_two")]
    pub max_instances: usize,
}

/// Whom one running instance of an MCP server serves: what one agent tells a stateful server
/// (a memory graph, a folder, a session) is seen by exactly the agents of the same instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum McpScope {
    /// One instance for every agent of the bot.
    Bot,
    /// One instance per Discord server; the console's agents share one, and the Agent Protocol's
    /// another.
    Server,
    /// One instance per agent.
    Agent,
}

impl McpScope {
    /// The word the config uses, for `autothread check` and the log.
    pub fn label(self) -> &'static str {
        match self {
            McpScope::Bot => "bot",
            McpScope::Server => "server",
            McpScope::Agent => "agent",
        }
    }

    /// What the scope means, in words.
    pub fn meaning(self) -> &'static str {
        match self {
            McpScope::Bot => "one instance for every agent",
            McpScope::Server => "an instance per Discord server, the console and the API",
            McpScope::Agent => "an instance per agent",
        }
    }
}

/// How an MCP server reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(try_from = "NetworkSetting")]
#[cfg_attr(test, serde(rename_all = "snake_case"))]
pub enum McpNetwork {
    /// No network at all: a program gets a network namespace of its own where the kernel allows,
    /// and can make no internet socket in any case.
    None,
    /// Only through the egress proxy, which applies `read_webpage`'s rules (`web::guard`).
    Guarded,
    /// Whatever the bot's machine reaches, private networks included.
    Open,
}

impl McpNetwork {
    pub fn label(self) -> &'static str {
        match self {
            McpNetwork::None => "none",
            McpNetwork::Guarded => "guarded",
            McpNetwork::Open => "open",
        }
    }
}

/// `network` as written: a word, or the boolean of older configs.
#[derive(Deserialize)]
#[serde(untagged)]
enum NetworkSetting {
    Reaches(bool),
    Named(String),
}

impl TryFrom<NetworkSetting> for McpNetwork {
    type Error = String;

    fn try_from(setting: NetworkSetting) -> Result<Self, Self::Error> {
        match setting {
            NetworkSetting::Reaches(false) => Ok(McpNetwork::None),
            NetworkSetting::Reaches(true) => Ok(McpNetwork::Open),
            NetworkSetting::Named(name) => match name.as_str() {
                "none" => Ok(McpNetwork::None),
                "guarded" => Ok(McpNetwork::Guarded),
                "open" => Ok(McpNetwork::Open),
                other => Err(format!(
                    "network must be \"none\", \"guarded\" or \"open\" (got {other:?})"
                )),
            },
        }
    }
}

/// Where an MCP server's tools take their risk class from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum ToolClasses {
    /// Every tool in the server's `risk`.
    #[default]
    Server,
    /// Each tool's annotations choose its class.
    Hints,
}

/// The environment's names with every value redacted: a value may be a key.
#[cfg(test)]
fn names_only<S: serde::Serializer>(
    env: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(env.keys().map(|name| (name, "[redacted]")))
}

fn external() -> Risk {
    Risk::External
}

fn confined_by_default() -> bool {
    true
}

fn thirty() -> u64 {
    30
}

fn result_chars() -> usize {
    12_000
}

fn ten_minutes() -> u64 {
    600
}

fn thirty_two() -> usize {
    32
}

/// Without the environment's values and the URL's query, either of which may hold a secret.
impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url.as_deref().map(super::without_query))
            .field("headers", &self.headers)
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("risk", &self.risk)
            .field("classes", &self.classes)
            .field("tool_risks", &self.tool_risks)
            .field("network", &self.network())
            .field("confine", &self.confine)
            .field("paths", &self.paths)
            .field("read_paths", &self.read_paths)
            .field("timeout_secs", &self.timeout_secs)
            .field("scope", &self.scope())
            .field("idle_secs", &self.idle_secs)
            .field("max_instances", &self.max_instances)
            .finish()
    }
}

impl McpServerConfig {
    /// Whether the server's tool `tool` is offered.
    pub fn offers(&self, tool: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|t| t == tool))
            && !self.deny.iter().any(|t| t == tool)
    }

    /// Whom one instance serves: as configured, else `server` for a program (which may keep
    /// state, so one Discord server's agents must not read another's) and `bot` for a URL (whose
    /// state, if any, is the remote service's, one session whatever the bot does).
    pub fn scope(&self) -> McpScope {
        self.scope.unwrap_or(if self.command.is_some() {
            McpScope::Server
        } else {
            McpScope::Bot
        })
    }

    /// How it reaches the network: as written; else `guarded` for a confined program and `open`
    /// for an unconfined one or a URL server.
    pub fn network(&self) -> McpNetwork {
        match self.network {
            Some(network) => network,
            None if self.command.is_some() && self.confine => McpNetwork::Guarded,
            None => McpNetwork::Open,
        }
    }

    /// How it is reached, for logs and `autothread check` (a URL without its query).
    pub fn describe(&self) -> String {
        match (&self.command, &self.url) {
            (Some(command), _) => format!("the program {command}"),
            (None, Some(url)) => super::without_query(url),
            (None, None) => "nothing".into(),
        }
    }
}

impl McpConfig {
    /// Each server has a usable name (unique, and a valid first part of a command name), and
    /// exactly one of a program and a URL.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, server) in self.servers.iter().enumerate() {
            let field = format!("mcp.servers[{i}]");
            let name = server.name.as_str();
            let valid = !name.is_empty()
                && name.len() <= 32
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("must be 1 to 32 letters, digits, '_' or '-' (got {name:?})"),
                ));
            }
            if !seen.insert(name) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("{name:?} names two servers"),
                ));
            }
            match (&server.command, &server.url) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(invalid(
                        field,
                        "needs exactly one of `command` (a program) and `url` (streamable HTTP)",
                    ))
                }
                (None, Some(url))
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    return Err(invalid(
                        format!("{field}.url"),
                        "must start with http:// or https://",
                    ))
                }
                _ => {}
            }
            validate_headers(server, &field)?;
            validate_confinement(server, &field)?;
            if server.timeout_secs == 0 || server.timeout_secs > 600 {
                return Err(invalid(
                    format!("{field}.timeout_secs"),
                    "must be between 1 and 600",
                ));
            }
            if server.idle_secs == 0 || server.idle_secs > 7 * 24 * 3600 {
                return Err(invalid(
                    format!("{field}.idle_secs"),
                    "must be between 1 and 604800 (a week)",
                ));
            }
            if server.max_instances == 0 || server.max_instances > 1024 {
                return Err(invalid(
                    format!("{field}.max_instances"),
                    "must be between 1 and 1024",
                ));
            }
            if server.max_result_chars == 0 {
                return Err(invalid(
                    format!("{field}.max_result_chars"),
                    "must be more than 0",
                ));
            }
        }
        Ok(())
    }
}

/// The confinement's keys fit how the server is reached: a URL server runs elsewhere, so neither
/// paths nor a guarded network mean anything for it; an unconfined program cannot be kept to less
/// than the bot's network; paths are absolute.
fn validate_confinement(server: &McpServerConfig, field: &str) -> Result<(), ConfigError> {
    let program = server.command.is_some();
    if !program {
        if server.network == Some(McpNetwork::Guarded) {
            return Err(invalid(
                format!("{field}.network"),
                "a URL server runs elsewhere, so its network cannot be guarded: write \"none\" if it reaches nothing, else leave it \"open\"",
            ));
        }
        if !server.paths.is_empty() || !server.read_paths.is_empty() || !server.confine {
            return Err(invalid(
                field.to_string(),
                "paths, read_paths and confine are for a program; a URL server runs elsewhere",
            ));
        }
    }
    if program && !server.confine && server.network() != McpNetwork::Open {
        return Err(invalid(
            format!("{field}.network"),
            format!(
                "network = \"{}\" needs the confinement: with confine = false the program reaches what the bot reaches, so write network = \"open\"",
                server.network().label()
            ),
        ));
    }
    for (key, paths) in [("paths", &server.paths), ("read_paths", &server.read_paths)] {
        if let Some(relative) = paths.iter().find(|p| !p.is_absolute()) {
            return Err(invalid(
                format!("{field}.{key}"),
                format!("{} is not an absolute path", relative.display()),
            ));
        }
    }
    Ok(())
}

/// Headers a config may not set: the MCP library sends them itself, and two values would confuse the
/// server.
const HEADERS_THE_LIBRARY_SENDS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Headers only for a URL server, each a valid header name naming an environment variable (the
/// value itself, "Bearer …", is refused, since it would be a secret in the file).
fn validate_headers(server: &McpServerConfig, field: &str) -> Result<(), ConfigError> {
    if !server.headers.is_empty() && server.url.is_none() {
        return Err(invalid(
            format!("{field}.headers"),
            "headers are sent to a URL server only; a program is given `env`",
        ));
    }
    for (header, variable) in &server.headers {
        let valid_name = !header.is_empty()
            && header.len() <= 64
            && header
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid_name {
            return Err(invalid(
                format!("{field}.headers"),
                format!("{header:?} is not an HTTP header's name"),
            ));
        }
        if HEADERS_THE_LIBRARY_SENDS.contains(&header.to_ascii_lowercase().as_str()) {
            return Err(invalid(
                format!("{field}.headers.{header}"),
                "is sent by the MCP client itself",
            ));
        }
        let valid_variable = !variable.is_empty()
            && variable.len() <= 128
            && !variable.starts_with(|c: char| c.is_ascii_digit())
            && variable
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_variable {
            // The value is not echoed: it may be the secret itself, written where it must not be.
            return Err(invalid(
                format!("{field}.headers.{header}"),
                "must name the environment variable that holds the header's value (letters, digits and '_'); the value itself is never written in the config",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> McpConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn servers_need_a_name_and_one_way_to_be_reached() {
        let good = parse("[[servers]]\nname = \"time\"\ncommand = \"mcp-server-time\"\n");
        assert!(good.validate().is_ok());
        assert_eq!(good.servers[0].risk, Risk::External);
        let both = parse("[[servers]]\nname = \"t\"\ncommand = \"x\"\nurl = \"https://a\"\n");
        assert!(both
            .validate()
            .unwrap_err()
            .to_string()
            .contains("exactly one"));
        let dotted = parse("[[servers]]\nname = \"a.b\"\ncommand = \"x\"\n");
        assert!(matches!(
            dotted.validate().unwrap_err(),
            ConfigError::Invalid { field, .. } if field == "mcp.servers[0].name"
        ));
        let twice = parse(
            "[[servers]]\nname = \"t\"\ncommand = \"x\"\n[[servers]]\nname = \"t\"\ncommand = \"y\"\n",
        );
        assert!(twice
            .validate()
            .unwrap_err()
            .to_string()
            .contains("two servers"));
    }

    #[test]
    fn a_program_is_scoped_per_server_and_a_url_per_bot_unless_set() {
        let servers = parse(
            "[[servers]]\nname = \"p\"\ncommand = \"x\"\n[[servers]]\nname = \"u\"\nurl = \"https://a\"\n[[servers]]\nname = \"a\"\ncommand = \"x\"\nscope = \"agent\"\nidle_secs = 5\nmax_instances = 2\n",
        );
        assert!(servers.validate().is_ok());
        let scopes: Vec<McpScope> = servers.servers.iter().map(|s| s.scope()).collect();
        assert_eq!(scopes, [McpScope::Server, McpScope::Bot, McpScope::Agent]);
        assert_eq!(servers.servers[0].idle_secs, 600);
        assert_eq!(servers.servers[0].max_instances, 32);
        assert_eq!(servers.servers[2].max_instances, 2);
        let none = parse("[[servers]]\nname = \"p\"\ncommand = \"x\"\nmax_instances = 0\n");
        assert!(matches!(
            none.validate().unwrap_err(),
            ConfigError::Invalid { field, .. } if field == "mcp.servers[0].max_instances"
        ));
        let never = parse("[[servers]]\nname = \"p\"\ncommand = \"x\"\nidle_secs = 0\n");
        assert!(matches!(
            never.validate().unwrap_err(),
            ConfigError::Invalid { field, .. } if field == "mcp.servers[0].idle_secs"
        ));
        let unknown: Result<McpConfig, _> =
            toml::from_str("[[servers]]\nname = \"p\"\ncommand = \"x\"\nscope = \"guild\"\n");
        assert!(unknown.is_err());
    }

    #[test]
    fn allow_and_deny_lists_choose_the_tools() {
        let mut server = parse("[[servers]]\nname = \"t\"\ncommand = \"x\"\n").servers[0].clone();
        assert!(server.offers("anything"));
        server.deny = vec!["convert_time".into()];
        assert!(!server.offers("convert_time"));
        server.allow = vec!["get_current_time".into()];
        assert!(server.offers("get_current_time"));
        assert!(!server.offers("other"));
    }

    #[test]
    fn headers_name_environment_variables_of_a_url_server() {
        let good = parse(
            "[[servers]]\nname = \"gh\"\nurl = \"https://mcp.example/x\"\nheaders = { Authorization = \"GH_MCP_AUTH\" }\n",
        );
        assert!(good.validate().is_ok());
        let written = parse(
            "[[servers]]\nname = \"gh\"\nurl = \"https://mcp.example/x\"\nheaders = { Authorization = \"Bearer ghp_written\" }\n",
        );
        let refused = written.validate().unwrap_err().to_string();
        assert!(
            refused.contains("mcp.servers[0].headers.Authorization"),
            "{refused}"
        );
        assert!(refused.contains("environment variable"), "{refused}");
        assert!(!refused.contains("ghp_written"), "{refused}");
        let program = parse(
            "[[servers]]\nname = \"t\"\ncommand = \"x\"\nheaders = { Authorization = \"T\" }\n",
        );
        assert!(program
            .validate()
            .unwrap_err()
            .to_string()
            .contains("URL server only"));
        let reserved = parse(
            "[[servers]]\nname = \"t\"\nurl = \"https://a\"\nheaders = { Mcp-Session-Id = \"T\" }\n",
        );
        assert!(reserved
            .validate()
            .unwrap_err()
            .to_string()
            .contains("MCP client itself"));
    }

    #[test]
    fn network_is_guarded_for_a_confined_program_and_reads_the_old_booleans() {
        let servers = parse(
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\n\
             [[servers]]\nname = \"b\"\ncommand = \"x\"\nnetwork = false\n\
             [[servers]]\nname = \"c\"\ncommand = \"x\"\nnetwork = true\n\
             [[servers]]\nname = \"d\"\ncommand = \"x\"\nnetwork = \"none\"\npaths = [\"/srv/notes\"]\n\
             [[servers]]\nname = \"e\"\nurl = \"https://mcp.example/x\"\n\
             [[servers]]\nname = \"f\"\ncommand = \"x\"\nconfine = false\n",
        );
        assert!(servers.validate().is_ok());
        let networks: Vec<McpNetwork> = servers.servers.iter().map(|s| s.network()).collect();
        assert_eq!(
            networks,
            [
                McpNetwork::Guarded,
                McpNetwork::None,
                McpNetwork::Open,
                McpNetwork::None,
                McpNetwork::Open,
                McpNetwork::Open
            ]
        );
        assert!(servers.servers[0].confine);
        assert!(!servers.servers[5].confine);
        let misspelt: Result<McpConfig, _> =
            toml::from_str("[[servers]]\nname = \"a\"\ncommand = \"x\"\nnetwork = \"guard\"\n");
        let refused = misspelt.unwrap_err().to_string();
        assert!(
            refused.contains("\"none\", \"guarded\" or \"open\""),
            "{refused}"
        );
    }

    #[test]
    fn confinement_keys_are_refused_where_they_mean_nothing() {
        let refused = |text: &str| parse(text).validate().unwrap_err().to_string();
        let said =
            refused("[[servers]]\nname = \"u\"\nurl = \"https://a\"\nnetwork = \"guarded\"\n");
        assert!(
            said.contains("mcp.servers[0].network") && said.contains("runs elsewhere"),
            "{said}"
        );
        let said = refused("[[servers]]\nname = \"u\"\nurl = \"https://a\"\npaths = [\"/srv\"]\n");
        assert!(said.contains("for a program"), "{said}");
        let said = refused(
            "[[servers]]\nname = \"p\"\ncommand = \"x\"\nconfine = false\nnetwork = \"guarded\"\n",
        );
        assert!(said.contains("needs the confinement"), "{said}");
        let said = refused("[[servers]]\nname = \"p\"\ncommand = \"x\"\npaths = [\"notes\"]\n");
        assert!(
            said.contains("mcp.servers[0].paths") && said.contains("absolute"),
            "{said}"
        );
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let server = parse(
            "[[servers]]\nname = \"gh\"\nurl = \"https://mcp.example/x?token=hunter2\"\nenv = { GITHUB_TOKEN = \"ghp_secret\" }\n",
        )
        .servers[0]
            .clone();
        let shown = format!("{server:?}");
        assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
        assert!(
            !shown.contains("ghp_secret") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
