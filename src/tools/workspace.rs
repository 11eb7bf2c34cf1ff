//! Workspace paths: every path an agent names is normalised and confined to its own workspace.

/// Longest path accepted, in bytes, so keys stay small.
const MAX_PATH_BYTES: usize = 255;

/// Normalises a model-supplied path to `a/b/c` form, or explains why it is refused.
/// Absolute paths, drive letters, `..` and control characters are refused rather than "fixed", so
/// the model learns the rule instead of being silently redirected.
pub fn normalize_path(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err("the path is empty".into());
    }
    if trimmed.starts_with('/') || trimmed.starts_with('\\') || trimmed.starts_with('~') {
        return Err(format!(
            "'{trimmed}' is an absolute path; use a path relative to your workspace"
        ));
    }
    let bytes = trimmed.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err(format!(
            "'{trimmed}' is an absolute path; use a path relative to your workspace"
        ));
    }
    if trimmed.chars().any(|c| c.is_control()) {
        return Err("the path contains control characters".into());
    }
    let mut parts = Vec::new();
    for part in trimmed.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                return Err(format!(
                    "'{trimmed}' leaves the workspace ('..' is not allowed)"
                ))
            }
            other => parts.push(other),
        }
    }
    if parts.is_empty() {
        return Err(format!("'{trimmed}' does not name a file"));
    }
    let path = parts.join("/");
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    Ok(path)
}

/// Like `normalize_path`, but the workspace root itself ("", ".", "/") is allowed: for folders.
pub fn normalize_folder(raw: &str) -> Result<String, String> {
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
        ];
        for (raw, why) in refused {
            let err = normalize_path(raw).unwrap_err();
            assert!(err.contains(why), "{raw:?}: {err}");
        }
        assert_eq!(normalize_folder("."), Ok(String::new()));
        assert_eq!(normalize_folder("docs/"), Ok("docs".into()));
        assert!(normalize_folder("../x").is_err());
    }
}
