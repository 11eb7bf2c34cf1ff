//! `[sandbox]`: whether agents may run code, with which interpreter, as which users and within
//! which limits.

use serde::Deserialize;

/// Code execution (`execute_python`, `execute_python_file`, `execute_shell`) in a sandbox on the
/// real kernel. The commands are in the external class (asked for by default); where the kernel
/// cannot give the sandbox, they are off and `autothread check` says why.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Offer `execute_python` and `execute_python_file`.
    pub enabled: bool,
    /// Also offer `execute_shell` (AutoGPT's EXECUTE_LOCAL_COMMANDS); off unless set.
    pub shell: bool,
    /// The interpreter: a name looked up in /usr/local/bin, /usr/bin and /bin, or a full path.
    pub python: String,
    /// More paths runs may read and execute (a virtual environment, a toolchain).
    pub read_only_paths: Vec<std::path::PathBuf>,
    /// When the bot runs as root, each run becomes a user (and group) of its own, from these up:
    /// the process limit and signals then never reach another run. In a container, they must be
    /// in its user namespace's range.
    pub run_as_uid: u32,
    pub run_as_gid: u32,
    /// How many users (and groups) from those runs may become. Every bot on a host may share the
    /// range: a lock file per user keeps each user to one run at a time across them.
    pub run_as_uids: u32,
    /// Runs under way at once, across all agents; one more waits for none and is refused.
    pub concurrent_runs: usize,
    pub cpu_secs: u64,
    pub wall_secs: u64,
    /// Address space of each of a run's processes, which bounds what each can allocate.
    pub memory_mb: u64,
    /// Processes (and threads) a run may have at once.
    pub processes: u64,
    /// The largest file a run may write.
    pub file_mb: u64,
    pub open_files: u64,
    /// Output kept of each stream; a run writing 256 times that is stopped.
    pub output_kb: u64,
    /// What the run's folder may hold before the run is stopped.
    pub disk_mb: u64,
    /// Each run's own cgroup, which bounds its memory, processes and CPU as a whole: "auto" (a
    /// cgroup v2 subtree delegated to the bot, else cgroup v1 where the bot may write it), "off"
    /// (the memory divided among the processes instead), or a cgroup v2 directory the bot may
    /// write.
    pub cgroup: String,
    /// Cores' worth of CPU a run may use at once, where it has a cgroup.
    pub cpus: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: true,
            shell: false,
            python: "python3".into(),
            read_only_paths: Vec::new(),
            run_as_uid: 61_000,
            run_as_gid: 61_000,
            run_as_uids: 1000,
            concurrent_runs: 16,
            cpu_secs: 20,
            wall_secs: 60,
            memory_mb: 1024,
            processes: 32,
            file_mb: 16,
            open_files: 256,
            output_kb: 64,
            disk_mb: 64,
            cgroup: "auto".into(),
            cpus: 1,
        }
    }
}
