//! The confinement a sandboxed process enters between fork and exec (`Confinement`): its own
//! session, resource limits, no network, an unprivileged identity, no new privileges, a Landlock
//! view of the files and a seccomp filter. Everything is prepared in the parent before the fork;
//! the child makes system calls only.
//!
//! In order: `setsid`; rlimits (CPU, address space, file size, open files, no core file); a network
//! namespace and the drop to the run's user when the bot is root, or a user and network namespace
//! otherwise; `RLIMIT_NPROC` after the change of user; `PR_SET_PDEATHSIG`; no new privileges;
//! Landlock (the run directory read-write, the system's libraries and the interpreter's prefix
//! read-only, TCP, abstract sockets and signals scoped where the sandbox's ABI has them); then the
//! seccomp filters from `seccompiler`. These refuse sockets, io_uring (which runs operations
//! seccomp never sees), tracing, namespaces and mounts, kernel modules and keys, and
//! `setsid`/`setpgid`; `clone3` is answered with ENOSYS so that the C library falls back to
//! `clone`, whose flags a filter can see.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::cgroup::Join;
use super::namespaces::Namespaces;
use super::syscall::check;
use super::{Limits, SandboxError};

/// The newest Landlock ABI whose rights are asked for. A run asks for those of the sandbox's ABI
/// (the kernel's, or the older one the probe was told to act as), never more; a kernel without
/// Landlock gives no ruleset at all, which `prepare` refuses.
pub(super) const LANDLOCK_ABI: ABI = ABI::V6;

/// The ABI whose rights a run's ruleset handles: the sandbox's, at most `LANDLOCK_ABI`.
pub(super) fn ruleset_abi(landlock_abi: i64) -> ABI {
    ABI::from(landlock_abi.clamp(0, LANDLOCK_ABI as i64) as i32)
}

/// Who the process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The bot runs as root: the process becomes this user and group, which the process limit
    /// binds (root is exempt from it) and which owns nothing of the bot's.
    Drop { uid: u32, gid: u32 },
    /// The bot runs unprivileged: the process enters its own user namespace, where the process
    /// limit counts its own processes only, not the bot's threads.
    NewUserNamespace,
}

impl Identity {
    /// The identity for this process: dropping to `uid` when running as root.
    pub fn for_this_process(uid: u32, gid: u32) -> Identity {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            Identity::Drop { uid, gid }
        } else {
            Identity::NewUserNamespace
        }
    }
}

/// Everything the child applies to itself, built before the fork.
pub struct Confinement {
    landlock: OwnedFd,
    /// Denies what a sandboxed program never needs (sockets, namespaces, tracing, io_uring, new
    /// sessions that would escape the kill of the process group); answered with EPERM.
    deny: BpfProgram,
    /// `clone3` answered with ENOSYS, so that the C library falls back to `clone`, whose flags
    /// the first filter can see (clone3 passes them in memory a filter cannot read).
    no_clone3: BpfProgram,
    /// On x86-64, the x32 numbering of every call refused, which the other filters (matching
    /// numbers) would not see.
    no_x32: Option<BpfProgram>,
    /// Soft and hard values.
    rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// The run's process limit for its user, where no cgroup counts its processes.
    processes: Option<u64>,
    /// The run's cgroup, joined first, so that everything the run does is counted in it.
    cgroup: Option<Join>,
    identity: Identity,
    /// The bot's process id, to see after the fork whether it died before the death signal was
    /// set up.
    parent: libc::pid_t,
    /// The run's own namespaces, where the kernel gives them.
    namespaces: Option<Namespaces>,
    /// With namespaces, the run's folder is a filesystem of its own, made after the fork: the
    /// Landlock rule giving it to the run (its path, the rights) is added to the ruleset then.
    own_folder_rule: Option<(std::ffi::CString, u64)>,
}

/// SECBIT_NOROOT, SECBIT_KEEP_CAPS_LOCKED, SECBIT_NO_CAP_AMBIENT_RAISE and the locks of the
/// first and last: root of a user namespace execs without capabilities, and cannot undo that.
const ROOT_GIVES_NOTHING: libc::c_ulong = 0x01 | 0x02 | 0x20 | 0x40 | 0x80;

/// `struct landlock_path_beneath_attr` of the kernel's interface.
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

