//! One MCP tool as an agent command (`McpTool`, named `server.tool`): its arguments from the tool's
//! input schema (`kind_of` gives the type the core checks; each argument's own schema goes into the
//! reply schema unless it refers to definitions elsewhere), its description with what each argument
//! means, capped. Its result (`shown`) is the text parts, other content named, and structured
//! content when there is nothing else, capped and labelled untrusted; a server's `is_error` is kept
//! as an error. Its images are saved in the workspace as generated images are (`images/…`, within
//! the workspace's limits, `saved_images`), and the result names each one's file. The tools are marked `reads_untrusted`, so an agent that used one is tainted, and
//! their arguments count as egress unless the server is configured without network.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::Value;

use super::McpServer;
use crate::core::commands::Egress;
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::reply::CommandCall;
use crate::tools::{Command, ToolCtx, ToolOutput, WorkspaceOp};

/// Tools taken from one server at most: every command is in every prompt.
pub const MAX_TOOLS_PER_SERVER: usize = 32;

/// Characters of a tool's description kept for the prompt.
const MAX_DESCRIPTION_CHARS: usize = 400;

/// Arguments of one tool at most.
const MAX_ARGUMENTS: usize = 24;

pub struct McpTool {
    server: Arc<McpServer>,
    /// The tool's name on its server.
    tool: String,
    spec: CommandSpec,
}

/// Why an MCP server's tool cannot be offered as a command; its text says the tool is left out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolLeftOut {
    /// The tool's name (its first 80 characters) cannot be part of a command's name.
    #[error(
        "the tool {0:?} is left out: its name is not 1 to 64 letters, digits, '_', '-' or '.'"
    )]
    BadName(String),
    /// The tool must be run as a task (`execution.taskSupport = "required"`), which this bot does
    /// not do: every call of it would fail.
    #[error("the tool {0} is left out: it must be run as a task (its execution.taskSupport is \"required\"), which this bot does not do")]
    OnlyAsTask(String),
    /// The tool takes more arguments than a command may.
    #[error("the tool {name} is left out: it takes {count} arguments, more than {MAX_ARGUMENTS}")]
    TooManyArguments { name: String, count: usize },
}

impl McpTool {
    /// The command for `tool`, or why it cannot be one (a name that is not a command's, too many
    /// arguments).
    pub fn new(server: Arc<McpServer>, tool: &Tool) -> Result<McpTool, ToolLeftOut> {
        let name = tool.name.as_ref();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(ToolLeftOut::BadName(
                name.chars().take(80).collect::<String>(),
            ));
        }
        let command_name = format!("{}.{name}", server.name());
        let description = describe(tool);
        // What the server is given reaches whatever the server reaches.
        let egress = match server.config().network() {
            crate::config::McpNetwork::None => Egress::Nowhere,
            crate::config::McpNetwork::Guarded | crate::config::McpNetwork::Open => {
                Egress::AllArguments
            }
        };
        let class = class_of(server.config(), tool);
        let mut spec = CommandSpec::new(&command_name, &description, class)
            .reads_untrusted()
            .egress(egress);
        let schema = Value::Object((*tool.input_schema).clone());
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            if properties.len() > MAX_ARGUMENTS {
                return Err(ToolLeftOut::TooManyArguments {
                    name: name.to_string(),
                    count: properties.len(),
                });
            }
            for (argument, own) in properties {
                let description = own
                    .get("description")
                    .and_then(Value::as_str)
                    .map(one_line)
                    .unwrap_or_default();
                spec = spec.schema_arg(
                    argument,
                    kind_of(own),
                    &description,
                    reply_schema_of(own),
                    required.contains(&argument.as_str()),
                );
            }
        }
        Ok(McpTool {
            server,
            tool: name.to_string(),
            spec,
        })
    }
}

/// The tool's risk class: the config's for it by name, else its hints' when the server's are
/// followed, else the server's.
fn class_of(config: &crate::config::McpServerConfig, tool: &Tool) -> Risk {
    if let Some(class) = config.tool_risks.get(tool.name.as_ref()) {
        return *class;
    }
    match (config.classes, &tool.annotations) {
        (crate::config::ToolClasses::Hints, Some(hints)) => class_of_hints(hints),
        _ => config.risk,
    }
}

/// The class the hints give, each missing one taken as the protocol's default (not read-only,
/// destructive, open world): the least the tool says of itself.
fn class_of_hints(hints: &rmcp::model::ToolAnnotations) -> Risk {
    let read_only = hints.read_only_hint == Some(true);
    let open_world = hints.open_world_hint != Some(false);
    let destructive = hints.destructive_hint != Some(false);
    match (read_only, open_world, destructive) {
        (true, false, _) => Risk::Read,
        (true, true, _) => Risk::Network,
        (false, false, false) => Risk::Write,
        _ => Risk::External,
    }
}

