//! Repairing what a model meant as JSON: code fences, prose around the object, trailing commas,
//! single quotes, unquoted keys, Python literals, comments and truncation, in stages that each
//! run only when everything before them failed.

use serde_json::Value;

/// The repair pipeline alone: returns the parsed JSON object if the text can be turned into one.
///
/// The steps run in a fixed order and each runs only when everything before it failed: BOM and
/// surrounding whitespace, a markdown code fence, the first balanced `{...}` in the text, and then
/// cumulative textual fixes (trailing commas, control characters and bad escapes in strings,
/// single quotes and stray inner quotes, unquoted keys, Python literals and comments, and finally
/// truncation and missing separators).
pub fn repair_json(text: &str) -> Option<Value> {
    let cleaned = text.trim_start().trim_start_matches('\u{feff}').trim();
    if let Some(object) = parse_object(cleaned) {
        return Some(object);
    }
    if let Some(inner) = fenced_block(cleaned) {
        if let Some(object) = parse_object(inner.trim()) {
            return Some(object);
        }
    }

    let chars: Vec<char> = cleaned.chars().collect();
    let mut start = find_open_brace(&chars, 0);
    let mut candidates = 0;
    while let Some(begin) = start {
        if candidates >= MAX_CANDIDATES {
            break;
        }
        candidates += 1;
        let mut next_from = begin + 1;
        for (stage, fixes) in STAGES.iter().enumerate() {
            let scan = normalize(&chars, begin, *fixes);
            // The unrepaired scan decides where the next candidate starts: after a balanced
            // object that failed, its insides are never tried on their own, because a nested
            // object (say, the args) is not the reply.
            if stage == 0 && scan.closed {
                next_from = scan.end;
            }
            // A lone `{` closed by the truncation fix is a stray brace in prose, not a reply.
            let stray_brace = !scan.closed && scan.text.trim_end() == "{}";
            if let Some(object) = parse_object(&scan.text).filter(|_| !stray_brace) {
                return Some(object);
            }
        }
        start = find_open_brace(&chars, next_from);
    }
    None
}

/// How many `{` positions are tried before giving up, which bounds the work on hostile input.
const MAX_CANDIDATES: usize = 16;

fn parse_object(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

fn find_open_brace(chars: &[char], from: usize) -> Option<usize> {
    chars
        .get(from..)?
        .iter()
        .position(|c| *c == '{')
        .map(|offset| from + offset)
}

/// Returns the contents of the first markdown code fence, or everything after an opening fence
/// that was never closed (a truncated reply). A language tag such as `json` is skipped.
fn fenced_block(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after_ticks = &text[open + 3..];
    let tag_len = after_ticks
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(after_ticks.len());
    let body = &after_ticks[tag_len..];
    match body.find("```") {
        Some(close) => Some(&body[..close]),
        None => Some(body),
    }
}

/// Which textual fixes the normaliser applies. Stages enable them cumulatively.
#[derive(Debug, Clone, Copy, Default)]
struct Fixes {
    trailing_commas: bool,
    control_chars: bool,
    quotes: bool,
    unquoted_keys: bool,
    python: bool,
    truncation: bool,
}

/// The repair stages in order. Stage 0 applies no fix and only cuts out the first balanced
/// object, so surrounding prose and a second object are dropped before anything is rewritten.
const STAGES: [Fixes; 7] = [
    Fixes {
        trailing_commas: false,
        control_chars: false,
        quotes: false,
        unquoted_keys: false,
        python: false,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: false,
        quotes: false,
        unquoted_keys: false,
        python: false,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: true,
        quotes: false,
        unquoted_keys: false,
        python: false,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: true,
        quotes: true,
        unquoted_keys: false,
        python: false,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: true,
        quotes: true,
        unquoted_keys: true,
        python: false,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: true,
        quotes: true,
        unquoted_keys: true,
        python: true,
        truncation: false,
    },
    Fixes {
        trailing_commas: true,
        control_chars: true,
        quotes: true,
        unquoted_keys: true,
        python: true,
        truncation: true,
    },
];

/// What the parser expects next inside an open object or array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A key (objects only), right after `{` or `,`.
    Key,
    /// The `:` after a key.
    Colon,
    /// A value, after `:` in an object or after `[` or `,` in an array.
    Value,
    /// A `,` or the closing bracket, after a complete member.
    Next,
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    is_object: bool,
    expect: Expect,
}

impl Frame {
    fn closer(self) -> char {
        if self.is_object {
            '}'
        } else {
            ']'
        }
    }
}

