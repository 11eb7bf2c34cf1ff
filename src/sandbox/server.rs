//! The confinement of a long-lived server program (a stdio MCP server, see `mcp::confined`),
//! built from the sandbox's pieces: its probe of Landlock's ABI, its run users, its Landlock
//! rulesets and seccomp programs.
//!
//! A server is not a run: it lives as long as the bot, keeps its own state, and may need the
//! network. So it gets no run directory, no resource limits but a core-file ban, and sockets;
//! but the same walls. In order, between fork and exec (`ServerConfinement::enter`): a user of
//! its own from the sandbox's range when the bot is root (`ServerUser`, held for the server's
//! life, a lock file keeping other bots and code runs off it), or a user namespace where the
//! kernel allows one otherwise; for `ServerNetwork::None`, a network namespace of its own where
//! the kernel allows; no new privileges; Landlock: the system and the server's own files
//! read-only, its private home and the configured paths read-write, nothing else (so the bot's
//! store, config and secrets are out of reach), TCP connect and bind refused but to the egress
//! proxy's port for `ServerNetwork::Proxy` (ABI 4, Linux 6.7), signals and abstract sockets
//! scoped to the server (ABI 6, Linux 6.12); then seccomp, refusing what the sandbox refuses
//! (tracing, namespaces, mounts, kernel modules and keys, io_uring, new sessions) except sockets,
//! of which `None` may make no internet or packet one at all and `Proxy` no internet one but a
//! TCP stream (so no UDP, and DNS only through the proxy).
//!
//! `ServerConfinement::prepare` refuses, with the reason (`Unconfinable`), what this kernel
//! cannot confine as asked: no Landlock at all, or a guarded network without Landlock's TCP rules
//! (the proxy settings alone would be advice a program may ignore). `describe` says what a server
//! gets, for the log and `autothread check`.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, NetPort, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use seccompiler::{BpfProgram, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

use super::confine::{
    landlock_abi, no_clone3_filter, no_x32_filter, program, ruleset_abi, Identity, NAMESPACE_FLAGS,
    REFUSED_CALLS,
};
use super::syscall::check;
use super::users::{UidRange, UserSlot, UserSlots, UID_LOCKS};
use super::SYSTEM_READ_ONLY;
use crate::locks::LockRecovered;

/// How a confined server reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerNetwork {
    /// Not at all.
    None,
    /// Only through the egress proxy listening on this port of 127.0.0.1.
    Proxy { port: u16 },
    /// As the bot does.
    Open,
}

/// The files a confined server may reach.
#[derive(Debug, Clone, Default)]
pub struct ServerPaths {
    /// Read and executed (the system's, its program's, the configured ones).
    pub read_only: Vec<PathBuf>,
    /// Read and written (its private home, the configured ones).
    pub read_write: Vec<PathBuf>,
}

/// Why a server cannot be confined as asked here; what `autothread check` shows after "off".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unconfinable {
    #[error("this kernel does not enforce Landlock (Linux 5.13 or later, with landlock in the lsm= list), so the server cannot be confined; set confine = false and network = \"open\" to run it unconfined, as the bot's user")]
    NoLandlock,
    #[error("a guarded network needs Landlock's TCP rules (ABI 4, Linux 6.7; this kernel has ABI {abi}), without which the server could ignore the proxy; use network = \"none\", or \"open\"")]
    NoTcpRules { abi: i64 },
    #[error("Landlock refused the server's rules: {0}")]
    Landlock(String),
    #[error("the server's seccomp filter could not be built: {0}")]
    Seccomp(String),
    #[error("no user of its own for the server: {0}")]
    NoUser(String),
}

/// Who a server runs as, held for its life: a user of the sandbox's range (the bot is root), or
/// the bot's user in a user namespace.
#[derive(Debug)]
pub struct ServerUser {
    identity: Identity,
    _slot: UserSlot<'static>,
}

