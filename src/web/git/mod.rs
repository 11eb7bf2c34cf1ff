//! Cloning a public git repository for `clone_repository`: gitoxide speaks git's smart HTTP
//! protocol through the guarded web client (every request and redirect checked like a page fetch,
//! https only unless the operator allow-listed the host, the download capped), fetches the tip of
//! the default branch alone, and its files are read out of the fetched pack, within limits.
//!
//! `clone_tip` runs on the blocking pool: a bare repository in a temporary folder, isolated from
//! the machine's and the user's git configuration, with gitoxide's allocations bounded (a small
//! delta can declare gigabytes); one shallow fetch of the remote's `HEAD`; then the tip's tree
//! walked by `BoundedRecorder` (entries and the deadline) and read into files within `CloneLimits`
//! (`Names`: no `.git`, no name taken twice).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gix::protocol::transport::client::blocking_io::http as git_http;
use reqwest::Url;

mod http;

use http::{Exchanger, GuardedHttp};

use super::fetch::{FetchError, WebClient};
use super::guard::Blocked;
use crate::core::paths::normalize_path;

/// How much a clone may fetch, keep and take.
#[derive(Debug, Clone)]
pub struct CloneLimits {
    /// Bytes the server may send in all, the pack included.
    pub max_download_bytes: u64,
    /// A file larger than this is left out (with a note).
    pub max_file_bytes: u64,
    /// The files kept may add up to this much; past it the clone fails as a whole.
    pub max_total_bytes: u64,
    /// Files kept at most; past it the clone fails as a whole.
    pub max_files: usize,
    /// The whole clone, from the first request to the last file read.
    pub timeout: Duration,
}

/// The tip of a repository's default branch, as files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The commit's id, in hex.
    pub commit: String,
    /// The default branch's name, when the server named it.
    pub branch: Option<String>,
    /// Paths (relative to the repository's root, as the workspace writes them) and contents.
    pub files: Vec<(String, Vec<u8>)>,
    /// One line per entry left out, and why (the first few).
    pub left_out: Vec<String>,
    /// Entries left out past those.
    pub also_left_out: usize,
    /// Bytes the server sent.
    pub downloaded: u64,
}

/// Why a repository was not cloned; the text is what the model and the user read.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    #[error("{0:?} is not a valid URL")]
    BadUrl(String),
    #[error("{url} was not cloned: only https URLs can be cloned (plain http only from a host the operator allow-listed)")]
    NotHttps { url: String },
    #[error("a repository URL with a user name or password is not cloned: only public repositories are, and credentials must never leave in a URL")]
    Credentials,
    #[error("{0}")]
    Fetch(#[from] FetchError),
    #[error("{url} asks for credentials: only public repositories can be cloned")]
    Private { url: String },
    #[error("the repository is more than {max} bytes to download; it was not cloned")]
    TooLarge { max: u64 },
    #[error("cloning took longer than {secs} s and was stopped")]
    TimedOut { secs: u64 },
    #[error("the repository has no commit on its default branch")]
    Empty,
    #[error("the repository's files come to more than {max} bytes; it was not cloned")]
    TooMuchContent { max: u64 },
    #[error("the repository has more than {max} files; it was not cloned")]
    TooManyFiles { max: usize },
    #[error("{url} is not a git repository this bot can read: {why}")]
    Git { url: String, why: String },
}

