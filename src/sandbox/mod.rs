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
//! readable), checks that Landlock is present (and its signal scope, when the bot is not root: a
//! run in a user namespace keeps the bot's user id, and only that scope keeps it from signalling
//! the bot and other runs), then proves the whole confinement with a real confined run that reports
//! the interpreter's version. Any failure turns code execution off with the reason, which
//! `autothread check` shows; `probe_once` probes once per process and configuration.
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
mod process;
pub mod rundir;
mod syscall;
mod users;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::config::{SandboxConfig, WorkspaceConfig};
use crate::locks::LockRecovered;
pub use confine::{landlock_abi, Identity};

pub use cgroup::Usage;
use cgroup::{Cgroups, Join, RunCgroup, Setting, Version};
use confine::Confinement;
use interpreter::{find_program, interpreter_paths};
pub use limits::{Limits, Ran, Stopped};
use namespaces::{release_pipe, Namespaces, Owner, WorkFolder};
use output::{read_capped, Flood};
use process::{
    become_subreaper, clock_ticks, group_cpu_ticks, reap_group, wait_with_timeout, GroupKiller,
};
pub use rundir::{Changes, RunDir};
pub use users::UID_LOCKS;
use users::{UidRange, UserSlots};

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
    /// Landlock of at most this ABI (0: none).
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
    /// Finds the interpreter and proves the sandbox with a real run: a kernel (or an interpreter)
    /// that cannot give every part of it is refused, with the reason, and nothing runs
    /// unconfined.
    pub fn probe(config: &SandboxConfig) -> Result<Sandbox, String> {
        Sandbox::probe_lacking(config, &[])
    }

    /// `probe`, as on a machine that lacks `lacks` besides what this one lacks: what `check`
    /// says and which fallback runs take there, shown on this machine.
    pub fn probe_lacking(config: &SandboxConfig, lacks: &[Lack]) -> Result<Sandbox, String> {
        become_subreaper();
        let told = lacks.iter().find_map(|lack| match lack {
            Lack::LandlockAbi(abi) => Some(*abi),
            Lack::Namespaces => None,
        });
        let landlock_abi = landlock_abi()
            .map(|abi| told.map_or(abi, |told| abi.min(told)))
            .filter(|abi| *abi > 0)
            .ok_or(
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
        let limits = Limits::from_config(config);
        let cgroups = Cgroups::probe(&Setting::parse(&config.cgroup), limits.bounds());
        let mut sandbox = Sandbox {
            isolation: Isolation::Namespaces,
            python,
            python_version: String::new(),
            read_only,
            drops_to_users,
            users: UserSlots::new(
                drops_to_users.then(|| UidRange {
                    first_uid: config.run_as_uid,
                    first_gid: config.run_as_gid,
                    count: config.run_as_uids,
                    locks: PathBuf::from(UID_LOCKS),
                }),
                config.concurrent_runs,
            ),
            limits,
            landlock_abi,
            cgroups: cgroups.cgroups,
            not_v2: cgroups.not_v2,
            not_v1: cgroups.not_v1,
        };
        // Namespaces and a cgroup where the machine gives them, proven by a trial run in them;
        // else the run goes without (the cgroup first), which `describe` (and so `autothread
        // check`) says.
        if lacks.contains(&Lack::Namespaces) {
            sandbox.isolation = Isolation::Shared {
                why: "the kernel refused to make them".into(),
            };
        }
        let trial = loop {
            sandbox.check_division()?;
            let why = match sandbox.run_blocking_trial() {
                Ok(version) => break version,
                Err(why) => why,
            };
            if let Some(cgroups) = sandbox.cgroups.take() {
                let refused = Some(format!("a trial run in its cgroup failed: {why}"));
                match cgroups.version() {
                    Version::V2 => sandbox.not_v2 = refused,
                    Version::V1 => sandbox.not_v1 = refused,
                }
            } else if sandbox.isolation == Isolation::Namespaces {
                sandbox.isolation = Isolation::Shared { why };
            } else {
                return Err(why);
            }
        };
        sandbox.python_version = trial;
        Ok(sandbox)
    }

    /// Without a cgroup, the run's memory is divided among its processes: each share must hold
    /// the interpreter.
    fn check_division(&self) -> Result<(), String> {
        let limits = &self.limits;
        if self.cgroups.is_some() || limits.memory_per_process() >= MIN_PROCESS_MEMORY {
            return Ok(());
        }
        Err(format!(
            "sandbox.memory_mb ({} MiB) divided among sandbox.processes ({}) leaves each process {} MiB, and the interpreter needs {} MiB: raise memory_mb or lower processes (or give runs a cgroup, which bounds them as a whole)",
            limits.memory_bytes >> 20,
            limits.processes,
            limits.memory_per_process() >> 20,
            MIN_PROCESS_MEMORY >> 20
        ))
    }

    /// `probe`, once per process and configuration: every `App` built afterwards (each command
    /// of the command line builds one) shares the result, and with it the users runs become.
    pub fn probe_once(config: &SandboxConfig) -> Result<Arc<Sandbox>, String> {
        type Probed = Vec<(String, Result<Arc<Sandbox>, String>)>;
        static PROBED: std::sync::Mutex<Probed> = std::sync::Mutex::new(Vec::new());
        let key = format!("{config:?}");
        let mut probed = PROBED.lock_recovered();
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

    /// Each part of the sandbox this machine does not give, and what a run can do without it.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        if let Isolation::Shared { why } = &self.isolation {
            missing.push(format!(
                "runs have no PID, IPC or mount namespace of their own ({why}): a run can list the host's processes and their owners, its SysV shared memory, queues and semaphores are the host's (and outlive it), its folder is on the host's disk (its size measured every {} ms, so a fast writer passes the limit for a moment, and files deleted while open are not seen), and it can see the names of files it cannot open{}",
                POLL.as_millis(),
                match self.drops_to_users {
                    true => "",
                    false => "; and, sharing the bot's user, it can change the bot's limits, priority and files",
                }
            ));
        }
        if self.cgroups.is_none() {
            missing.push(format!(
                "runs have no cgroup of their own ({}): the run's memory is divided among its processes ({} MiB of address space each), its CPU time is summed over its processes every {} ms (it may pass the limit by that much on each core, and may use every core), and memfd_create is refused (no per-process limit bounds it)",
                self.cgroup_refusals(),
                self.limits.memory_per_process() >> 20,
                POLL.as_millis()
            ));
        }
        missing
    }

    /// Why runs get no cgroup of either version, as far as each was tried.
    fn cgroup_refusals(&self) -> String {
        [("not v2", &self.not_v2), ("not v1", &self.not_v1)]
            .iter()
            .filter_map(|(which, why)| why.as_ref().map(|why| format!("{which}: {why}")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One line for the log and `autothread check`.
    pub fn describe(&self) -> String {
        let who = match self.drops_to_users {
            true => format!(
                "as uids from {} (one per run, locked in {UID_LOCKS} against other bots)",
                self.users.first_uid().unwrap_or_default()
            ),
            false => "in its own user namespace".to_string(),
        };
        let apart = match &self.isolation {
            Isolation::Namespaces => {
                "namespaces of its own (processes, IPC, mounts: only its folder writable, network)"
                    .to_string()
            }
            Isolation::Shared { why } => format!(
                "no namespaces of its own ({why}): a run sees the host's processes and shares its IPC objects"
            ),
        };
        let bounds = match &self.cgroups {
            Some(cgroups) => format!(
                "a cgroup of its own, {}{}: {} MiB and {} processes for the run as a whole, {} CPU core(s) at once",
                cgroups.describe(),
                match (&self.not_v2, cgroups.version()) {
                    (Some(why), Version::V1) => format!(" (not v2: {why})"),
                    _ => String::new(),
                },
                self.limits.memory_bytes >> 20,
                self.limits.processes,
                self.limits.cpus,
            ),
            None => format!(
                "no cgroup ({}): {} MiB divided into {} MiB of address space for each of up to {} processes",
                self.cgroup_refusals(),
                self.limits.memory_bytes >> 20,
                self.limits.memory_per_process() >> 20,
                self.limits.processes,
            ),
        };
        format!(
            "Python {} at {}, Landlock ABI {}, seccomp, {who}, {apart}; {} s CPU (the run's processes together), {} s wall; {bounds}",
            self.python_version,
            self.python.display(),
            self.landlock_abi,
            self.limits.cpu_secs,
            self.limits.wall.as_secs(),
        )
    }

    /// The interpreter's version, from a run in the sandbox (the whole confinement included),
    /// which must also leave nothing on its error stream.
    fn run_blocking_trial(&self) -> Result<String, String> {
        let run = RunDir::create(Vec::new()).map_err(|e| format!("no run directory: {e}"))?;
        let user = self.users.take().map_err(|e| e.to_string())?;
        let identity = user.identity();
        prepare_dir(&run, identity)
            .map_err(|e| format!("the run directory could not be prepared: {e}"))?;
        let cgroup = self.run_cgroup()?;
        let (mut command, release) = self.command(
            &Program::Python {
                code: String::new(),
            },
            &run,
            identity,
            cgroup.as_ref(),
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
        // Nothing of the trial's folder is read back: its monitor may end with it.
        drop(release);
        let output = wait_with_timeout(child, PROBE_WAIT).map_err(|e| {
            format!(
                "{} did not answer in the sandbox: {e}",
                self.python.display()
            )
        })?;
        if let Some(mut cgroup) = cgroup {
            cgroup
                .remove(REAP_WAIT)
                .map_err(|e| format!("the trial run's cgroup could not be removed: {e}"))?;
        }
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

    /// A cgroup for one run, where runs get one.
    fn run_cgroup(&self) -> Result<Option<RunCgroup>, String> {
        self.cgroups
            .as_ref()
            .map(|cgroups| cgroups.create(self.limits.bounds()))
            .transpose()
            .map_err(|e| format!("the run's cgroup could not be made: {e}"))
    }

    /// The process for `program`, confined, in `dir`, with an empty environment but for a few
    /// plain settings (never a secret of the bot's); in `cgroup` from before it starts.
    fn command(
        &self,
        program: &Program,
        run: &RunDir,
        identity: Identity,
        cgroup: Option<&RunCgroup>,
    ) -> Result<(std::process::Command, Option<OwnedFd>), String> {
        let join: Option<Join> = cgroup
            .map(RunCgroup::join)
            .transpose()
            .map_err(|e| format!("the run's cgroup cannot be joined: {e}"))?;
        let dir = run.path();
        let mut release = None;
        let namespaces = match self.isolation {
            Isolation::Namespaces => {
                let (monitor_end, bot_end) =
                    release_pipe().map_err(|e| format!("no pipe for the run: {e}"))?;
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
    ) -> Result<Ran, String> {
        let started = Instant::now();
        let user = self.users.take().map_err(|e| e.to_string())?;
        let identity = user.identity();
        let run = tokio::task::spawn_blocking(move || {
            let run = RunDir::create(files)?;
            prepare_dir(&run, identity)?;
            Ok::<_, io::Error>(run)
        })
        .await
        .map_err(|e| format!("the run directory could not be made: {e}"))?
        .map_err(|e| format!("the run directory could not be made: {e}"))?;
        let run = Arc::new(run);
        let mut cgroup = self.run_cgroup()?;
        let (command, release) = self.command(program, &run, identity, cgroup.as_ref())?;
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("the program could not be started: {e}"))?;
        let killer = GroupKiller(child.id().map(|pid| pid as libc::pid_t));
        // The run's own folder, held from here on: it outlives the run's namespace, to be read
        // back. Then the monitor may end when the run does.
        let own_folder = match release {
            Some(release) => {
                let held = hold_folder(child.id(), run.path());
                drop(release);
                Some(held.map_err(|e| format!("the run's folder could not be reached: {e}"))?)
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
