//! Runs code an agent wrote on the real kernel, confined: a fresh copy of its workspace, no
//! network, a read-only view of the system, no new privileges, a seccomp filter, resource limits,
//! a wall-clock timeout that kills the whole process group, an empty environment, capped output;
//! and reads back what the run changed. Where the kernel cannot confine, nothing runs.
//!
//! Each part is probed, and the best the machine gives is used: namespaces of the run's own
//! (`namespaces`), else Landlock's view of the host; a cgroup of the run's own (`cgroup`, v2 in a
//! delegated subtree, else v1), which bounds its memory, processes and CPU as a whole, else
//! per-process limits that divide the run's among its processes; a user of its own from the
//! operator's range for a root bot (`users`), else a user namespace. `Sandbox::describe` and
//! `Sandbox::missing` say which, for the log and `autothread check`.
//!
//! `Sandbox::probe` finds the interpreter in the sandbox's own PATH (run as found, its prefix
//! readable), checks that Landlock is present (ABI 1 is enough for the files), then proves the
//! whole confinement with a real confined run that reports the interpreter's version. A run in a
//! user namespace (the bot is not root) keeps the bot's user id: Landlock's signal and
//! abstract-socket scopes (ABI 6, Linux 6.12) keep it from the bot's processes, and before them
//! the run's own PID and network namespaces do (`SignalContainment`), so such a bot on an older
//! kernel runs code only where those namespaces are proven. Any failure turns code execution off
//! with the reason (a `ProbeError`), which `autothread check` shows; `probe_once` probes once per
//! process and configuration. A run that cannot be prepared or carried out says why with a
//! `SandboxError`.
//!
//! `Sandbox::run` takes a user slot (`users`), makes a `RunDir` (`rundir`), starts the confined
//! process (`process`, `confine`; in its cgroup and its own namespaces where the kernel allows) with an empty
//! environment and the code on stdin, reads its output with a cap per stream, and polls the wall
//! clock, the output and the disk. Whatever happened, the run's process group is then killed and
//! reaped; the bot is a child subreaper, so nothing a run started outlives it. `Ran::limit_hit`
//! names the limit that ended a run.

mod cgroup;
mod confine;
mod interpreter;
mod limits;
mod namespaces;
mod output;
mod probe;
mod process;
pub mod rundir;
pub mod server;
mod syscall;
mod users;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::config::WorkspaceConfig;
pub use confine::{landlock_abi, Identity};

pub use cgroup::Usage;
use cgroup::{Cgroups, Join, RunCgroup, Version};
use confine::Confinement;
pub use limits::{Limits, Ran, Stopped};
use namespaces::{release_pipe, Namespaces, Owner, WorkFolder};
use output::{read_capped, Flood};
pub use probe::{ProbeError, SignalContainment};
use process::{clock_ticks, group_cpu_ticks, reap_group, GroupKiller};
pub use rundir::{Changes, RunDir};
use users::UserSlots;
pub use users::{NoSlot, UID_LOCKS};

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

/// The least address space a process of a run may have: the interpreter alone takes 14 MiB.
const MIN_PROCESS_MEMORY: u64 = 24 << 20;

/// How often a run's CPU time (and, where its folder is the bot's copy, its files) is measured
/// while it runs.
const POLL: Duration = Duration::from_millis(100);

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

/// What a machine may lack, for `Sandbox::probe_lacking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lack {
    /// Landlock of at most this ABI (0: none): reported, and the rights runs are confined with.
    LandlockAbi(i64),
    /// Namespaces a run could have (a container's seccomp profile, no user namespaces).
    Namespaces,
}

/// How far a run is kept apart from the host, beyond Landlock, seccomp and the limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Namespaces of its own: a run sees only its own processes, IPC objects and network, and a
    /// file tree holding its folder (the one writable place) and the system's read-only paths.
    Namespaces,
    /// The kernel (or a container's seccomp profile) refused the namespaces, for the reason
    /// given: a run can list the host's processes, and its IPC objects are the host's.
    Shared { why: String },
}

