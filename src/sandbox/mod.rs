//! Runs code an agent wrote on the real kernel, confined: a fresh copy of its workspace, no
//! network, a read-only view of the system, no new privileges, a seccomp filter, resource limits,
//! a wall-clock timeout that kills the whole process group, an empty environment, capped output;
//! and reads back what the run changed. Where the kernel cannot confine, nothing runs.

mod confine;
mod interpreter;
pub mod rundir;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::config::{SandboxConfig, WorkspaceConfig};
pub use confine::{landlock_abi, Identity};

use confine::Confinement;
use interpreter::{find_program, interpreter_paths};
pub use rundir::{Changes, RunDir};

/// The only places a sandboxed program finds programs: never the bot's own PATH.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What every run may read and execute: the system's programs and libraries, and the few files
/// under /etc the dynamic loader and the C library read. The rest of /etc (and everything else)
/// stays out of view.
const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
];

/// How often a run's directory is measured while it runs.
const DISK_POLL: Duration = Duration::from_millis(250);

/// The limits of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub cpu_secs: u64,
    pub wall: Duration,
    /// Address space, which bounds what the program can allocate.
    pub memory_bytes: u64,
    pub processes: u64,
    pub file_bytes: u64,
    pub open_files: u64,
    /// Output kept of each stream; the rest is counted and dropped.
    pub output_bytes: usize,
    /// Output read before the run is stopped: more is a flood, not a result.
    pub output_flood_bytes: u64,
    /// Bytes the run's directory may hold before the run is stopped.
    pub disk_bytes: u64,
}

impl Limits {
    pub fn from_config(config: &SandboxConfig) -> Limits {
        Limits {
            cpu_secs: config.cpu_secs.max(1),
            wall: Duration::from_secs(config.wall_secs.max(1)),
            memory_bytes: config.memory_mb.max(16) << 20,
            processes: config.processes.max(1),
            file_bytes: config.file_mb.max(1) << 20,
            open_files: config.open_files.max(16),
            output_bytes: (config.output_kb.max(1) << 10) as usize,
            output_flood_bytes: (config.output_kb.max(1) << 10) * 256,
            disk_bytes: config.disk_mb.max(1) << 20,
        }
    }
}

/// What a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Python source, given on standard input.
    Python { code: String },
    /// A Python file of the workspace, with arguments.
    PythonFile { path: String, args: Vec<String> },
    /// A shell command line, run by `/bin/sh -c`.
    Shell { command: String },
}

/// Why a run was stopped from outside, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    WallClock,
    OutputFlood,
    DiskFull,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stopped: Option<Stopped>,
    pub stdout: String,
    pub stderr: String,
    /// Output bytes read beyond what was kept, both streams together.
    pub output_dropped: u64,
    pub changes: Changes,
    pub elapsed: Duration,
}

impl Ran {
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && self.stopped.is_none()
    }

    /// Which limit ended the run, in words, if one did.
    pub fn limit_hit(&self, limits: &Limits) -> Option<String> {
        match (self.stopped, self.signal) {
            (Some(Stopped::WallClock), _) => Some(format!(
                "it ran for {} s, the time limit, and was stopped",
                limits.wall.as_secs()
            )),
            (Some(Stopped::OutputFlood), _) => Some(format!(
                "it wrote more than {} bytes of output and was stopped",
                limits.output_flood_bytes
            )),
            (Some(Stopped::DiskFull), _) => Some(format!(
                "its files passed {} bytes (or could no longer be measured) and it was stopped",
                limits.disk_bytes
            )),
            (None, Some(libc::SIGXCPU)) => Some(format!(
                "it used {} s of CPU time, the limit, and was stopped",
                limits.cpu_secs
            )),
            (None, Some(libc::SIGXFSZ)) => Some(format!(
                "it wrote a file past {} bytes, the limit",
                limits.file_bytes
            )),
            _ => None,
        }
    }
}

