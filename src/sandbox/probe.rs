//! Finding out what this machine gives the sandbox: `Sandbox::probe` proves the confinement with
//! a real run (or refuses it with the reason), `probe_once` keeps the answer per process and
//! configuration, and `missing`/`describe` say which parts are in use and which are not, and
//! which `SignalContainment` keeps a run's signals and abstract sockets in. `probe_lacking` acts
//! as a machine with less (an older Landlock ABI, no namespaces): the test hook with which the
//! confinement tests run in each mode this machine allows.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use super::cgroup::{Cgroups, Setting, Version};
use super::confine::{landlock_abi, Identity};
use super::interpreter::{find_program, interpreter_paths};
use super::process::{become_subreaper, wait_with_timeout};
use super::users::{UidRange, UserSlots, UID_LOCKS};
use super::{
    prepare_dir, Isolation, Lack, Limits, Program, RunDir, Sandbox, SandboxError,
    MIN_PROCESS_MEMORY, POLL, PROBE_WAIT, REAP_WAIT, SANDBOX_PATH, SYSTEM_READ_ONLY,
};
use crate::config::SandboxConfig;
use crate::locks::LockRecovered;

/// Why this machine's sandbox is refused, and code execution is off: what the log and
/// `autothread check` say after "off". Shared by every `App` of the process (`probe_once`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "this kernel does not enforce Landlock (Linux 5.13 or later, with landlock in the lsm= list)"
    )]
    NoLandlock,
    #[error(
        "'{python}' was not found in {}; set sandbox.python to an interpreter's full path",
        SANDBOX_PATH
    )]
    NoInterpreter { python: String },
    #[error("the bot is not root, this kernel's Landlock (ABI {abi}) cannot keep a run from signalling the bot's own processes or reaching its abstract sockets (its scopes need Linux 6.12), and runs cannot have the PID and network namespaces of their own that stand in for them ({why}): allow the bot user namespaces (in a container, the seccomp profile deploy/seccomp.json; on Ubuntu, an AppArmor profile that allows them or kernel.apparmor_restrict_unprivileged_userns = 0), run the bot as root (each run then becomes a user of its own), or run it on Linux 6.12 or later")]
    SignalsUnscoped { abi: i64, why: String },
    #[error("sandbox.memory_mb ({memory_mib} MiB) divided among sandbox.processes ({processes}) leaves each process {each_mib} MiB, and the interpreter needs {needed_mib} MiB: raise memory_mb or lower processes (or give runs a cgroup, which bounds them as a whole)")]
    MemoryTooDivided {
        memory_mib: u64,
        processes: u64,
        each_mib: u64,
        needed_mib: u64,
    },
    /// The trial run failed where no part of the sandbox can be left out.
    #[error(transparent)]
    Trial(Arc<SandboxError>),
}

/// What keeps a run from signalling the bot's processes (and the other runs') and from reaching
/// their abstract UNIX sockets: the mode of confinement `autothread check` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalContainment {
    /// Landlock's signal and abstract-socket scopes (ABI 6, Linux 6.12).
    LandlockScopes,
    /// The bot is root: each run is a user of its own, which cannot signal another's processes.
    /// (No run can make a socket at all: seccomp refuses them.)
    OwnUser,
    /// A bot that is not root on an older Landlock: the run's own PID namespace, in which nothing
    /// outside can be named, and network namespace, to which abstract sockets belong.
    Namespaces,
}

impl SignalContainment {
    fn of(drops_to_users: bool, landlock_abi: i64) -> SignalContainment {
        match (landlock_abi >= 6, drops_to_users) {
            (true, _) => SignalContainment::LandlockScopes,
            (false, true) => SignalContainment::OwnUser,
            (false, false) => SignalContainment::Namespaces,
        }
    }
}

impl Sandbox {
    /// Finds the interpreter and proves the sandbox with a real run: a kernel (or an interpreter)
    /// that cannot give every part of it is refused, with the reason, and nothing runs
    /// unconfined.
    pub fn probe(config: &SandboxConfig) -> Result<Sandbox, ProbeError> {
        Sandbox::probe_lacking(config, &[])
    }