/// The tool's description on one line, capped, with what its arguments mean (the prompt's
/// command line names them only).
fn describe(tool: &Tool) -> String {
    let own = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .unwrap_or("A tool of an MCP server");
    let mut text = one_line(own);
    let arguments: Vec<String> = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter_map(|(name, schema)| {
                    let said = schema
                        .get("description")
                        .and_then(Value::as_str)
                        .map(one_line);
                    let mut told: Vec<String> = said.into_iter().collect();
                    told.extend(choices_and_default(schema));
                    (!told.is_empty()).then(|| format!("{name}: {}", told.join(", ")))
                })
                .collect()
        })
        .unwrap_or_default();
    if !arguments.is_empty() {
        text = format!("{}. {}", text.trim_end_matches('.'), arguments.join("; "));
    }
    crate::core::text::truncate_chars(&text, MAX_DESCRIPTION_CHARS)
}

/// An argument's allowed values and default as the prompt tells them ("one of a|b", "default a"):
/// the compact reply format shows the model no schema, and it would learn them from an error.
fn choices_and_default(schema: &Value) -> Vec<String> {
    let mut told = Vec::new();
    let choices = schema
        .get("enum")
        .or_else(|| schema.pointer("/items/enum"))
        .and_then(Value::as_array)
        .filter(|values| !values.is_empty());
    if let Some(values) = choices {
        let shown: Vec<String> = values.iter().take(12).map(plain_value).collect();
        let more = if values.len() > 12 { "|…" } else { "" };
        told.push(format!("one of {}{more}", shown.join("|")));
    }
    if let Some(default) = schema.get("default") {
        told.push(format!("default {}", plain_value(default)));
    }
    told
}

/// A JSON value as the prompt shows it: a string without its quotes, others as JSON, capped.
fn plain_value(value: &Value) -> String {
    let text = match value {
        Value::String(text) => one_line(text),
        other => other.to_string(),
    };
    crate::core::text::truncate_chars(&text, 40)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The argument type the core checks, from the argument's schema.
fn kind_of(schema: &Value) -> ArgType {
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => ArgType::String,
        Some("integer") => ArgType::Integer,
        Some("number") => ArgType::Number,
        Some("boolean") => ArgType::Boolean,
        Some("object") => ArgType::Object,
        Some("array") => {
            let items = schema.pointer("/items/type").and_then(Value::as_str);
            if items == Some("string") {
                ArgType::StringList
            } else {
                ArgType::List
            }
        }
        // A union of types, or no type at all: the server checks.
        _ => ArgType::Any,
    }
}

#[async_trait]
impl Command for McpTool {
    fn spec(&self) -> CommandSpec {
        self.spec.clone()
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        if !self.server.still_offers(&self.tool) {
            return ToolOutput::error(format!(
                "The MCP server '{}' no longer offers the tool '{}' (its list of tools changed), so it was not run; use the commands you are shown now.",
                self.server.name(),
                self.tool
            ));
        }
        let arguments = call.args.clone().into_iter().collect();
        // The instance of the agent's place, or its own, as the server's scope says.
        let instance = self.server.instance_for(&ctx.agent.id, &ctx.payer.spender);
        match self.server.call_in(instance, &self.tool, arguments).await {
            Ok(result) => {
                let (saved, ops) = saved_images(&result, self.server.name(), &self.tool, ctx);
                ToolOutput {
                    ops,
                    ..shown(&result, self.server.config().max_result_chars, &saved)
                }
            }
            Err(failure) => ToolOutput::error(failure.0),
        }
    }
}

/// Images of one result saved at most.
const MAX_SAVED_IMAGES: usize = 8;