/// Clones the tip of `url`'s default branch and returns its files.
pub async fn clone_tip(
    web: &WebClient,
    url: &str,
    limits: &CloneLimits,
) -> Result<Checkout, CloneError> {
    let parsed = Url::parse(url.trim()).map_err(|_| CloneError::BadUrl(shown(url)))?;
    check_git_url(web, &parsed)?;
    let deadline = Instant::now() + limits.timeout;
    let exchanger = Exchanger {
        web: web.clone(),
        runtime: tokio::runtime::Handle::current(),
        deadline,
        timeout_secs: limits.timeout.as_secs(),
        remaining: Arc::new(AtomicU64::new(limits.max_download_bytes)),
        max_download: limits.max_download_bytes,
        failure: Arc::new(Mutex::new(None)),
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    // gitoxide checks the flag between its steps; the requests themselves end at the deadline.
    let alarm = tokio::spawn({
        let interrupt = interrupt.clone();
        async move {
            tokio::time::sleep(limits_timeout(deadline)).await;
            interrupt.store(true, Ordering::SeqCst);
        }
    });
    let job = tokio::task::spawn_blocking({
        let (exchanger, limits, interrupt) = (exchanger.clone(), limits.clone(), interrupt.clone());
        move || fetch_and_read(exchanger, parsed, &limits, &interrupt)
    });
    // The work stops at its next check of the flag; a step never waits much past the deadline
    // for it (what it still does then is bounded, and its folder is removed when it ends).
    let job = tokio::time::timeout(limits.timeout + JOIN_GRACE, job).await;
    alarm.abort();
    interrupt.store(true, Ordering::SeqCst);
    let timed_out = job.is_err() || Instant::now() >= deadline;
    let recorded = exchanger.take_failure();
    let Ok(job) = job else {
        return Err(CloneError::TimedOut {
            secs: limits.timeout.as_secs(),
        });
    };
    match job {
        Ok(Ok(checkout)) => Ok(checkout),
        // The transport's own reason is clearer than what gitoxide wraps around it.
        Ok(Err(error)) => Err(recorded.unwrap_or(if timed_out {
            CloneError::TimedOut {
                secs: limits.timeout.as_secs(),
            }
        } else {
            error
        })),
        Err(join) => Err(CloneError::Git {
            url: shown(url),
            why: format!("the clone stopped: {join}"),
        }),
    }
}

/// How long past its deadline a clone's work is waited for before the step goes on without it.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// A URL as results show it: cut, so that a long one cannot fill the agent's history.
fn shown(url: &str) -> String {
    crate::core::text::truncate_chars(url.trim(), 300)
}

fn limits_timeout(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// A URL a clone may reach: https, or http on a host the operator allow-listed; then the guard's
/// own check (no private address written into the URL, the allowlist's port).
fn check_git_url(web: &WebClient, url: &Url) -> Result<(), CloneError> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err(CloneError::Credentials);
    }
    let allowed_http = url.scheme() == "http"
        && url
            .host_str()
            .is_some_and(|host| web.guard().is_allow_listed(host));
    if url.scheme() != "https" && !allowed_http {
        return Err(CloneError::NotHttps {
            url: url.to_string(),
        });
    }
    web.guard()
        .check_url(url)
        .map_err(|blocked: Blocked| FetchError::Blocked {
            url: url.to_string(),
            blocked,
        })?;
    Ok(())
}

