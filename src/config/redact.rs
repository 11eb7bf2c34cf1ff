//! Secrets kept out of the log whoever writes the line: the values registered here (a URL MCP
//! server's query and each of its values, the password in its address, the values of its
//! `headers`) are replaced by `[redacted]` in every log line, by the writer the binary gives its
//! log (`Redacting`).
//!
//! Our own errors already show a URL without its query, but the libraries the bot uses name the
//! whole URL in theirs (reqwest's errors, the MCP library's own ERROR lines), at every level up to
//! trace, and the bot cannot change their words: so the log's writer, which every line goes
//! through (the `log` crate's records too, through `tracing-log`), takes the secrets out of each
//! line as it is written. A line is redacted whole, since each event is formatted and written at
//! once. At most `MAX_SECRETS` are kept, and values shorter than `MIN_SECRET_CHARS` are not
//! registered (a query's `page=2` would otherwise blank every "2" of the log); a header's value is
//! registered whatever its length down to that floor, a query's values from `MIN_QUERY_VALUE_CHARS`.

use std::io::Write;
use std::sync::RwLock;

/// Secrets kept at most: a config names a bounded number of servers, but the registry must not
/// grow without bound either way.
pub const MAX_SECRETS: usize = 256;

/// The shortest value registered at all.
pub const MIN_SECRET_CHARS: usize = 4;

/// The shortest query value registered: a query's values are often plain parameters (`page=2`,
/// `format=json`); a key or token is longer.
pub const MIN_QUERY_VALUE_CHARS: usize = 6;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

static SECRETS: RwLock<Secrets> = RwLock::new(Secrets(Vec::new()));

/// The registered secrets, longest first, so that a query is replaced whole before the values
/// inside it.
struct Secrets(Vec<String>);

impl Secrets {
    fn add(&mut self, secret: &str) {
        if secret.chars().count() < MIN_SECRET_CHARS
            || self.0.len() >= MAX_SECRETS
            || self.0.iter().any(|known| known == secret)
        {
            return;
        }
        self.0.push(secret.to_string());
        self.0.sort_by_key(|known| std::cmp::Reverse(known.len()));
    }

    fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.0 {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }
}

/// Registers `secret`, so that no log line shows it from now on; a short or known one is ignored.
pub fn register(secret: &str) {
    SECRETS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .add(secret);
}

/// Registers what a URL's text could give away: its query (as written and decoded), the values in
/// it that are long enough to be keys, and the password of its user part.
pub fn register_url(url: &str) {
    for secret in secrets_of_url(url) {
        register(&secret);
    }
}

/// The secrets `register_url` registers for `url`.
pub fn secrets_of_url(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(parsed) = reqwest::Url::parse(url) else {
        // Not a URL: whatever follows a '?' is still kept out.
        if let Some((_, query)) = url.split_once('?') {
            found.push(query.to_string());
        }
        return found;
    };
    if let Some(query) = parsed.query() {
        found.push(query.to_string());
        for (_, value) in parsed.query_pairs() {
            if value.chars().count() >= MIN_QUERY_VALUE_CHARS {
                found.push(value.to_string());
            }
        }
        // The value as written too (percent-encoded), as a library may print it.
        for pair in query.split('&') {
            if let Some((_, raw)) = pair.split_once('=') {
                if raw.chars().count() >= MIN_QUERY_VALUE_CHARS {
                    found.push(raw.to_string());
                }
            }
        }
    }
    if let Some(password) = parsed.password() {
        found.push(password.to_string());
    }
    found
}

/// `text` with every registered secret replaced by `[redacted]`.
pub fn redact(text: &str) -> String {
    SECRETS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .redact(text)
}

/// A log writer that holds one line (one event, as the log formats it) and writes it to `inner`
/// redacted, when it is flushed or dropped.
pub struct Redacting<W: Write> {
    inner: W,
    held: Vec<u8>,
}

impl<W: Write> Redacting<W> {
    pub fn new(inner: W) -> Self {
        Redacting {
            inner,
            held: Vec::new(),
        }
    }

    fn write_held(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.held);
        let redacted = redact(&text);
        self.held.clear();
        self.inner.write_all(redacted.as_bytes())?;
        self.inner.flush()
    }
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_held()
    }
}

impl<W: Write> Drop for Redacting<W> {
    fn drop(&mut self) {
        // A log line that cannot be written has nowhere else to go.
        let _ = self.write_held();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_query_values_and_password_are_redacted_and_plain_parameters_kept() {
        let url = "https://bob:pa55word-x@mcp.example/x?token=s3cr3t-q%2Bv&page=2";
        let secrets = secrets_of_url(url);
        assert!(
            secrets.contains(&"token=s3cr3t-q%2Bv&page=2".to_string()),
            "{secrets:?}"
        );
        assert!(secrets.contains(&"s3cr3t-q+v".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"s3cr3t-q%2Bv".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"pa55word-x".to_string()), "{secrets:?}");
        assert!(!secrets.contains(&"2".to_string()), "{secrets:?}");
        register_url(url);
        let line =
            format!("error sending request for url ({url}): refused; decoded s3cr3t-q+v; page 2");
        let shown = redact(&line);
        for secret in ["s3cr3t", "pa55word"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("page 2") && shown.contains("mcp.example/x?[redacted]"),
            "{shown}"
        );
    }

    #[test]
    fn the_writer_redacts_a_line_written_in_pieces() {
        register("hdr-value-xyz");
        let mut out = Vec::new();
        {
            let mut writer = Redacting::new(&mut out);
            writer
                .write_all(b"sent Authorization: Bearer hdr-val")
                .unwrap();
            writer.write_all(b"ue-xyz to the server\n").unwrap();
        }
        let written = String::from_utf8(out).unwrap();
        assert_eq!(
            written,
            "sent Authorization: Bearer [redacted] to the server\n"
        );
    }

    #[test]
    fn short_values_are_not_registered_and_the_registry_is_bounded() {
        let mut secrets = Secrets(Vec::new());
        secrets.add("abc");
        assert_eq!(secrets.redact("abc"), "abc");
        for i in 0..MAX_SECRETS + 10 {
            secrets.add(&format!("bounded-secret-{i:04}"));
        }
        assert_eq!(secrets.0.len(), MAX_SECRETS);
        assert_eq!(secrets.redact("a bounded-secret-0001 b"), "a [redacted] b");
        assert_eq!(secrets.redact("bounded-secret-0300"), "bounded-secret-0300");
    }
}
