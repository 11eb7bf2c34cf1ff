//! The model's reply for one cycle: its schema, the prompt text describing it, and the tolerant
//! parser that turns untrusted model output into an `AgentReply` or a message to quote back.
//!
//! Parsing happens in three layers. A strict `serde_json` parse comes first, because most
//! replies are well formed and should not pay for repairs. When that fails, `repair_json`
//! applies a fixed sequence of increasingly aggressive textual repairs, trying a parse after each
//! one, so that a mild problem is never "fixed" by a heavier heuristic. Finally the JSON object is
//! checked against the reply schema, where a few common shape mistakes (command nested in the
//! thoughts, args as a string) are normalised instead of rejected.
//!
//! Everything here is pure: no I/O, no clocks, no randomness, and no input can make it panic.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub use super::repair::repair_json;

/// The model's thoughts for one cycle (AutoGPT 0.5 reply schema). Every field defaults to "" when missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Thoughts {
    pub observations: String,
    pub text: String,
    pub reasoning: String,
    /// AutoGPT 0.2 called this field "criticism", so that key is accepted too.
    #[serde(alias = "criticism")]
    pub self_criticism: String,
    /// When the model sends a JSON array of strings, the items are joined as "- item" lines.
    pub plan: String,
    pub speak: String,
}

/// One proposed command: name plus JSON object arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandCall {
    pub name: String,
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// One complete, schema-checked reply from the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReply {
    #[serde(default)]
    pub thoughts: Thoughts,
    pub command: CommandCall,
}

/// How the reply was obtained, for logging and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseRoute {
    /// The text parsed as JSON as it was, and its shape matched the schema without reshaping.
    Strict,
    /// The text needed textual repair, or the command had to be relocated or its args converted.
    Repaired,
}

/// Why a reply could not be used. Both messages are written to be quoted back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// No JSON object could be found or repaired; the String is the parse error message to quote back to the model.
    NotJson(String),
    /// JSON was found but does not match the schema (e.g. no "command", command without "name", args not an object); the String says exactly what is wrong.
    Schema(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::NotJson(message) => write!(f, "the reply is not valid JSON: {message}"),
            ReplyError::Schema(message) => {
                write!(f, "the reply does not match the response format: {message}")
            }
        }
    }
}

impl std::error::Error for ReplyError {}

/// The six thought fields in the order the prompt lists them.
const THOUGHT_FIELDS: [&str; 6] = [
    "observations",
    "text",
    "reasoning",
    "self_criticism",
    "plan",
    "speak",
];

/// Parse a reply: strict serde_json parse first; then repair; then schema checks.
///
/// The route is `Strict` only when the text parsed unchanged and the command sat where the schema
/// says. Filling in defaults (missing thoughts, missing args) and rendering non-string thought
/// values as text are not counted as repairs, because they lose nothing the model said.
pub fn parse_reply(text: &str) -> Result<(AgentReply, ParseRoute), ReplyError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => {
            let (reply, reshaped) = reply_from_object(&map)?;
            let route = if reshaped {
                ParseRoute::Repaired
            } else {
                ParseRoute::Strict
            };
            Ok((reply, route))
        }
        // Some models JSON-encode their whole answer a second time; unwrap it once.
        Ok(Value::String(inner)) => match repair_json(&inner) {
            Some(Value::Object(map)) => {
                reply_from_object(&map).map(|(reply, _)| (reply, ParseRoute::Repaired))
            }
            _ => Err(ReplyError::Schema(format!(
                "the reply is a JSON string, but it must be a single JSON object of the form {}",
                SHAPE_HINT
            ))),
        },
        Ok(other) => Err(ReplyError::Schema(format!(
            "the reply is {}, but it must be a single JSON object of the form {}",
            describe(&other),
            SHAPE_HINT
        ))),
        Err(strict_error) => match repair_json(text) {
            Some(Value::Object(map)) => {
                reply_from_object(&map).map(|(reply, _)| (reply, ParseRoute::Repaired))
            }
            _ => Err(ReplyError::NotJson(not_json_message(text, &strict_error))),
        },
    }
}

/// A compact reminder of the expected shape, used inside error messages.
const SHAPE_HINT: &str =
    "{\"thoughts\": {...}, \"command\": {\"name\": \"<command name>\", \"args\": {...}}}";

/// Builds the NotJson message. The line and column come from the strict parse of the model's
/// own text, so they point at something the model can actually find in what it wrote.
fn not_json_message(text: &str, strict_error: &serde_json::Error) -> String {
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        "the reply was empty; respond with a single JSON object".to_string()
    } else if !trimmed.contains('{') {
        format!(
            "no JSON object found in the reply (it contains no '{{'); \
             respond with a single JSON object of the form {SHAPE_HINT} ({strict_error})"
        )
    } else {
        format!(
            "the JSON object in the reply could not be parsed or repaired ({strict_error}); \
             respond with only a single valid JSON object, with no text before or after it"
        )
    }
}

