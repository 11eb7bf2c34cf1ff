//! `clone_repository` against git's own smart-HTTP server (`git http-backend`, run as a CGI
//! program behind a loopback listener): the console clones a real repository into its workspace,
//! and the refusals (plain http to a host nobody allowed, a private repository, a download past
//! its cap, a folder that exists) come back as clear results.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use autothread::config::WebConfig;
use autothread::web::git::{clone_tip, CloneError, CloneLimits};
use autothread::web::Web;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};
use support::fake_openai::{agent_reply, progress_of, Expect, FakeOpenAi, Reply};
use support::needs::{self, needs};
use support::{created_agent_id, TestEnv};
use tokio::io::AsyncWriteExt;

/// A repository served by `git http-backend`, and the folder it lives in.
struct GitServer {
    port: u16,
    _root: tempfile::TempDir,
}

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(["-c", "init.defaultBranch=main", "-c", "core.symlinks=true"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?} failed");
}

/// `project.git`: a first commit with a file that a second commit removes (a shallow clone of
/// the tip must not bring it back), a source tree, a symbolic link and a file over the
/// workspace's 1 MiB limit.
fn make_repository(root: &Path) {
    let work = root.join("work");
    std::fs::create_dir_all(work.join("src")).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("old.txt"), "gone at the tip").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    std::fs::remove_file(work.join("old.txt")).unwrap();
    std::fs::write(work.join("README.md"), "# Project\nThe answer is 42.\n").unwrap();
    std::fs::write(work.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n").unwrap();
    std::fs::write(work.join("big.bin"), vec![b'x'; 1024 * 1024 + 1]).unwrap();
    std::os::unix::fs::symlink("README.md", work.join("link.md")).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "second"]);
    git(root, &["clone", "-q", "--bare", "work", "project.git"]);
}

/// Serves `root` with git's own CGI server; `/private/…` asks for credentials as a private
/// repository's host does. `None` (having said why) where git or its server is missing.
async fn serve_git() -> Option<GitServer> {
    needs(needs::git_http_backend())?;
    let root = tempfile::tempdir().unwrap();
    make_repository(root.path());
    let path = Arc::new(root.path().to_path_buf());
    let app = axum::Router::new().fallback(cgi).with_state(path);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Some(GitServer { port, _root: root })
}

async fn cgi(
    State(root): State<Arc<PathBuf>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A repository that moved, on this server; and one "moved" to the cloud's metadata address.
    let query = uri.query().map_or(String::new(), |q| format!("?{q}"));
    if let Some(rest) = uri.path().strip_prefix("/moved") {
        return Response::builder()
            .status(StatusCode::MOVED_PERMANENTLY)
            .header("Location", format!("{rest}{query}"))
            .body(Body::empty())
            .unwrap();
    }
    if uri.path().starts_with("/away/") {
        return Response::builder()
            .status(StatusCode::FOUND)
            .header("Location", "https://169.254.169.254/latest/meta-data")
            .body(Body::empty())
            .unwrap();
    }
    if uri.path().starts_with("/private/") {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("WWW-Authenticate", "Basic realm=\"git\"")
            .body(Body::empty())
            .unwrap();
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root.as_path())
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", root.as_path())
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        // As a web server's configuration passes it on: the client's protocol version.
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let raw = output.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)))
        .expect("CGI output has headers");
    let head = String::from_utf8_lossy(&raw[..split.0]).to_string();
    let mut response = Response::builder();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.trim()[..3].parse().unwrap();
            response = response.status(code);
        } else {
            response = response.header(name.trim(), value.trim());
        }
    }
    response
        .body(Body::from(raw[split.0 + split.1..].to_vec()))
        .unwrap()
}

fn limits() -> CloneLimits {
    CloneLimits {
        max_download_bytes: 8 * 1024 * 1024,
        max_file_bytes: 1024 * 1024,
        max_total_bytes: 4 * 1024 * 1024,
        max_files: 100,
        timeout: Duration::from_secs(30),
    }
}

