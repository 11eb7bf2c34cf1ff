//! Approve & remember: rules a person makes from a card so that later commands like it run without
//! one. The scopes are worked out from the approved command. A rule of any scope is offered only
//! where the policy already lets the class run unattended, and a rule for the exact command only
//! where the class is `remember`; so a rule never widens the policy (ask stays ask, deny stays
//! deny). No rule is offered for a class that needs several approvers, and none approves a command
//! that sends data out of an agent that read untrusted content.
//!
//! `RuleScope` is what a rule covers: exact arguments (by SHA-256), a script's exact arguments and
//! contents (`ExactScript`, checked by the runtime before it runs through `ScriptCheck`), paths
//! under a folder, URLs on one origin, or any arguments. `matches` refuses paths that climb out or
//! hold control characters and URLs with a user name or an odd host; labels show what the model
//! chose as code spans. `offered_scopes` derives the scopes from the command, its spec's
//! `rule_argument` and `runs_file`, and the `RuleBreadth` the class allows. A `RuleDraft` is a
//! person's choice (`Decision::Remember`) of scope, `RuleReach` (the agent or the server) and
//! `RuleLife`; an `ApprovalRule` is the rule kept, with its uses. `covering_rule` finds the live
//! rule for a call; `MAX_RULES_PER_AGENT` and `MAX_RULES_PER_SERVER` bound them (`over_limit`).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::commands::CommandSpec;
use super::commands::RuleArgument;
use super::digest::sha256_tagged;
use super::reply::CommandCall;
use super::text::truncate_chars;

/// Live rules one agent may keep, and one server: a rule more needs one revoked first.
pub const MAX_RULES_PER_AGENT: usize = 10;
pub const MAX_RULES_PER_SERVER: usize = 10;
/// How much of an exact command's arguments a rule shows (its digest covers them all).
const SHOWN_ARGUMENTS_MAX: usize = 300;

/// What a rule covers, narrowest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuleScope {
    /// This command with exactly these arguments (compared by digest, whatever their order).
    Exact {
        command: String,
        arguments: String,
        digest: String,
    },
    /// A script run with exactly these arguments, and only while the file it runs (`path`) holds
    /// exactly the contents it held when the rule was made (`contents`, the runtime's SHA-256 of
    /// it, filled in as the person's approval is taken): an agent that changes the script is
    /// asked again.
    ExactScript {
        command: String,
        arguments: String,
        digest: String,
        path: String,
        #[serde(default)]
        contents: String,
    },
    /// This command's paths under a folder of the workspace.
    PathUnder {
        command: String,
        argument: String,
        folder: String,
    },
    /// This command's URLs on one origin: scheme, host and port (`https://docs.rs`), so that a
    /// rule made for a web site does not cover another port or plain http on the same host.
    UrlOrigin {
        command: String,
        argument: String,
        origin: String,
    },
    /// This command with any arguments (`what` names them: "query", "arguments").
    AnyArguments { command: String, what: String },
}

impl RuleScope {
    pub fn command(&self) -> &str {
        match self {
            RuleScope::Exact { command, .. }
            | RuleScope::ExactScript { command, .. }
            | RuleScope::PathUnder { command, .. }
            | RuleScope::UrlOrigin { command, .. }
            | RuleScope::AnyArguments { command, .. } => command,
        }
    }

    /// What the rule covers, for people: "`web_search` with any query".
    pub fn label(&self) -> String {
        match self {
            RuleScope::Exact {
                command, arguments, ..
            } => format!("`{command}` exactly as {}", code(arguments)),
            RuleScope::ExactScript {
                command,
                arguments,
                path,
                ..
            } => format!(
                "`{command}` exactly as {}, with {} as it was then",
                code(arguments),
                code(path)
            ),
            RuleScope::PathUnder {
                command,
                argument,
                folder,
            } => format!(
                "`{command}` with any {argument} under {}",
                code(&format!("{folder}/"))
            ),
            RuleScope::UrlOrigin {
                command,
                argument,
                origin,
            } => format!("`{command}` with any {argument} on {}", code(origin)),
            RuleScope::AnyArguments { command, what } => format!("`{command}` with any {what}"),
        }
    }