/// The result's images saved in the workspace, as generated images are: where each one went, or
/// why it was not saved (not base64, over a file's or the workspace's limit, too many), in the
/// order of the result's images; and the writes that save them.
fn saved_images(
    result: &CallToolResult,
    server: &str,
    tool: &str,
    ctx: &ToolCtx<'_>,
) -> (Vec<Result<String, String>>, Vec<WorkspaceOp>) {
    use base64::Engine as _;
    let mut room = ctx
        .limits
        .max_agent_bytes
        .saturating_sub(ctx.workspace.total_bytes().unwrap_or(u64::MAX));
    let (mut saved, mut ops) = (Vec::new(), Vec::new());
    let images = result.content.iter().filter_map(|block| block.as_image());
    for (n, image) in images.enumerate() {
        if n >= MAX_SAVED_IMAGES {
            saved.push(Err(format!(
                "only {MAX_SAVED_IMAGES} images of a result are saved"
            )));
            continue;
        }
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(image.data.as_bytes())
        else {
            saved.push(Err("its data is not base64".into()));
            continue;
        };
        let size = bytes.len() as u64;
        if size > ctx.limits.max_file_bytes || size > room {
            saved.push(Err(format!(
                "at {size} bytes it does not fit in the workspace (a file may be {} bytes, and {room} are left)",
                ctx.limits.max_file_bytes
            )));
            continue;
        }
        room -= size;
        let extension = match image.mime_type.as_str() {
            "image/png" => "png",
            "image/jpeg" => "jpg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            _ => "bin",
        };
        // The server's and the tool's names are letters, digits, '_', '-' and '.' only.
        let path = format!(
            "images/{}-{server}-{tool}-{}.{extension}",
            ctx.agent.cycle,
            n + 1
        );
        ops.push(WorkspaceOp::Put {
            path: path.clone(),
            contents: bytes,
        });
        saved.push(Ok(path));
    }
    (saved, ops)
}

/// A result as the agent reads it: its text parts, what else it holds named (an image by the file
/// it was saved as, from `saved`), capped, and labelled as coming from outside.
fn shown(
    result: &CallToolResult,
    max_chars: usize,
    saved: &[Result<String, String>],
) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut images = saved.iter();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                let size = image.data.len() / 4 * 3;
                match images.next() {
                    Some(Ok(path)) => format!(
                        "[an image ({}, {size} bytes), saved as {path}]",
                        image.mime_type
                    ),
                    Some(Err(why)) => format!(
                        "[an image ({}, {size} bytes), not saved: {why}]",
                        image.mime_type
                    ),
                    None => format!("[an image ({}, {size} bytes), not shown]", image.mime_type),
                }
            }
            ContentBlock::Audio(audio) => format!("[audio ({}), not shown]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[resource {uri}, binary, not shown]")
                }
                _ => "[a resource of a kind this bot does not read]".to_string(),
            },
            ContentBlock::ResourceLink(link) => format!("[link to resource {}]", link.uri),
            _ => "[content of a kind this bot does not read]".to_string(),
        });
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = parts.join("\n");
    let total = text.chars().count();
    let mut body = crate::core::text::truncate_chars(&text, max_chars);
    if total > max_chars {
        body.push_str(&format!("\n[cut: {max_chars} of {total} characters shown]"));
    }
    let labelled = labelled(&body);
    if result.is_error == Some(true) {
        ToolOutput::error(labelled)
    } else {
        ToolOutput::success(labelled)
    }
}

/// Text from a server, labelled as untrusted (an error's too: the server wrote it).
pub(super) fn labelled(text: &str) -> String {
    format!("{}\n{text}", crate::core::taint::UNTRUSTED_LABEL)
}

/// Schema keywords a grammar-constrained decoder may refuse or blow up on (llama.cpp refuses a
/// pattern without anchors, and makes a rule per repetition of a length or item bound); the
/// server checks them itself.
const DROPPED_KEYWORDS: &[&str] = &[
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "format",
];