fn web_allowing(port: u16) -> Web {
    Web::from_config(&WebConfig {
        allow_hosts: vec![format!("127.0.0.1:{port}")],
        timeout_secs: 10,
        ..WebConfig::default()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tip_of_a_repository_is_read_and_its_limits_hold() {
    let Some(server) = serve_git().await else {
        return;
    };
    let port = server.port;
    let web = web_allowing(port);
    let url = format!("http://127.0.0.1:{port}/project.git");
    let checkout = clone_tip(&web.fetcher, &url, &limits()).await.unwrap();
    assert_eq!(checkout.branch.as_deref(), Some("main"));
    assert_eq!(checkout.commit.len(), 40);
    let mut paths: Vec<&str> = checkout.files.iter().map(|(p, _)| p.as_str()).collect();
    paths.sort();
    assert_eq!(paths, vec!["README.md", "src/lib.rs"], "{checkout:?}");
    assert!(checkout.files.contains(&(
        "src/lib.rs".to_string(),
        b"pub fn answer() -> u32 { 42 }\n".to_vec()
    )));
    let left_out = checkout.left_out.join("; ");
    assert!(
        left_out.contains("'link.md': a symbolic link"),
        "{left_out}"
    );
    assert!(
        left_out.contains("'big.bin': 1048577 bytes, and files are limited to 1048576 bytes"),
        "{left_out}"
    );
    assert!(checkout.downloaded > 0);

    // A download past the cap is stopped, not kept.
    let small = CloneLimits {
        max_download_bytes: 2048,
        ..limits()
    };
    let refused = clone_tip(&web.fetcher, &url, &small).await.unwrap_err();
    assert!(
        matches!(refused, CloneError::TooLarge { max: 2048 }),
        "{refused}"
    );
    // Files that would pass the workspace's room refuse the clone as a whole.
    let no_room = CloneLimits {
        max_total_bytes: 10,
        ..limits()
    };
    let refused = clone_tip(&web.fetcher, &url, &no_room).await.unwrap_err();
    assert!(
        matches!(refused, CloneError::TooMuchContent { max: 10 }),
        "{refused}"
    );
    // A private repository says so, and nothing asks for credentials.
    let private = format!("http://127.0.0.1:{port}/private/project.git");
    let refused = clone_tip(&web.fetcher, &private, &limits())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .ends_with("asks for credentials: only public repositories can be cloned"),
        "{refused}"
    );
    // A moved repository is followed (and its new place used for the rest of the fetch); a
    // redirect to a private address is not.
    let moved = format!("http://127.0.0.1:{port}/moved/project.git");
    let followed = clone_tip(&web.fetcher, &moved, &limits()).await.unwrap();
    assert_eq!(followed.commit, checkout.commit);
    let away = format!("http://127.0.0.1:{port}/away/project.git");
    let refused = clone_tip(&web.fetcher, &away, &limits()).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("fetches never reach private networks"),
        "{refused}"
    );
    // Credentials never travel in a URL.
    let with_password = format!("http://user:secret@127.0.0.1:{port}/project.git");
    let refused = clone_tip(&web.fetcher, &with_password, &limits())
        .await
        .unwrap_err();
    assert!(matches!(refused, CloneError::Credentials), "{refused}");
    assert!(!refused.to_string().contains("secret"));
    // A tree of more entries than allowed is refused as a whole.
    let few = CloneLimits {
        max_files: 1,
        ..limits()
    };
    let refused = clone_tip(&web.fetcher, &url, &few).await.unwrap_err();
    assert!(
        matches!(refused, CloneError::TooManyFiles { max: 1 }),
        "{refused}"
    );
    // Without the operator's allowlist, plain http is refused, and so is this machine.
    let unlisted = Web::from_config(&WebConfig::default()).unwrap();
    let refused = clone_tip(&unlisted.fetcher, &url, &limits())
        .await
        .unwrap_err();
    assert!(matches!(refused, CloneError::NotHttps { .. }), "{refused}");
    let https_local = format!("https://127.0.0.1:{port}/project.git");
    let refused = clone_tip(&unlisted.fetcher, &https_local, &limits())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("fetches never reach private networks"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_clones_a_repository_into_its_workspace() {
    let Some(server) = serve_git().await else {
        return;
    };
    let port = server.port;
    let url = format!("http://127.0.0.1:{port}/project.git");
    let fake = FakeOpenAi::start(Expect::test_model()).await;
    fake.push_checked(
        Reply::Content(agent_reply(
            "clone_repository",
            json!({"url": url, "path": "project"}),
        )),
        Some(Box::new(|body: &Value| {
            let prompt = body.to_string();
            match prompt.contains("clone_repository(url, path)")
                && prompt.contains("cloning git repositories")
            {
                true => Ok(()),
                false => Err("the prompt offers clone_repository and names the ability".into()),
            }
        })),
    );
    // Again, into the same folder (named another way, so it is no repeat of the step).
    fake.push_content(agent_reply(
        "clone_repository",
        json!({"url": url, "path": "./project/"}),
    ));
    fake.push_checked(
        Reply::Content(agent_reply("finish", json!({"reason": "cloned"}))),
        Some(Box::new(|body: &Value| {
            let progress = progress_of(body);
            for needle in [
                "into 'project/': 2 files",
                "branch main",
                "Its history (.git) is not kept",
                "The folder 'project' already holds files; clone into a new folder.",
            ] {
                if !progress.contains(needle) {
                    return Err(format!("Progress lacks {needle:?}:\n{progress}"));
                }
            }
            Ok(())
        })),
    );
    let env = TestEnv::new(&fake.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!(
        "\n[web]\nallow_hosts = [\"127.0.0.1:{port}\"]\ntimeout_secs = 10\n"
    ));
    std::fs::write(&path, config).unwrap();
    let (ok, out, err) = env
        .console_approving("Read the project", "CloneGPT", 1)
        .await;
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);
    let export = env.dir.path().join("export");
    let (ok, shown, err) = env
        .run(&["export", &id, "--out", export.to_str().unwrap()])
        .await;
    assert!(ok, "{shown}{err}");
    let workspace = export.join("workspace/project");
    assert_eq!(
        std::fs::read_to_string(workspace.join("README.md")).unwrap(),
        "# Project\nThe answer is 42.\n"
    );
    assert!(workspace.join("src/lib.rs").is_file());
    for absent in [".git", "old.txt", "big.bin", "link.md"] {
        assert!(!workspace.join(absent).exists(), "{absent} was kept");
    }
    fake.assert_clean();
}
