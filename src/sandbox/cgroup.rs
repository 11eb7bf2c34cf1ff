//! A cgroup of each run's own, where the bot can make one: the kernel then bounds the run as a
//! whole (the memory of all its processes together, the pages of its memfds and of its folder
//! included as the kernel charges them; its process count; its share of the CPU) and measures its
//! CPU time exactly. Version 2 in a subtree delegated to the bot (its own cgroup under systemd's
//! `Delegate=yes`, or `sandbox.cgroup`), else version 1's separate hierarchies where the bot may
//! write them (as root); else nothing, and the per-process limits divide the run's.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The CPU controller's period: the run's share is a quota of each such period.
const CPU_PERIOD_US: u64 = 100_000;

/// The leaf a bot moves its own processes into, in a version 2 subtree: a cgroup with controllers
/// enabled for its children may hold no process itself.
const BOT_LEAF: &str = "bot";

/// What the operator asked for (`sandbox.cgroup`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// Version 2 in the bot's own cgroup where it is delegated, else version 1.
    Auto,
    /// No cgroup: the per-process limits divide the run's.
    Off,
    /// Version 2 in this directory, which the bot may write.
    At(PathBuf),
}

impl Setting {
    /// `sandbox.cgroup`: empty or "auto", "off", or the path of a version 2 cgroup.
    pub fn parse(value: &str) -> Setting {
        match value.trim() {
            "" | "auto" => Setting::Auto,
            "off" => Setting::Off,
            path => Setting::At(PathBuf::from(path)),
        }
    }
}

/// Which cgroup version runs' cgroups are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// What a run's cgroup bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub memory_bytes: u64,
    pub processes: u64,
    /// Cores' worth of CPU the run may use at once.
    pub cpu_cores: u64,
}

/// Where runs' cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A version 2 directory whose children are runs (and the bot's leaf).
    V2 { base: PathBuf },
    /// Version 1: the bot's own cgroup in each hierarchy (two controllers may share one).
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: PathBuf,
        cpuacct: PathBuf,
    },
}

/// The cgroups runs get on this machine.
#[derive(Debug)]
pub struct Cgroups {
    kind: Kind,
}

/// The number of the next run's cgroup, across every `Cgroups` of this process (a name holds the
/// process id too, so that two bots sharing a parent cgroup never meet).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// What probing found: the cgroups runs get, if any, and why each version is not used.
#[derive(Debug)]
pub struct Probed {
    pub cgroups: Option<Cgroups>,
    pub not_v2: Option<String>,
    pub not_v1: Option<String>,
}