/// A kernel sandbox proven to work on this machine, with its interpreter.
#[derive(Debug)]
pub struct Sandbox {
    python: PathBuf,
    python_version: String,
    read_only: Vec<PathBuf>,
    /// Whether runs become users of their own (the bot runs as root) or enter a user namespace.
    drops_to_users: bool,
    users: UserSlots,
    limits: Limits,
    landlock_abi: i64,
}

/// The users runs become when the bot is root: one per run under way, so that the process limit
/// (counted per user) and signals (a user's own processes only) never reach another run.
#[derive(Debug)]
struct UserSlots {
    first_uid: u32,
    first_gid: u32,
    busy: std::sync::Mutex<Vec<bool>>,
    /// Where the search for a free user starts: users are taken in turn, so the one a run just
    /// gave back is the last to be taken again.
    next: std::sync::atomic::AtomicUsize,
}

/// A user taken for one run, given back when dropped.
struct UserSlot<'s> {
    slots: &'s UserSlots,
    index: usize,
}

impl UserSlots {
    fn new(first_uid: u32, first_gid: u32, slots: usize) -> Self {
        UserSlots {
            first_uid,
            first_gid,
            busy: std::sync::Mutex::new(vec![false; slots.max(1)]),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn take(&self) -> Option<UserSlot<'_>> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let start = self.next.load(std::sync::atomic::Ordering::Relaxed);
        let index = (0..busy.len())
            .map(|offset| (start + offset) % busy.len())
            .find(|&i| !busy[i])?;
        busy[index] = true;
        self.next
            .store(index + 1, std::sync::atomic::Ordering::Relaxed);
        Some(UserSlot { slots: self, index })
    }
}

impl UserSlot<'_> {
    fn identity(&self) -> Identity {
        Identity::Drop {
            uid: self.slots.first_uid + self.index as u32,
            gid: self.slots.first_gid + self.index as u32,
        }
    }
}

impl Drop for UserSlot<'_> {
    fn drop(&mut self) {
        let mut busy = self.slots.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy[self.index] = false;
    }
}

/// Kills a run's whole process group when dropped: at the end of a run, and when the run's
/// future is dropped half-way (the bot shutting down, a cancelled command).
struct GroupKiller(Option<libc::pid_t>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // SAFETY: a signal to the run's own process group, which `setsid` made; only the
            // run's user is in it.
            unsafe { libc::killpg(group, libc::SIGKILL) };
        }
    }
}

