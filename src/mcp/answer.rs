//! A tool's result read the way servers send them: a result the MCP library could not take as a
//! tool's (one content block of a type it does not know, from a newer revision of the protocol,
//! fails the whole) is read again block by block (`tolerant`): readable blocks are kept, each
//! unknown one becomes a short note naming its type, so a healthy server is neither failed nor
//! restarted for it.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

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