impl ServerUser {
    /// A user for one server: from `first_uid` (and `first_gid`), `count` of them, shared with
    /// code runs and other bots through the sandbox's lock files.
    pub fn take(first_uid: u32, first_gid: u32, count: u32) -> Result<ServerUser, Unconfinable> {
        let slots = slots_for(first_uid, first_gid, count);
        let slot = slots
            .take()
            .map_err(|e| Unconfinable::NoUser(e.to_string()))?;
        Ok(ServerUser {
            identity: slot.identity(),
            _slot: slot,
        })
    }

    /// The user id and group id it becomes, when it becomes one.
    pub fn ids(&self) -> Option<(u32, u32)> {
        match self.identity {
            Identity::Drop { uid, gid } => Some((uid, gid)),
            Identity::NewUserNamespace => None,
        }
    }
}

/// The slots of one range of users, kept for the process's life (a bot has one range).
fn slots_for(first_uid: u32, first_gid: u32, count: u32) -> &'static UserSlots {
    /// Each range (first uid, first gid, count) and its slots.
    type Ranges = Vec<((u32, u32, u32), &'static UserSlots)>;
    static RANGES: Mutex<Ranges> = Mutex::new(Vec::new());
    let key = (first_uid, first_gid, count);
    let mut ranges = RANGES.lock_recovered();
    if let Some((_, slots)) = ranges.iter().find(|(k, _)| *k == key) {
        return slots;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let range = root.then(|| UidRange {
        first_uid,
        first_gid,
        count,
        locks: PathBuf::from(UID_LOCKS),
    });
    // Leaked once per range: the slots live as long as the servers that hold them.
    let slots: &'static UserSlots = Box::leak(Box::new(UserSlots::new(range, usize::MAX)));
    ranges.push((key, slots));
    slots
}

/// What the bot's own root process cannot be kept from anyway: the paths every server reads.
/// The system's (as a code run's), plus what programs commonly read under /etc (names, time
/// zones, certificates, Python's site configuration), and the null and random devices.
pub fn system_read_only() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
    paths.extend(
        [
            "/etc/hosts",
            "/etc/nsswitch.conf",
            "/etc/host.conf",
            "/etc/gai.conf",
            "/etc/passwd",
            "/etc/group",
            "/etc/timezone",
            "/etc/ca-certificates",
            "/etc/pki",
            "/etc/mime.types",
        ]
        .iter()
        .map(PathBuf::from),
    );
    if let Ok(entries) = std::fs::read_dir("/etc") {
        paths.extend(
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
                .map(|e| e.path()),
        );
    }
    paths
}

/// Everything a server's process applies to itself between fork and exec, built before.
pub struct ServerConfinement {
    landlock: OwnedFd,
    deny: BpfProgram,
    no_clone3: BpfProgram,
    no_x32: Option<BpfProgram>,
    identity: Identity,
    /// The namespaces it enters (`CLONE_NEW*` flags), proven possible before.
    unshare: libc::c_int,
    abi: i64,
    network: ServerNetwork,
}

impl ServerConfinement {
    /// The confinement for a server run as `user`, reaching `paths` and `network`; refused when
    /// this kernel cannot give it.
    pub fn prepare(
        paths: &ServerPaths,
        network: ServerNetwork,
        user: &ServerUser,
    ) -> Result<ServerConfinement, Unconfinable> {
        let abi = landlock_abi().ok_or(Unconfinable::NoLandlock)?;
        if matches!(network, ServerNetwork::Proxy { .. }) && abi < 4 {
            return Err(Unconfinable::NoTcpRules { abi });
        }
        let identity = user.identity;
        let wanted = match (identity, network) {
            (Identity::Drop { .. }, ServerNetwork::None) => libc::CLONE_NEWNET,
            (Identity::Drop { .. }, _) => 0,
            (Identity::NewUserNamespace, ServerNetwork::None) => {
                libc::CLONE_NEWUSER | libc::CLONE_NEWNET
            }
            (Identity::NewUserNamespace, _) => libc::CLONE_NEWUSER,
        };
        // What the kernel (or a container's seccomp profile) refuses is left out: the server is
        // still kept off the network by seccomp, and from the bot's files by Landlock.
        let unshare = [wanted, wanted & !libc::CLONE_NEWNET, 0]
            .into_iter()
            .find(|flags| *flags == 0 || namespaces_allowed(*flags))
            .unwrap_or(0);
        Ok(ServerConfinement {
            landlock: server_ruleset(paths, network, abi)?,
            deny: server_filter(network)?,
            no_clone3: no_clone3_filter().map_err(|e| Unconfinable::Seccomp(e.to_string()))?,
            no_x32: no_x32_filter(),
            identity,
            unshare,
            abi,
            network,
        })
    }

