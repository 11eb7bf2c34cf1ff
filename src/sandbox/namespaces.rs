//! A run's own namespaces: its processes, IPC objects, network and host name apart from the host's,
//! and a file tree holding only the run's folder (the one writable place) and the system's
//! read-only paths. Prepared in the parent; entered between fork and exec by the run's monitor, a
//! process outside the run's PID namespace that waits for the run and reports its end.
//!
//! The run's folder is a tmpfs of `sandbox.disk_mb` (`WorkFolder`), whose changes the bot reads
//! back through the monitor, and the System V limits of the run's IPC namespace are set to the
//! run's memory. Where the kernel gives no namespaces, the probe falls back to the confinement
//! alone, and `autothread check` names each missing part.

use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::syscall::check;
use super::SandboxError;

/// Device files a run may use, bound from the host's /dev.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];

/// Whether a bound path may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    ReadOnly,
    Writable,
}

/// One step of building the run's file tree; every path is under the new root, but for the
/// sources of bind mounts and copies.
enum Step {
    Dir(CString),
    File(CString),
    /// The run's folder: a filesystem in memory of its own, with these options (its size).
    Tmpfs {
        target: CString,
        options: CString,
    },
    /// A folder of the workspace made in the run's folder, given to `owner` (root's runs).
    CopyDir {
        target: CString,
        owner: Option<(u32, u32)>,
    },
    /// A file of the workspace copied into the run's folder.
    CopyFile {
        source: CString,
        target: CString,
        owner: Option<(u32, u32)>,
    },
    Bind {
        source: CString,
        target: CString,
        access: Access,
    },
}

/// Who owns the run's namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The bot is root: the namespaces belong to the host's user namespace, and the run drops to
    /// its own user afterwards.
    Root,
    /// The bot is not root: a user namespace of the run's own owns the others, in which the bot's
    /// user and group are the only ones mapped.
    UserNamespace { uid: u32, gid: u32 },
}

