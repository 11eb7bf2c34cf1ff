//! A tool's result read the way servers send them: a result the MCP library could not take as a
//! tool's (one content block of a type it does not know, from a newer revision of the protocol,
//! fails the whole) is read again block by block (`tolerant`): readable blocks are kept, each
//! unknown one becomes a short note naming its type, so a healthy server is neither failed nor
//! restarted for it.
//!
//! A tool may say it must be run as a task (`"execution": {"taskSupport": "required"}`, protocol
//! revision 2025-11-25), which this bot does not do, so every call of it would fail. The MCP
//! library drops that field from the tools it lists, so the raw listing is read on its way in
//! (`note_task_only`, by the transports' readers in `oversize`) and such tools are left out.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

/// The names of a server's tools that must run as tasks, as its listings said.
pub type TaskOnly = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// Notes in `task_only` which tools of a listing (one raw JSON-RPC message) must run as tasks, and
/// that the others it lists need not (a list may change); any other message changes nothing.
pub fn note_task_only(message: &[u8], task_only: &TaskOnly) {
    // Cheap first: only a message that names the field is read.
    if !message.windows(11).any(|w| w == b"taskSupport") {
        return;
    }
    let Ok(value) = serde_json::from_slice::<Value>(message) else {
        return;
    };
    let Some(tools) = value.pointer("/result/tools").and_then(Value::as_array) else {
        return;
    };
    let mut noted = task_only
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        if tool
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str)
            == Some("required")
        {
            noted.insert(name.to_string());
        } else {
            noted.remove(name);
        }
    }
}

/// Unknown blocks noted by name at most; the rest are counted.
const MAX_NOTED: usize = 8;

/// The result in `value`, its unknown content blocks replaced by notes; `None` when it is not a
/// tool's result at all (no `content` and no `structuredContent`).
pub fn tolerant(value: &Value) -> Option<CallToolResult> {
    let content = value.get("content").and_then(Value::as_array);
    let structured = value.get("structuredContent").cloned();
    if content.is_none() && structured.is_none() {
        return None;
    }
    let mut blocks = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for block in content.into_iter().flatten() {
        match serde_json::from_value::<ContentBlock>(block.clone()) {
            Ok(read) => blocks.push(read),
            Err(_) => {
                let kind = block
                    .get("type")
                    .and_then(Value::as_str)
                    .map(|kind| crate::core::text::truncate_chars(kind, 40))
                    .unwrap_or_else(|| "without a type".to_string());
                skipped.push(kind);
            }
        }
    }
    if !skipped.is_empty() {
        blocks.push(ContentBlock::text(note(&skipped)));
    }
    let mut result = CallToolResult::success(blocks);
    result.is_error = value.get("isError").and_then(Value::as_bool);
    result.structured_content = structured;
    Some(result)
}

/// The note that stands for the blocks skipped, by type.
fn note(skipped: &[String]) -> String {
    let named: Vec<String> = skipped
        .iter()
        .take(MAX_NOTED)
        .map(|kind| format!("'{kind}'"))
        .collect();
    let more = skipped.len().saturating_sub(MAX_NOTED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "[{} content block(s) of a kind this bot does not read ({}{more}) skipped]",
        skipped.len(),
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_that_must_run_as_tasks_are_noted_from_the_raw_listing() {
        let task_only = TaskOnly::default();
        let listing = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [
            {"name": "research", "execution": {"taskSupport": "required"}, "inputSchema": {}},
            {"name": "maybe", "execution": {"taskSupport": "optional"}, "inputSchema": {}},
            {"name": "plain", "inputSchema": {}}
        ]}});
        note_task_only(listing.to_string().as_bytes(), &task_only);
        assert_eq!(
            task_only.lock().unwrap().iter().collect::<Vec<_>>(),
            ["research"]
        );
        // A call's answer that mentions the word changes nothing; a new listing does.
        let answer = json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "taskSupport"}]}});
        note_task_only(answer.to_string().as_bytes(), &task_only);
        assert!(task_only.lock().unwrap().contains("research"));
        let relisted = json!({"jsonrpc": "2.0", "id": 4, "result": {"tools": [
            {"name": "research", "execution": {"taskSupport": "forbidden"}, "inputSchema": {}}
        ]}});
        note_task_only(relisted.to_string().as_bytes(), &task_only);
        assert!(task_only.lock().unwrap().is_empty());
    }

    #[test]
    fn unknown_blocks_become_a_note_and_readable_ones_are_kept() {
        let value = json!({"content": [
            {"type": "text", "text": "kept"},
            {"type": "hologram", "frames": 3},
            {"type": "text", "text": "also kept"},
            {"nothing": true}
        ], "isError": false});
        let result = tolerant(&value).unwrap();
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect();
        assert_eq!(texts[..2], ["kept".to_string(), "also kept".to_string()]);
        assert!(
            texts[2].contains("2 content block(s)") && texts[2].contains("'hologram'"),
            "{texts:?}"
        );
        assert!(texts[2].contains("'without a type'"), "{texts:?}");
        assert_eq!(result.is_error, Some(false));
        assert!(tolerant(&json!({"other": 1})).is_none());
    }
}