/// Names the JSON type of a value for error messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a parsed object against the reply schema. The flag is true when the command had to be
/// relocated or its args converted, which makes the route `Repaired`.
fn reply_from_object(map: &Map<String, Value>) -> Result<(AgentReply, bool), ReplyError> {
    let thoughts_map = match map.get("thoughts") {
        None | Some(Value::Null) => None,
        Some(Value::Object(thoughts)) => Some(thoughts),
        Some(other) => {
            return Err(ReplyError::Schema(format!(
                "\"thoughts\" must be an object with the string fields {}, but it is {}",
                THOUGHT_FIELDS.join(", "),
                describe(other)
            )))
        }
    };

    // The command normally sits at the top level; some models tuck it inside "thoughts". In both
    // places a bare string command takes its args from a sibling "args" key.
    let top_command = map.get("command").filter(|value| !value.is_null());
    let nested_command = thoughts_map
        .and_then(|thoughts| thoughts.get("command"))
        .filter(|value| !value.is_null());
    let (command_value, sibling_args, mut reshaped) = match (top_command, nested_command) {
        (Some(command), _) => (command, map.get("args"), false),
        (None, Some(command)) => (
            command,
            thoughts_map.and_then(|thoughts| thoughts.get("args")),
            true,
        ),
        (None, None) => {
            return Err(ReplyError::Schema(format!(
                "the reply has no \"command\"; every reply must name exactly one command, as in {SHAPE_HINT}"
            )))
        }
    };

    let (name, args_value) = match command_value {
        Value::Object(command) => {
            let name = match command.get("name") {
                Some(Value::String(name)) => name.trim().to_string(),
                None | Some(Value::Null) => {
                    return Err(ReplyError::Schema(
                        "\"command\" has no \"name\"; it must be an object like \
                         {\"name\": \"<command name>\", \"args\": {...}}"
                            .to_string(),
                    ))
                }
                Some(other) => {
                    return Err(ReplyError::Schema(format!(
                        "\"command.name\" must be a string naming one of the available commands, but it is {}",
                        describe(other)
                    )))
                }
            };
            // "arguments" is the OpenAI function-calling spelling; a sibling "args" next to the
            // command object is another common slip.
            let args_value = match (command.get("args"), command.get("arguments")) {
                (Some(args), _) => Some(args),
                (None, Some(args)) => {
                    reshaped = true;
                    Some(args)
                }
                (None, None) => {
                    if sibling_args.is_some() {
                        reshaped = true;
                    }
                    sibling_args
                }
            };
            (name, args_value)
        }
        Value::String(name) => {
            reshaped = true;
            (name.trim().to_string(), sibling_args)
        }
        other => {
            return Err(ReplyError::Schema(format!(
                "\"command\" must be an object like {{\"name\": \"<command name>\", \"args\": {{...}}}}, but it is {}",
                describe(other)
            )))
        }
    };
    if name.is_empty() {
        return Err(ReplyError::Schema(
            "\"command.name\" is empty; it must be the name of one of the available commands"
                .to_string(),
        ));
    }

    let (args, converted) = args_from(args_value)?;
    let thoughts = thoughts_map.map(thoughts_from).unwrap_or_default();
    Ok((
        AgentReply {
            thoughts,
            command: CommandCall { name, args },
        },
        reshaped || converted,
    ))
}

/// Turns the args value into an object. The flag is true when a conversion was needed.
fn args_from(value: Option<&Value>) -> Result<(Map<String, Value>, bool), ReplyError> {
    match value {
        None => Ok((Map::new(), false)),
        Some(Value::Null) => Ok((Map::new(), true)),
        Some(Value::Object(args)) => Ok((args.clone(), false)),
        Some(Value::String(encoded)) => {
            let trimmed = encoded.trim();
            if trimmed.is_empty() {
                return Ok((Map::new(), true));
            }
            // Only strings that look like an object are repaired, so that an ordinary sentence
            // which happens to contain braces is not mistaken for arguments.
            let parsed = match serde_json::from_str::<Value>(trimmed) {
                Ok(value) => Some(value),
                Err(_) if trimmed.starts_with('{') || trimmed.starts_with("```") => {
                    repair_json(trimmed)
                }
                Err(_) => None,
            };
            match parsed {
                Some(Value::Object(args)) => Ok((args, true)),
                _ => Err(ReplyError::Schema(
                    "\"command.args\" must be an object mapping argument names to values, \
                     but it is a string that does not contain a JSON object"
                        .to_string(),
                )),
            }
        }
        Some(other) => Err(ReplyError::Schema(format!(
            "\"command.args\" must be an object mapping argument names to values, but it is {}",
            describe(other)
        ))),
    }
}