/// The run's folder as the run sees it: a filesystem in memory that holds at most `bytes` (files
/// deleted while open included) and `entries` files and folders, filled with a copy of `copy`
/// (folders before what they hold; paths relative to the bot's copy of the folder).
pub struct WorkFolder {
    pub bytes: u64,
    pub entries: u64,
    pub copy: Vec<(PathBuf, EntryKind)>,
    /// The run's user, who owns it, when the bot is root.
    pub owner: Option<(u32, u32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Folder,
    File,
}

/// Everything the monitor does to give a run its namespaces, built before the fork.
pub struct Namespaces {
    /// The read end of a pipe the bot holds the write end of: once the run has ended, the monitor
    /// waits for the bot to close it (after taking hold of the run's folder) before it ends too,
    /// since the run's folder lives only as long as its namespace has a process or a holder.
    release: OwnedFd,
    flags: libc::c_int,
    /// `/proc/self/uid_map`, `setgroups` and `gid_map` and what is written to each, in order.
    maps: Vec<(CString, CString)>,
    /// The IPC namespace's own limits (its `/proc/sys/kernel` files), where the kernel lets the
    /// namespace's owner set them (Linux 5.19 and later in a user namespace; always for root).
    ipc_limits: Vec<(CString, CString)>,
    new_root: CString,
    root_options: CString,
    steps: Vec<Step>,
    work: CString,
    slash: CString,
    dot: CString,
    tmpfs: CString,
}

impl Namespaces {
    /// Plans a tree under `staging` (an empty folder of the bot's) with `work` bound writable at
    /// its own path, and each of `read_only` that exists bound read-only at its own path.
    pub fn prepare(
        staging: &Path,
        work: &Path,
        read_only: &[PathBuf],
        owner: Owner,
        folder: &WorkFolder,
        ipc_bytes: u64,
        release: OwnedFd,
    ) -> Result<Namespaces, SandboxError> {
        let mut flags = libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWUTS;
        let mut maps = Vec::new();
        if let Owner::UserNamespace { uid, gid } = owner {
            flags |= libc::CLONE_NEWUSER;
            // The bot's ids are root's inside, the only ids there: what the run makes is the
            // bot's, and the namespace's root may set its IPC limits below. The run itself gets
            // no capability from being root there (see `Confinement::enter`).
            maps = vec![
                (c("/proc/self/uid_map")?, c(&format!("0 {uid} 1\n"))?),
                (c("/proc/self/setgroups")?, c("deny")?),
                (c("/proc/self/gid_map")?, c(&format!("0 {gid} 1\n"))?),
            ];
        }
        let mut planned = Plan {
            root: staging.to_path_buf(),
            dirs: HashSet::new(),
            steps: Vec::new(),
        };
        // A path under another is seen through it already (and a mount point made in it would be
        // made on the host).
        let mut sources: Vec<&PathBuf> = read_only
            .iter()
            .filter(|p| p.is_absolute() && p.exists())
            .collect();
        sources.sort();
        sources.dedup();
        let tops: Vec<&PathBuf> = sources
            .iter()
            .filter(|p| !sources.iter().any(|q| q != *p && p.starts_with(q)))
            .copied()
            .collect();
        for path in tops {
            planned.bind(path, Access::ReadOnly)?;
        }
        for device in DEVICES {
            let device = Path::new(device);
            if device.exists() {
                planned.bind(device, Access::Writable)?;
            }
        }
        planned.work_folder(work, folder)?;
        // SysV shared memory, queues and semaphores of the run's own IPC namespace, bounded as a
        // whole: its shared memory within `ipc_bytes`, a few queues and semaphore sets.
        let ipc_limits = [
            ("shmall", format!("{}", (ipc_bytes / 4096).max(1))),
            ("shmmax", format!("{ipc_bytes}")),
            ("shmmni", "32".to_string()),
            ("msgmni", "32".to_string()),
            ("sem", "32 1024 32 32".to_string()),
        ]
        .iter()
        .map(|(name, value)| Ok((c(&format!("/proc/sys/kernel/{name}"))?, c(value)?)))
        .collect::<Result<Vec<_>, SandboxError>>()?;
        Ok(Namespaces {
            release,
            flags,
            maps,
            ipc_limits,
            new_root: c_path(staging)?,
            root_options: c("mode=0755,size=1m")?,
            steps: planned.steps,
            work: c_path(work)?,
            slash: c("/")?,
            dot: c(".")?,
            tmpfs: c("tmpfs")?,
        })
    }

