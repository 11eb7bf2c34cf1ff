//! Workspace paths: every path an agent names is normalised and confined to its own workspace (pure,
//! so that the commands and the code sandbox apply the same rule).

/// Longest path accepted, in bytes, so keys stay small.
const MAX_PATH_BYTES: usize = 255;

/// Why a path an agent named is refused; its text is written for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Nothing but spaces.
    #[error("the path is empty")]
    Empty,
    /// A path from the root, a home folder or a drive (the trimmed path).
    #[error("'{0}' is an absolute path; use a path relative to your workspace")]
    Absolute(String),
    /// A control character somewhere in it.
    #[error("the path contains control characters")]
    Control,
    /// An invisible or direction-changing character, by its code point.
    #[error("the path contains U+{0:04X}, an invisible or direction-changing character that makes one name look like another")]
    Invisible(u32),
    /// A `..` part (the trimmed path).
    #[error("'{0}' leaves the workspace ('..' is not allowed)")]
    Leaves(String),
    /// Only separators and `.` parts (the trimmed path).
    #[error("'{0}' does not name a file")]
    NoFile(String),
    /// Longer than `MAX_PATH_BYTES`.
    #[error("the path is longer than {MAX_PATH_BYTES} bytes")]
    TooLong,
}

/// Normalises a model-supplied path to `a/b/c` form, or explains why it is refused.
/// Absolute paths, drive letters, `..` and control characters are refused rather than "fixed", so
/// the model learns the rule instead of being silently redirected.
pub fn normalize_path(raw: &str) -> Result<String, PathError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(PathError::Empty);
    }
    if trimmed.starts_with('/') || trimmed.starts_with('\\') || trimmed.starts_with('~') {
        return Err(PathError::Absolute(trimmed.to_string()));
    }
    let bytes = trimmed.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err(PathError::Absolute(trimmed.to_string()));
    }
    if trimmed.chars().any(|c| c.is_control()) {
        return Err(PathError::Control);
    }
    if let Some(hidden) = trimmed.chars().find(|c| is_invisible_or_bidi(*c)) {
        return Err(PathError::Invisible(hidden as u32));
    }
    let mut parts = Vec::new();
    for part in trimmed.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return Err(PathError::Leaves(trimmed.to_string())),
            other => parts.push(other),
        }
    }
    if parts.is_empty() {
        return Err(PathError::NoFile(trimmed.to_string()));
    }
    let path = parts.join("/");
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    Ok(path)
}

/// Characters that change how a name is shown without being seen: zero-width ones, direction
/// marks, embeddings, overrides and isolates, invisible operators and the byte-order mark.
fn is_invisible_or_bidi(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Like `normalize_path`, but the workspace root itself ("", ".", "/") is allowed: for folders.
pub fn normalize_folder(raw: &str) -> Result<String, PathError> {
    match raw.trim() {
        "" | "." | "./" | "/" => Ok(String::new()),
        other => normalize_path(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_confines_paths() {
        let ok = [
            ("a.txt", "a.txt"),
            ("./notes/a.txt", "notes/a.txt"),
            ("notes//a.txt", "notes/a.txt"),
            ("notes\\a.txt", "notes/a.txt"),
            (" x/./y ", "x/y"),
        ];
        for (raw, expected) in ok {
            assert_eq!(normalize_path(raw).as_deref(), Ok(expected), "{raw}");
        }
        let refused = [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("C:\\Windows", "absolute"),
            ("~/.ssh/id_rsa", "absolute"),
            ("../secret", "leaves the workspace"),
            ("a/../../b", "leaves the workspace"),
            ("a/..", "leaves the workspace"),
            ("a\u{0}b", "control"),
            (".", "does not name a file"),
            // "report\u{202E}txt.exe" shows as "reportexe.txt".
            (
                "report\u{202E}txt.exe",
                "U+202E, an invisible or direction-changing",
            ),
            ("note\u{200B}s.txt", "U+200B"),
            ("\u{FEFF}a.txt", "U+FEFF"),
            ("a\u{2066}b", "U+2066"),
        ];
        for (raw, why) in refused {
            let err = normalize_path(raw).unwrap_err().to_string();
            assert!(err.contains(why), "{raw:?}: {err}");
        }
        // Letters of any script are still names.
        assert_eq!(
            normalize_path("notes/日本語.txt").as_deref(),
            Ok("notes/日本語.txt")
        );
        assert_eq!(
            normalize_path("café/ملف.txt").as_deref(),
            Ok("café/ملف.txt")
        );
        assert_eq!(normalize_folder("."), Ok(String::new()));
        assert_eq!(normalize_folder("docs/"), Ok("docs".into()));
        assert!(normalize_folder("../x").is_err());
    }
}