impl Sandbox {
    /// Finds the interpreter and proves the sandbox with a real run: a kernel (or an interpreter)
    /// that cannot give every part of it is refused, with the reason, and nothing runs
    /// unconfined.
    pub fn probe(config: &SandboxConfig) -> Result<Sandbox, String> {
        become_subreaper();
        let landlock_abi = landlock_abi().ok_or(
            "this kernel does not enforce Landlock (Linux 5.13 or later, with landlock in the lsm= list)",
        )?;
        let python = find_program(&config.python).ok_or_else(|| {
            format!(
                "'{}' was not found in {SANDBOX_PATH}; set sandbox.python to an interpreter's full path",
                config.python
            )
        })?;
        let mut read_only: Vec<PathBuf> = SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
        // An interpreter installed outside /usr (a virtual environment, /opt) brings its prefix.
        for path in interpreter_paths(&python) {
            if !read_only.iter().any(|p| path.starts_with(p)) {
                read_only.push(path);
            }
        }
        // Debian's interpreter reads its site configuration through links into /etc/python3*.
        if let Ok(entries) = std::fs::read_dir("/etc") {
            read_only.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
                    .map(|e| e.path()),
            );
        }
        read_only.extend(config.read_only_paths.iter().cloned());
        let drops_to_users = matches!(
            Identity::for_this_process(config.run_as_uid, config.run_as_gid),
            Identity::Drop { .. }
        );
        // A run in a user namespace keeps the bot's own user id, so only Landlock's signal scope
        // (ABI 6, Linux 6.12) keeps it from signalling the bot and the other runs.
        if !drops_to_users && landlock_abi < 6 {
            return Err(format!(
                "the bot is not root, and this kernel's Landlock (ABI {landlock_abi}) cannot keep a run from signalling the bot's own processes: run the bot as root (each run then becomes a user of its own) or on Linux 6.12 or later"
            ));
        }
        let mut sandbox = Sandbox {
            python,
            python_version: String::new(),
            read_only,
            drops_to_users,
            users: UserSlots::new(config.run_as_uid, config.run_as_gid, config.concurrent_runs),
            limits: Limits::from_config(config),
            landlock_abi,
        };
        let trial = sandbox.run_blocking_trial()?;
        sandbox.python_version = trial;
        Ok(sandbox)
    }

    /// `probe`, once per process and configuration: every `App` built afterwards (each command
    /// of the command line builds one) shares the result, and with it the users runs become.
    pub fn probe_once(config: &SandboxConfig) -> Result<Arc<Sandbox>, String> {
        type Probed = Vec<(String, Result<Arc<Sandbox>, String>)>;
        static PROBED: std::sync::Mutex<Probed> = std::sync::Mutex::new(Vec::new());
        let key = format!("{config:?}");
        let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, result)) = probed.iter().find(|(k, _)| *k == key) {
            return result.clone();
        }
        let result = Sandbox::probe(config).map(Arc::new);
        probed.push((key, result.clone()));
        result
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// One line for the log and `autothread check`.
    pub fn describe(&self) -> String {
        let who = match self.drops_to_users {
            true => format!("as uids from {} (one per run)", self.users.first_uid),
            false => "in its own user namespace".to_string(),
        };
        format!(
            "Python {} at {}, Landlock ABI {}, seccomp, {who}; {} s CPU, {} s wall, {} MiB, {} processes",
            self.python_version,
            self.python.display(),
            self.landlock_abi,
            self.limits.cpu_secs,
            self.limits.wall.as_secs(),
            self.limits.memory_bytes >> 20,
            self.limits.processes,
        )
    }

    /// The interpreter's version, from a run in the sandbox (the whole confinement included),
    /// which must also leave nothing on its error stream.
    fn run_blocking_trial(&self) -> Result<String, String> {
        let run = RunDir::create(Vec::new()).map_err(|e| format!("no run directory: {e}"))?;
        let user = self.users.take();
        let identity = self.identity(user.as_ref())?;
        prepare_dir(&run, identity)
            .map_err(|e| format!("the run directory could not be prepared: {e}"))?;
        let mut command = self.command(
            &Program::Python {
                code: String::new(),
            },
            run.path(),
            identity,
        )?;
        command
            .args(["-c", "import sys; print(sys.version.split()[0])"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().map_err(|e| {
            format!(
                "{} could not be started in the sandbox: {e}",
                self.python.display()
            )
        })?;
        let output = wait_with_timeout(child, PROBE_WAIT).map_err(|e| {
            format!(
                "{} did not answer in the sandbox: {e}",
                self.python.display()
            )
        })?;
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if !output.status.success() || stdout.is_empty() || !stderr.is_empty() {
            return Err(format!(
                "{} does not run cleanly in the sandbox ({}): {stderr}",
                self.python.display(),
                output.status,
            ));
        }
        Ok(stdout)
    }

    /// Who a run is: the user taken for it, or its own user namespace.
    fn identity(&self, user: Option<&UserSlot<'_>>) -> Result<Identity, String> {
        // The users are also what bounds the runs under way, on both paths.
        match (self.drops_to_users, user) {
            (false, Some(_)) => Ok(Identity::NewUserNamespace),
            (true, Some(user)) => Ok(user.identity()),
            (_, None) => Err(format!(
                "{} runs are under way, the most at once (sandbox.concurrent_runs); try again when one has ended",
                self.users.busy.lock().map(|b| b.len()).unwrap_or(0)
            )),
        }
    }

    /// The process for `program`, confined, in `dir`, with an empty environment but for a few
    /// plain settings (never a secret of the bot's).
    fn command(
        &self,
        program: &Program,
        dir: &Path,
        identity: Identity,
    ) -> Result<std::process::Command, String> {
        let confinement = Arc::new(Confinement::prepare(
            dir,
            &self.read_only,
            &self.limits,
            identity,
        )?);
        let mut command = match program {
            // Isolated mode: no user site, no PYTHON* variables, no current folder on the path
            // but the script's; no bytecode files left in the workspace.
            Program::Python { .. } => {
                let mut c = std::process::Command::new(&self.python);
                c.args(["-I", "-B"]);
                c
            }
            Program::PythonFile { path, args } => {
                let mut c = std::process::Command::new(&self.python);
                // `./`, so that a file named like an option is still a file.
                c.args(["-I", "-B", &format!("./{path}")]).args(args);
                c
            }
            Program::Shell { command } => {
                let mut c = std::process::Command::new("/bin/sh");
                c.args(["-c", command.as_str()]);
                c
            }
        };
        command
            .current_dir(dir)
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("LANG", "C.UTF-8");
        // SAFETY: `enter` makes system calls on data prepared above, and nothing else: it is
        // safe between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || confinement.enter());
        }
        Ok(command)
    }

    /// Runs `program` on a copy of `files` and reads back what it changed.
    pub async fn run(
        &self,
        program: &Program,
        files: Vec<(String, Vec<u8>)>,
        workspace: &WorkspaceConfig,
    ) -> Result<Ran, String> {
        let started = Instant::now();
        let user = self.users.take();
        let identity = self.identity(user.as_ref())?;
        let run = tokio::task::spawn_blocking(move || {
            let run = RunDir::create(files)?;
            prepare_dir(&run, identity)?;
            Ok::<_, io::Error>(run)
        })
        .await
        .map_err(|e| format!("the run directory could not be made: {e}"))?
        .map_err(|e| format!("the run directory could not be made: {e}"))?;
        let run = Arc::new(run);
        let mut command =
            tokio::process::Command::from(self.command(program, run.path(), identity)?);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("the program could not be started: {e}"))?;
        let killer = GroupKiller(child.id().map(|pid| pid as libc::pid_t));
        let code = match program {
            Program::Python { code } => code.clone(),
            _ => String::new(),
        };
        let stdin = child.stdin.take();
        let feed = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A program that exits without reading its input is no error of ours.
                let _ = stdin.write_all(code.as_bytes()).await;
            }
        });
        let limits = self.limits.clone();
        let flood = Arc::new(Flood::new(limits.output_flood_bytes));
        let stdout = tokio::spawn(read_capped(
            child.stdout.take(),
            limits.output_bytes,
            flood.clone(),
        ));
        let stderr = tokio::spawn(read_capped(
            child.stderr.take(),
            limits.output_bytes,
            flood.clone(),
        ));
        let deadline = tokio::time::Instant::now() + limits.wall;
        let mut stopped = None;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status.ok(),
                _ = tokio::time::sleep_until(deadline) => {
                    stopped = Some(Stopped::WallClock);
                    break None;
                }
                _ = flood.passed.notified() => {
                    stopped = Some(Stopped::OutputFlood);
                    break None;
                }
                _ = tokio::time::sleep(DISK_POLL) => {
                    let dir = run.clone();
                    let full = tokio::task::spawn_blocking(move || dir.bytes_used())
                        .await
                        .map_or(true, |(used, cut)| cut || used > limits.disk_bytes);
                    if full {
                        stopped = Some(Stopped::DiskFull);
                        break None;
                    }
                }
            }
        };
        if stopped.is_none() && flood.is_passed() {
            // The program wrote its flood and ended before the loop looked.
            stopped = Some(Stopped::OutputFlood);
        }
        // Whatever the program left behind in its group (a background process, a stopped run's
        // children) ends with it, and is gone before its user is given to another run (whose
        // process limit it would otherwise still count against).
        let group = killer.0;
        drop(killer);
        let status = match status {
            Some(status) => Some(status),
            None => child.wait().await.ok(),
        };
        if let Some(group) = group {
            let gone = tokio::task::spawn_blocking(move || reap_group(group, REAP_WAIT))
                .await
                .unwrap_or(false);
            if !gone {
                tracing::warn!(group, "a sandboxed run's processes outlived its end");
            }
        }
        feed.abort();
        let (stdout, dropped_out) = stdout.await.unwrap_or_default();
        let (stderr, dropped_err) = stderr.await.unwrap_or_default();
        let workspace = workspace.clone();
        let dir = run.clone();
        let changes = tokio::task::spawn_blocking(move || dir.changes(&workspace))
            .await
            .map_err(|e| format!("the run's files could not be read back: {e}"))?;
        drop(user);
        let (code, signal) = match status {
            Some(status) => (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ),
            None => (None, None),
        };
        Ok(Ran {
            code,
            signal,
            stopped,
            stdout,
            stderr,
            output_dropped: dropped_out + dropped_err,
            changes,
            elapsed: started.elapsed(),
        })
    }
}