    /// Enters the namespaces and the new file tree, then forks: the run's first process (PID 1 of
    /// its namespace) returns, to become the program; the caller stays behind as the monitor,
    /// waits for it and ends as it ended, and never returns.
    ///
    /// # Safety
    /// Only between fork and exec, in a child of `bot`: it makes system calls only, on data
    /// prepared in `prepare`.
    pub unsafe fn enter(&self, bot: libc::pid_t) -> io::Result<()> {
        check(libc::unshare(self.flags))?;
        // A new user namespace cleared the death signal; and the bot may have died meanwhile.
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if libc::getppid() != bot {
            libc::_exit(137);
        }
        for (file, contents) in &self.maps {
            write_file(file, contents)?;
        }
        for (file, contents) in &self.ipc_limits {
            // Best effort: an older kernel keeps these to the host's root.
            let _ = write_file(file, contents);
        }
        let null = std::ptr::null::<libc::c_char>();
        // Nothing mounted here reaches the host, nor the other way round.
        check(libc::mount(
            null,
            self.slash.as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            self.tmpfs.as_ptr(),
            self.new_root.as_ptr(),
            self.tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            self.root_options.as_ptr().cast(),
        ))?;
        for step in &self.steps {
            match step {
                Step::Dir(path) => {
                    if libc::mkdir(path.as_ptr(), 0o755) != 0 {
                        let error = io::Error::last_os_error();
                        if error.raw_os_error() != Some(libc::EEXIST) {
                            return Err(error);
                        }
                    }
                }
                Step::File(path) => {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    check(fd)?;
                    libc::close(fd);
                }
                Step::Bind {
                    source,
                    target,
                    access,
                } => bind(source, target, *access)?,
                Step::Tmpfs { target, options } => check(libc::mount(
                    self.tmpfs.as_ptr(),
                    target.as_ptr(),
                    self.tmpfs.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                ))?,
                Step::CopyDir { target, owner } => {
                    check(libc::mkdir(target.as_ptr(), 0o700))?;
                    if let Some((uid, gid)) = owner {
                        check(libc::chown(target.as_ptr(), *uid, *gid))?;
                    }
                }
                Step::CopyFile {
                    source,
                    target,
                    owner,
                } => copy_file(source, target, *owner)?,
            }
        }
        // The new tree becomes the root, and the host's is let go: nothing else is reachable.
        check(libc::chdir(self.new_root.as_ptr()))?;
        check(libc::syscall(libc::SYS_pivot_root, self.dot.as_ptr(), self.dot.as_ptr()) as i32)?;
        check(libc::umount2(self.dot.as_ptr(), libc::MNT_DETACH))?;
        check(libc::chdir(self.slash.as_ptr()))?;
        // The tree's own folders (the mount points) cannot be written either.
        check(libc::mount(
            null,
            self.slash.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ))?;
        check(libc::chdir(self.work.as_ptr()))?;
        // Waiting on the run below needs the default disposition (an inherited "ignore" would
        // reap it unseen).
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let run = libc::fork();
        check(run)?;
        if run == 0 {
            // The run dies with its monitor.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            return Ok(());
        }
        monitor(run, self.release.as_raw_fd())
    }
}

/// Copies a file's bytes in the kernel, with no buffer of ours.
unsafe fn copy_file(
    source: &CString,
    target: &CString,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let from = libc::open(
        source.as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
    );
    check(from)?;
    let to = libc::open(
        target.as_ptr(),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
        0o600,
    );
    if to < 0 {
        let error = io::Error::last_os_error();
        libc::close(from);
        return Err(error);
    }
    let mut result = Ok(());
    loop {
        let sent = libc::sendfile(to, from, std::ptr::null_mut(), 1 << 30);
        if sent == 0 {
            break;
        }
        if sent < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINTR) {
                result = Err(error);
                break;
            }
        }
    }
    if let (Ok(()), Some((uid, gid))) = (&result, owner) {
        if libc::fchown(to, uid, gid) != 0 {
            result = Err(io::Error::last_os_error());
        }
    }
    libc::close(from);
    libc::close(to);
    result
}

/// Waits for the run's first process and ends as it ended: with its exit code, or by its
/// signal, so that the bot reads the run's own end (SIGXCPU for the CPU limit).
unsafe fn monitor(run: libc::pid_t, release: libc::c_int) -> ! {
    // The monitor holds nothing of the run's but the release pipe: not its output (the bot reads
    // to its end), nor the pipe that tells the bot the program has started.
    let keep = release as u32;
    let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0;
    let above = libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32) == 0;
    if !(below && above) {
        // A kernel before 5.9, or a seccomp profile that refuses close_range.
        for fd in 0..4096 {
            if fd != release {
                libc::close(fd);
            }
        }
    }
    let mut status = 0;
    loop {
        let waited = libc::waitpid(run, &mut status, 0);
        if waited == run {
            break;
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            libc::_exit(127);
        }
    }
    // The bot takes hold of the run's folder, then closes its end.
    let mut byte = 0u8;
    loop {
        let read = libc::read(release, (&mut byte as *mut u8).cast(), 1);
        if read == 0 || (read < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            break;
        }
    }
    if libc::WIFEXITED(status) {
        libc::_exit(libc::WEXITSTATUS(status));
    }
    let signal = libc::WTERMSIG(status);
    libc::signal(signal, libc::SIG_DFL);
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, signal);
    libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    libc::kill(libc::getpid(), signal);
    libc::_exit(128 + signal)
}

