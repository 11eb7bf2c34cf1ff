//! Workspace paths as the commands use them: the rule itself lives in `core::paths`.

pub use crate::core::paths::{normalize_folder, normalize_path};
