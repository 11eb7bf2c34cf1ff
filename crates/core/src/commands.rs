//! Command descriptions as plain data: names, typed arguments, risk classes, aliases, and the check
//! that turns a model's proposed call into a valid call (or an error text the model gets to read).
//!
//! A `CommandSpec` is built with `CommandSpec::new(name, description, Risk::…)` and then `arg`,
//! `optional_arg`, `schema_arg` (an argument with its own JSON schema, for MCP tools), `alias`, and
//! the markers the core's rules read: `reads_untrusted` and `egress` (the taint rule, see `taint`),
//! `rule_argument` and `runs_file` (what an approval rule may bind, see `rules`), and
//! `lands_with_result` (a command whose only effect is the workspace change it returns, see
//! `runtime::storage_plan`). `ArgType` covers strings, integers, booleans and lists of strings, and
//! for MCP tools numbers, objects, lists and any value. `Risk` is the class the policy acts on
//! (read, write, network, control, external). `CommandSet::validate` admits only registered
//! commands and arguments and yields a `ValidCall`. `CommandSet::reply_schema` makes `command` an
//! `anyOf` with one variant per command (a `const` name plus that command's argument schema) and
//! caps the thought fields, so a constrained decoder can only produce a valid command; the schema
//! is sent with `"strict": false`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::reply::{reply_envelope_schema, reply_json_schema, CommandCall};
use super::text::truncate_chars;

/// Longest thought field a constrained decoder may produce.
/// Each thought field's length in the grammar schema. A small model under a grammar may fill a
/// string to its limit with one token per character ("1.1.1…"): six fields of 150 stay within
/// 900 tokens, so the command still fits in the smallest reply reserve (1,000) instead of being
/// cut off, which the parser can only refuse.
const MAX_THOUGHT_CHARS: usize = 150;
/// Unknown arguments a refusal names one by one; the rest are counted.
const MAX_UNKNOWN_NAMED: usize = 5;

/// The command that ends an agent: the step records its reason as the agent's result, no policy
/// may deny it, and no config may disable it, so that every agent can always end.
pub const FINISH: &str = "finish";

/// What a command can touch; the approval policy is expressed in these classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Looks at the agent's own workspace or memory.
    Read,
    /// Changes the agent's own workspace or memory.
    Write,
    /// Reads from the internet.
    Network,
    /// Steers the agent itself: finish, ask_user, sub-agents.
    Control,
    /// Has effects outside the bot.
    External,
}