/// How long the probe's trial run may take.
const PROBE_WAIT: Duration = Duration::from_secs(15);

/// How long a killed run's processes may take to be gone.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// Makes this process the reaper of its runs' orphans (a background process whose parent has
/// ended), so that it can wait for them to be gone; otherwise they would go to init, which reaps
/// when it likes, or to nobody when the bot is init in a container.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sets a flag of this process; no pointers.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    });
}

/// Kills and reaps every process of a run's group until none is left, for at most `within`;
/// whether the group is gone.
fn reap_group(group: libc::pid_t, within: Duration) -> bool {
    let started = Instant::now();
    loop {
        // SAFETY: plain system calls on the run's own process group; no status is read.
        unsafe {
            while libc::waitpid(-group, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            if libc::kill(-group, 0) != 0 {
                return true;
            }
            libc::killpg(group, libc::SIGKILL);
        }
        if started.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Gives the run's directory to its user, when the run becomes one.
fn prepare_dir(run: &RunDir, identity: Identity) -> io::Result<()> {
    if let Identity::Drop { uid, gid } = identity {
        run.give_to(uid, gid)?;
    }
    Ok(())
}

/// A child's output, or an error once `wait` has passed (the child is then killed).
fn wait_with_timeout(
    mut child: std::process::Child,
    wait: Duration,
) -> io::Result<std::process::Output> {
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if started.elapsed() > wait {
            // SAFETY: a signal to the child's own process group, which `setsid` made.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer in {} s", wait.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The output read from a run so far, and a signal once it passes the flood mark.
struct Flood {
    read: std::sync::atomic::AtomicU64,
    mark: u64,
    passed: tokio::sync::Notify,
}

impl Flood {
    fn new(mark: u64) -> Self {
        Flood {
            read: std::sync::atomic::AtomicU64::new(0),
            mark,
            passed: tokio::sync::Notify::new(),
        }
    }

    /// Counts `n` bytes read; true once the total passes the mark (and the signal is given).
    fn add(&self, n: u64) -> bool {
        let total = self.read.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
        let passed = total > self.mark;
        if passed {
            self.passed.notify_one();
        }
        passed
    }

    fn is_passed(&self) -> bool {
        self.read.load(std::sync::atomic::Ordering::Relaxed) > self.mark
    }
}

/// Reads a stream to its end, keeping the first `keep` bytes (as text) and counting the rest;
/// stops reading at a flood, so that the writer blocks until the run is stopped.
async fn read_capped(
    stream: Option<impl AsyncRead + Unpin>,
    keep: usize,
    flood: Arc<Flood>,
) -> (String, u64) {
    let Some(mut stream) = stream else {
        return (String::new(), 0);
    };
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buffer[..room]);
                dropped += (n - room) as u64;
                if flood.add(n as u64) {
                    break;
                }
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), dropped)
}