    /// One line for the log and `autothread check`: who the server is and what it reaches.
    pub fn describe(&self) -> String {
        let who = match self.identity {
            Identity::Drop { uid, .. } => format!("as uid {uid}"),
            Identity::NewUserNamespace if self.unshare & libc::CLONE_NEWUSER != 0 => {
                "in a user namespace of its own".to_string()
            }
            Identity::NewUserNamespace => {
                "as the bot's user (the kernel refused it a user namespace)".to_string()
            }
        };
        let signals = match (self.abi >= 6, self.identity) {
            (true, _) => "signals and abstract sockets kept in by Landlock's scopes",
            (false, Identity::Drop { .. }) => "signals kept in by its own user",
            (false, Identity::NewUserNamespace) => {
                "sharing the bot's user id, it can signal the bot's processes (Landlock's scopes need Linux 6.12)"
            }
        };
        let network = match self.network {
            ServerNetwork::None if self.unshare & libc::CLONE_NEWNET != 0 => {
                "no network (a network namespace of its own, and no internet socket)".to_string()
            }
            ServerNetwork::None => {
                "no network (no internet socket; the kernel refused a network namespace)"
                    .to_string()
            }
            ServerNetwork::Proxy { port } => format!(
                "network only through the egress proxy on 127.0.0.1:{port}, which applies the web guard (TCP to that port only, no UDP)"
            ),
            ServerNetwork::Open => {
                "network open: it reaches whatever the bot's machine reaches, private addresses included".to_string()
            }
        };
        format!("confined {who}, Landlock ABI {} (the system and its own files read-only, its home and paths read-write), seccomp, {signals}; {network}", self.abi)
    }

    /// Sets the confinement to be entered by `command`'s process before it execs.
    pub fn apply_to(self, command: &mut std::process::Command) {
        let confinement = std::sync::Arc::new(self);
        // SAFETY: `enter` makes system calls on data prepared above, and nothing else: it is
        // safe between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(command, move || confinement.enter());
        }
    }

    /// Applies the confinement to the calling process, between fork and exec: system calls on
    /// data prepared before, no allocation, no locks.
    fn enter(&self) -> io::Result<()> {
        // SAFETY: each call is a plain system call on values owned by `self`.
        unsafe {
            let core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(libc::setrlimit(libc::RLIMIT_CORE, &core))?;
            if self.unshare != 0 {
                check(libc::unshare(self.unshare))?;
            }
            if let Identity::Drop { uid, gid } = self.identity {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(gid))?;
                check(libc::setuid(uid))?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
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

/// Whether a child may enter new namespaces of `flags` here: tried once per process with a real
/// child, since a container's seccomp profile or a security module may refuse what the kernel
/// has.
fn namespaces_allowed(flags: libc::c_int) -> bool {
    static TRIED: Mutex<Vec<(libc::c_int, bool)>> = Mutex::new(Vec::new());
    static TRUE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let mut tried = TRIED.lock_recovered();
    if let Some((_, allowed)) = tried.iter().find(|(f, _)| *f == flags) {
        return *allowed;
    }
    let program = TRUE.get_or_init(|| {
        ["/bin/true", "/usr/bin/true"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    });
    let allowed = program.as_ref().is_some_and(|program| {
        let mut command = std::process::Command::new(program);
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: one system call between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                check(libc::unshare(flags))
            });
        }
        command.status().is_ok_and(|status| status.success())
    });
    tried.push((flags, allowed));
    allowed
}