impl Risk {
    /// The class with what it covers, for choosing it in a menu.
    pub fn title(self) -> &'static str {
        match self {
            Risk::Read => "read (files and memory)",
            Risk::Write => "write (files and memory)",
            Risk::Network => "network (web search and pages)",
            Risk::Control => "control (finish, ask_user, sub-agents)",
            Risk::External => "external (effects outside the bot)",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Write => "write",
            Risk::Network => "network",
            Risk::Control => "control",
            Risk::External => "external",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    String,
    Integer,
    Boolean,
    /// A list of strings.
    StringList,
    /// Any JSON number (an MCP tool's `number`).
    Number,
    /// A JSON object (an MCP tool's nested arguments).
    Object,
    /// A list of anything.
    List,
    /// Any JSON value: the argument's own schema says more.
    Any,
}

impl ArgType {
    fn json_name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::Boolean => "boolean",
            ArgType::StringList | ArgType::List => "array",
            ArgType::Number => "number",
            ArgType::Object => "object",
            ArgType::Any => "any",
        }
    }

    fn accepts(self, value: &Value) -> bool {
        match self {
            ArgType::String => value.is_string(),
            ArgType::Integer => value.is_i64() || value.is_u64(),
            ArgType::Boolean => value.is_boolean(),
            ArgType::StringList => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            ArgType::Number => value.is_number(),
            ArgType::Object => value.is_object(),
            ArgType::List => value.is_array(),
            ArgType::Any => true,
        }
    }

    fn schema(self, description: &str) -> Value {
        match self {
            ArgType::StringList => json!({
                "type": "array",
                "items": {"type": "string"},
                "description": description
            }),
            // Every JSON type, spelt out: older grammar converters refuse a schema without one.
            ArgType::Any => json!({
                "type": ["string", "number", "boolean", "object", "array", "null"],
                "description": description
            }),
            _ => json!({"type": self.json_name(), "description": description}),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgSpec {
    pub name: String,
    pub kind: ArgType,
    pub description: String,
    pub required: bool,
    /// The argument's own JSON schema, when it says more than `kind` (an MCP tool's enums and
    /// nested objects); the reply schema carries it, and the server checks the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// An older name for a command, with the argument names it used (old → new).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alias {
    pub name: String,
    pub renames: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    pub name: String,
    pub description: String,
    pub args: Vec<ArgSpec>,
    pub risk: Risk,
    pub aliases: Vec<Alias>,
    /// What it returns comes from outside and nobody vouches for it (a web page, search results,
    /// a sub-agent's reply): an agent that ran it is tainted (see `core::taint`).
    #[serde(default)]
    pub reads_untrusted: bool,
    /// Each way it can carry data out, for a tainted agent (commands of the external class
    /// always can, unless they say `Egress::Nowhere`).
    #[serde(default)]
    pub egress: Vec<crate::commands::Egress>,
    /// The argument an approve-and-remember rule can be narrowed to (a folder, a host).
    #[serde(default)]
    pub rule_argument: Option<crate::commands::RuleArgument>,
    /// The argument naming a workspace file whose contents the command runs (a script): a
    /// remembered rule for it binds those contents, not only the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_file: Option<String>,
    /// Its only effect is the workspace change it returns, which the store applies in the same
    /// write as its result: nothing happens before that write, so a crash before it loses the
    /// command whole and the restart asks the model again (see `Actor::persist`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lands_with_result: bool,
}

impl CommandSpec {
    pub fn new(name: &str, description: &str, risk: Risk) -> Self {
        CommandSpec {
            name: name.into(),
            description: description.into(),
            args: Vec::new(),
            risk,
            aliases: Vec::new(),
            reads_untrusted: false,
            egress: Vec::new(),
            rule_argument: None,
            runs_file: None,
            lands_with_result: false,
        }
    }

    /// Marks a command whose only effect is the workspace change it returns.
    pub fn lands_with_result(mut self) -> Self {
        self.lands_with_result = true;
        self
    }

    /// Marks what the command returns as untrusted.
    pub fn reads_untrusted(mut self) -> Self {
        self.reads_untrusted = true;
        self
    }

    /// Adds a way the command can carry data out.
    pub fn egress(mut self, egress: crate::commands::Egress) -> Self {
        self.egress.push(egress);
        self
    }

    /// Names the argument a remembered rule may be narrowed to.
    pub fn rule_argument(mut self, argument: crate::commands::RuleArgument) -> Self {
        self.rule_argument = Some(argument);
        self
    }

    /// Names the argument whose file's contents the command runs.
    pub fn runs_file(mut self, argument: &str) -> Self {
        self.runs_file = Some(argument.into());
        self
    }

    pub fn arg(mut self, name: &str, kind: ArgType, description: &str) -> Self {
        self.args.push(ArgSpec {
            name: name.into(),
            kind,
            description: description.into(),
            required: true,
            schema: None,
        });
        self
    }

    /// An argument of a command made elsewhere (an MCP tool's), with its own JSON schema when
    /// that schema stands on its own.
    pub fn schema_arg(
        mut self,
        name: &str,
        kind: ArgType,
        description: &str,
        schema: Option<Value>,
        required: bool,
    ) -> Self {
        self.args.push(ArgSpec {
            name: name.into(),
            kind,
            description: description.into(),
            required,
            schema,
        });
        self
    }

    pub fn optional_arg(self, name: &str, kind: ArgType, description: &str) -> Self {
        self.arg(name, kind, description).make_last_optional()
    }

    fn make_last_optional(mut self) -> Self {
        if let Some(last) = self.args.last_mut() {
            last.required = false;
        }
        self
    }

    pub fn alias(mut self, name: &str, renames: &[(&str, &str)]) -> Self {
        self.aliases.push(Alias {
            name: name.into(),
            renames: renames
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        });
        self
    }

    /// The one-line form used in the prompt: `name: description. Params: (arg: type, opt?: type)`.
    /// The command as the prompt lists it, in a call's shape: `name(arg, optional?: integer):
    /// description`. Arguments are strings unless a type is given; the line is sent every cycle,
    /// so it says nothing twice.
    pub fn prompt_line(&self) -> String {
        let params: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                let optional = if a.required { "" } else { "?" };
                match a.kind {
                    ArgType::String => format!("{}{optional}", a.name),
                    ArgType::StringList => format!("{}{optional}: list[string]", a.name),
                    ArgType::List => format!("{}{optional}: list", a.name),
                    other => format!("{}{optional}: {}", a.name, other.json_name()),
                }
            })
            .collect();
        format!(
            "{}({}): {}",
            self.name,
            params.join(", "),
            self.description.trim_end_matches('.')
        )
    }

    /// JSON schema of the arguments object.
    pub fn args_schema(&self) -> Value {
        let mut properties = Map::new();
        for arg in &self.args {
            let schema = match &arg.schema {
                Some(own) => own.clone(),
                None => arg.kind.schema(&arg.description),
            };
            properties.insert(arg.name.clone(), schema);
        }
        let required: Vec<&str> = self
            .args
            .iter()
            .filter(|a| a.required)
            .map(|a| a.name.as_str())
            .collect();
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        })
    }
}