/// Reads the thought fields leniently: any JSON value is rendered as text.
fn thoughts_from(map: &Map<String, Value>) -> Thoughts {
    let field = |names: &[&str], as_plan: bool| -> String {
        names
            .iter()
            .find_map(|name| map.get(*name))
            .map(|value| render_thought(value, as_plan))
            .unwrap_or_default()
    };
    Thoughts {
        observations: field(&["observations"], false),
        text: field(&["text"], false),
        reasoning: field(&["reasoning"], false),
        self_criticism: field(&["self_criticism", "criticism", "self-criticism"], false),
        plan: field(&["plan"], true),
        speak: field(&["speak"], false),
    }
}

/// Renders one thought value as text. Arrays become one line per item; for the plan each line
/// gets a "- " bullet, without doubling a bullet the model already wrote.
fn render_thought(value: &Value, as_plan: bool) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::Object(_) => value.to_string(),
        Value::Array(items) => {
            let lines: Vec<String> = items
                .iter()
                .map(|item| match item {
                    Value::String(text) => text.trim().to_string(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .filter(|line| !line.is_empty())
                .map(|line| {
                    if as_plan {
                        let bare = line
                            .strip_prefix("- ")
                            .or_else(|| line.strip_prefix("* "))
                            .unwrap_or(&line);
                        format!("- {bare}")
                    } else {
                        line
                    }
                })
                .collect();
            lines.join("\n")
        }
    }
}

/// The JSON schema of the reply, for a `response_format` of type `json_schema`.
///
/// It is a draft 2020-12 schema in the subset OpenAI structured outputs accept: the reply, its
/// thoughts and its command each have "type": "object", "properties", "required" listing every
/// field, and "additionalProperties": false. When `command_names` is
/// non-empty, `command.name` is restricted to those names (duplicates dropped, order kept).
///
/// `command.args` is an open object because each command takes different arguments, so this
/// schema suits `"strict": false`; OpenAI's strict mode rejects open objects.
pub fn reply_json_schema(command_names: &[String]) -> Value {
    let mut thought_properties = Map::new();
    for (field, description) in THOUGHT_FIELDS.iter().zip(THOUGHT_DESCRIPTIONS) {
        thought_properties.insert(
            (*field).to_string(),
            json!({"type": "string", "description": description}),
        );
    }

    let mut name_schema = json!({
        "type": "string",
        "description": "The name of exactly one of the available commands."
    });
    // Duplicate names would make the enum invalid JSON Schema, so keep the first of each.
    let mut unique: Vec<&str> = Vec::new();
    for name in command_names {
        if !unique.contains(&name.as_str()) {
            unique.push(name.as_str());
        }
    }
    // With the names listed, the enum says all the description did.
    if !unique.is_empty() {
        name_schema = json!({"type": "string", "enum": unique});
    }

    json!({
        "type": "object",
        "properties": {
            "thoughts": {
                "type": "object",
                "properties": thought_properties,
                "required": THOUGHT_FIELDS,
                "additionalProperties": false
            },
            "command": {
                "type": "object",
                "properties": {
                    "name": name_schema,
                    "args": {
                        "type": "object",
                        "description": "The command's arguments by name."
                    }
                },
                "required": ["name", "args"],
                "additionalProperties": false
            }
        },
        "required": ["thoughts", "command"],
        "additionalProperties": false
    })
}

/// The reply's shape alone, for endpoints that bill the schema as input: the six thought fields
/// and the command's name and arguments, typed, with nothing a model reads twice (the prompt
/// lists the commands; a missing thought field reads as empty). A server that enforces a schema still gets an object with
/// `thoughts` and `command`.
pub fn reply_envelope_schema() -> Value {
    let text = json!({"type": "string"});
    let thoughts: Map<String, Value> = THOUGHT_FIELDS
        .iter()
        .map(|field| ((*field).to_string(), text.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": {
            "thoughts": {"type": "object", "properties": thoughts},
            "command": {
                "type": "object",
                "properties": {"name": text, "args": {"type": "object"}}
            }
        }
    })
}

/// Short descriptions of the thought fields, shared by the schema and the prompt text.
const THOUGHT_DESCRIPTIONS: [&str; 6] = [
    "What the latest result and the conversation show.",
    "Your thought, in a sentence or two.",
    "Why it leads to the command you chose.",
    "What could go wrong or be done better.",
    "Your next steps, one \"- step\" per line.",
    "A short summary of your thought for the user.",
];