/// Why runs cannot have a cgroup of one version here; `Probed` keeps its text for `describe`.
#[derive(Debug, thiserror::Error)]
enum CgroupError {
    #[error("{} is not a cgroup v2 directory: {source}", dir.display())]
    NotV2Directory { dir: PathBuf, source: io::Error },
    #[error("the cgroup v2 directory {} does not offer the {lacking} controller(s) (bound to cgroup v1, or not delegated)", dir.display())]
    ControllersLacking { dir: PathBuf, lacking: String },
    #[error("cannot make {}: {source}", leaf.display())]
    LeafNotMade { leaf: PathBuf, source: io::Error },
    #[error("cannot move process {pid} into {}: {source}", leaf.display())]
    NotMoved {
        pid: String,
        leaf: PathBuf,
        source: io::Error,
    },
    #[error("cannot enable the memory, pids and cpu controllers in {}: {source}", dir.display())]
    ControllersNotEnabled { dir: PathBuf, source: io::Error },
    #[error(transparent)]
    NotMade(io::Error),
    #[error("a cgroup could not be removed: {0}")]
    NotRemoved(#[source] io::Error),
    #[error("no cgroup v2 hierarchy is mounted")]
    NoV2Mount,
    #[error("this process is in no cgroup v2")]
    NotInV2,
    #[error("the bot's cgroup v2 ({}) offers no memory controller (bound to cgroup v1, or not delegated)", dir.display())]
    NoMemoryController { dir: PathBuf },
    #[error("the bot's cgroup v2 ({}) is not delegated to it: run it as a systemd service with Delegate=yes, or set sandbox.cgroup to a cgroup it may write", dir.display())]
    NotDelegated { dir: PathBuf },
    #[error("no cgroup v1 hierarchy has the {controller} controller")]
    NoV1Hierarchy { controller: &'static str },
    #[error("this process is in no cgroup v1 of {controller}")]
    NotInV1 { controller: &'static str },
}

/// What the kernel measured of a run, read before its cgroup is removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// The run's cgroup: one directory, or one in each hierarchy for version 1.
    pub dirs: Vec<PathBuf>,
    pub cpu: Duration,
    /// The most memory the run held at once, where the kernel says (version 2 before Linux 5.19
    /// does not).
    pub memory_peak: Option<u64>,
    /// Processes of the run the kernel killed for its memory bound.
    pub oom_kills: u64,
    /// Forks refused for its process bound.
    pub forks_refused: u64,
}

impl Cgroups {
    /// Finds where runs' cgroups can be made, proven by making (and removing) one.
    pub fn probe(setting: &Setting, bounds: Bounds) -> Probed {
        let mut probed = Probed {
            cgroups: None,
            not_v2: None,
            not_v1: None,
        };
        if *setting == Setting::Off {
            let off = "sandbox.cgroup is off".to_string();
            probed.not_v2 = Some(off.clone());
            probed.not_v1 = Some(off);
            return probed;
        }
        let v2 = match setting {
            Setting::At(path) => Cgroups::v2_at(path),
            _ => own_v2().and_then(|base| Cgroups::v2_at(&base)),
        };
        match v2.and_then(|cgroups| cgroups.trial(bounds).map(|()| cgroups)) {
            Ok(cgroups) => {
                probed.cgroups = Some(cgroups);
                return probed;
            }
            Err(why) => probed.not_v2 = Some(why.to_string()),
        }
        match own_v1().and_then(|cgroups| cgroups.trial(bounds).map(|()| cgroups)) {
            Ok(cgroups) => probed.cgroups = Some(cgroups),
            Err(why) => probed.not_v1 = Some(why.to_string()),
        }
        probed
    }

    /// Version 2 in `base`: its processes (the bot's) move into a leaf of their own, and the
    /// memory, pids and cpu controllers are enabled for its children.
    fn v2_at(base: &Path) -> Result<Cgroups, CgroupError> {
        let offered = std::fs::read_to_string(base.join("cgroup.controllers")).map_err(|e| {
            CgroupError::NotV2Directory {
                dir: base.to_path_buf(),
                source: e,
            }
        })?;
        let offered: Vec<&str> = offered.split_whitespace().collect();
        let lacking: Vec<&str> = ["memory", "pids", "cpu"]
            .into_iter()
            .filter(|c| !offered.contains(c))
            .collect();
        if !lacking.is_empty() {
            return Err(CgroupError::ControllersLacking {
                dir: base.to_path_buf(),
                lacking: lacking.join(", "),
            });
        }
        let held = std::fs::read_to_string(base.join("cgroup.procs")).unwrap_or_default();
        let held: Vec<&str> = held.split_whitespace().collect();
        if !held.is_empty() {
            let leaf = base.join(BOT_LEAF);
            make_dir(&leaf).map_err(|e| CgroupError::LeafNotMade {
                leaf: leaf.clone(),
                source: e,
            })?;
            for pid in held {
                // One that ended meanwhile is no obstacle.
                if let Err(e) = std::fs::write(leaf.join("cgroup.procs"), pid) {
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(CgroupError::NotMoved {
                            pid: pid.to_string(),
                            leaf,
                            source: e,
                        });
                    }
                }
            }
        }
        std::fs::write(base.join("cgroup.subtree_control"), "+memory +pids +cpu").map_err(|e| {
            CgroupError::ControllersNotEnabled {
                dir: base.to_path_buf(),
                source: e,
            }
        })?;
        Ok(Cgroups::new(Kind::V2 {
            base: base.to_path_buf(),
        }))
    }

    fn new(kind: Kind) -> Cgroups {
        Cgroups { kind }
    }

    pub fn version(&self) -> Version {
        match self.kind {
            Kind::V2 { .. } => Version::V2,
            Kind::V1 { .. } => Version::V1,
        }
    }

    /// "cgroup v2 in <dir>" or "cgroup v1 (<dirs>)", for `describe`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::V2 { base } => format!("cgroup v2 in {}", base.display()),
            Kind::V1 { memory, .. } => format!(
                "cgroup v1 (memory{}, pids, cpu, cpuacct)",
                match memory.join("memory.memsw.limit_in_bytes").exists() {
                    true => " and swap",
                    false => "",
                }
            ),
        }
    }

    /// Makes and removes one run's cgroup, which proves the bot may.
    fn trial(&self, bounds: Bounds) -> Result<(), CgroupError> {
        let mut run = self.create(bounds).map_err(CgroupError::NotMade)?;
        run.remove(Duration::from_secs(2))
            .map_err(CgroupError::NotRemoved)
    }

    /// A cgroup for one run, bounded; it is removed (everything in it killed) when dropped.
    pub fn create(&self, bounds: Bounds) -> io::Result<RunCgroup> {
        let name = format!(
            "autothread-run-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut run = RunCgroup {
            kind: self.kind.clone(),
            dirs: Vec::new(),
            name: name.clone(),
            removed: false,
        };
        let in_dir = |dir: &Path| dir.join(&name);
        let made = |e: io::Error, what: &str| {
            io::Error::new(e.kind(), format!("the run's cgroup ({what}): {e}"))
        };
        match &self.kind {
            Kind::V2 { base } => {
                let dir = in_dir(base);
                make_dir(&dir).map_err(|e| made(e, &format!("mkdir {}", dir.display())))?;
                run.dirs.push(dir.clone());
                let set = |file: &str, value: String| {
                    std::fs::write(dir.join(file), value).map_err(|e| made(e, file))
                };
                set("memory.max", bounds.memory_bytes.to_string())?;
                // Without swap accounting the file is absent, and there is no swap to bound.
                if let Err(e) = set("memory.swap.max", "0".to_string()) {
                    if dir.join("memory.swap.max").exists() {
                        return Err(e);
                    }
                }
                set("pids.max", bounds.processes.to_string())?;
                set(
                    "cpu.max",
                    format!(
                        "{} {CPU_PERIOD_US}",
                        bounds.cpu_cores.max(1) * CPU_PERIOD_US
                    ),
                )?;
            }
            Kind::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
            } => {
                for base in [memory, pids, cpu, cpuacct] {
                    let dir = in_dir(base);
                    if run.dirs.contains(&dir) {
                        continue;
                    }
                    make_dir(&dir).map_err(|e| made(e, &format!("mkdir {}", dir.display())))?;
                    run.dirs.push(dir);
                }
                let set = |base: &Path, file: &str, value: String| {
                    std::fs::write(in_dir(base).join(file), value).map_err(|e| made(e, file))
                };
                set(
                    memory,
                    "memory.limit_in_bytes",
                    bounds.memory_bytes.to_string(),
                )?;
                // Memory and swap together, where the kernel accounts swap: no more than memory.
                if in_dir(memory).join("memory.memsw.limit_in_bytes").exists() {
                    set(
                        memory,
                        "memory.memsw.limit_in_bytes",
                        bounds.memory_bytes.to_string(),
                    )?;
                }
                set(pids, "pids.max", bounds.processes.to_string())?;
                set(cpu, "cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                set(
                    cpu,
                    "cpu.cfs_quota_us",
                    (bounds.cpu_cores.max(1) * CPU_PERIOD_US).to_string(),
                )?;
            }
        }
        Ok(run)
    }
}

