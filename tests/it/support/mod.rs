//! Shared test support: the fake OpenAI server and a driver for the `autothread` binary.
#![allow(dead_code)]

pub mod bot;
pub mod fake_discord;
pub mod fake_mcp;
pub mod fake_openai;
pub mod inproc;
pub mod needs;
pub mod postgres;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

/// How long a test waits for the bot, the console or a fake to do something before it fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// The fake's models (and the local models the provider tests name) cost nothing unless a test
/// prices them in `[budget.prices]`, which wins.
pub const FREE_TEST_MODELS: &str = "free_models = [\"test-model\", \"fake-passage\", \"fake-query\", \"local-llama\", \"mystery-7b\", \"smollm2\"]\n";

/// A temporary home for one test: config file, store, export directory.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub base_url: String,
    /// Variables every process of this environment is started with (the store's URL, say).
    pub env: Vec<(String, String)>,
}

impl TestEnv {
    /// A config pointing at `base_url` with fast retries and a 4k-context test model.
    pub fn new(base_url: &str, extra_llm: &str) -> TestEnv {
        // Tests that click through hundreds of cycles in seconds would otherwise meet the
        // default calls-per-minute limit; pacing has its own tests.
        TestEnv::with_budget(base_url, extra_llm, "guild_calls_per_minute = 0\n")
    }

    /// Like `with_budget`, with long-term memory on and embeddings served by the same fake.
    pub fn with_memory(base_url: &str, budget: &str) -> TestEnv {
        let env = TestEnv::with_budget(base_url, "", budget);
        let path = env.dir.path().join("bot.toml");
        let config = std::fs::read_to_string(&path)
            .unwrap()
            .replace("[memory]\nenabled = false\n", "[memory]\nenabled = true\npassage_model = \"fake-passage\"\nquery_model = \"fake-query\"\n");
        std::fs::write(path, config).unwrap();
        env
    }

    /// Like `new`, with the `[budget]` section given.
    pub fn with_budget(base_url: &str, extra_llm: &str, budget: &str) -> TestEnv {
        let dir = tempfile::tempdir().unwrap();
        let timeout = if extra_llm.contains("timeout_secs") {
            ""
        } else {
            "timeout_secs = 2\n"
        };
        let config = format!(
            "[llm]\nbase_url = \"{base_url}\"\nmodel = \"test-model\"\n{timeout}max_attempts = 3\nretry_initial_ms = 20\nretry_max_ms = 100\n{extra_llm}\n\n[llm.models.\"test-model\"]\ncontext_tokens = 4096\nmax_tokens = 500\n\n[memory]\nenabled = false\n\n[budget]\n{FREE_TEST_MODELS}{budget}"
        );
        std::fs::write(dir.path().join("bot.toml"), config).unwrap();
        TestEnv {
            dir,
            base_url: base_url.to_string(),
            env: Vec::new(),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_autothread"));
        cmd.arg("--config")
            .arg(self.dir.path().join("bot.toml"))
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("AZURE_OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_EMBED_BASE")
            .env_remove("OPENAI_EMBED_MODEL")
            .env_remove("OPENAI_EMBED_QUERY_MODEL")
            .env_remove("AUTOTHREAD_CONFIG")
            .env_remove("DISCORD_MESSAGE_CONTENT_INTENT")
            .env_remove("AUTOTHREAD_DATA_DIR")
            .env_remove("AUTOTHREAD_STORE_URL")
            // Tests run many bots at once: each listener gets a free port (the log names it).
            .env("AUTOTHREAD_OPS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// `console --continuous` on `task` as agent `name`, answering yes to the first `approvals`
    /// questions (commands of the external and control classes are asked for even then).
    pub async fn console_approving(
        &self,
        task: &str,
        name: &str,
        approvals: usize,
    ) -> (bool, String, String) {
        let mut run = self.spawn(&[
            "console",
            "--task",
            task,
            "--name",
            name,
            "--role",
            "r",
            "--continuous",
        ]);
        for asked in 1..=approvals {
            run.wait_for("Input:", asked, WAIT).await;
            run.type_lines(&["y"]).await;
        }
        run.finish(WAIT).await
    }

    pub fn spawn(&self, args: &[&str]) -> Running {
        Running::new(
            self.command(args)
                .spawn()
                .expect("the autothread binary starts"),
        )
    }

    /// Runs a short command to completion and returns (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut running = self.spawn(args);
        running.close_stdin();
        let (status, out, err) = running.finish(Duration::from_secs(30)).await;
        (status, out, err)
    }
}

/// A running `autothread` process with its output collected as it arrives.
pub struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

fn collect(
    mut source: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    into: Arc<Mutex<String>>,
) {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        loop {
            match source.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    });
}

impl Running {
    /// Wraps a process a test spawned itself (with extra environment, say).
    pub fn new_public(child: Child) -> Running {
        Running::new(child)
    }

    fn new(mut child: Child) -> Running {
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), stdout.clone());
        collect(child.stderr.take().unwrap(), stderr.clone());
        Running {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
        }
    }

    pub async fn type_lines(&mut self, lines: &[&str]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        for line in lines {
            stdin.write_all(line.as_bytes()).await.unwrap();
            stdin.write_all(b"\n").await.unwrap();
        }
        stdin.flush().await.unwrap();
    }

    /// The process id, for a benchmark that reads the process's memory from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is running")
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until stdout contains `needle` `times` times.
    pub async fn wait_for(&self, needle: &str, times: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.stdout().matches(needle).count() < times {
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {needle:?} ×{times}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (bounded) until the log on stderr contains `needle` `times` times.
    pub async fn wait_for_log(&self, needle: &str, times: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.stderr().matches(needle).count() < times {
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {needle:?} ×{times} in the log\n--- stderr ---\n{}",
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, as a deploy or `docker stop` sends it.
    pub fn terminate(&self) {
        let pid = self.child.id().expect("the process is running");
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
    }

    /// SIGKILL: no chance to flush or clean up, like a power cut.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }

    pub async fn finish(mut self, timeout: Duration) -> (bool, String, String) {
        self.stdin = None;
        let status = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => {
                let _ = self.child.kill().await;
                panic!(
                    "autothread did not exit in time\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
        };
        // Give the output collectors a moment to drain the pipes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        (status.success(), self.stdout(), self.stderr())
    }
}

/// The durable flushes in the disk report the console and the bot log as they stop ("this run:
/// N durable flushes, ..."); `None` when the log holds no report.
pub fn durable_flushes(log: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.split("this run: ").nth(1))
        .and_then(|report| report.split_whitespace().next()?.parse().ok())
}

/// The agent id the console printed when it created the agent.
pub fn created_agent_id(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Created agent "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|id| id.trim_end_matches('.').to_string())
        .expect("the console prints the new agent's id")
}
