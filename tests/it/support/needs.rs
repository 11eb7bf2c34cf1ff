//! What a test needs from the machine beyond the repository (a program, a kernel feature), and
//! the one way a test says it is missing: outside CI it prints `skipped:` and why, and returns;
//! under `CI=true` it fails with the same reason, so CI cannot pass by skipping.

use std::process::{Command, Stdio};

use autothread::config::SandboxConfig;
use autothread::sandbox::{Lack, Sandbox};

/// `found`, or `None` after the skip (outside CI) or the failure (under `CI=true`) saying why.
pub fn needs<T>(found: Result<T, String>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(why) => {
            unmet(&why);
            None
        }
    }
}

/// Says that this machine lacks `why`: a failure under `CI=true`, a skip otherwise.
pub fn unmet(why: &str) {
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "under CI=true every test runs, and this one cannot: {why}"
    );
    eprintln!("skipped: {why}");
}

/// The test hook that makes the sandbox tests run as on an older kernel: a Landlock ABI (1 to
/// 6) that the probe is told this machine has at most, so that runs are confined with its rights
/// and the namespaces stand in for what it lacks. Read by these tests only, never by the bot;
/// `sandbox::an_unprivileged_bot_confines_its_runs_in_user_namespaces` sets it for each mode.
pub const EMULATED_LANDLOCK_ABI: &str = "AUTOTHREAD_TEST_LANDLOCK_ABI";

/// The Landlock ABI these tests act as having, when `EMULATED_LANDLOCK_ABI` says one.
pub fn emulated_landlock_abi() -> Option<i64> {
    let told = std::env::var(EMULATED_LANDLOCK_ABI).ok()?;
    Some(
        told.parse()
            .unwrap_or_else(|_| panic!("{EMULATED_LANDLOCK_ABI}={told} is not an ABI number")),
    )
}

/// The sandbox as the bot would have it here with `config` (Landlock, and its scopes or the
/// namespaces standing in for them when not root; the interpreter), with the Landlock ABI of
/// `EMULATED_LANDLOCK_ABI` where it is set.
pub fn sandbox(config: &SandboxConfig) -> Result<Sandbox, String> {
    let lacks: Vec<Lack> = emulated_landlock_abi()
        .map(Lack::LandlockAbi)
        .into_iter()
        .collect();
    Sandbox::probe_lacking(config, &lacks)
        .map_err(|why| format!("code cannot run sandboxed here: {why}"))
}

/// Whether agents can run Python here, as a bot with the default config would.
pub fn code_execution() -> Result<(), String> {
    sandbox(&SandboxConfig::default()).map(|_| ())
}

/// `git` with its smart-HTTP server, `git http-backend`.
pub fn git_http_backend() -> Result<(), String> {
    // Without a request it answers with an error page of its own; a git without it (or no git)
    // says otherwise.
    let ran = Command::new("git")
        .arg("http-backend")
        .env_remove("REQUEST_METHOD")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("git is not installed ({e})"))?;
    let said = String::from_utf8_lossy(&ran.stdout) + String::from_utf8_lossy(&ran.stderr);
    if said.contains("REQUEST_METHOD") {
        Ok(())
    } else {
        Err(format!(
            "`git http-backend` does not run here: {}",
            said.trim()
        ))
    }
}

/// `setpriv` (util-linux), with which a root test runs a program as another user.
pub fn setpriv() -> Result<(), String> {
    Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
        .map_err(|e| format!("setpriv (util-linux) is not installed ({e})"))
}