/// Why a run (or the probe's trial run) could not be prepared or carried out. Each message is
/// what the agent reads after "The code could not be run:", and what `autothread check` shows
/// when the trial run fails.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    NoSlot(#[from] NoSlot),
    #[error("'{text}' holds a NUL byte")]
    NulByte { text: String },
    #[error("the run's folder's path holds a NUL byte")]
    FolderPathNul,
    #[error("this kernel does not enforce Landlock")]
    NoLandlockAbi,
    #[error(
        "this kernel does not enforce Landlock (5.13 or later, with landlock in the lsm= list)"
    )]
    LandlockNotEnforced,
    #[error("Landlock: {0}")]
    Landlock(#[source] landlock::RulesetError),
    #[error("seccomp: {0}")]
    Seccomp(#[source] seccompiler::BackendError),
    #[error("the run's cgroup could not be made: {0}")]
    CgroupNotMade(#[source] io::Error),
    #[error("the run's cgroup cannot be joined: {0}")]
    CgroupNotJoined(#[source] io::Error),
    #[error("no pipe for the run: {0}")]
    NoPipe(#[source] io::Error),
    #[error("the run directory could not be made: {0}")]
    RunDirNotMade(#[source] io::Error),
    #[error("the program could not be started: {0}")]
    NotStarted(#[source] io::Error),
    #[error("the run's folder could not be reached: {0}")]
    FolderUnreachable(#[source] io::Error),
    #[error("the run's files could not be read back: {0}")]
    NotReadBack(#[source] tokio::task::JoinError),
    #[error("no run directory: {0}")]
    NoRunDir(#[source] io::Error),
    #[error("the run directory could not be prepared: {0}")]
    RunDirNotPrepared(#[source] io::Error),
    #[error("{} could not be started in the sandbox: {source}", python.display())]
    TrialNotStarted { python: PathBuf, source: io::Error },
    #[error("{} did not answer in the sandbox: {source}", python.display())]
    TrialUnanswered { python: PathBuf, source: io::Error },
    #[error("the trial run's cgroup could not be removed: {0}")]
    TrialCgroupKept(#[source] io::Error),
    #[error("{} does not run cleanly in the sandbox ({status}): {stderr}", python.display())]
    TrialUnclean {
        python: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// A kernel sandbox proven to work on this machine, with its interpreter.
#[derive(Debug)]
pub struct Sandbox {
    isolation: Isolation,
    python: PathBuf,
    python_version: String,
    read_only: Vec<PathBuf>,
    /// Whether runs become users of their own (the bot runs as root) or enter a user namespace.
    drops_to_users: bool,
    users: UserSlots,
    limits: Limits,
    landlock_abi: i64,
    /// Where each run gets a cgroup of its own, if anywhere.
    cgroups: Option<Cgroups>,
    /// Why runs get no cgroup v2, and no cgroup v1.
    not_v2: Option<String>,
    not_v1: Option<String>,
}

impl Sandbox {
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn isolation(&self) -> &Isolation {
        &self.isolation
    }

    /// The version of the cgroups runs get, if they get one.
    pub fn cgroup_version(&self) -> Option<u8> {
        self.cgroups.as_ref().map(|c| match c.version() {
            Version::V1 => 1,
            Version::V2 => 2,
        })
    }

    /// A cgroup for one run, where runs get one.
    fn run_cgroup(&self) -> Result<Option<RunCgroup>, SandboxError> {
        self.cgroups
            .as_ref()
            .map(|cgroups| cgroups.create(self.limits.bounds()))
            .transpose()
            .map_err(SandboxError::CgroupNotMade)
    }

    /// The process for `program`, confined, in `dir`, with an empty environment but for a few
    /// plain settings (never a secret of the bot's); in `cgroup` from before it starts.
    fn command(
        &self,
        program: &Program,
        run: &RunDir,
        identity: Identity,
        cgroup: Option<&RunCgroup>,
    ) -> Result<(std::process::Command, Option<OwnedFd>), SandboxError> {
        let join: Option<Join> = cgroup
            .map(RunCgroup::join)
            .transpose()
            .map_err(SandboxError::CgroupNotJoined)?;
        let dir = run.path();
        let mut release = None;
        let namespaces = match self.isolation {
            Isolation::Namespaces => {
                let (monitor_end, bot_end) = release_pipe().map_err(SandboxError::NoPipe)?;
                release = Some(bot_end);
                let folder = WorkFolder {
                    bytes: self.limits.disk_bytes,
                    entries: run.max_entries() as u64 + 16,
                    copy: run.entries(),
                    owner: match identity {
                        Identity::Drop { uid, gid } => Some((uid, gid)),
                        Identity::NewUserNamespace => None,
                    },
                };
                let owner = match identity {
                    Identity::Drop { .. } => Owner::Root,
                    // SAFETY: getuid and getgid have no preconditions.
                    Identity::NewUserNamespace => unsafe {
                        Owner::UserNamespace {
                            uid: libc::getuid(),
                            gid: libc::getgid(),
                        }
                    },
                };
                Some(Namespaces::prepare(
                    &run.staging(),
                    dir,
                    &self.read_only,
                    owner,
                    &folder,
                    self.limits.memory_bytes,
                    monitor_end,
                )?)
            }
            Isolation::Shared { .. } => None,
        };
        let confinement = Arc::new(Confinement::prepare(
            dir,
            &self.read_only,
            self.landlock_abi,
            &self.limits,
            identity,
            namespaces,
            join,
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
        Ok((command, release))
    }

    /// Runs `program` on a copy of `files` and reads back what it changed.
    pub async fn run(
        &self,
        program: &Program,
        files: Vec<(String, Vec<u8>)>,
        workspace: &WorkspaceConfig,
    ) -> Result<Ran, SandboxError> {
        let started = Instant::now();
        let user = self.users.take()?;
        let identity = user.identity();
        let run = tokio::task::spawn_blocking(move || {
            let run = RunDir::create(files)?;
            prepare_dir(&run, identity)?;
            Ok::<_, io::Error>(run)
        })
        .await
        .map_err(|e| SandboxError::RunDirNotMade(io::Error::other(e)))?
        .map_err(SandboxError::RunDirNotMade)?;
        let run = Arc::new(run);
        let mut cgroup = self.run_cgroup()?;
        let (command, release) = self.command(program, &run, identity, cgroup.as_ref())?;
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(SandboxError::NotStarted)?;
        let killer = GroupKiller(child.id().map(|pid| pid as libc::pid_t));
        // The run's own folder, held from here on: it outlives the run's namespace, to be read
        // back. Then the monitor may end when the run does.
        let own_folder = match release {
            Some(release) => {
                let held = hold_folder(child.id(), run.path());
                drop(release);
                Some(held.map_err(SandboxError::FolderUnreachable)?)
            }
            None => None,
        };
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
                _ = tokio::time::sleep(POLL) => {
                    // The CPU time of every process of the run, together: the per-process limit
                    // alone would give each of them the whole. A cgroup counts it exactly (and
                    // says when the kernel killed a process for the run's memory); else the
                    // run's process group is summed.
                    let over = match &cgroup {
                        Some(cgroup) => {
                            if cgroup.oom_kills() > 0 {
                                stopped = Some(Stopped::Memory);
                                break None;
                            }
                            cgroup
                                .cpu_used()
                                .is_some_and(|used| used.as_secs_f64() > limits.cpu_secs as f64)
                        }
                        None => {
                            let group = killer.0;
                            let used = tokio::task::spawn_blocking(move || {
                                group.map_or(0, group_cpu_ticks)
                            })
                            .await
                            .unwrap_or(0);
                            used > limits.cpu_secs * clock_ticks()
                        }
                    };
                    if over {
                        stopped = Some(Stopped::CpuTime);
                        break None;
                    }
                    // The run's own folder is bounded by its size; the bot's copy is measured.
                    if own_folder.is_none() {
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
        // The kernel's measure of the run, then its cgroup is emptied and removed.
        let usage = match cgroup.take() {
            Some(mut cgroup) => tokio::task::spawn_blocking(move || {
                let usage = cgroup.usage();
                if let Err(e) = cgroup.remove(REAP_WAIT) {
                    tracing::warn!(error = %e, "a sandboxed run's cgroup outlived its end");
                }
                usage
            })
            .await
            .ok(),
            None => None,
        };
        if stopped.is_none() && usage.as_ref().is_some_and(|u| u.oom_kills > 0) {
            // A process was killed for the run's memory before the loop looked.
            stopped = Some(Stopped::Memory);
        }
        feed.abort();
        let (stdout, dropped_out) = stdout.await.unwrap_or_default();
        let (stderr, dropped_err) = stderr.await.unwrap_or_default();
        let workspace = workspace.clone();
        let dir = run.clone();
        let changes = tokio::task::spawn_blocking(move || match own_folder {
            Some(folder) => dir.changes_at(
                Path::new(&format!("/proc/self/fd/{}", folder.as_raw_fd())),
                &workspace,
            ),
            None => dir.changes(&workspace),
        })
        .await
        .map_err(SandboxError::NotReadBack)?;
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
            usage,
        })
    }
}

/// The run's own folder, reached through its monitor (`pid`), which is outside the run's PID
/// namespace and stays until the bot lets it go; the descriptor keeps the folder readable after
/// the namespace is gone.
fn hold_folder(pid: Option<u32>, work: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let pid = pid.ok_or_else(|| io::Error::other("the run has no process id"))?;
    let inside = work.strip_prefix("/").unwrap_or(work);
    let path = PathBuf::from(format!("/proc/{pid}/root")).join(inside);
    let folder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    Ok(OwnedFd::from(folder))
}

/// How long the probe's trial run may take.
const PROBE_WAIT: Duration = Duration::from_secs(15);

/// How long a killed run's processes may take to be gone.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// Gives the run's directory to its user, when the run becomes one.
fn prepare_dir(run: &RunDir, identity: Identity) -> io::Result<()> {
    if let Identity::Drop { uid, gid } = identity {
        run.give_to(uid, gid)?;
    }
    Ok(())
}