    /// `probe`, as on a machine that lacks `lacks` besides what this one lacks: what `check`
    /// says and which fallback runs take there, shown on this machine. A told Landlock ABI is
    /// the one runs are confined with, not only reported: the tests run the hostile programs on
    /// this kernel as they would run on an older one (ABI 5, Linux 6.7; ABI 1, Linux 5.13).
    pub fn probe_lacking(config: &SandboxConfig, lacks: &[Lack]) -> Result<Sandbox, ProbeError> {
        become_subreaper();
        let told = lacks.iter().find_map(|lack| match lack {
            Lack::LandlockAbi(abi) => Some(*abi),
            Lack::Namespaces => None,
        });
        let landlock_abi = landlock_abi()
            .map(|abi| told.map_or(abi, |told| abi.min(told)))
            .filter(|abi| *abi > 0)
            .ok_or(ProbeError::NoLandlock)?;
        let python = find_program(&config.python).ok_or_else(|| ProbeError::NoInterpreter {
            python: config.python.clone(),
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
        // A run in a user namespace keeps the bot's own user id: Landlock's scopes (ABI 6, Linux
        // 6.12) keep it from signalling the bot and the other runs and from reaching their
        // abstract sockets. Before them, the run's own PID namespace (nothing outside it can be
        // named, so none can be signalled) and network namespace (abstract sockets belong to
        // one) stand in, so such a bot's runs must have their namespaces or not run at all.
        let containment = SignalContainment::of(drops_to_users, landlock_abi);
        let unscoped = |why: String| ProbeError::SignalsUnscoped {
            abi: landlock_abi,
            why,
        };
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
            let why = "the kernel refused to make them";
            if containment == SignalContainment::Namespaces {
                return Err(unscoped(why.into()));
            }
            sandbox.isolation = Isolation::Shared { why: why.into() };
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
                if containment == SignalContainment::Namespaces {
                    return Err(unscoped(why.to_string()));
                }
                sandbox.isolation = Isolation::Shared {
                    why: why.to_string(),
                };
            } else {
                return Err(ProbeError::Trial(Arc::new(why)));
            }
        };
        sandbox.python_version = trial;
        Ok(sandbox)
    }

    /// Without a cgroup, the run's memory is divided among its processes: each share must hold
    /// the interpreter.
    fn check_division(&self) -> Result<(), ProbeError> {
        let limits = &self.limits;
        if self.cgroups.is_some() || limits.memory_per_process() >= MIN_PROCESS_MEMORY {
            return Ok(());
        }
        Err(ProbeError::MemoryTooDivided {
            memory_mib: limits.memory_bytes >> 20,
            processes: limits.processes,
            each_mib: limits.memory_per_process() >> 20,
            needed_mib: MIN_PROCESS_MEMORY >> 20,
        })
    }

    /// `probe`, once per process and configuration: every `App` built afterwards (each command
    /// of the command line builds one) shares the result, and with it the users runs become.
    pub fn probe_once(config: &SandboxConfig) -> Result<Arc<Sandbox>, ProbeError> {
        type Probed = Vec<(String, Result<Arc<Sandbox>, ProbeError>)>;
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

    /// What keeps a run's signals and abstract sockets from the bot and the other runs.
    pub fn signal_containment(&self) -> SignalContainment {
        SignalContainment::of(self.drops_to_users, self.landlock_abi)
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
        let kept_in = match self.signal_containment() {
            SignalContainment::LandlockScopes => {
                "signals and abstract sockets kept in by Landlock's scopes".to_string()
            }
            SignalContainment::OwnUser => format!(
                "signals kept in by the run's own user{}",
                match self.landlock_abi {
                    6.. => "",
                    _ => " (this Landlock has no scopes, which need ABI 6, Linux 6.12)",
                }
            ),
            SignalContainment::Namespaces => format!(
                "signals and abstract sockets kept in by the run's own PID and network namespaces, standing in for Landlock's scopes (ABI 6, Linux 6.12; this is ABI {})",
                self.landlock_abi
            ),
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
            "Python {} at {}, Landlock ABI {}, seccomp, {who}, {apart}, {kept_in}; {} s CPU (the run's processes together), {} s wall; {bounds}",
            self.python_version,
            self.python.display(),
            self.landlock_abi,
            self.limits.cpu_secs,
            self.limits.wall.as_secs(),
        )
    }

    /// The interpreter's version, from a run in the sandbox (the whole confinement included),
    /// which must also leave nothing on its error stream.
    fn run_blocking_trial(&self) -> Result<String, SandboxError> {
        let run = RunDir::create(Vec::new()).map_err(SandboxError::NoRunDir)?;
        let user = self.users.take()?;
        let identity = user.identity();
        prepare_dir(&run, identity).map_err(SandboxError::RunDirNotPrepared)?;
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
        let child = command
            .spawn()
            .map_err(|source| SandboxError::TrialNotStarted {
                python: self.python.clone(),
                source,
            })?;
        // Nothing of the trial's folder is read back: its monitor may end with it.
        drop(release);
        let output = wait_with_timeout(child, PROBE_WAIT).map_err(|source| {
            SandboxError::TrialUnanswered {
                python: self.python.clone(),
                source,
            }
        })?;
        if let Some(mut cgroup) = cgroup {
            cgroup
                .remove(REAP_WAIT)
                .map_err(SandboxError::TrialCgroupKept)?;
        }
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if !output.status.success() || stdout.is_empty() || !stderr.is_empty() {
            return Err(SandboxError::TrialUnclean {
                python: self.python.clone(),
                status: output.status,
                stderr,
            });
        }
        Ok(stdout)
    }
}
