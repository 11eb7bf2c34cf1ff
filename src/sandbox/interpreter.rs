//! Finding the sandbox's interpreter, and the folders it needs to read beyond the system's.

use std::path::{Path, PathBuf};

use super::SANDBOX_PATH;

/// `name` as a path: itself when it has a slash, else the first file of that name in the
/// sandbox's PATH. It is run as found (a virtual environment's `bin/python` link is how the
/// interpreter knows its environment).
pub(super) fn find_program(name: &str) -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = if name.contains('/') {
        vec![PathBuf::from(name)]
    } else {
        SANDBOX_PATH
            .split(':')
            .map(|dir| Path::new(dir).join(name))
            .collect()
    };
    candidates.into_iter().find(|p| p.is_file())
}

/// The folders an interpreter needs to read beyond the system's: for `<prefix>/bin/<name>`
/// (a virtual environment or an installation in /opt) and for the file its links lead to, the
/// `<prefix>`. An interpreter not in a `bin` folder brings only its own file.
pub(super) fn interpreter_paths(python: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for path in [Some(python.to_path_buf()), python.canonicalize().ok()]
        .into_iter()
        .flatten()
    {
        match path.parent() {
            Some(bin) if bin.file_name().is_some_and(|n| n == "bin") => {
                if let Some(prefix) = bin.parent() {
                    paths.push(prefix.to_path_buf());
                }
            }
            _ => paths.push(path),
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreter_brings_its_prefix_only_from_a_bin_folder() {
        // Neither exists here, so only the paths as given are considered.
        assert_eq!(
            interpreter_paths(Path::new("/opt/venv/bin/python")),
            vec![PathBuf::from("/opt/venv")]
        );
        assert_eq!(
            interpreter_paths(Path::new("/srv/tools/python")),
            vec![PathBuf::from("/srv/tools/python")],
            "not the whole of /srv/tools"
        );
    }
}