    /// What the rule covers without the command's name, short enough for a menu option.
    pub fn short_label(&self) -> String {
        let text = match self {
            RuleScope::Exact { .. } => "exactly this command".to_string(),
            RuleScope::ExactScript { .. } => "exactly this command and script".to_string(),
            RuleScope::PathUnder {
                argument, folder, ..
            } => format!("any {argument} under {folder}/"),
            RuleScope::UrlOrigin {
                argument, origin, ..
            } => format!("any {argument} on {origin}"),
            RuleScope::AnyArguments { what, .. } => format!("any {what}"),
        };
        truncate_chars(&text, 60)
    }

    /// Whether `call` is covered.
    pub fn matches(&self, call: &CommandCall) -> bool {
        if call.name != self.command() {
            return false;
        }
        match self {
            RuleScope::Exact { digest, .. } | RuleScope::ExactScript { digest, .. } => {
                canonical_digest(&call.args) == *digest
            }
            RuleScope::PathUnder {
                argument, folder, ..
            } => string_arg(call, argument)
                .and_then(path_parts)
                .is_some_and(|parts| {
                    parent_parts(folder)
                        .is_some_and(|f| parts.len() > f.len() && parts.starts_with(&f))
                }),
            RuleScope::UrlOrigin {
                argument, origin, ..
            } => {
                string_arg(call, argument).and_then(url_origin).as_deref() == Some(origin.as_str())
            }
            RuleScope::AnyArguments { .. } => true,
        }
    }
}

/// How much of what the model chose a label shows (the digest covers exact arguments in full).
const LABEL_TEXT_MAX: usize = 80;

/// Text a person, a page or the model chose, as a Markdown code span: nothing in it renders
/// (no masked links, no emphasis), it cannot close the span early, and it is short enough for a
/// list line to hold it whole.
fn code(text: &str) -> String {
    format!(
        "`{}`",
        truncate_chars(&text.replace('`', "'"), LABEL_TEXT_MAX)
    )
}

fn string_arg<'c>(call: &'c CommandCall, name: &str) -> Option<&'c str> {
    call.args.get(name).and_then(Value::as_str)
}

/// The arguments' SHA-256 whatever order their keys came in. A rule stored with the 64-bit FNV
/// digest of earlier versions matches nothing: its person is asked again, once.
fn canonical_digest(args: &Map<String, Value>) -> String {
    sha256_tagged(canonical_text(args).as_bytes())
}

fn canonical_text(args: &Map<String, Value>) -> String {
    let sorted: BTreeMap<&String, &Value> = args.iter().collect();
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// A workspace path's parts, or `None` for one that climbs out (`..`) or holds a control
/// character: such a path is never under any folder, whatever the workspace guard would later
/// say of it.
fn path_parts(path: &str) -> Option<Vec<String>> {
    if path.chars().any(char::is_control) {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return None,
            part => parts.push(part.to_string()),
        }
    }
    Some(parts)
}

fn parent_parts(folder: &str) -> Option<Vec<String>> {
    path_parts(folder).filter(|parts| !parts.is_empty())
}

/// The origin of an http(s) URL, lower-cased, without its default port (`https://docs.rs`,
/// `http://[::1]:8080`); `None` for another scheme, a user name before the host, or a host with
/// characters no host name has.
fn url_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?.to_ascii_lowercase();
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (inside, after) = v6.split_once(']')?;
            // Anything but a port after the address (`[::1]@evil.example`) is not this host.
            if !(after.is_empty() || after.starts_with(':')) {
                return None;
            }
            (format!("[{inside}]"), after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (authority.clone(), None),
        },
    };
    let host_chars = |c: char| c.is_ascii_alphanumeric() || "-.[]:".contains(c);
    if host.is_empty() || !host.chars().all(host_chars) {
        return None;
    }
    match port {
        None => Some(format!("{scheme}://{host}")),
        Some(port) if port == default_port => Some(format!("{scheme}://{host}")),
        Some(port) if !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => {
            Some(format!("{scheme}://{host}:{port}"))
        }
        Some(_) => None,
    }
}

/// A script that must be as a rule bound it for the rule's approval to hold: the runtime compares
/// the file's SHA-256 with `contents` just before running it, and shows the card instead when
/// they differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptCheck {
    pub rule: String,
    pub path: String,
    pub contents: String,
}

impl ApprovalRule {
    /// What the runtime must check before a command this rule approved runs, if anything.
    pub fn script_check(&self) -> Option<ScriptCheck> {
        self.scope
            .bound_script()
            .map(|(path, contents)| ScriptCheck {
                rule: self.id.clone(),
                path: path.to_string(),
                contents: contents.to_string(),
            })
    }
}