impl Confinement {
    /// Prepares the confinement of a run in `run_dir`, which it may read and write; `read_only`
    /// paths (the system's libraries and the interpreter) may be read and executed; Landlock's
    /// rights are those of `landlock_abi`.
    pub fn prepare(
        run_dir: &Path,
        read_only: &[PathBuf],
        landlock_abi: i64,
        limits: &Limits,
        identity: Identity,
        namespaces: Option<Namespaces>,
        cgroup: Option<Join>,
    ) -> Result<Confinement, SandboxError> {
        // A cgroup bounds the run's memory (memfds included) and processes as a whole: each
        // process may then have all of the run's memory, and memfds are allowed.
        let (memory, memfd) = match &cgroup {
            Some(_) => (limits.memory_bytes, Memfd::Allowed),
            None => (limits.memory_per_process(), Memfd::Refused),
        };
        let own_folder_rule = match &namespaces {
            Some(_) => {
                use std::os::unix::ffi::OsStrExt;
                let path = std::ffi::CString::new(run_dir.as_os_str().as_bytes())
                    .map_err(|_| SandboxError::FolderPathNul)?;
                Some((path, folder_rights(landlock_abi)?))
            }
            None => None,
        };
        Ok(Confinement {
            own_folder_rule,
            landlock: landlock_ruleset(run_dir, read_only, landlock_abi)?,
            deny: deny_filter(memfd)?,
            no_clone3: no_clone3_filter()?,
            no_x32: no_x32_filter(),
            rlimits: vec![
                // The soft limit sends SIGXCPU, which tells the CPU limit apart from other kills;
                // a program that ignores it meets the hard limit a second later.
                (libc::RLIMIT_CPU, limits.cpu_secs, limits.cpu_secs + 1),
                (libc::RLIMIT_AS, memory, memory),
                (libc::RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
                (libc::RLIMIT_NOFILE, limits.open_files, limits.open_files),
                (libc::RLIMIT_CORE, 0, 0),
            ],
            processes: cgroup.is_none().then_some(limits.processes),
            cgroup,
            identity,
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            namespaces,
        })
    }

    /// Applies the confinement to the calling process. It runs in the child between fork and
    /// exec, where only async-signal-safe calls are allowed: system calls on data prepared
    /// before, no allocation, no locks.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: each call below is a plain system call on values owned by `self`, whose
        // pointers stay valid for the call; none allocates or takes a lock.
        unsafe {
            if let Some(cgroup) = &self.cgroup {
                cgroup.enter()?;
            }
            // Its own session and process group, which the parent kills whole.
            check(libc::setsid())?;
            for &(resource, soft, hard) in &self.rlimits {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                check(libc::setrlimit(resource, &limit))?;
            }
            // The process dies with the thread that started it, if the bot itself dies; and if
            // the bot died before this was set, the run does not start.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            if libc::getppid() != self.parent {
                libc::_exit(137);
            }
            if let Some(namespaces) = &self.namespaces {
                // From here on this is the run's first process; its monitor stayed behind.
                namespaces.enter(self.parent)?;
            }
            match (self.identity, self.namespaces.is_some()) {
                (Identity::Drop { uid, gid }, in_namespaces) => {
                    if !in_namespaces {
                        // A network namespace of its own, with nothing in it, where the kernel
                        // lets root make one (a container's seccomp profile may not): the network
                        // is closed without it too, since no socket can be made.
                        libc::unshare(libc::CLONE_NEWNET);
                    }
                    check(libc::setgroups(0, std::ptr::null()))?;
                    check(libc::setgid(gid))?;
                    check(libc::setuid(uid))?;
                }
                (Identity::NewUserNamespace, true) => {
                    // The run is root of its user namespace (the bot's id is mapped to 0 there):
                    // being root gives it no capability across exec, for good.
                    check(libc::prctl(
                        libc::PR_SET_SECUREBITS,
                        ROOT_GIVES_NOTHING,
                        0,
                        0,
                        0,
                    ))?;
                }
                (Identity::NewUserNamespace, false) => {
                    // Where a security module lets a new user namespace have no capabilities
                    // (Ubuntu's AppArmor default), it cannot have a network namespace: the user
                    // namespace alone is what the process limit needs.
                    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                        check(libc::unshare(libc::CLONE_NEWUSER))?;
                    }
                }
            }
            // Set after the identity change: the count is of the new user's processes (or of the
            // new user namespace's), so the bot's own threads do not count against it.
            // In a user namespace with the others, the run's monitor is in it too, and counts.
            // (A run's cgroup counts its processes instead, and is the one bound they meet.)
            if let Some(processes) = self.processes {
                let processes = match (self.identity, self.namespaces.is_some()) {
                    (Identity::NewUserNamespace, true) => processes + 1,
                    _ => processes,
                };
                let processes = libc::rlimit {
                    rlim_cur: processes,
                    rlim_max: processes,
                };
                check(libc::setrlimit(libc::RLIMIT_NPROC, &processes))?;
            }
            // A new identity (a user, a user namespace) cleared the death signal.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            if let Some((path, rights)) = &self.own_folder_rule {
                let folder = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                check(folder)?;
                let rule = PathBeneath {
                    allowed_access: *rights,
                    parent_fd: folder,
                };
                let added = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    self.landlock.as_raw_fd(),
                    1, // LANDLOCK_RULE_PATH_BENEATH
                    &rule as *const PathBeneath,
                    0,
                );
                libc::close(folder);
                check(added as libc::c_int)?;
            }
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.landlock.as_raw_fd(),
                0,
            ) as libc::c_int)?;
        }
        let refused = |_| io::Error::from_raw_os_error(libc::EPERM);
        if let Some(no_x32) = &self.no_x32 {
            seccompiler::apply_filter(no_x32).map_err(refused)?;
        }
        seccompiler::apply_filter(&self.no_clone3).map_err(refused)?;
        seccompiler::apply_filter(&self.deny).map_err(refused)?;
        Ok(())
    }
}