/// One run's cgroup (a directory in each hierarchy for version 1).
#[derive(Debug)]
pub struct RunCgroup {
    kind: Kind,
    dirs: Vec<PathBuf>,
    name: String,
    removed: bool,
}

/// The `cgroup.procs` files a process writes itself into, before it runs the program: prepared in
/// the parent, written between fork and exec.
pub struct Join(Vec<CString>);

impl Join {
    /// Moves the calling process into the run's cgroup ("0" names the writer).
    ///
    /// # Safety
    /// Between fork and exec: system calls only, on data prepared before.
    pub unsafe fn enter(&self) -> io::Result<()> {
        for file in &self.0 {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            super::syscall::check(fd)?;
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            let error = io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(error);
            }
        }
        Ok(())
    }
}

impl RunCgroup {
    /// What the run's first process writes to join it.
    pub fn join(&self) -> io::Result<Join> {
        self.dirs
            .iter()
            .map(|dir| {
                CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                    .map_err(|_| io::Error::other("a cgroup path holds a NUL byte"))
            })
            .collect::<io::Result<Vec<_>>>()
            .map(Join)
    }

    fn dir_of(&self, controller: Controller) -> PathBuf {
        match &self.kind {
            Kind::V2 { base } => base.join(&self.name),
            Kind::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
            } => match controller {
                Controller::Memory => memory,
                Controller::Pids => pids,
                Controller::Cpu => cpu,
                Controller::CpuAcct => cpuacct,
            }
            .join(&self.name),
        }
    }

    /// The CPU time of every process the run had, ended ones included.
    pub fn cpu_used(&self) -> Option<Duration> {
        match self.kind {
            Kind::V2 { .. } => {
                let stat = read(&self.dir_of(Controller::Cpu).join("cpu.stat"))?;
                keyed(&stat, "usage_usec").map(Duration::from_micros)
            }
            Kind::V1 { .. } => read(&self.dir_of(Controller::CpuAcct).join("cpuacct.usage"))?
                .trim()
                .parse()
                .ok()
                .map(Duration::from_nanos),
        }
    }

    /// Processes the kernel killed for the run's memory bound, so far.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.kind {
            Kind::V2 { .. } => "memory.events",
            Kind::V1 { .. } => "memory.oom_control",
        };
        read(&self.dir_of(Controller::Memory).join(file))
            .and_then(|text| keyed(&text, "oom_kill"))
            .unwrap_or(0)
    }

    pub fn usage(&self) -> Usage {
        let memory = self.dir_of(Controller::Memory);
        let peak = match self.kind {
            Kind::V2 { .. } => "memory.peak",
            Kind::V1 { .. } => "memory.max_usage_in_bytes",
        };
        Usage {
            dirs: self.dirs.clone(),
            cpu: self.cpu_used().unwrap_or_default(),
            memory_peak: read(&memory.join(peak)).and_then(|t| t.trim().parse().ok()),
            oom_kills: self.oom_kills(),
            forks_refused: read(&self.dir_of(Controller::Pids).join("pids.events"))
                .and_then(|text| keyed(&text, "max"))
                .unwrap_or(0),
        }
    }

    /// Kills everything in the cgroup and removes it, within `within`.
    pub fn remove(&mut self, within: Duration) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        let started = Instant::now();
        if let Kind::V2 { .. } = self.kind {
            // Linux 5.14 and later kill the whole cgroup at once; before, the list is killed.
            let _ = std::fs::write(self.dirs[0].join("cgroup.kill"), "1");
        }
        let mut last = Ok(());
        for dir in &self.dirs {
            last = empty_and_remove(dir, started, within);
            if last.is_err() {
                break;
            }
        }
        self.removed = last.is_ok();
        last
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove(Duration::from_secs(2)) {
            tracing::warn!(error = %e, "a run's cgroup could not be removed");
        }
    }
}