/// Runs on the blocking pool: a bare repository in a temporary folder, one shallow fetch of the
/// remote's HEAD, and its tree read out.
fn fetch_and_read(
    exchanger: Exchanger,
    url: Url,
    limits: &CloneLimits,
    interrupt: &AtomicBool,
) -> Result<Checkout, CloneError> {
    let git_error = |why: String| CloneError::Git {
        url: url.to_string(),
        why,
    };
    let folder = tempfile::Builder::new()
        .prefix("autothread-clone-")
        .tempdir()
        .map_err(|e| git_error(format!("no temporary folder: {e}")))?;
    // Isolated: nothing of the machine's or the user's git configuration (URL rewrites,
    // credential helpers, proxies) takes part. The repository is a stranger's: no object may
    // inflate past a bound while the pack is indexed (a small delta or zlib stream can declare
    // gigabytes).
    let alloc_limit = limits
        .max_download_bytes
        .max(limits.max_file_bytes)
        .saturating_mul(2);
    let repo = gix::ThreadSafeRepository::init_opts(
        folder.path(),
        gix::create::Kind::Bare,
        gix::create::Options::default(),
        gix::open::Options::isolated()
            .config_overrides([format!("gitoxide.objects.allocLimit={alloc_limit}")]),
    )
    .map_err(|e| git_error(e.to_string()))?
    .to_thread_local();
    let remote = repo
        .remote_at_without_url_rewrite(url.as_str())
        .and_then(|remote| {
            remote.with_refspecs(
                Some("+HEAD:refs/remotes/origin/HEAD"),
                gix::remote::Direction::Fetch,
            )
        })
        .map_err(|e| git_error(e.to_string()))?;
    let git_url = gix::url::parse(url.as_str().as_bytes()).map_err(|e| git_error(e.to_string()))?;
    let transport = git_http::connect_http(
        GuardedHttp {
            exchanger: exchanger.clone(),
            redirected_base: None,
        },
        git_url,
        gix::protocol::transport::Protocol::V2,
        false,
    );
    let outcome = remote
        .to_connection_with_transport(transport)
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| git_error(e.to_string()))?
        .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(NonZeroU32::MIN))
        .receive(gix::progress::Discard, interrupt)
        .map_err(|e| git_error(e.to_string()))?;
    let (commit, branch) = outcome
        .ref_map
        .remote_refs
        .iter()
        .find_map(|remote_ref| {
            use gix::protocol::handshake::Ref;
            match remote_ref {
                Ref::Symbolic {
                    full_ref_name,
                    target,
                    object,
                    ..
                } if full_ref_name == "HEAD" => Some((
                    *object,
                    target
                        .to_string()
                        .strip_prefix("refs/heads/")
                        .map(String::from),
                )),
                Ref::Direct {
                    full_ref_name,
                    object,
                } if full_ref_name == "HEAD" => Some((*object, None)),
                _ => None,
            }
        })
        .ok_or(CloneError::Empty)?;
    let tree = repo
        .find_commit(commit)
        .and_then(|commit| commit.tree())
        .map_err(|e| git_error(format!("the fetched commit could not be read: {e}")))?;
    let mut recorder = BoundedRecorder {
        inner: gix::traverse::tree::Recorder::default(),
        seen: 0,
        max_entries: limits.max_files.saturating_mul(2),
        interrupt,
        over_bound: false,
    };
    if let Err(e) = tree.traverse().breadthfirst(&mut recorder) {
        return Err(if recorder.over_bound {
            CloneError::TooManyFiles {
                max: limits.max_files,
            }
        } else if interrupt.load(Ordering::SeqCst) {
            CloneError::TimedOut {
                secs: limits.timeout.as_secs(),
            }
        } else {
            git_error(format!("the fetched tree could not be read: {e}"))
        });
    }
    let entries = recorder.inner.records;
    let mut checkout = Checkout {
        commit: commit.to_string(),
        branch,
        files: Vec::new(),
        left_out: Vec::new(),
        also_left_out: 0,
        downloaded: exchanger.max_download - exchanger.remaining.load(Ordering::SeqCst),
    };
    let mut total: u64 = 0;
    let mut names = Names::default();
    for entry in entries {
        if interrupt.load(Ordering::SeqCst) {
            return Err(CloneError::TimedOut {
                secs: limits.timeout.as_secs(),
            });
        }
        if entry.mode.is_tree() {
            continue;
        }
        let shown = entry.filepath.to_string();
        let path = match normalize_path(&shown) {
            Ok(path) if path == shown && names.take(&path) => path,
            _ => {
                checkout.leave_out(format!(
                    "'{}': the workspace refuses its name",
                    crate::core::text::truncate_chars(&shown, 120)
                ));
                continue;
            }
        };
        if entry.mode.is_link() {
            checkout.left_out.push(format!("'{path}': a symbolic link"));
            continue;
        }
        if entry.mode.is_commit() {
            checkout
                .left_out
                .push(format!("'{path}': a submodule (not cloned)"));
            continue;
        }
        let size = repo
            .find_header(entry.oid)
            .map_err(|e| git_error(format!("'{path}' could not be read: {e}")))?
            .size();
        if size > limits.max_file_bytes {
            checkout.leave_out(format!(
                "'{path}': {size} bytes, and files are limited to {} bytes",
                limits.max_file_bytes
            ));
            continue;
        }
        total += size;
        if total > limits.max_total_bytes {
            return Err(CloneError::TooMuchContent {
                max: limits.max_total_bytes,
            });
        }
        if checkout.files.len() == limits.max_files {
            return Err(CloneError::TooManyFiles {
                max: limits.max_files,
            });
        }
        let blob = repo
            .find_blob(entry.oid)
            .map_err(|e| git_error(format!("'{path}' could not be read: {e}")))?;
        checkout.files.push((path, blob.data.clone()));
    }
    Ok(checkout)
}