/// Whether this kernel enforces Landlock, and which ABI.
pub fn landlock_abi() -> Option<i64> {
    // SAFETY: with the VERSION flag the call only reports the ABI (or fails).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    (abi > 0).then_some(abi)
}

/// The files the process may touch: its run directory, in full; the read-only paths, to read and
/// execute; `/dev/null` and friends. TCP binds and connects (ABI 4), abstract UNIX sockets and
/// signals to processes outside the sandbox (ABI 6) are refused where `landlock_abi` has them;
/// below that, the run's own network and PID namespaces keep them in (see `probe`).
fn landlock_ruleset(
    run_dir: &Path,
    read_only: &[PathBuf],
    landlock_abi: i64,
) -> Result<OwnedFd, SandboxError> {
    let fail = SandboxError::Landlock;
    let abi = ruleset_abi(landlock_abi);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default().handle_access(all).map_err(fail)?;
    // An empty set of rights is refused by the crate: each family is handled only where the ABI
    // has it.
    let network = AccessNet::from_all(abi);
    if !network.is_empty() {
        ruleset = ruleset.handle_access(network).map_err(fail)?;
    }
    let scopes = Scope::from_all(abi);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(fail)?;
    }
    let created = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(read_only, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"],
            read | AccessFs::WriteFile,
        ))
        .map_err(fail)?
        .add_rules(path_beneath_rules([run_dir], all))
        .map_err(fail)?;
    Option::<OwnedFd>::from(created).ok_or(SandboxError::LandlockNotEnforced)
}

/// Every file right the ruleset handles: what `landlock_ruleset` asked for, as far as this
/// kernel gives it (a rule with more is refused).
fn folder_rights(sandbox_abi: i64) -> Result<u64, SandboxError> {
    let kernel = landlock_abi().ok_or(SandboxError::NoLandlockAbi)?;
    let asked = AccessFs::from_all(ruleset_abi(sandbox_abi));
    Ok(asked.bits() & AccessFs::from_all(ruleset_abi(kernel)).bits())
}

/// Whether a run may make memfds: memory in files of no filesystem, which no limit of a
/// process's bounds, but a run's cgroup does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Memfd {
    Allowed,
    Refused,
}

/// `clone` flags that make a namespace, refused to runs and servers.
pub(super) const NAMESPACE_FLAGS: [i32; 7] = [
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// Calls refused to a run and to a server alike (EPERM), besides the sockets each one's network
/// forbids.
pub(super) const REFUSED_CALLS: &[i64] = &[
    // io_uring runs operations (connect among them) that seccomp never sees.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Other processes' memory and tracing.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    // Namespaces and mounts.
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    // Kernel attack surface a program has no use for.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    // A new session or process group would escape the kill of the run's or server's group.
    libc::SYS_setsid,
    libc::SYS_setpgid,
];

/// Calls refused with EPERM. Everything else is allowed: the filter closes the doors a program
/// could use to reach past Landlock and the limits, not the ordinary system interface.
fn deny_filter(memfd: Memfd) -> Result<BpfProgram, SandboxError> {
    // No network at all: no socket can be made (pairs of connected sockets can).
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = std::iter::once(libc::SYS_socket)
        .chain(REFUSED_CALLS.iter().copied())
        .chain((memfd == Memfd::Refused).then_some(libc::SYS_memfd_create))
        .map(|call| (call, Vec::new()))
        .collect();
    // clone with any namespace flag.
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = flag as u64;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(SandboxError::Seccomp)?;
        clone_rules.push(SeccompRule::new(vec![condition]).map_err(SandboxError::Seccomp)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    program(rules, libc::EPERM)
}

pub(super) fn no_clone3_filter() -> Result<BpfProgram, SandboxError> {
    program(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        libc::ENOSYS,
    )
}

/// On x86-64, every call made with the x32 bit (numbers from 0x40000000) is refused: the same
/// architecture value carries both numberings, and the other filters match the 64-bit numbers.
#[cfg(target_arch = "x86_64")]
pub(super) fn no_x32_filter() -> Option<BpfProgram> {
    use seccompiler::sock_filter;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let statement = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    // Load the call number (offset 0 of seccomp_data); if it is at least the x32 bit, skip to
    // the refusal, else allow.
    Some(vec![
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 1,
            jf: 0,
            k: X32_SYSCALL_BIT,
        },
        statement(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        statement(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
    ])
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn no_x32_filter() -> Option<BpfProgram> {
    None
}

pub(super) fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
) -> Result<BpfProgram, SandboxError> {
    let arch: seccompiler::TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(SandboxError::Seccomp)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(SandboxError::Seccomp)?;
    filter.try_into().map_err(SandboxError::Seccomp)
}