/// An argument's schema as the reply schema carries it: without the keywords above, or `None`
/// (its type alone is checked) when it refers to definitions elsewhere or is large.
fn reply_schema_of(own: &Value) -> Option<Value> {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for keyword in DROPPED_KEYWORDS {
                    map.remove(*keyword);
                }
                if map
                    .get("enum")
                    .and_then(Value::as_array)
                    .is_some_and(Vec::is_empty)
                {
                    map.remove("enum");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let text = own.to_string();
    if text.contains("\"$ref\"") || text.len() > MAX_ARGUMENT_SCHEMA_CHARS {
        return None;
    }
    let mut kept = own.clone();
    strip(&mut kept);
    Some(kept)
}

/// The largest argument schema carried into the reply schema, in characters.
const MAX_ARGUMENT_SCHEMA_CHARS: usize = 2_000;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The command for a tool `echo` of a server configured by `config`.
    fn echo_of(config: &str) -> CommandSpec {
        let config: crate::config::McpServerConfig = toml::from_str(config).unwrap();
        let server = McpServer::new(&config, &crate::config::WebConfig::default()).unwrap();
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let tool = Tool::new("echo", "Echoes", schema.as_object().unwrap().clone());
        McpTool::new(server, &tool).unwrap().spec
    }

    #[test]
    fn a_tool_s_arguments_leave_unless_its_server_has_no_network() {
        let reaching = echo_of("name = \"notes\"\ncommand = \"notes-server\"\nrisk = \"write\"\n");
        assert_eq!(reaching.egress, [Egress::AllArguments]);
        let call = CommandCall {
            name: "notes.echo".into(),
            args: json!({"text": "secret"}).as_object().unwrap().clone(),
        };
        assert_eq!(
            crate::core::taint::outgoing_data(&reaching, &call),
            Some(("*".into(), r#"{"text":"secret"}"#.into()))
        );
        let local = echo_of("name = \"notes\"\ncommand = \"notes-server\"\nnetwork = false\n");
        assert_eq!(local.egress, [Egress::Nowhere]);
        assert_eq!(crate::core::taint::outgoing_data(&local, &call), None);
    }

    #[test]
    fn hints_choose_a_tools_class_only_when_followed_and_the_config_overrides_them() {
        use rmcp::model::ToolAnnotations;
        let tool = |name: &str, read_only, open_world, destructive| {
            let schema = json!({"type": "object", "properties": {}});
            let mut tool = Tool::new(name.to_string(), "d", schema.as_object().unwrap().clone());
            tool.annotations = Some(ToolAnnotations::from_raw(
                None,
                read_only,
                destructive,
                None,
                open_world,
            ));
            tool
        };
        let config = |more: &str| -> crate::config::McpServerConfig {
            toml::from_str(&format!("name = \"s\"\ncommand = \"x\"\n{more}")).unwrap()
        };
        let followed = config("classes = \"hints\"\ntool_risks = { wipe = \"control\" }\n");
        assert_eq!(
            class_of(&followed, &tool("look", Some(true), Some(false), None)),
            Risk::Read
        );
        assert_eq!(
            class_of(&followed, &tool("fetch", Some(true), None, None)),
            Risk::Network
        );
        assert_eq!(
            class_of(
                &followed,
                &tool("note", Some(false), Some(false), Some(false))
            ),
            Risk::Write
        );
        assert_eq!(
            class_of(&followed, &tool("post", None, None, None)),
            Risk::External
        );
        assert_eq!(
            class_of(&followed, &tool("wipe", Some(true), Some(false), None)),
            Risk::Control
        );
        let ignored = config("risk = \"network\"\n");
        assert_eq!(
            class_of(&ignored, &tool("look", Some(true), Some(false), None)),
            Risk::Network
        );
    }

    #[test]
    fn choices_and_defaults_are_in_the_description() {
        let schema = json!({"type": "object", "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius", "description": "The unit"},
            "days": {"type": "integer", "default": 3}
        }});
        let tool = Tool::new("forecast", "Forecasts", schema.as_object().unwrap().clone());
        let said = describe(&tool);
        assert!(
            said.contains("unit: The unit, one of celsius|fahrenheit, default celsius"),
            "{said}"
        );
        assert!(said.contains("days: default 3"), "{said}");
    }

    #[test]
    fn argument_kinds_follow_the_schema() {
        assert_eq!(
            kind_of(&json!({"type": "string", "enum": ["a"]})),
            ArgType::String
        );
        assert_eq!(
            kind_of(&json!({"type": "array", "items": {"type": "string"}})),
            ArgType::StringList
        );
        assert_eq!(
            kind_of(&json!({"type": "array", "items": {"type": "object"}})),
            ArgType::List
        );
        assert_eq!(kind_of(&json!({"type": "number"})), ArgType::Number);
        assert_eq!(kind_of(&json!({"type": ["string", "null"]})), ArgType::Any);
    }

    #[test]
    fn schemas_lose_what_a_grammar_cannot_take() {
        let own = json!({"type": "string", "pattern": "[a-z]+", "maxLength": 9000, "enum": [], "description": "d"});
        assert_eq!(
            reply_schema_of(&own),
            Some(json!({"type": "string", "description": "d"}))
        );
        let nested =
            json!({"type": "array", "items": {"type": "string", "pattern": "x"}, "maxItems": 500});
        assert_eq!(
            reply_schema_of(&nested),
            Some(json!({"type": "array", "items": {"type": "string"}}))
        );
        assert_eq!(reply_schema_of(&json!({"$ref": "#/$defs/T"})), None);
        assert_eq!(reply_schema_of(&json!({"enum": vec!["v"; 1000]})), None);
    }

    #[test]
    fn results_are_labelled_capped_and_errors_stay_errors() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("x".repeat(50))]);
        let out = shown(&result, 20, &[]);
        let crate::core::history::Outcome::Success(text) = &out.outcome else {
            panic!("{out:?}")
        };
        assert!(
            text.starts_with(crate::core::taint::UNTRUSTED_LABEL),
            "{text}"
        );
        assert!(text.contains("[cut: 20 of 50 characters shown]"), "{text}");
        result.is_error = Some(true);
        assert!(matches!(
            shown(&result, 100, &[]).outcome,
            crate::core::history::Outcome::Error(_)
        ));
    }
}