/// The commands an agent may use, in prompt order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSet {
    pub specs: Vec<CommandSpec>,
}

/// Why a proposed call is not a valid one; its text is written for the model, saying what was
/// wrong and what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCall {
    /// The name is no command's and no alias's; `offered` lists the names the model may use.
    #[error("Unknown command '{requested}'. Use one of: {offered}.")]
    UnknownCommand { requested: String, offered: String },
    /// The command is known but its arguments are not what it takes.
    #[error("Invalid arguments for command '{command}': {problems}. Expected: {expected}")]
    Arguments {
        command: String,
        problems: String,
        expected: String,
    },
}

/// A call that names a known command with well-typed arguments, under its canonical name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCall {
    pub call: CommandCall,
    pub risk: Risk,
}

impl CommandSet {
    pub fn get(&self, name: &str) -> Option<&CommandSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// The reply schema for structured output, with `command` as one variant per command so that a
    /// constrained decoder (llama.cpp's grammar, OpenAI's structured output) can only produce a
    /// known name with that command's arguments. Thought fields are bounded in length so that a
    /// small model cannot ramble until `max_tokens` cuts the reply short.
    pub fn reply_schema(&self) -> Value {
        let mut schema = reply_json_schema(&self.names());
        // A grammar enforces the lengths; the compact schema leaves them to the parser.
        if let Some(Value::Object(thoughts)) = schema.pointer_mut("/properties/thoughts/properties")
        {
            for field in thoughts.values_mut() {
                field["maxLength"] = json!(MAX_THOUGHT_CHARS);
            }
        }
        if !self.specs.is_empty() {
            let variants: Vec<Value> = self
                .specs
                .iter()
                .map(|spec| {
                    json!({
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "const": spec.name},
                            "args": spec.args_schema()
                        },
                        "required": ["name", "args"],
                        "additionalProperties": false
                    })
                })
                .collect();
            schema["properties"]["command"] = json!({"anyOf": variants});
        }
        schema
    }

    /// The envelope of a reply for endpoints that bill the schema as input (OpenAI reads it as
    /// part of the prompt, and with `"strict": false` enforces nothing): the thought fields and a
    /// command's name and arguments, typed, without descriptions or the list of names. The prompt
    /// already lists the commands with their arguments, so saying them again in the schema paid
    /// for about a sixth of every call; a name or argument the model gets wrong is refused by
    /// `validate` with the precise reason, which the model reads.
    pub fn compact_reply_schema(&self) -> Value {
        reply_envelope_schema()
    }

    /// Maps aliases to canonical names and checks the arguments. The error text is written for the
    /// model: it says what was wrong and what would be right.
    pub fn validate(&self, proposed: &CommandCall) -> Result<ValidCall, InvalidCall> {
        let requested = proposed.name.trim();
        let (spec, renames) = match self.get(requested) {
            Some(spec) => (spec, &[][..]),
            None => match self.specs.iter().find_map(|s| {
                s.aliases
                    .iter()
                    .find(|a| a.name == requested)
                    .map(|a| (s, a.renames.as_slice()))
            }) {
                Some(found) => found,
                None => {
                    return Err(InvalidCall::UnknownCommand {
                        requested: requested.to_string(),
                        offered: self.names().join(", "),
                    })
                }
            },
        };
        let mut args = Map::new();
        for (key, value) in &proposed.args {
            let key = renames
                .iter()
                .find(|(old, _)| old == key)
                .map(|(_, new)| new.clone())
                .unwrap_or_else(|| key.clone());
            args.insert(key, value.clone());
        }
        let mut problems = Vec::new();
        for arg in &spec.args {
            match args.get(&arg.name) {
                None | Some(Value::Null) if arg.required => {
                    problems.push(format!("missing required argument '{}'", arg.name))
                }
                None | Some(Value::Null) => {
                    args.remove(&arg.name);
                }
                Some(value) if !arg.kind.accepts(value) => problems.push(format!(
                    "argument '{}' must be {}",
                    arg.name,
                    match arg.kind {
                        ArgType::StringList => "a list of strings".to_string(),
                        ArgType::Integer => "an integer".to_string(),
                        ArgType::Object => "an object".to_string(),
                        ArgType::List => "a list".to_string(),
                        other => format!("a {}", other.json_name()),
                    }
                )),
                Some(_) => {}
            }
        }
        let unknown: Vec<&String> = args
            .keys()
            .filter(|key| !spec.args.iter().any(|a| &a.name == *key))
            .collect();
        // A reply may carry any number of made-up arguments; the refusal names a few.
        for key in unknown.iter().take(MAX_UNKNOWN_NAMED) {
            problems.push(format!("unknown argument '{}'", truncate_chars(key, 40)));
        }
        if unknown.len() > MAX_UNKNOWN_NAMED {
            problems.push(format!(
                "{} more unknown arguments",
                unknown.len() - MAX_UNKNOWN_NAMED
            ));
        }
        if !problems.is_empty() {
            return Err(InvalidCall::Arguments {
                command: spec.name.clone(),
                problems: problems.join("; "),
                expected: spec.prompt_line(),
            });
        }
        Ok(ValidCall {
            call: CommandCall {
                name: spec.name.clone(),
                args,
            },
            risk: spec.risk,
        })
    }
}