/// Binds `source` at `target`; read-only unless writable, keeping the flags the source's mount
/// has (a user namespace may not clear them).
unsafe fn bind(source: &CString, target: &CString, access: Access) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    check(libc::mount(
        source.as_ptr(),
        target.as_ptr(),
        null,
        libc::MS_BIND | libc::MS_REC,
        std::ptr::null(),
    ))?;
    // (The C library's statvfs takes the flags from the kernel's statfs: no allocation.)
    let mut stat: libc::statvfs = std::mem::zeroed();
    check(libc::statvfs(target.as_ptr(), &mut stat))?;
    // The ST_ flags have the values of the MS_ ones.
    let kept = (stat.f_flag as libc::c_ulong)
        & (libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC
            | libc::MS_NOATIME
            | libc::MS_NODIRATIME
            | libc::MS_RELATIME
            | libc::MS_RDONLY);
    let read_only = match access {
        Access::ReadOnly => libc::MS_RDONLY,
        Access::Writable => 0,
    };
    check(libc::mount(
        null,
        target.as_ptr(),
        null,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOSUID | kept | read_only,
        std::ptr::null(),
    ))
}

unsafe fn write_file(file: &CString, contents: &CString) -> io::Result<()> {
    let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    check(fd)?;
    let bytes = contents.as_bytes();
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let error = io::Error::last_os_error();
    libc::close(fd);
    if written != bytes.len() as isize {
        return Err(error);
    }
    Ok(())
}

/// The steps planned so far, with the folders they make.
struct Plan {
    root: PathBuf,
    dirs: HashSet<PathBuf>,
    steps: Vec<Step>,
}