/// How wide a rule the class of a command allows (see `ClassAction::Remember`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleBreadth {
    /// Any scope: a class the policy runs unattended anyway.
    Any,
    /// The exact command only (and a script's exact contents): a class that always asks.
    ExactOnly,
}

impl RuleScope {
    /// Whether it covers one exact command only (a class that always asks allows no other).
    pub fn is_exact(&self) -> bool {
        matches!(
            self,
            RuleScope::Exact { .. } | RuleScope::ExactScript { .. }
        )
    }

    /// The scope as a card offers it: a script's contents are bound only when a person takes it.
    pub fn as_offered(&self) -> RuleScope {
        self.clone().binding_script(String::new())
    }

    /// This scope binding the script it runs to `contents` (the SHA-256 of the file as it is).
    pub fn binding_script(mut self, contents: String) -> RuleScope {
        if let RuleScope::ExactScript {
            contents: bound, ..
        } = &mut self
        {
            *bound = contents;
        }
        self
    }

    /// The script whose contents the rule binds, once they are known: (path, digest).
    pub fn bound_script(&self) -> Option<(&str, &str)> {
        match self {
            RuleScope::ExactScript { path, contents, .. } if !contents.is_empty() => {
                Some((path, contents))
            }
            _ => None,
        }
    }
}

/// The scopes a rule made from `call` may have, narrowest first.
pub fn offered_scopes(
    spec: &CommandSpec,
    call: &CommandCall,
    breadth: RuleBreadth,
) -> Vec<RuleScope> {
    let canonical = canonical_text(&call.args);
    let arguments = truncate_chars(&canonical, SHOWN_ARGUMENTS_MAX);
    let digest = sha256_tagged(canonical.as_bytes());
    if let Some(argument) = spec.runs_file.as_deref() {
        // A script's rule is worth only as much as the file it runs: it binds its contents, and
        // a script whose path the workspace would refuse gets no rule at all.
        let path =
            string_arg(call, argument).and_then(|path| crate::paths::normalize_path(path).ok());
        return path
            .map(|path| RuleScope::ExactScript {
                command: call.name.clone(),
                arguments,
                digest,
                path,
                contents: String::new(),
            })
            .into_iter()
            .collect();
    }
    let mut scopes = vec![RuleScope::Exact {
        command: call.name.clone(),
        arguments,
        digest,
    }];
    if breadth == RuleBreadth::ExactOnly {
        return scopes;
    }
    match &spec.rule_argument {
        Some(RuleArgument::Path(argument)) => {
            let parts = string_arg(call, argument)
                .and_then(path_parts)
                .unwrap_or_default();
            if parts.len() > 1 {
                scopes.push(RuleScope::PathUnder {
                    command: call.name.clone(),
                    argument: argument.clone(),
                    folder: parts[..parts.len() - 1].join("/"),
                });
            }
        }
        Some(RuleArgument::Url(argument)) => {
            if let Some(origin) = string_arg(call, argument).and_then(url_origin) {
                scopes.push(RuleScope::UrlOrigin {
                    command: call.name.clone(),
                    argument: argument.clone(),
                    origin,
                });
            }
        }
        None => {}
    }
    let required: Vec<&str> = spec
        .args
        .iter()
        .filter(|arg| arg.required)
        .map(|arg| arg.name.as_str())
        .collect();
    let what = match required.as_slice() {
        [only] => (*only).to_string(),
        _ => "arguments".into(),
    };
    scopes.push(RuleScope::AnyArguments {
        command: call.name.clone(),
        what,
    });
    scopes
}

/// Whom a rule approves for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleReach {
    /// The agent whose card it was made on.
    Agent,
    /// Every agent of that server (made by its admins only).
    Server,
}

impl RuleReach {
    pub fn label(self) -> &'static str {
        match self {
            RuleReach::Agent => "this agent",
            RuleReach::Server => "every agent in this server",
        }
    }
}

/// How long a rule lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleLife {
    Hour,
    Day,
    UntilRevoked,
}

impl RuleLife {
    pub const ALL: [RuleLife; 3] = [RuleLife::Hour, RuleLife::Day, RuleLife::UntilRevoked];

    pub fn label(self) -> &'static str {
        match self {
            RuleLife::Hour => "for 1 hour",
            RuleLife::Day => "for 1 day",
            RuleLife::UntilRevoked => "until revoked",
        }
    }

    pub fn expires_at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            RuleLife::Hour => Some(now + Duration::hours(1)),
            RuleLife::Day => Some(now + Duration::days(1)),
            RuleLife::UntilRevoked => None,
        }
    }
}

