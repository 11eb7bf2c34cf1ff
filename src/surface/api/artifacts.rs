//! A task's artifacts are its agent's workspace: listed (paged), downloaded byte-exact as
//! `application/octet-stream`, and uploaded as multipart (`file`, and an optional
//! `relative_path`, the folder it goes in).
//!
//! An artifact's id is its path written in hex, so it fits one segment of a URL and needs no
//! record of its own. An upload obeys `write_file`'s rules: the path is normalised and confined
//! to the workspace (`core::paths`: no `..`, no absolute path, no control, invisible or
//! direction-changing characters), and the file and the whole workspace are held to
//! `workspace.max_file_bytes` and `workspace.max_agent_bytes`. A refusal is a 422 saying why,
//! and nothing is written. An accepted file is written by whoever runs the agent
//! (`Supervisor::put_upload`: its actor, between two of its messages), with an
//! `AuditEvent::FileUploaded` entry naming the caller; the agent sees it when it next lists or
//! reads its files. A file is `agent_created: false` while it holds what a person uploaded.

use axum::extract::{Multipart, Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::protocol::{Artifact, PageQuery};
use super::{shown_id, Api, ApiError, Caller};
use crate::core::audit::{AuditEntry, AuditEvent};
use crate::core::paths::normalize_path;
use crate::core::person::ActedBy;
use crate::core::state::AgentState;
use crate::runtime::uploads::{self, UploadError};
use crate::store::Store;

/// An artifact's id: its path in hex.
pub fn artifact_id(path: &str) -> String {
    path.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The path an id names, if it is one.
fn path_of(id: &str) -> Option<String> {
    if !id.len().is_multiple_of(2) || id.len() > 1024 {
        return None;
    }
    let bytes = (0..id.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(id.get(at..at + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// Who wrote a file as it is now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Created {
    ByTheAgent,
    /// A person put it there from outside (an upload), and the agent has not rewritten it.
    ByAPerson,
}

fn artifact(state: &AgentState, path: &str, created: Created) -> Artifact {
    let (folder, file_name) = match path.rsplit_once('/') {
        Some((folder, name)) => (folder.to_string(), name.to_string()),
        None => (String::new(), path.to_string()),
    };
    Artifact {
        artifact_id: artifact_id(path),
        agent_created: created == Created::ByTheAgent,
        file_name,
        relative_path: folder,
        created_at: state.created_at,
        modified_at: state.updated_at,
    }
}

/// Every file of the agent's workspace, by path.
pub fn list(store: &Store, state: &AgentState) -> Result<Vec<Artifact>, ApiError> {
    let from_outside = store.files_put_from_outside(&state.id)?;
    Ok(store
        .list_files(&state.id)?
        .iter()
        .map(|(path, _)| {
            let created = if from_outside.contains(path) {
                Created::ByAPerson
            } else {
                Created::ByTheAgent
            };
            artifact(state, path, created)
        })
        .collect())
}

pub async fn list_artifacts(
    State(api): State<Api>,
    caller: Caller,
    Path(task_id): Path<String>,
    Query(query): Query<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let page = api.page(&query)?;
    let state = api.owned(&caller, &task_id)?;
    let (artifacts, pagination) = page.of(list(&api.app.store, &state)?);
    Ok(Json(
        json!({"artifacts": artifacts, "pagination": pagination}),
    ))
}

pub async fn download_artifact(
    State(api): State<Api>,
    caller: Caller,
    Path((task_id, artifact_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let state = api.owned(&caller, &task_id)?;
    let missing = || {
        ApiError::NotFound(format!(
            "Task {:?} has no artifact {:?}.",
            shown_id(&task_id),
            shown_id(&artifact_id)
        ))
    };
    let path = path_of(&artifact_id).ok_or_else(missing)?;
    let contents = api
        .app
        .store
        .read_file(&state.id, &path)?
        .ok_or_else(missing)?;
    let file_name = path.rsplit('/').next().unwrap_or(&path);
    // The name was confined and checked when written; quotes and backslashes would end the
    // header's quoted string, so they are dropped.
    let shown_name: String = file_name
        .chars()
        .filter(|c| !matches!(c, '"' | '\\') && !c.is_control())
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", shown_name.escape_default()),
            ),
        ],
        contents,
    )
        .into_response())
}

/// What an upload's request carried.
#[derive(Default)]
struct Received {
    file_name: Option<String>,
    contents: Option<Vec<u8>>,
    relative_path: Option<String>,
}

async fn read_upload(mut multipart: Multipart) -> Result<Received, ApiError> {
    let unreadable = |e: axum::extract::multipart::MultipartError| {
        ApiError::Invalid(format!("The upload cannot be read: {}.", e.body_text()))
    };
    let mut upload = Received::default();
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        match field.name() {
            Some("file") => {
                upload.file_name = field.file_name().map(str::to_string);
                upload.contents = Some(field.bytes().await.map_err(unreadable)?.to_vec());
            }
            Some("relative_path") => {
                upload.relative_path = Some(field.text().await.map_err(unreadable)?);
            }
            other => {
                return Err(ApiError::Invalid(format!(
                    "The upload has a part {:?}; it takes `file` and `relative_path`.",
                    other.map(shown_id).unwrap_or_default()
                )))
            }
        }
    }
    Ok(upload)
}

/// The workspace path an upload goes to: `relative_path` (a folder) joined with the file's
/// name, confined to the workspace; or why not.
fn upload_path(upload: &Received) -> Result<String, ApiError> {
    let file_name = upload
        .file_name
        .as_deref()
        .filter(|name| !name.trim().is_empty())
        .ok_or_else(|| ApiError::Invalid("The `file` part has no file name.".into()))?;
    let refused = |e: crate::core::paths::PathError| {
        ApiError::Invalid(format!("The file cannot go there: {e}."))
    };
    // The name alone is checked first: a name with a separator would pick its own folder.
    if file_name.contains(['/', '\\']) {
        normalize_path(file_name).map_err(refused)?;
    }
    let joined = match upload.relative_path.as_deref().map(str::trim) {
        None | Some("") => file_name.to_string(),
        Some(folder) => format!("{}/{file_name}", folder.trim_end_matches(['/', '\\'])),
    };
    normalize_path(&joined).map_err(refused)
}

/// What the caller is told when an upload was not written.
fn refusal(error: UploadError) -> ApiError {
    match error {
        UploadError::FileTooBig { .. } | UploadError::WorkspaceFull { .. } => {
            ApiError::Invalid(error.to_string())
        }
        UploadError::NoSuchAgent => ApiError::NotFound(error.to_string()),
        UploadError::Elsewhere | UploadError::Busy | UploadError::ShuttingDown => {
            ApiError::Unavailable(error.to_string())
        }
        UploadError::Store(error) => error.into(),
    }
}

pub async fn upload_artifact(
    State(api): State<Api>,
    caller: Caller,
    Path(task_id): Path<String>,
    multipart: Multipart,
) -> Result<Json<Artifact>, ApiError> {
    let state = api.owned(&caller, &task_id)?;
    let upload = read_upload(multipart).await?;
    let path = upload_path(&upload)?;
    let contents = upload
        .contents
        .ok_or_else(|| ApiError::Invalid("The upload has no `file` part.".into()))?;
    let entry = AuditEntry {
        at: api.app.clock.now(),
        by: ActedBy::person(caller.person()),
        event: AuditEvent::FileUploaded {
            path: path.clone(),
            bytes: contents.len() as u64,
            digest: crate::core::digest::sha256_tagged(&contents),
        },
    };
    let upload = uploads::Upload {
        path: path.clone(),
        contents,
        entry,
    };
    api.supervisor
        .put_upload(&state.id, upload)
        .await
        .map_err(refusal)?;
    Ok(Json(artifact(&state, &path, Created::ByAPerson)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(name: &str, folder: Option<&str>) -> Received {
        Received {
            file_name: Some(name.into()),
            contents: Some(b"x".to_vec()),
            relative_path: folder.map(str::to_string),
        }
    }

    #[test]
    fn ids_are_paths_in_hex_and_nothing_else_is_an_id() {
        let id = artifact_id("notes/plan.md");
        assert_eq!(path_of(&id).as_deref(), Some("notes/plan.md"));
        assert_eq!(path_of("zz"), None);
        assert_eq!(path_of("abc"), None);
    }

    #[test]
    fn an_upload_lands_inside_the_workspace_or_is_refused_saying_why() {
        assert_eq!(upload_path(&upload("a.txt", None)).unwrap(), "a.txt");
        assert_eq!(
            upload_path(&upload("a.txt", Some("docs/"))).unwrap(),
            "docs/a.txt"
        );
        for (name, folder, why) in [
            ("a.txt", Some("../.."), "leaves the workspace"),
            ("a.txt", Some("/etc"), "absolute path"),
            ("../a.txt", None, "leaves the workspace"),
            ("a\u{202e}txt.exe", None, "U+202E"),
            ("a\u{7}.txt", None, "control characters"),
            ("", None, "no file name"),
        ] {
            match upload_path(&upload(name, folder)) {
                Err(ApiError::Invalid(text)) => assert!(text.contains(why), "{name:?}: {text}"),
                other => panic!("{name:?} in {folder:?} was not refused: {other:?}"),
            }
        }
    }
}