/// The result of normalising one candidate.
struct Scan {
    /// The rewritten text, ready for a strict parse.
    text: String,
    /// The index just past the last character consumed.
    end: usize,
    /// True when the top-level object closed in the original text (not by a truncation fix).
    closed: bool,
}

/// The mutable state of one normalising pass. It tracks just enough JSON structure (open
/// brackets and whether a key, colon, value or comma comes next) to know where a comma is
/// trailing, what a bare word means, and how to close a truncated reply.
struct Normaliser<'a> {
    chars: &'a [char],
    fixes: Fixes,
    out: String,
    stack: Vec<Frame>,
    /// Byte position in `out` of a comma that nothing but whitespace has followed yet.
    pending_comma: Option<usize>,
}

/// Rewrites the text starting at the `{` at `start` into (hopefully) valid JSON, stopping after
/// the top-level object closes.
fn normalize(chars: &[char], start: usize, fixes: Fixes) -> Scan {
    let mut state = Normaliser {
        chars,
        fixes,
        out: String::with_capacity(chars.len().saturating_sub(start) + 16),
        stack: Vec::new(),
        pending_comma: None,
    };
    let mut i = start;
    while i < chars.len() {
        match state.step(i) {
            Step::Continue(next) => i = next,
            Step::Closed(end) => {
                return Scan {
                    text: state.out,
                    end,
                    closed: true,
                }
            }
            Step::Eof => {
                i = chars.len();
                break;
            }
        }
    }
    if fixes.truncation {
        state.close_all();
    }
    Scan {
        text: state.out,
        end: i,
        closed: false,
    }
}

enum Step {
    /// Keep scanning from this index.
    Continue(usize),
    /// The top-level object closed; the index is just past it.
    Closed(usize),
    /// The input ended inside a string.
    Eof,
}