/// What a person asked for when approving with "remember".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleDraft {
    pub scope: RuleScope,
    pub reach: RuleReach,
    pub life: RuleLife,
}

/// A rule in force (or expired, until it is dropped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    /// `<agent>.<cycle>`: the card it was made on, which also makes it unique.
    pub id: String,
    pub scope: RuleScope,
    pub reach: RuleReach,
    pub created_by: crate::person::Person,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub uses: u64,
    #[serde(default)]
    pub last_used: Option<DateTime<Utc>>,
}

impl ApprovalRule {
    pub fn from_draft(
        agent: &str,
        cycle: u64,
        draft: RuleDraft,
        by: &crate::person::Person,
        now: DateTime<Utc>,
    ) -> Self {
        ApprovalRule {
            id: rule_id(agent, cycle),
            scope: draft.scope,
            reach: draft.reach,
            created_by: by.clone(),
            created_at: now,
            expires_at: draft.life.expires_at(now),
            uses: 0,
            last_used: None,
        }
    }

    pub fn live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|end| now < end)
    }

    /// "until 2026-11-25 10:00 UTC", or "until revoked".
    pub(crate) fn until(&self) -> String {
        match self.expires_at {
            Some(end) => format!("until {}", end.format("%Y-%m-%d %H:%M UTC")),
            None => "until revoked".into(),
        }
    }

    /// What approved a command, as the trail and the card name it.
    pub fn approver(&self) -> String {
        format!("rule {} ({})", self.id, self.scope.label())
    }

    /// One line for `/agent rules` and the console.
    pub fn describe(&self) -> String {
        let until = self.until();
        let used = match (self.uses, self.last_used) {
            (0, _) => "never used".to_string(),
            (n, Some(last)) => format!("used {n}×, last {}", last.format("%Y-%m-%d %H:%M UTC")),
            (n, None) => format!("used {n}×"),
        };
        format!(
            "{} — for {}, by {}, {until}; {used}",
            self.scope.label(),
            self.reach.label(),
            self.created_by
        )
    }
}

/// Why no rule more may be made for `reach` (its live rules, the agent's `own` or its
/// `server`'s, are at their limit); `None` while there is room.
pub fn over_limit(
    reach: RuleReach,
    own: &[ApprovalRule],
    server: &[ApprovalRule],
    now: DateTime<Utc>,
) -> Option<String> {
    let (rules, limit) = match reach {
        RuleReach::Agent => (own, MAX_RULES_PER_AGENT),
        RuleReach::Server => (server, MAX_RULES_PER_SERVER),
    };
    (rules.iter().filter(|r| r.live(now)).count() >= limit).then(|| {
        format!(
            "{} already has {limit} rules; revoke one with `/agent rules` first",
            reach.label()
        )
    })
}

pub fn rule_id(agent: &str, cycle: u64) -> String {
    format!("{agent}.{cycle}")
}