/// The prompt text describing the reply format: a TypeScript `Response` interface in a `ts`
/// code fence, as AutoGPT 0.5 puts in its prompt, with a comment on every field and a lead-in
/// sentence telling the model to answer with that JSON object alone.
pub fn reply_format_instructions() -> String {
    let mut text = String::from(
        "Respond with a single JSON object, and nothing before or after it, \
         that matches this TypeScript interface:\n```ts\ninterface Response {\n  thoughts: {\n",
    );
    for (field, description) in THOUGHT_FIELDS.iter().zip(THOUGHT_DESCRIPTIONS) {
        text.push_str(&format!("    // {description}\n    {field}: string;\n"));
    }
    text.push_str(
        "  };\n  command: {\n    // The name of exactly one of the available commands.\n    name: string;\n    // The command's arguments, keyed by argument name; use {} when it takes none.\n    args: Record<string, any>;\n  };\n}\n```",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A well-formed reply used as the base for routes and mutations.
    const VALID: &str = r#"{
  "thoughts": {
    "observations": "The task asks for Rust news.",
    "text": "I should search the web.",
    "reasoning": "A search finds recent articles.",
    "self_criticism": "I may need several searches.",
    "plan": "- search\n- read\n- summarise",
    "speak": "Searching the web for Rust news."
  },
  "command": {"name": "web_search", "args": {"query": "rust news"}}
}"#;

    /// (name, input, expected command name, expected args).
    fn corpus() -> Vec<(&'static str, String, &'static str, Value)> {
        let s = |text: &str| text.to_string();
        vec![
            (
                "prose before",
                s(r#"Here is my response:
{"thoughts": {"text": "search"}, "command": {"name": "web_search", "args": {"query": "rust"}}}"#),
                "web_search",
                json!({"query": "rust"}),
            ),
            (
                "json followed by explanation",
                s(r#"{"thoughts": {"text": "read"}, "command": {"name": "read_file", "args": {"filename": "notes.txt"}}}

I chose read_file because the notes may contain the answer."#),
                "read_file",
                json!({"filename": "notes.txt"}),
            ),
            (
                "prose on both sides",
                s(r#"Sure! {"command": {"name": "list_files", "args": {"folder": "."}}} Hope this helps."#),
                "list_files",
                json!({"folder": "."}),
            ),
            (
                "json code fence",
                s("```json\n{\"thoughts\": {\"text\": \"t\"}, \"command\": {\"name\": \"web_search\", \"args\": {\"query\": \"q\"}}}\n```"),
                "web_search",
                json!({"query": "q"}),
            ),
            (
                "plain code fence",
                s("```\n{\"command\": {\"name\": \"do_nothing\", \"args\": {}}}\n```"),
                "do_nothing",
                json!({}),
            ),
            (
                "fence with prose around it",
                s("Here is my response:\n```json\n{\"command\": {\"name\": \"finish\", \"args\": {\"reason\": \"done\"}}}\n```\nLet me know if you need more."),
                "finish",
                json!({"reason": "done"}),
            ),
            (
                "fence on one line",
                s("```json {\"command\": {\"name\": \"finish\", \"args\": {\"reason\": \"ok\"}}}```"),
                "finish",
                json!({"reason": "ok"}),
            ),
            (
                "braces inside strings and after the object",
                s(r#"{"thoughts": {"text": "a set {x} and a lone } brace"}, "command": {"name": "write_file", "args": {"filename": "a.rs", "text": "fn main() { }"}}} trailing } text {"#),
                "write_file",
                json!({"filename": "a.rs", "text": "fn main() { }"}),
            ),
            (
                "two objects take the first",
                s(r#"{"command": {"name": "first", "args": {"n": 1}}}
{"command": {"name": "second", "args": {"n": 2}}}"#),
                "first",
                json!({"n": 1}),
            ),
            (
                "braces in prose before the object",
                s(r#"I weighed the options {search, read} first. {"command": {"name": "web_search", "args": {"query": "x"}}}"#),
                "web_search",
                json!({"query": "x"}),
            ),
            (
                "trailing comma in object",
                s(r#"{"thoughts": {"text": "t", "speak": "s",}, "command": {"name": "web_search", "args": {"query": "q",},},}"#),
                "web_search",
                json!({"query": "q"}),
            ),
            (
                "trailing comma in array",
                s(r#"{"thoughts": {"plan": ["a", "b",]}, "command": {"name": "delete_file", "args": {"paths": ["x", "y", ]}}}"#),
                "delete_file",
                json!({"paths": ["x", "y"]}),
            ),
            (
                "raw newlines in text",
                s("{\"thoughts\": {\"text\": \"line one\nline two\"}, \"command\": {\"name\": \"write_file\", \"args\": {\"filename\": \"a.txt\", \"text\": \"hello\nworld\"}}}"),
                "write_file",
                json!({"filename": "a.txt", "text": "hello\nworld"}),
            ),
            (
                "raw tab and control character",
                s("{\"command\": {\"name\": \"write_file\", \"args\": {\"text\": \"a\tb\u{1}c\"}}}"),
                "write_file",
                json!({"text": "a\tb\u{1}c"}),
            ),
            (
                "invalid backslash escape in a path",
                s(r#"{"command": {"name": "read_file", "args": {"filename": "C:\Users\me\notes.txt"}}}"#),
                "read_file",
                // "\n" in the path is a valid escape, so it stays a newline; the rest are literal.
                json!({"filename": "C:\\Users\\me\notes.txt"}),
            ),
            (
                "escaped apostrophe in double quotes",
                s(r#"{"command": {"name": "ask_user", "args": {"question": "Isn\'t it late?"}}}"#),
                "ask_user",
                json!({"question": "Isn't it late?"}),
            ),
            (
                "single quotes python style",
                s(r#"{'thoughts': {'text': 'read it'}, 'command': {'name': 'read_file', 'args': {'filename': 'a.txt'}}}"#),
                "read_file",
                json!({"filename": "a.txt"}),
            ),
            (
                "single quotes with apostrophe and inner double quotes",
                s(r#"{'thoughts': {'text': 'I can't wait'}, 'command': {'name': 'write_file', 'args': {'text': 'say "hi" now', 'filename': 'it's.txt'}}}"#),
                "write_file",
                json!({"text": "say \"hi\" now", "filename": "it's.txt"}),
            ),
            (
                "mixed quotes keep apostrophe in double-quoted string",
                s(r#"{'command': {'name': 'write_file', 'args': {"text": "don't stop", 'filename': 'b.txt'}}}"#),
                "write_file",
                json!({"text": "don't stop", "filename": "b.txt"}),
            ),
            (
                "unescaped inner double quotes",
                s(r#"{"command": {"name": "write_file", "args": {"text": "He said "hi" to me", "filename": "c.txt"}}}"#),
                "write_file",
                json!({"text": "He said \"hi\" to me", "filename": "c.txt"}),
            ),
            (
                "unquoted keys",
                s(r#"{thoughts: {text: "list"}, command: {name: "list_files", args: {folder: "docs", max_depth: 2}}}"#),
                "list_files",
                json!({"folder": "docs", "max_depth": 2}),
            ),
            (
                "python literals",
                s(r#"{'command': {'name': 'list_files', 'args': {'recursive': True, 'hidden': False, 'limit': None, 'note': 'True stays'}}}"#),
                "list_files",
                json!({"recursive": true, "hidden": false, "limit": null, "note": "True stays"}),
            ),
            (
                "unquoted keys and bare word values",
                s("{command: {name: web_search, args: {query: rust, limit: +5, ratio: 1.}}}"),
                "web_search",
                json!({"query": "rust", "limit": 5, "ratio": 1}),
            ),
            (
                "comments",
                s("{\n  // the command\n  \"command\": {\"name\": \"do_nothing\", /* none */ \"args\": {}}\n}"),
                "do_nothing",
                json!({}),
            ),
            (
                "truncated inside args string",
                s(r#"{"thoughts": {"text": "search"}, "command": {"name": "web_search", "args": {"query": "rust async"#),
                "web_search",
                json!({"query": "rust async"}),
            ),
            (
                "truncated after a complete value",
                s(r#"{"thoughts": {"text": "t"}, "command": {"name": "read_file", "args": {"filename": "a.txt"},"#),
                "read_file",
                json!({"filename": "a.txt"}),
            ),
            (
                "truncated mid key",
                s(r#"{"command": {"name": "web_search", "args": {"query": "q", "num_res"#),
                "web_search",
                json!({"query": "q", "num_res": null}),
            ),
            (
                "truncated after colon",
                s(r#"{"command": {"name": "web_search", "args": {"query": "q", "num": "#),
                "web_search",
                json!({"query": "q", "num": null}),
            ),
            (
                "truncated inside a literal",
                s(r#"{"command": {"name": "list_files", "args": {"recursive": tr"#),
                "list_files",
                json!({"recursive": true}),
            ),
            (
                "truncated fenced reply",
                s("```json\n{\"command\": {\"name\": \"web_search\", \"args\": {\"query\": \"cats\""),
                "web_search",
                json!({"query": "cats"}),
            ),
            (
                "byte order mark",
                s("\u{feff}{\"command\": {\"name\": \"finish\", \"args\": {\"reason\": \"bom\"}}}"),
                "finish",
                json!({"reason": "bom"}),
            ),
            (
                "command nested in thoughts",
                s(r#"{"thoughts": {"text": "t", "command": {"name": "web_search", "args": {"query": "nested"}}}}"#),
                "web_search",
                json!({"query": "nested"}),
            ),
            (
                "command as a string with top-level args",
                s(r#"{"thoughts": {"text": "t"}, "command": "read_file", "args": {"filename": "x.md"}}"#),
                "read_file",
                json!({"filename": "x.md"}),
            ),
            (
                "args null",
                s(r#"{"command": {"name": "do_nothing", "args": null}}"#),
                "do_nothing",
                json!({}),
            ),
            (
                "args as json-encoded string",
                s(r#"{"command": {"name": "web_search", "args": "{\"query\": \"encoded\"}"}}"#),
                "web_search",
                json!({"query": "encoded"}),
            ),
            (
                "arguments alias",
                s(r#"{"command": {"name": "web_search", "arguments": {"query": "alias"}}}"#),
                "web_search",
                json!({"query": "alias"}),
            ),
            (
                "0.2 reply with criticism and plan list",
                s(r#"{"thoughts": {"text": "t", "reasoning": "r", "plan": ["one", "two"], "criticism": "c", "speak": "s"}, "command": {"name": "google", "args": {"input": "rust"}}}"#),
                "google",
                json!({"input": "rust"}),
            ),
            (
                "missing comma between members",
                s("{\"command\": {\"name\": \"write_file\"\n \"args\": {\"filename\": \"a\" \"text\": \"b\"}}}"),
                "write_file",
                json!({"filename": "a", "text": "b"}),
            ),
            (
                "mismatched closer",
                s(r#"{"thoughts": {"plan": ["a", "b"}, "command": {"name": "finish", "args": {"reason": "r"}}}"#),
                "finish",
                json!({"reason": "r"}),
            ),
            (
                "double-encoded reply",
                s(r#""{\"command\": {\"name\": \"finish\", \"args\": {\"reason\": \"twice\"}}}""#),
                "finish",
                json!({"reason": "twice"}),
            ),
            (
                "everything at once",
                s("Here is my response:\n```json\n{'thoughts': {'text': 'it's\nlate',}, command: {'name': 'list_files', 'args': {'recursive': True, 'folder': 'src"),
                "list_files",
                json!({"recursive": true, "folder": "src"}),
            ),
        ]
    }

    #[test]
    fn corpus_of_malformed_replies_is_repaired() {
        let rows = corpus();
        assert!(rows.len() >= 25, "corpus has only {} rows", rows.len());
        for (name, input, expected_name, expected_args) in rows {
            let result = parse_reply(&input);
            let (reply, route) = match result {
                Ok(parsed) => parsed,
                Err(error) => panic!("case {name:?} failed: {error}"),
            };
            assert_eq!(reply.command.name, expected_name, "case {name:?}");
            assert_eq!(
                Value::Object(reply.command.args.clone()),
                expected_args,
                "case {name:?}"
            );
            // A 0.2-style reply is valid JSON in the right shape, so it needs no repair; the
            // criticism alias and the plan list are read leniently rather than repaired.
            let expected_route = if name.starts_with("0.2 ") {
                ParseRoute::Strict
            } else {
                ParseRoute::Repaired
            };
            assert_eq!(route, expected_route, "case {name:?}");
        }
    }

    #[test]
    fn well_formed_reply_takes_the_strict_route() {
        let (reply, route) = parse_reply(VALID).expect("valid reply parses");
        assert_eq!(route, ParseRoute::Strict);
        assert_eq!(reply.command.name, "web_search");
        assert_eq!(
            reply.thoughts.self_criticism,
            "I may need several searches."
        );
        assert_eq!(reply.thoughts.plan, "- search\n- read\n- summarise");

        // Missing thoughts and missing args are defaults, not repairs.
        let (bare, route) =
            parse_reply(r#"{"command": {"name": "do_nothing"}}"#).expect("bare reply parses");
        assert_eq!(route, ParseRoute::Strict);
        assert_eq!(bare.thoughts, Thoughts::default());
        assert!(bare.command.args.is_empty());
    }

    #[test]
    fn repaired_reply_takes_the_repaired_route() {
        let fenced = format!("```json\n{VALID}\n```");
        let (reply, route) = parse_reply(&fenced).expect("fenced reply parses");
        assert_eq!(route, ParseRoute::Repaired);
        assert_eq!(reply, parse_reply(VALID).expect("valid").0);

        // Valid JSON whose command had to be relocated is also reported as repaired.
        let (_, route) =
            parse_reply(r#"{"command": "finish", "args": {"reason": "r"}}"#).expect("parses");
        assert_eq!(route, ParseRoute::Repaired);
    }

    #[test]
    fn thoughts_are_rendered_leniently() {
        let (reply, _) = parse_reply(
            r#"{"thoughts": {"observations": 3, "text": ["a", "b"], "reasoning": true,
                "criticism": "old key", "plan": ["- first", "second", null, 4], "speak": {"k": 1}},
                "command": {"name": "x", "args": {}}}"#,
        )
        .expect("parses");
        assert_eq!(reply.thoughts.observations, "3");
        assert_eq!(reply.thoughts.text, "a\nb");
        assert_eq!(reply.thoughts.reasoning, "true");
        assert_eq!(reply.thoughts.self_criticism, "old key");
        assert_eq!(reply.thoughts.plan, "- first\n- second\n- 4");
        assert_eq!(reply.thoughts.speak, r#"{"k":1}"#);
    }

    #[test]
    fn repaired_thoughts_keep_their_text() {
        let input =
            "Here you go: {'thoughts': {'text': 'I can't stop', 'speak': \"don't\nworry\",}, \
                     'command': {'name': 'finish', 'args': {}}}";
        let (reply, _) = parse_reply(input).expect("parses");
        assert_eq!(reply.thoughts.text, "I can't stop");
        assert_eq!(reply.thoughts.speak, "don't\nworry");
    }

    fn expect_not_json(input: &str, needle: &str) {
        match parse_reply(input) {
            Err(ReplyError::NotJson(message)) => assert!(
                message.contains(needle),
                "message {message:?} should mention {needle:?}"
            ),
            other => panic!("expected NotJson for {input:?}, got {other:?}"),
        }
    }

    fn expect_schema(input: &str, needles: &[&str]) {
        match parse_reply(input) {
            Err(ReplyError::Schema(message)) => {
                for needle in needles {
                    assert!(
                        message.contains(needle),
                        "message {message:?} should mention {needle:?}"
                    );
                }
            }
            other => panic!("expected Schema for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn unusable_replies_are_rejected_with_helpful_messages() {
        expect_not_json("", "empty");
        expect_not_json("   \n ", "empty");
        expect_not_json(
            "I think I should search the web for this.",
            "no JSON object",
        );
        expect_not_json("{{{{ ::: }}}} nope", "could not be parsed");
        // A stray brace at the end of prose is not mistaken for an empty reply.
        expect_not_json("I will now open a brace {", "could not be parsed");

        expect_schema(r#"{"thoughts": {}}"#, &["no \"command\""]);
        expect_schema(r#"{"command": {"args": {}}}"#, &["no \"name\""]);
        expect_schema(r#"{"command": {"name": "", "args": {}}}"#, &["empty"]);
        expect_schema(r#"{"command": {"name": 7, "args": {}}}"#, &["a number"]);
        expect_schema(
            r#"{"command": {"name": "x", "args": ["a", "b"]}}"#,
            &["command.args", "an array"],
        );
        expect_schema(
            r#"{"command": {"name": "x", "args": "not an object"}}"#,
            &["command.args", "string"],
        );
        expect_schema(r#"[1, 2, 3]"#, &["an array", "single JSON object"]);
        expect_schema(r#"[{"command": {"name": "x", "args": {}}}]"#, &["an array"]);
        expect_schema(
            r#"{"thoughts": "thinking", "command": {"name": "x"}}"#,
            &["\"thoughts\" must be an object"],
        );
        expect_schema(r#"{"command": 5}"#, &["\"command\" must be an object"]);
        expect_schema(r#"42"#, &["a number"]);
        // A reply truncated before the command is repaired as JSON but still lacks a command.
        expect_schema(r#"{"thoughts": {"text": "I will sea"#, &["no \"command\""]);
    }

    #[test]
    fn error_display_quotes_the_problem() {
        let error = ReplyError::Schema("no command".to_string());
        assert_eq!(
            error.to_string(),
            "the reply does not match the response format: no command"
        );
        let error = ReplyError::NotJson("bad".to_string());
        assert_eq!(error.to_string(), "the reply is not valid JSON: bad");
    }

    #[test]
    fn repair_json_only_returns_objects() {
        assert_eq!(repair_json(""), None);
        assert_eq!(repair_json("just words"), None);
        assert_eq!(repair_json("[1, 2]"), None);
        assert_eq!(repair_json(r#"{"a": 1}"#), Some(json!({"a": 1})));
        assert_eq!(repair_json("{a: 1,}"), Some(json!({"a": 1})));
        // Truncation closes open strings, arrays and objects in order.
        assert_eq!(
            repair_json(r#"{"a": [1, {"b": "c"#),
            Some(json!({"a": [1, {"b": "c"}]}))
        );
    }

    #[test]
    fn json_schema_lists_commands_and_required_fields() {
        let names = vec![
            "web_search".to_string(),
            "finish".to_string(),
            "web_search".to_string(),
        ];
        let schema = reply_json_schema(&names);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["thoughts", "command"]));
        let command = &schema["properties"]["command"];
        assert_eq!(command["required"], json!(["name", "args"]));
        assert_eq!(command["additionalProperties"], false);
        assert_eq!(
            command["properties"]["name"]["enum"],
            json!(["web_search", "finish"])
        );
        assert_eq!(command["properties"]["args"]["type"], "object");
        let thoughts = &schema["properties"]["thoughts"];
        assert_eq!(
            thoughts["required"],
            json!([
                "observations",
                "text",
                "reasoning",
                "self_criticism",
                "plan",
                "speak"
            ])
        );
        assert_eq!(thoughts["additionalProperties"], false);
        assert_eq!(thoughts["properties"]["plan"]["type"], "string");

        let open = reply_json_schema(&[]);
        assert!(open["properties"]["command"]["properties"]["name"]
            .get("enum")
            .is_none());
    }

    #[test]
    fn format_instructions_describe_every_field() {
        let text = reply_format_instructions();
        assert!(text.contains("interface Response"));
        for field in THOUGHT_FIELDS {
            assert!(
                text.contains(&format!("{field}: string;")),
                "missing {field}"
            );
        }
        assert!(text.contains("name: string;"));
        assert!(text.contains("args: Record<string, any>;"));
        // Every field line is preceded by a comment line.
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            if line.trim_end().ends_with(": string;") || line.contains("Record<") {
                assert!(index > 0 && lines[index - 1].trim_start().starts_with("//"));
            }
        }
    }

    #[test]
    fn serde_round_trip_accepts_criticism_alias_and_defaults() {
        let reply: AgentReply = serde_json::from_str(
            r#"{"thoughts": {"criticism": "c"}, "command": {"name": "finish"}}"#,
        )
        .expect("deserialises");
        assert_eq!(reply.thoughts.self_criticism, "c");
        assert_eq!(reply.thoughts.text, "");
        assert!(reply.command.args.is_empty());
        let encoded = serde_json::to_string(&reply).expect("serialises");
        let decoded: AgentReply = serde_json::from_str(&encoded).expect("round trip");
        assert_eq!(decoded, reply);
    }

    /// A tiny linear congruential generator so the mutation test is deterministic without
    /// pulling in a random-number crate.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn below(&mut self, bound: usize) -> usize {
            if bound == 0 {
                0
            } else {
                (self.next() % bound as u64) as usize
            }
        }
    }

    #[test]
    fn mutated_replies_never_panic() {
        const NASTY: [char; 22] = [
            '{', '}', '[', ']', '"', '\'', ',', ':', '\\', '\n', '\t', '\u{0}', '\u{feff}', 'é',
            '😀', 'T', 'N', '/', '*', 'u', '`', ' ',
        ];
        let mut rng = Lcg(0x5eed);
        let base: Vec<char> = VALID.chars().collect();
        for round in 0..200 {
            let mut text = base.clone();
            let edits = 1 + rng.below(6);
            for _ in 0..edits {
                let at = rng.below(text.len() + 1);
                match rng.below(5) {
                    0 if at < text.len() => {
                        text.remove(at);
                    }
                    1 => text.insert(at, NASTY[rng.below(NASTY.len())]),
                    2 if at < text.len() => text[at] = NASTY[rng.below(NASTY.len())],
                    3 => text.truncate(at),
                    _ => {
                        let from = rng.below(text.len() + 1);
                        let to = (from + rng.below(20)).min(text.len());
                        let slice: Vec<char> = text[from..to].to_vec();
                        let at = at.min(text.len());
                        text.splice(at..at, slice);
                    }
                }
            }
            let mutated: String = text.into_iter().collect();
            // Results vary; the property is only that nothing panics and errors carry a message.
            match parse_reply(&mutated) {
                Ok((reply, _)) => assert!(!reply.command.name.is_empty(), "round {round}"),
                Err(ReplyError::NotJson(message)) | Err(ReplyError::Schema(message)) => {
                    assert!(!message.is_empty(), "round {round}")
                }
            }
            let _ = repair_json(&mutated);

            // Byte-level damage as well, decoded lossily the way a transport layer would.
            let mut bytes = mutated.into_bytes();
            if !bytes.is_empty() {
                let at = rng.below(bytes.len());
                bytes[at] = (rng.next() & 0xff) as u8;
            }
            let lossy = String::from_utf8_lossy(&bytes);
            let _ = parse_reply(&lossy);
        }
    }

    #[test]
    fn hostile_inputs_finish_without_panicking() {
        let deep_open = "[".repeat(5000);
        let deep_object = format!("{{\"a\": {}", deep_open);
        let many_braces = "{".repeat(3000);
        let inputs = [
            deep_open.as_str(),
            deep_object.as_str(),
            many_braces.as_str(),
            "{\"a\": \"\\u12",
            "{\"a\": \"\\",
            "{'",
            "{\"",
            "}{",
            "```",
            "```json",
            "\u{feff}",
            "{:}",
            "{,,,}",
        ];
        for input in inputs {
            let _ = parse_reply(input);
            let _ = repair_json(input);
        }
    }
}