/// One way a command can carry data out of the agent. A command names each of its ways; one that
/// names none carries nothing out, unless it is of the external class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Egress {
    /// Every call sends this argument out (a search query, a message to a sub-agent).
    Argument(String),
    /// Every call sends all its arguments out (a new sub-agent's name, task and first message,
    /// an MCP tool's arguments).
    AllArguments,
    /// The URL in this argument is requested, and every part of it can carry data: the host's
    /// labels (`<data>.x.example`, which a DNS server sees), the user info, the path, the query,
    /// and the fragment (which a client or a redirect may pass on). Nothing tells a URL the agent
    /// was given apart from one it made up, so every URL counts.
    #[serde(alias = "url_query")]
    Url(String),
    /// This argument is sent as a request's body.
    Body(String),
    /// What the command is given stays on the bot's machine (an MCP server the operator
    /// configured with `network = false`): nothing counts as leaving, whatever its class.
    Nowhere,
}

/// Which argument of a command names what a rule can be narrowed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleArgument {
    /// A path in the workspace: a rule may cover the paths under its folder.
    Path(String),
    /// A URL: a rule may cover the URLs on its host.
    Url(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> CommandSet {
        CommandSet {
            specs: vec![
                CommandSpec::new("write_file", "Write a file", Risk::Write)
                    .arg("filename", ArgType::String, "path")
                    .arg("contents", ArgType::String, "text")
                    .alias(
                        "write_to_file",
                        &[("file", "filename"), ("text", "contents")],
                    ),
                CommandSpec::new("list_folder", "List a folder", Risk::Read).optional_arg(
                    "folder",
                    ArgType::String,
                    "path",
                ),
            ],
        }
    }

    fn call(name: &str, args: Value) -> CommandCall {
        CommandCall {
            name: name.into(),
            args: args.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn aliases_map_name_and_arguments() {
        let valid = set()
            .validate(&call(
                "write_to_file",
                json!({"file": "a.txt", "text": "hi"}),
            ))
            .unwrap();
        assert_eq!(valid.call.name, "write_file");
        assert_eq!(
            valid.call.args,
            *json!({"filename": "a.txt", "contents": "hi"})
                .as_object()
                .unwrap()
        );
        assert_eq!(valid.risk, Risk::Write);
    }

    #[test]
    fn errors_are_written_for_the_model() {
        let cases = [
            (
                call("rm_rf", json!({})),
                "Unknown command 'rm_rf'. Use one of: write_file, list_folder.",
            ),
            (
                call("write_file", json!({"filename": "a"})),
                "missing required argument 'contents'",
            ),
            (
                call("write_file", json!({"filename": 3, "contents": "x"})),
                "argument 'filename' must be a string",
            ),
            (
                call(
                    "write_file",
                    json!({"filename": "a", "contents": "x", "mode": "w"}),
                ),
                "unknown argument 'mode'",
            ),
        ];
        for (proposed, expected) in cases {
            let err = set().validate(&proposed).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
        }
        // Ten thousand made-up arguments make a short refusal.
        let mut args = serde_json::Map::new();
        args.insert("filename".into(), json!("a"));
        args.insert("contents".into(), json!("x"));
        for i in 0..10_000 {
            args.insert(format!("{}{i}", "k".repeat(60)), json!(i));
        }
        let err = set()
            .validate(&call("write_file", Value::Object(args)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("9995 more unknown arguments"), "{err}");
        assert!(
            err.chars().count() < 600,
            "{} characters",
            err.chars().count()
        );
    }

    #[test]
    fn optional_arguments_may_be_absent_or_null() {
        assert!(set().validate(&call("list_folder", json!({}))).is_ok());
        let valid = set()
            .validate(&call("list_folder", json!({"folder": null})))
            .unwrap();
        assert!(valid.call.args.is_empty());
    }

    #[test]
    fn reply_schema_has_one_variant_per_command_with_typed_args() {
        let schema = set().reply_schema();
        let variants = schema
            .pointer("/properties/command/anyOf")
            .and_then(Value::as_array)
            .unwrap();
        assert_eq!(variants.len(), 2);
        assert_eq!(variants[0]["properties"]["name"]["const"], "write_file");
        assert_eq!(
            variants[0]["properties"]["args"]["required"],
            json!(["filename", "contents"])
        );
        assert_eq!(variants[1]["properties"]["args"]["required"], json!([]));
        assert_eq!(
            schema.pointer("/properties/thoughts/properties/plan/maxLength"),
            Some(&json!(MAX_THOUGHT_CHARS))
        );
        // Thoughts come before the command, and a command's name before its arguments, so a
        // decoder that follows property order reasons first and names the command early.
        let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["thoughts", "command"]);
        let keys: Vec<&String> = variants[0]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["name", "args"]);
    }

    #[test]
    fn prompt_line_marks_optional_params() {
        let specs = set();
        assert_eq!(
            specs.specs[1].prompt_line(),
            "list_folder(folder?): List a folder"
        );
    }
}