/// The first live rule among `rules` that covers `call`.
pub fn covering_rule<'r>(
    rules: impl IntoIterator<Item = &'r ApprovalRule>,
    call: &CommandCall,
    now: DateTime<Utc>,
) -> Option<&'r ApprovalRule> {
    rules
        .into_iter()
        .find(|rule| rule.live(now) && rule.scope.matches(call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{ArgType, Risk};
    use chrono::TimeZone;
    use serde_json::json;

    fn call(name: &str, args: Value) -> CommandCall {
        CommandCall {
            name: name.into(),
            args: args.as_object().unwrap().clone(),
        }
    }

    fn write_spec() -> CommandSpec {
        CommandSpec::new("write_file", "w", Risk::Write)
            .arg("filename", ArgType::String, "f")
            .arg("text", ArgType::String, "t")
            .rule_argument(RuleArgument::Path("filename".into()))
    }

    #[test]
    fn scopes_are_worked_out_from_the_command_narrowest_first() {
        let written = call(
            "write_file",
            json!({"filename": "notes/today/a.md", "text": "hi"}),
        );
        let scopes = offered_scopes(&write_spec(), &written, RuleBreadth::Any);
        let labels: Vec<String> = scopes.iter().map(RuleScope::label).collect();
        assert_eq!(labels.len(), 3, "{labels:?}");
        assert!(
            labels[0].starts_with("`write_file` exactly as `{"),
            "{}",
            labels[0]
        );
        assert_eq!(
            labels[1],
            "`write_file` with any filename under `notes/today/`"
        );
        assert_eq!(labels[2], "`write_file` with any arguments");
        let search =
            CommandSpec::new("web_search", "s", Risk::Network).arg("query", ArgType::String, "q");
        let scopes = offered_scopes(
            &search,
            &call("web_search", json!({"query": "rust"})),
            RuleBreadth::Any,
        );
        assert_eq!(
            scopes.last().unwrap().label(),
            "`web_search` with any query"
        );
        let page = CommandSpec::new("read_webpage", "r", Risk::Network)
            .arg("url", ArgType::String, "u")
            .rule_argument(RuleArgument::Url("url".into()));
        let scopes = offered_scopes(
            &page,
            &call("read_webpage", json!({"url": "https://Docs.RS:443/x?y=1"})),
            RuleBreadth::Any,
        );
        assert_eq!(
            scopes[1].label(),
            "`read_webpage` with any url on `https://docs.rs`"
        );
        // What the model chose is shown as code: a backtick cannot end the span, and a path with
        // a control character, or a URL with an odd host, offers no narrower scope.
        let sneaky = call(
            "write_file",
            json!({"filename": "a`[x](https://e.example)`/b.md", "text": "t"}),
        );
        let folder = offered_scopes(&write_spec(), &sneaky, RuleBreadth::Any)[1].label();
        assert_eq!(
            folder,
            "`write_file` with any filename under `a'[x](https:/e.example)'/`"
        );
        let control = call("write_file", json!({"filename": "a\nb/c.md", "text": "t"}));
        assert_eq!(
            offered_scopes(&write_spec(), &control, RuleBreadth::Any).len(),
            2
        );
        let odd = call("read_webpage", json!({"url": "https://a*b.example/"}));
        assert_eq!(offered_scopes(&page, &odd, RuleBreadth::Any).len(), 2);
    }

    #[test]
    fn a_scope_covers_what_it_says_and_nothing_wider() {
        let shown = call(
            "write_file",
            json!({"filename": "notes/a.md", "text": "hi"}),
        );
        let scopes = offered_scopes(&write_spec(), &shown, RuleBreadth::Any);
        let (exact, folder) = (&scopes[0], &scopes[1]);
        let reordered = call(
            "write_file",
            json!({"text": "hi", "filename": "notes/a.md"}),
        );
        assert!(exact.matches(&reordered));
        assert!(!exact.matches(&call(
            "write_file",
            json!({"filename": "notes/a.md", "text": "ho"})
        )));
        for (path, covered) in [
            ("notes/b.md", true),
            ("./notes/deep/c.md", true),
            ("notes", false),
            ("notesX/b.md", false),
            ("notes/../secrets.md", false),
            ("other/notes/b.md", false),
        ] {
            let other = call("write_file", json!({"filename": path, "text": "x"}));
            assert_eq!(folder.matches(&other), covered, "{path}");
        }
        assert!(!folder.matches(&call("read_file", json!({"filename": "notes/b.md"}))));
        let host = RuleScope::UrlOrigin {
            command: "read_webpage".into(),
            argument: "url".into(),
            origin: "https://docs.rs".into(),
        };
        for (url, covered) in [
            ("https://docs.rs/serde", true),
            ("HTTPS://DOCS.rs:443/", true),
            ("http://docs.rs/", false),
            ("https://docs.rs:8443/", false),
            ("https://docs.rs.evil.example/", false),
            ("https://evil.example/?docs.rs", false),
            ("https://docs.rs@evil.example/", false),
            ("ftp://docs.rs/", false),
            ("https://[::1]@docs.rs/", false),
        ] {
            let page = call("read_webpage", json!({ "url": url }));
            assert_eq!(host.matches(&page), covered, "{url}");
        }
    }

    #[test]
    fn an_expired_rule_covers_nothing() {
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap();
        let search = call("web_search", json!({"query": "x"}));
        let draft = RuleDraft {
            scope: RuleScope::AnyArguments {
                command: "web_search".into(),
                what: "query".into(),
            },
            reach: RuleReach::Agent,
            life: RuleLife::Hour,
        };
        let rule = ApprovalRule::from_draft("abc", 4, draft, &"alice".into(), now);
        assert_eq!(rule.id, "abc.4");
        let rules = [rule];
        assert!(covering_rule(&rules, &search, now + Duration::minutes(59)).is_some());
        assert!(covering_rule(&rules, &search, now + Duration::minutes(60)).is_none());
        assert!(rules[0].describe().contains("never used"));
    }
}