#[derive(Clone, Copy)]
enum Controller {
    Memory,
    Pids,
    Cpu,
    CpuAcct,
}

/// Kills the processes `dir` lists until none is left, then removes it; retried until `within`
/// has passed since `started` (a killed process leaves its cgroup a moment after the signal).
fn empty_and_remove(dir: &Path, started: Instant, within: Duration) -> io::Result<()> {
    loop {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: a signal to a process the run's cgroup holds, which is the run's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if started.elapsed() > within => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{} could not be removed: {e}", dir.display()),
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// `mkdir`, with an existing directory taken as made (a leaf of the bot's from before).
fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.ends_with(BOT_LEAF) => Ok(()),
        other => other,
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The number after `key` in a "key value" per line file.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The bot's own version 2 cgroup, where it is delegated to the bot: the root of a cgroup
/// namespace (a container's), or one systemd marked delegated (`Delegate=yes`).
fn own_v2() -> Result<PathBuf, CgroupError> {
    let mount = mounts()
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
        .ok_or(CgroupError::NoV2Mount)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or(CgroupError::NotInV2)?;
    let base = mount
        .point
        .join(own.trim().trim_start_matches('/'))
        .components()
        .collect::<PathBuf>();
    let offered = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    if !offered.split_whitespace().any(|c| c == "memory") {
        return Err(CgroupError::NoMemoryController { dir: base });
    }
    if own.trim() != "/" && !delegated(&base) {
        return Err(CgroupError::NotDelegated { dir: base });
    }
    Ok(base)
}

/// Whether systemd marked `dir` delegated (its `trusted.delegate` or `user.delegate` attribute).
fn delegated(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let name = CString::new(*name).unwrap_or_default();
        let mut value = [0u8; 8];
        // SAFETY: reads at most the buffer's length into it.
        let read = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        read > 0 && value[0] == b'1'
    })
}