/// The server's Landlock ruleset: `read_only` to read and execute, `read_write` in full, the
/// null and random devices; TCP handled where the network is not open (connect to the proxy's
/// port only, for `Proxy`), and the scopes where the ABI has them.
fn server_ruleset(
    paths: &ServerPaths,
    network: ServerNetwork,
    abi: i64,
) -> Result<OwnedFd, Unconfinable> {
    let fail = |e: landlock::RulesetError| Unconfinable::Landlock(e.to_string());
    let rights = ruleset_abi(abi);
    let all = AccessFs::from_all(rights);
    let read = AccessFs::from_read(rights);
    let mut ruleset = Ruleset::default().handle_access(all).map_err(fail)?;
    let tcp = AccessNet::from_all(rights);
    if network != ServerNetwork::Open && !tcp.is_empty() {
        ruleset = ruleset.handle_access(tcp).map_err(fail)?;
    }
    let scopes = Scope::from_all(rights);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(fail)?;
    }
    let mut created = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.read_only, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"],
            read | AccessFs::WriteFile,
        ))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.read_write, all))
        .map_err(fail)?;
    if let ServerNetwork::Proxy { port } = network {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(fail)?;
    }
    Option::<OwnedFd>::from(created).ok_or(Unconfinable::NoLandlock)
}

/// The calls a server may not make (EPERM): the sandbox's list but sockets, and of sockets those
/// its network forbids.
fn server_filter(network: ServerNetwork) -> Result<BpfProgram, Unconfinable> {
    let fail = |e: seccompiler::BackendError| Unconfinable::Seccomp(e.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = REFUSED_CALLS
        .iter()
        .map(|&call| (call, Vec::new()))
        .collect();
    let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(fail)
    };
    let rule = |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(fail);
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = flag as u64;
        clone_rules.push(rule(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(fail)?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let internet = [libc::AF_INET, libc::AF_INET6];
    let mut socket_rules = Vec::new();
    match network {
        ServerNetwork::Open => {}
        ServerNetwork::None => {
            for family in internet.into_iter().chain([libc::AF_PACKET]) {
                socket_rules.push(rule(vec![condition(0, SeccompCmpOp::Eq, family as u64)?])?);
            }
        }
        ServerNetwork::Proxy { .. } => {
            socket_rules.push(rule(vec![condition(
                0,
                SeccompCmpOp::Eq,
                libc::AF_PACKET as u64,
            )?])?);
            for family in internet {
                // Only a TCP stream: Landlock's rules are TCP's, so UDP (DNS among it), raw
                // sockets and other stream protocols (SCTP) would pass them.
                for kind in [
                    libc::SOCK_DGRAM,
                    libc::SOCK_RAW,
                    libc::SOCK_RDM,
                    libc::SOCK_SEQPACKET,
                    // SOCK_PACKET, the old way to packet sockets (the constant is deprecated).
                    10,
                ] {
                    socket_rules.push(rule(vec![
                        condition(0, SeccompCmpOp::Eq, family as u64)?,
                        condition(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
                    ])?);
                }
                socket_rules.push(rule(vec![
                    condition(0, SeccompCmpOp::Eq, family as u64)?,
                    condition(2, SeccompCmpOp::Ne, 0)?,
                    condition(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
                ])?);
            }
        }
    }
    if !socket_rules.is_empty() {
        rules.insert(libc::SYS_socket, socket_rules);
    }
    program(rules, libc::EPERM).map_err(|e| Unconfinable::Seccomp(e.to_string()))
}

/// Whether `path` exists, for the paths a server is given (a missing one is refused at start,
/// where Landlock would leave it out without a word).
pub fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}