/// Notes on entries left out, at most this many; the rest are counted.
const LEFT_OUT_NOTES: usize = 20;

impl Checkout {
    fn leave_out(&mut self, note: String) {
        if self.left_out.len() < LEFT_OUT_NOTES {
            self.left_out.push(note);
        } else {
            self.also_left_out += 1;
        }
    }
}

/// The names a checkout has taken: a path is refused when it has a `.git` component, names a
/// file again, or is a file where a folder was taken or the other way round (a crafted tree
/// can hold both), since the workspace and a sandbox's copy of it cannot.
#[derive(Default)]
struct Names {
    files: std::collections::HashSet<String>,
    folders: std::collections::HashSet<String>,
}

impl Names {
    fn take(&mut self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.iter().any(|part| part.eq_ignore_ascii_case(".git")) {
            return false;
        }
        let folders: Vec<String> = (1..parts.len()).map(|n| parts[..n].join("/")).collect();
        if self.folders.contains(path)
            || self.files.contains(path)
            || folders.iter().any(|folder| self.files.contains(folder))
        {
            return false;
        }
        self.folders.extend(folders);
        self.files.insert(path.to_string());
        true
    }
}

/// gitoxide's tree recorder, stopped once `max_entries` entries (folders too) are seen or the
/// clone is interrupted: a pack of a few kilobytes can hold trees that name one another
/// thousands of times over.
struct BoundedRecorder<'i> {
    inner: gix::traverse::tree::Recorder,
    seen: usize,
    max_entries: usize,
    interrupt: &'i AtomicBool,
    over_bound: bool,
}

impl BoundedRecorder<'_> {
    fn one_more(&mut self) -> bool {
        self.seen += 1;
        self.over_bound = self.seen > self.max_entries;
        !self.over_bound && !self.interrupt.load(Ordering::Relaxed)
    }
}

impl gix::traverse::tree::Visit for BoundedRecorder<'_> {
    fn pop_back_tracked_path_and_set_current(&mut self) {
        self.inner.pop_back_tracked_path_and_set_current();
    }

    fn pop_front_tracked_path_and_set_current(&mut self) {
        self.inner.pop_front_tracked_path_and_set_current();
    }

    fn push_back_tracked_path_component(&mut self, component: &gix::bstr::BStr) {
        self.inner.push_back_tracked_path_component(component);
    }

    fn push_path_component(&mut self, component: &gix::bstr::BStr) {
        self.inner.push_path_component(component);
    }

    fn pop_path_component(&mut self) {
        self.inner.pop_path_component();
    }

    fn visit_tree(
        &mut self,
        entry: &gix::objs::tree::EntryRef<'_>,
    ) -> gix::traverse::tree::visit::Action {
        if !self.one_more() {
            return std::ops::ControlFlow::Break(());
        }
        self.inner.visit_tree(entry)
    }

    fn visit_nontree(
        &mut self,
        entry: &gix::objs::tree::EntryRef<'_>,
    ) -> gix::traverse::tree::visit::Action {
        if !self.one_more() {
            return std::ops::ControlFlow::Break(());
        }
        self.inner.visit_nontree(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn a_checkout_takes_each_name_once_and_no_git_folder() {
        let mut names = Names::default();
        assert!(names.take("src/lib.rs"));
        assert!(names.take("README.md"));
        assert!(!names.take("src/lib.rs"), "the same file twice");
        assert!(!names.take("src"), "a file where a folder is");
        assert!(
            !names.take("README.md/inner.txt"),
            "a folder where a file is"
        );
        assert!(!names.take(".git/config"));
        assert!(!names.take("vendor/.GIT/hooks/post-checkout"));
        assert!(names.take("docs/.gitignore"));
    }
}