/// The bot's own version 1 cgroups of the memory, pids, cpu and cpuacct hierarchies.
fn own_v1() -> Result<Cgroups, CgroupError> {
    let mounts = mounts();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for controller in ["memory", "pids", "cpu", "cpuacct"] {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == controller))
            .ok_or(CgroupError::NoV1Hierarchy { controller })?;
        let path = own
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then_some(path)
            })
            .next()
            .ok_or(CgroupError::NotInV1 { controller })?;
        dirs.push(mount.point.join(path.trim().trim_start_matches('/')));
    }
    let mut dirs = dirs.into_iter();
    let mut next = || dirs.next().unwrap_or_default();
    Ok(Cgroups::new(Kind::V1 {
        memory: next(),
        pids: next(),
        cpu: next(),
        cpuacct: next(),
    }))
}

/// A mounted filesystem: where, of which type, with which filesystem options.
struct Mount {
    point: PathBuf,
    fstype: String,
    options: String,
}

/// The mounts this process sees (`/proc/self/mountinfo`: the mount point is field 5; after the
/// " - " separator come the type, the source and the filesystem's own options).
fn mounts() -> Vec<Mount> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let point = before.split(' ').nth(4)?;
            let mut after = after.split(' ');
            let fstype = after.next()?.to_string();
            let options = after.nth(1).unwrap_or("").to_string();
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                fstype,
                options,
            })
        })
        .collect()
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(digits)) => {
                out.push(
                    digits
                        .iter()
                        .fold(0u8, |n, d| n.wrapping_mul(8) + (d - b'0')),
                );
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            memory_bytes: 256 << 20,
            processes: 9,
            cpu_cores: 2,
        }
    }

    #[test]
    fn a_v2_subtree_moves_the_bot_into_a_leaf_and_bounds_each_run() {
        // A directory laid out as a delegated cgroup v2 (the files the kernel would show), where
        // the bot's processes are.
        let fake = tempfile::tempdir().unwrap();
        let base = fake.path();
        std::fs::write(
            base.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        std::fs::write(base.join("cgroup.procs"), "4242\n4243\n").unwrap();
        std::fs::write(base.join("cgroup.subtree_control"), "").unwrap();
        let cgroups = Cgroups::v2_at(base).unwrap();
        // The last process written is what the fake file holds; the kernel would list both.
        assert_eq!(
            std::fs::read_to_string(base.join("bot/cgroup.procs")).unwrap(),
            "4243"
        );
        assert_eq!(
            std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +cpu"
        );
        assert_eq!(
            cgroups.describe(),
            format!("cgroup v2 in {}", base.display())
        );

        let mut run = cgroups.create(bounds()).unwrap();
        let dir = run.dirs[0].clone();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(dir.starts_with(base), "{}", dir.display());
        assert!(
            name.starts_with(&format!("autothread-run-{}-", std::process::id())),
            "{name}"
        );
        let file = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(file("memory.max"), (256u64 << 20).to_string());
        assert_eq!(file("memory.swap.max"), "0");
        assert_eq!(file("pids.max"), "9");
        assert_eq!(file("cpu.max"), "200000 100000");
        let join = run.join().unwrap();
        assert_eq!(
            join.0,
            [CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap()]
        );
        // What the kernel would report, read back.
        std::fs::write(
            dir.join("cpu.stat"),
            "usage_usec 1500000\nuser_usec 1000000\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 3\n",
        )
        .unwrap();
        std::fs::write(dir.join("memory.peak"), "268435456\n").unwrap();
        std::fs::write(dir.join("pids.events"), "max 7\n").unwrap();
        assert_eq!(
            run.usage(),
            Usage {
                dirs: vec![dir.clone()],
                cpu: Duration::from_millis(1500),
                memory_peak: Some(256 << 20),
                oom_kills: 3,
                forks_refused: 7,
            }
        );
        // Removal kills the whole cgroup at once; a directory holding files (which a real
        // cgroup's are not) stays, and says so.
        assert!(run.remove(Duration::from_millis(20)).is_err());
        assert_eq!(file("cgroup.kill"), "1");
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        std::fs::remove_dir(&dir).unwrap();
        run.remove(Duration::from_millis(20)).unwrap();
        assert!(!dir.exists());
        // The next run gets a cgroup of its own name.
        let second = cgroups.create(bounds()).unwrap();
        assert_ne!(second.dirs[0], dir);
        drop(std::fs::remove_dir_all(&second.dirs[0]));
    }

    #[test]
    fn a_v2_directory_without_the_controllers_is_refused_with_the_reason() {
        let fake = tempfile::tempdir().unwrap();
        std::fs::write(fake.path().join("cgroup.controllers"), "cpuset io\n").unwrap();
        let why = Cgroups::v2_at(fake.path()).unwrap_err().to_string();
        assert!(why.contains("memory, pids, cpu"), "{why}");
        let why = Cgroups::v2_at(&fake.path().join("nothing"))
            .unwrap_err()
            .to_string();
        assert!(why.contains("not a cgroup v2 directory"), "{why}");
    }

    #[test]
    fn the_setting_is_auto_off_or_a_path() {
        assert_eq!(Setting::parse(""), Setting::Auto);
        assert_eq!(Setting::parse("auto"), Setting::Auto);
        assert_eq!(Setting::parse("off"), Setting::Off);
        assert_eq!(
            Setting::parse("/sys/fs/cgroup/bots"),
            Setting::At(PathBuf::from("/sys/fs/cgroup/bots"))
        );
        let probed = Cgroups::probe(&Setting::Off, bounds());
        assert!(probed.cgroups.is_none());
        assert_eq!(probed.not_v1.as_deref(), Some("sandbox.cgroup is off"));
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/sys/fs/cgroup/a\040b"), "/sys/fs/cgroup/a b");
        assert_eq!(unescape(r"/plain\x"), r"/plain\x");
        assert_eq!(keyed("usage_usec 10\nmax 3\n", "max"), Some(3));
        assert_eq!(keyed("maxi 3\n", "max"), None);
    }
}