impl Plan {
    /// `path` under the new root.
    fn under_root(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// The folders down to `path` (not `path` itself), each made once.
    fn folders_to(&mut self, path: &Path) -> Result<(), SandboxError> {
        let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
        ancestors.reverse();
        for folder in ancestors {
            if folder == Path::new("/") || !self.dirs.insert(folder.to_path_buf()) {
                continue;
            }
            let target = self.under_root(folder);
            self.steps.push(Step::Dir(c_path(&target)?));
        }
        Ok(())
    }

    /// The run's folder at its own place, filled with the workspace's copy.
    fn work_folder(&mut self, work: &Path, folder: &WorkFolder) -> Result<(), SandboxError> {
        self.folders_to(work)?;
        let target = self.under_root(work);
        self.steps.push(Step::Dir(c_path(&target)?));
        let owner = match folder.owner {
            Some((uid, gid)) => format!(",uid={uid},gid={gid}"),
            None => String::new(),
        };
        self.steps.push(Step::Tmpfs {
            target: c_path(&target)?,
            options: c(&format!(
                "size={},nr_inodes={},mode=0700{owner}",
                folder.bytes.max(4096),
                folder.entries.max(16)
            ))?,
        });
        for (relative, kind) in &folder.copy {
            let inside = c_path(&target.join(relative))?;
            self.steps.push(match kind {
                EntryKind::Folder => Step::CopyDir {
                    target: inside,
                    owner: folder.owner,
                },
                EntryKind::File => Step::CopyFile {
                    source: c_path(&work.join(relative))?,
                    target: inside,
                    owner: folder.owner,
                },
            });
        }
        Ok(())
    }

    /// `path` (followed if a link) bound at its own place.
    fn bind(&mut self, path: &Path, access: Access) -> Result<(), SandboxError> {
        self.folders_to(path)?;
        let target = self.under_root(path);
        let is_dir = path.is_dir();
        if is_dir {
            if self.dirs.insert(path.to_path_buf()) {
                self.steps.push(Step::Dir(c_path(&target)?));
            }
        } else {
            self.steps.push(Step::File(c_path(&target)?));
        }
        self.steps.push(Step::Bind {
            source: c_path(path)?,
            target: c_path(&target)?,
            access,
        });
        Ok(())
    }
}

/// A pipe whose ends are closed on exec: the monitor's end (read) and the bot's (write).
pub fn release_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array, which this function then owns.
    unsafe {
        check(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

fn c(text: &str) -> Result<CString, SandboxError> {
    CString::new(text).map_err(|_| SandboxError::NulByte {
        text: text.to_string(),
    })
}

fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::NulByte {
        text: path.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|step| match step {
                Step::Dir(p) => format!("dir {}", p.to_string_lossy()),
                Step::Tmpfs { target, options } => format!(
                    "tmpfs {} {}",
                    target.to_string_lossy(),
                    options.to_string_lossy()
                ),
                Step::CopyDir { target, .. } => format!("copy dir {}", target.to_string_lossy()),
                Step::CopyFile { source, target, .. } => format!(
                    "copy {} {}",
                    source.to_string_lossy(),
                    target.to_string_lossy()
                ),
                Step::File(p) => format!("file {}", p.to_string_lossy()),
                Step::Bind {
                    source,
                    target,
                    access,
                } => format!(
                    "bind {} {} {access:?}",
                    source.to_string_lossy(),
                    target.to_string_lossy()
                ),
            })
            .collect()
    }

    #[test]
    fn the_tree_binds_each_path_once_and_the_run_folder_is_a_filled_tmpfs_of_its_own() {
        let host = tempfile::tempdir().unwrap();
        let work = host.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let file = host.path().join("conf");
        std::fs::write(&file, "x").unwrap();
        let nested = host.path().join("lib/inner");
        std::fs::create_dir_all(&nested).unwrap();
        let (release, _hold) = release_pipe().unwrap();
        let folder = WorkFolder {
            bytes: 1 << 20,
            entries: 100,
            copy: vec![
                (PathBuf::from("in"), EntryKind::Folder),
                (PathBuf::from("in/a.txt"), EntryKind::File),
            ],
            owner: Some((61_000, 61_001)),
        };
        let plan = Namespaces::prepare(
            Path::new("/new"),
            &work,
            &[
                host.path().join("lib"),
                nested.clone(),
                file.clone(),
                PathBuf::from("/no/such/path"),
            ],
            Owner::Root,
            &folder,
            64 << 20,
            release,
        )
        .unwrap();
        let steps = described(&plan.steps);
        let h = host.path().display().to_string();
        let binds: Vec<&String> = steps.iter().filter(|s| s.starts_with("bind")).collect();
        assert!(
            binds.contains(&&format!("bind {h}/conf /new{h}/conf ReadOnly")),
            "{steps:#?}"
        );
        assert!(
            binds.contains(&&format!("bind {h}/lib /new{h}/lib ReadOnly")),
            "{steps:#?}"
        );
        assert!(
            !steps
                .iter()
                .any(|s| s.contains("inner") || s.contains("/no/such")),
            "a path under another is not bound again, and a missing one not at all: {steps:#?}"
        );
        assert!(
            !binds.iter().any(|b| b.contains("work")),
            "the run's folder is its own, not the bot's: {steps:#?}"
        );
        let tail: Vec<&str> = steps[steps.len() - 4..]
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                format!("dir /new{h}/work").as_str(),
                format!(
                    "tmpfs /new{h}/work size=1048576,nr_inodes=100,mode=0700,uid=61000,gid=61001"
                )
                .as_str(),
                format!("copy dir /new{h}/work/in").as_str(),
                format!("copy {h}/work/in/a.txt /new{h}/work/in/a.txt").as_str(),
            ]
        );
        assert!(steps.contains(&format!("file /new{h}/conf")), "{steps:#?}");
        assert!(plan.maps.is_empty());
        assert_eq!(plan.flags & libc::CLONE_NEWUSER, 0);
    }
}