impl Normaliser<'_> {
    fn step(&mut self, i: usize) -> Step {
        let c = self.chars[i];
        match c {
            '{' | '[' => {
                self.begin_value();
                self.out.push(c);
                self.stack.push(Frame {
                    is_object: c == '{',
                    expect: if c == '{' { Expect::Key } else { Expect::Value },
                });
                Step::Continue(i + 1)
            }
            '}' | ']' => self.close(c, i),
            ',' => {
                self.comma();
                Step::Continue(i + 1)
            }
            ':' => {
                if let Some(top) = self.stack.last_mut() {
                    if top.is_object && top.expect == Expect::Colon {
                        top.expect = Expect::Value;
                    }
                }
                self.pending_comma = None;
                self.out.push(':');
                Step::Continue(i + 1)
            }
            '"' => self.string(i, '"'),
            '\'' if self.fixes.quotes => self.string(i, '\''),
            '/' if self.fixes.python && matches!(self.chars.get(i + 1), Some('/' | '*')) => {
                Step::Continue(self.skip_comment(i))
            }
            c if is_word_char(c) => Step::Continue(self.word(i)),
            c if c.is_ascii_whitespace() => {
                self.out.push(c);
                Step::Continue(i + 1)
            }
            c if self.fixes.control_chars && c.is_whitespace() => {
                self.out.push(' ');
                Step::Continue(i + 1)
            }
            c if self.fixes.control_chars && is_invisible(c) => Step::Continue(i + 1),
            c => {
                self.pending_comma = None;
                self.out.push(c);
                Step::Continue(i + 1)
            }
        }
    }

    /// Records that a value starts in the current container, inserting a missing comma or colon
    /// when the truncation-and-separators stage is on.
    fn begin_value(&mut self) {
        self.pending_comma = None;
        let fix = self.fixes.truncation;
        if let Some(top) = self.stack.last_mut() {
            if fix && top.expect == Expect::Next && !top.is_object {
                self.out.push(',');
            }
            if fix && top.expect == Expect::Colon {
                self.out.push(':');
            }
            top.expect = Expect::Next;
        }
    }

    /// Records that a key starts in the current object.
    fn begin_key(&mut self) {
        self.pending_comma = None;
        let fix = self.fixes.truncation;
        if let Some(top) = self.stack.last_mut() {
            if fix && top.expect == Expect::Next {
                self.out.push(',');
            }
            top.expect = Expect::Colon;
        }
    }

    /// True when a key (rather than a value) is expected at this point.
    fn expects_key(&self) -> bool {
        self.stack
            .last()
            .is_some_and(|top| top.is_object && matches!(top.expect, Expect::Key | Expect::Next))
    }

    fn comma(&mut self) {
        let fix = self.fixes.trailing_commas;
        match self.stack.last_mut() {
            Some(top) if top.expect == Expect::Next => {
                top.expect = if top.is_object {
                    Expect::Key
                } else {
                    Expect::Value
                };
                self.pending_comma = Some(self.out.len());
                self.out.push(',');
            }
            // A doubled or leading comma carries no meaning, so the trailing-comma fix drops it.
            Some(_) if fix => {}
            _ => {
                self.pending_comma = None;
                self.out.push(',');
            }
        }
    }

    fn close(&mut self, c: char, i: usize) -> Step {
        let matches_top = self.stack.last().is_some_and(|top| top.closer() == c);
        if !matches_top {
            let can_unwind = self.fixes.truncation && self.stack.iter().any(|f| f.closer() == c);
            if !can_unwind {
                self.pending_comma = None;
                self.out.push(c);
                return Step::Continue(i + 1);
            }
            // A `}` that skips an open `[` (or the reverse) means the model forgot a closer;
            // supply the missing ones before handling this one.
            while let Some(top) = self.stack.last().copied() {
                if top.closer() == c {
                    break;
                }
                self.stack.pop();
                self.finish_frame(top);
            }
        }
        if self.fixes.trailing_commas {
            self.drop_pending_comma();
        }
        self.pending_comma = None;
        self.out.push(c);
        self.stack.pop();
        if self.stack.is_empty() {
            Step::Closed(i + 1)
        } else {
            Step::Continue(i + 1)
        }
    }

    fn drop_pending_comma(&mut self) {
        if let Some(position) = self.pending_comma.take() {
            if self.out.get(position..position + 1) == Some(",") {
                self.out.remove(position);
            }
        }
    }

    /// Closes a container whose closer is missing, first completing a dangling key or colon.
    fn finish_frame(&mut self, frame: Frame) {
        match (frame.is_object, frame.expect) {
            (true, Expect::Colon) => self.out.push_str(": null"),
            (true, Expect::Value) => self.out.push_str(" null"),
            (_, Expect::Key) | (false, Expect::Value) => self.drop_pending_comma(),
            _ => {}
        }
        self.pending_comma = None;
        self.out.push(frame.closer());
    }

    /// Closes everything still open at the end of a truncated reply.
    fn close_all(&mut self) {
        while let Some(frame) = self.stack.pop() {
            self.finish_frame(frame);
        }
    }

    fn skip_comment(&self, i: usize) -> usize {
        let rest = self.chars.get(i + 2..).unwrap_or(&[]);
        let block = self.chars.get(i + 1) == Some(&'*');
        let mut j = 0;
        while j < rest.len() {
            if block && rest[j] == '*' && rest.get(j + 1) == Some(&'/') {
                return i + 2 + j + 2;
            }
            if !block && rest[j] == '\n' {
                return i + 2 + j;
            }
            j += 1;
        }
        self.chars.len()
    }

    /// Handles a bare word outside strings: a number, a literal, or an unquoted key.
    fn word(&mut self, i: usize) -> usize {
        let mut end = i;
        while end < self.chars.len() && is_word_char(self.chars[end]) {
            end += 1;
        }
        let word: String = self.chars[i..end].iter().collect();
        let numeric = word
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_digit() || matches!(first, '-' | '+' | '.'));
        let is_key = !numeric
            && self.expects_key()
            && next_non_space(self.chars, end).map(|(_, c)| c) == Some(':');
        if is_key {
            self.begin_key();
            if self.fixes.unquoted_keys {
                self.out.push('"');
                self.out.push_str(&word);
                self.out.push('"');
            } else {
                self.out.push_str(&word);
            }
        } else {
            self.begin_value();
            let at_eof = end == self.chars.len();
            self.out.push_str(&self.literal(&word, numeric, at_eof));
        }
        end
    }

    /// Maps a bare value word to JSON, applying the Python-literal and truncation fixes.
    fn literal(&self, word: &str, numeric: bool, at_eof: bool) -> String {
        if self.fixes.python {
            match word {
                "True" | "true" => return "true".to_string(),
                "False" | "false" => return "false".to_string(),
                "None" | "null" | "undefined" | "NaN" => return "null".to_string(),
                _ => {}
            }
            // Python and JavaScript accept "1." and "+1"; JSON does not.
            if numeric {
                let trimmed = word.strip_prefix('+').unwrap_or(word);
                let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
                // A number cut off at the end of the reply is left to the truncation branch.
                let cut_off = self.fixes.truncation && at_eof;
                if !(cut_off || trimmed.is_empty()) {
                    return trimmed.to_string();
                }
            }
        }
        if self.fixes.truncation && at_eof {
            // A reply cut off inside a literal or number: finish the literal, or drop the
            // dangling part of the number.
            if numeric {
                let kept = word.trim_end_matches(['.', 'e', 'E', '+', '-']);
                return if kept.is_empty() {
                    "null".to_string()
                } else {
                    kept.to_string()
                };
            }
            let lower = word.to_ascii_lowercase();
            for full in ["true", "false", "null", "none"] {
                if full.starts_with(lower.as_str()) {
                    return if full == "none" { "null" } else { full }.to_string();
                }
            }
        }
        if self.fixes.python && !numeric {
            // A single bare word in value position (YAML habits, as in `name: web_search`) is
            // most plausibly a string the model forgot to quote.
            return format!("\"{word}\"");
        }
        word.to_string()
    }

    /// Copies one string literal opened at `open` with `quote`, always emitting double quotes.
    fn string(&mut self, open: usize, quote: char) -> Step {
        let as_key = self.expects_key();
        if as_key {
            self.begin_key();
        } else {
            self.begin_value();
        }
        self.out.push('"');
        let chars = self.chars;
        let fixes = self.fixes;
        let mut i = open + 1;
        while i < chars.len() {
            let c = chars[i];
            if c == '\\' {
                i = self.escape(i, quote);
                continue;
            }
            if c == quote {
                // Strictly, the quote ends the string. With the quote fix, it ends the string only
                // when what follows could follow a string in JSON; otherwise it is an apostrophe
                // or an unescaped quotation inside the text.
                if !fixes.quotes || ends_string(chars, i + 1, quote) {
                    self.out.push('"');
                    return Step::Continue(i + 1);
                }
                self.out.push_str(if quote == '"' { "\\\"" } else { "'" });
                i += 1;
                continue;
            }
            if c == '"' {
                // Only reachable inside a single-quoted string, where a double quote is literal.
                self.out.push_str("\\\"");
            } else if fixes.control_chars && (c as u32) < 0x20 {
                push_control_escape(&mut self.out, c);
            } else {
                self.out.push(c);
            }
            i += 1;
        }
        if fixes.truncation {
            self.out.push('"');
        }
        Step::Eof
    }

    /// Copies the escape sequence starting with the backslash at `i` and returns the next index.
    fn escape(&mut self, i: usize, quote: char) -> usize {
        let fixes = self.fixes;
        let Some(&next) = self.chars.get(i + 1) else {
            // A reply cut off right after a backslash: the escape cannot be completed.
            if !fixes.truncation {
                self.out.push('\\');
            }
            return i + 1;
        };
        match next {
            '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => {
                self.out.push('\\');
                self.out.push(next);
                i + 2
            }
            'u' => {
                let digits = self.chars.get(i + 2..i + 6);
                if digits.is_some_and(|d| d.iter().all(char::is_ascii_hexdigit)) {
                    self.out.push_str("\\u");
                    self.out.extend(digits.unwrap_or(&[]).iter());
                    return i + 6;
                }
                let rest = self.chars.get(i + 2..).unwrap_or(&[]);
                if fixes.truncation && rest.len() < 4 && rest.iter().all(char::is_ascii_hexdigit) {
                    return self.chars.len();
                }
                self.invalid_escape(i)
            }
            '\'' if fixes.control_chars || quote == '\'' => {
                self.out.push('\'');
                i + 2
            }
            _ => self.invalid_escape(i),
        }
    }

    /// A backslash that starts no valid escape (as in a Windows path) is kept as a literal
    /// backslash by the control-character fix.
    fn invalid_escape(&mut self, i: usize) -> usize {
        if self.fixes.control_chars {
            self.out.push_str("\\\\");
        } else {
            self.out.push('\\');
        }
        i + 1
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '$' | '-' | '+' | '.')
}

/// Characters that are invisible and meaningless outside strings (BOM, zero-width space, and
/// control characters other than ordinary whitespace).
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{feff}' | '\u{200b}' | '\u{200c}' | '\u{200d}') || c.is_control()
}

fn next_non_space(chars: &[char], from: usize) -> Option<(usize, char)> {
    chars
        .get(from..)?
        .iter()
        .enumerate()
        .find(|(_, c)| !c.is_whitespace())
        .map(|(offset, c)| (from + offset, *c))
}

/// Decides whether a quote at `from - 1` closes its string: only if the text after it is the end
/// of input or something that can legally follow a string.
fn ends_string(chars: &[char], from: usize, quote: char) -> bool {
    match next_non_space(chars, from) {
        None => true,
        Some((_, c)) => matches!(c, ',' | ':' | '}' | ']') || c == quote,
    }
}

fn push_control_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        other => out.push_str(&format!("\\u{:04x}", other as u32)),
    }
}
