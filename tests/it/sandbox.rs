//! The code sandbox with real processes on the real kernel: code runs and its files come back,
//! and hostile programs fail cleanly within the limits.

use std::time::Duration;

use autothread::config::{SandboxConfig, WorkspaceConfig};
use autothread::sandbox::{Isolation, Lack, Program, Ran, Sandbox, SignalContainment, Stopped};
use autothread::store::WorkspaceOp;

use crate::support::needs::{self, needs};

/// Short limits, so that the hostile runs end quickly.
fn config() -> SandboxConfig {
    SandboxConfig {
        cpu_secs: 2,
        wall_secs: 6,
        memory_mb: 256,
        processes: 8,
        ..SandboxConfig::default()
    }
}

/// The sandbox with short limits; `None` (having said why) where this machine cannot give it.
fn sandbox() -> Option<Sandbox> {
    sandbox_with(config())
}

fn sandbox_with(config: SandboxConfig) -> Option<Sandbox> {
    needs(needs::sandbox(&config))
}

async fn python(sandbox: &Sandbox, code: &str) -> Ran {
    python_with(sandbox, code, Vec::new()).await
}

async fn python_with(sandbox: &Sandbox, code: &str, files: Vec<(String, Vec<u8>)>) -> Ran {
    sandbox
        .run(
            &Program::Python { code: code.into() },
            files,
            &WorkspaceConfig::default(),
        )
        .await
        .unwrap()
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(marker))
        .collect()
}

/// Children of this process, run by a sandbox user, that have ended and are not reaped: the
/// sandbox makes the process the reaper of its runs' orphans, and must reap them. (The other
/// tests' children, the bot's own user's, are left out: they are reaped by their own tests.)
fn zombie_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let first_sandbox_uid = SandboxConfig::default().run_as_uid;
    let sandbox_user = |entry: &std::fs::DirEntry| {
        std::fs::read_to_string(entry.path().join("status"))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("Uid:"))?;
                line.split_whitespace().nth(1)?.parse::<u32>().ok()
            })
            .is_some_and(|uid| uid >= first_sandbox_uid)
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(sandbox_user)
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            // "pid (comm) state ppid …"; the command name may hold spaces, the ")" ends it.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = after.split_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runs_on_a_copy_of_the_workspace_and_its_files_come_back() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    let ran = python_with(
        &sandbox,
        "import os\n\
         data = open('in/numbers.txt').read().split()\n\
         open('total.txt', 'w').write(str(sum(map(int, data))))\n\
         os.remove('old.txt')\n\
         print('summed', len(data), 'numbers in', os.getcwd() == os.environ['HOME'])\n",
        vec![
            ("in/numbers.txt".into(), b"1 2 3 4".to_vec()),
            ("old.txt".into(), b"stale".to_vec()),
        ],
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    assert_eq!(ran.stdout.trim(), "summed 4 numbers in True");
    let mut ops = ran.changes.ops.clone();
    ops.sort_by_key(|op| format!("{op:?}"));
    assert_eq!(
        ops,
        vec![
            WorkspaceOp::Delete {
                path: "old.txt".into()
            },
            WorkspaceOp::Put {
                path: "total.txt".into(),
                contents: b"10".to_vec()
            },
        ]
    );
    // The failure of a program is its result, with its output.
    let failed = python(&sandbox, "import sys\nprint('partial')\nsys.exit(3)").await;
    assert_eq!(failed.code, Some(3));
    assert!(!failed.succeeded());
    assert_eq!(failed.stdout.trim(), "partial");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_the_run_locks_loses_none_of_its_files() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    // The run takes every right away from a folder of the workspace's: a bot that cannot read it
    // back (one not root) must not take its files for deleted; and the run's directory is still
    // removed afterwards.
    let ran = python_with(
        &sandbox,
        "import os\n\
         open('notes.txt', 'w').write('kept')\n\
         os.chmod('docs/inner', 0)\n\
         os.chmod('docs', 0)\n",
        vec![
            ("docs/plan.md".into(), b"the plan".to_vec()),
            ("docs/inner/deep.md".into(), b"deeper".to_vec()),
        ],
    )
    .await;
    // (A folder the bot cannot measure stops a run as a full disk would: this one may be
    // stopped that way between its last line and its end.)
    assert!(ran.stderr.is_empty(), "{ran:?}");
    assert!(
        !ran.changes
            .ops
            .iter()
            .any(|op| matches!(op, WorkspaceOp::Delete { .. })),
        "{ran:?}"
    );
    assert!(
        ran.changes.ops.contains(&WorkspaceOp::Put {
            path: "notes.txt".into(),
            contents: b"kept".to_vec()
        }),
        "{ran:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_outside_the_run_can_be_neither_read_nor_written() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    // A store and a config of the bot's, beside the run's directory in the temporary folder.
    let bots = tempfile::tempdir().unwrap();
    let secret_file = bots.path().join("bot.toml");
    std::fs::write(&secret_file, "api_key = \"sk-not-for-agents\"").unwrap();
    let store = autothread::store::Store::open(&bots.path().join("data")).unwrap();
    drop(store);
    let code = format!(
        "import os\n\
         results = []\n\
         def attempt(what, action):\n\
         \x20   try:\n\
         \x20       action()\n\
         \x20       results.append(what + ': allowed')\n\
         \x20   except OSError as e:\n\
         \x20       results.append(what + ': denied ' + type(e).__name__)\n\
         attempt('read bot config', lambda: open({secret:?}).read())\n\
         attempt('list bot store', lambda: os.listdir({store:?}))\n\
         attempt('read /etc/hostname', lambda: open('/etc/hostname').read())\n\
         attempt('read parent environ', lambda: open('/proc/%d/environ' % os.getppid()).read())\n\
         attempt('list /root', lambda: os.listdir('/root'))\n\
         attempt('write /tmp', lambda: open('/tmp/escaped-' + str(os.getpid()), 'w').write('x'))\n\
         attempt('write /usr', lambda: open('/usr/escaped', 'w').write('x'))\n\
         attempt('write beside the run', lambda: open('../escaped', 'w').write('x'))\n\
         attempt('link out', lambda: os.symlink({secret:?}, 'link') or open('link').read())\n\
         print('\\n'.join(results))\n",
        secret = secret_file.display().to_string(),
        store = bots.path().join("data").display().to_string(),
    );
    let ran = python(&sandbox, &code).await;
    assert!(ran.succeeded(), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 9, "{}", ran.stdout);
    for line in &lines {
        assert!(line.contains(": denied"), "{line}\n{}", ran.stdout);
    }
    assert!(!ran.stdout.contains("sk-not-for-agents"));
    // A link the program made is not brought back into the workspace.
    assert!(ran.changes.ops.is_empty(), "{:?}", ran.changes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_closed_even_to_this_machine() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\n\
         try:\n\
         \x20   socket.create_connection(('127.0.0.1', {port}), timeout=2)\n\
         \x20   print('connected')\n\
         except OSError as e:\n\
         \x20   print('refused', type(e).__name__, e.errno)\n"
    );
    let ran = python(&sandbox, &code).await;
    assert!(ran.succeeded(), "{ran:?}");
    assert!(
        ran.stdout.starts_with("refused PermissionError"),
        "{}",
        ran.stdout
    );
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "nothing reached the listener");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_holds_nothing_of_the_bots() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    let ran = python(
        &sandbox,
        "import os\nprint(sorted(k for k in os.environ if k != 'LC_CTYPE'))",
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    assert_eq!(ran.stdout.trim(), "['HOME', 'LANG', 'PATH', 'TMPDIR']");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_programs_end_within_the_limits() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    let limits = sandbox.limits().clone();

    // An endless loop: the CPU limit ends it.
    let ran = python(&sandbox, "while True:\n    pass").await;
    assert!(ran.code.is_none(), "{ran:?}");
    assert!(
        ran.limit_hit(&limits).unwrap().contains("CPU time"),
        "{ran:?}"
    );
    assert!(ran.elapsed < limits.wall, "{:?}", ran.elapsed);

    // Sleeping forever uses no CPU: the wall clock ends it.
    let ran = python(&sandbox, "import time\ntime.sleep(3600)").await;
    assert_eq!(ran.stopped, Some(Stopped::WallClock), "{ran:?}");
    assert!(ran.elapsed < limits.wall + Duration::from_secs(2));

    // A memory hog gets a MemoryError, not the machine's memory.
    let ran = python(
        &sandbox,
        "block = bytearray(2 * 1024 ** 3)\nprint('allocated')",
    )
    .await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains("MemoryError"), "{}", ran.stderr);

    // Sleeps whose length names this test process, so that a run of these tests beside it (the
    // unprivileged one) is not taken for a survivor.
    let forked_sleep = format!("1000.{}", std::process::id());
    let background_sleep = format!("2000.{}", std::process::id());

    // A fork bomb meets the process limit, and nothing of it survives the run.
    let ran = python(
        &sandbox,
        &format!(
            "import os\n\
             made = 0\n\
             for _ in range(1000):\n\
             \x20   try:\n\
             \x20       if os.fork() == 0:\n\
             \x20           os.execv('/bin/sleep', ['sleep', '{forked_sleep}'])\n\
             \x20       made += 1\n\
             \x20   except OSError as e:\n\
             \x20       print('fork refused after', made, type(e).__name__)\n\
             \x20       break\n"
        ),
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    assert!(ran.stdout.contains("fork refused after"), "{}", ran.stdout);
    let made: u64 = ran
        .stdout
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    assert!(made < limits.processes, "{made}");
    assert!(
        processes_with(&forked_sleep).is_empty(),
        "the children are gone"
    );
    assert!(
        zombie_children().is_empty(),
        "and reaped: {:?}",
        zombie_children()
    );

    // A background process, even one that tries a session of its own, ends with the run.
    let ran = python(
        &sandbox,
        &format!(
            "import os, subprocess\n\
             try:\n\
             \x20   os.setsid()\n\
             \x20   print('setsid allowed')\n\
             except OSError as e:\n\
             \x20   print('setsid refused', type(e).__name__)\n\
             subprocess.Popen(['/bin/sleep', '{background_sleep}'])\n\
             print('left it running')\n"
        ),
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    assert!(
        ran.stdout.starts_with("setsid refused PermissionError"),
        "{}",
        ran.stdout
    );
    assert!(
        processes_with(&background_sleep).is_empty(),
        "the background process is gone"
    );

    // 100 MB of output: the run is stopped and only the start is kept.
    let ran = python(
        &sandbox,
        "import sys\nchunk = 'x' * 1000000\nfor _ in range(100):\n    sys.stdout.write(chunk)\n",
    )
    .await;
    assert_eq!(ran.stopped, Some(Stopped::OutputFlood), "{:?}", ran.stopped);
    assert_eq!(ran.stdout.len(), limits.output_bytes);

    // A file larger than the limit is cut off by the kernel.
    let ran = python(
        &sandbox,
        "f = open('big.bin', 'wb')\nfor _ in range(32):\n    f.write(b'0' * (1024 * 1024))\n",
    )
    .await;
    assert!(!ran.succeeded(), "{ran:?}");
    assert!(
        ran.limit_hit(&limits).is_some_and(|l| l.contains("file"))
            || ran.stderr.contains("File too large"),
        "{ran:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_reach_neither_the_bot_nor_its_store_nor_the_host() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    if let Isolation::Shared { why } = sandbox.isolation() {
        // Where the kernel refuses namespaces, the sandbox says so (and `check` with it).
        assert!(
            sandbox.describe().contains(why.as_str()),
            "{}",
            sandbox.describe()
        );
        return;
    }
    let bot = std::process::id();
    let bots = tempfile::tempdir().unwrap();
    let store = bots.path().join("data");
    drop(autothread::store::Store::open(&store).unwrap());
    use std::os::unix::fs::PermissionsExt;
    let mode_before = std::fs::metadata(&store).unwrap().permissions().mode();
    // SAFETY: getrlimit and getpriority only read this process's own settings.
    let (files_before, nice_before) = unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        (limit.rlim_cur, libc::getpriority(libc::PRIO_PROCESS, 0))
    };
    let code = format!(
        "import os, resource\n\
         bot = {bot}\n\
         results = []\n\
         def attempt(what, action):\n\
         \x20   try:\n\
         \x20       action()\n\
         \x20       results.append(what + ': allowed')\n\
         \x20   except OSError as e:\n\
         \x20       results.append(what + ': denied ' + type(e).__name__)\n\
         attempt('prlimit the bot', lambda: resource.prlimit(bot, resource.RLIMIT_NOFILE, (5, 5)))\n\
         attempt('renice the bot', lambda: os.setpriority(os.PRIO_PROCESS, bot, 19))\n\
         attempt('pin the bot', lambda: os.sched_setaffinity(bot, {{0}}))\n\
         attempt('chmod the store', lambda: os.chmod({store:?}, 0))\n\
         attempt('stat the store', lambda: os.stat({store:?}))\n\
         attempt('list /proc', lambda: os.listdir('/proc'))\n\
         attempt('write /tmp', lambda: open('/tmp/escaped', 'w'))\n\
         print('\\n'.join(results))\n\
         # Every process id this run can name: its own only.\n\
         def alive(pid):\n\
         \x20   try:\n\
         \x20       os.kill(pid, 0)\n\
         \x20       return True\n\
         \x20   except ProcessLookupError:\n\
         \x20       return False\n\
         \x20   except OSError:\n\
         \x20       return True\n\
         print('visible', [p for p in range(1, 5000) if alive(p)], os.getpid())\n\
         # Lowering its own user's priority reaches only the processes it can name.\n\
         os.setpriority(os.PRIO_USER, os.getuid(), 19)\n",
        store = store.display().to_string(),
    );
    let ran = python(&sandbox, &code).await;
    assert!(ran.succeeded(), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{}", ran.stdout);
    for line in &lines[..7] {
        assert!(line.contains(": denied"), "{line}\n{}", ran.stdout);
    }
    assert_eq!(lines[7], "visible [1] 1", "{}", ran.stdout);
    // The bot is as it was.
    // SAFETY: as above.
    let (files_after, nice_after) = unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        (limit.rlim_cur, libc::getpriority(libc::PRIO_PROCESS, 0))
    };
    assert_eq!(files_after, files_before);
    assert_eq!(nice_after, nice_before);
    assert_eq!(
        std::fs::metadata(&store).unwrap().permissions().mode(),
        mode_before
    );
    drop(autothread::store::Store::open(&store).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysv_objects_a_run_makes_are_its_own_and_gone_after_it() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    if matches!(sandbox.isolation(), Isolation::Shared { .. }) {
        return;
    }
    // A key naming this test process, so that a run of these tests beside it is not confused.
    let key = 0x5a00_0000 + (std::process::id() & 0xff_ffff);
    let make = format!(
        "import ctypes\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         made = libc.shmget({key}, 1 << 20, 0o1600)\n\
         queue = libc.msgget({key}, 0o1600)\n\
         print('made', made >= 0, queue >= 0)\n"
    );
    let ran = python(&sandbox, &make).await;
    assert!(ran.succeeded(), "{ran:?}");
    assert_eq!(ran.stdout.trim(), "made True True", "{ran:?}");
    let host = std::fs::read_to_string("/proc/sysvipc/shm").unwrap_or_default();
    assert!(
        !host
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&key.to_string())),
        "the host does not see the segment"
    );
    let find = format!(
        "import ctypes\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         print('found', libc.shmget({key}, 0, 0) >= 0, libc.msgget({key}, 0) >= 0)\n"
    );
    let ran = python(&sandbox, &find).await;
    assert!(ran.succeeded(), "{ran:?}");
    assert_eq!(ran.stdout.trim(), "found False False", "{ran:?}");
    // A hoard of segments stops at the run's memory (256 MiB here): four of 64 MiB at most.
    let hoard = "import ctypes\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         made = 0\n\
         for _ in range(16):\n\
         \x20   if libc.shmget(0, 64 << 20, 0o1600) < 0:\n\
         \x20       break\n\
         \x20   made += 1\n\
         print('segments', made)\n";
    let ran = python(&sandbox, hoard).await;
    assert!(ran.succeeded(), "{ran:?}");
    let made: u32 = ran
        .stdout
        .trim()
        .trim_start_matches("segments ")
        .parse()
        .unwrap();
    assert!((1..=4).contains(&made), "{}", ran.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_folder_holds_no_more_than_its_limit_deleted_files_included() {
    let Some(sandbox) = sandbox_with(SandboxConfig {
        disk_mb: 8,
        ..config()
    }) else {
        return;
    };
    if matches!(sandbox.isolation(), Isolation::Shared { .. }) {
        return;
    }
    // A file deleted while open still holds its bytes: written first, then a second file until
    // the folder is full.
    let ran = python(
        &sandbox,
        "import os\n\
         def fill(f):\n\
         \x20   written = 0\n\
         \x20   try:\n\
         \x20       while written < (500 << 20):\n\
         \x20           written += os.write(f, b'x' * (1 << 20))\n\
         \x20   except OSError as e:\n\
         \x20       return written, e.strerror\n\
         \x20   return written, 'no error'\n\
         hidden = os.open('hidden', os.O_WRONLY | os.O_CREAT)\n\
         os.unlink('hidden')\n\
         first = fill(hidden)\n\
         second = fill(os.open('seen', os.O_WRONLY | os.O_CREAT))\n\
         print(first[0] + second[0], first[1], second[1])\n",
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    let fields: Vec<&str> = ran.stdout.trim().splitn(2, ' ').collect();
    let written: u64 = fields[0].parse().unwrap();
    assert!(written <= 8 << 20, "{}", ran.stdout);
    assert!(
        ran.stdout.contains("No space left on device"),
        "{}",
        ran.stdout
    );
    // The deleted file held the folder: the second one got nothing.
    assert!(written >= 7 << 20, "{}", ran.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_processes_share_its_memory_and_its_cpu_time() {
    // Without a cgroup (where the bot can make none, or the operator says no): the run's memory
    // divided among its processes, its CPU time summed over its process group.
    let Some(sandbox) = sandbox_with(SandboxConfig {
        memory_mb: 128,
        processes: 4,
        cpu_secs: 2,
        wall_secs: 20,
        cgroup: "off".into(),
        ..config()
    }) else {
        return;
    };
    assert_eq!(sandbox.cgroup_version(), None);
    assert!(
        sandbox
            .describe()
            .contains("no cgroup (not v2: sandbox.cgroup is off"),
        "{}",
        sandbox.describe()
    );
    // Four processes each hold what they can: together no more than the run's 128 MiB.
    let ran = python(
        &sandbox,
        "import os, time\n\
         def hoard():\n\
         \x20   held = []\n\
         \x20   try:\n\
         \x20       while len(held) < 1024:\n\
         \x20           held.append(b'\\x01' * (1 << 20))\n\
         \x20   except MemoryError:\n\
         \x20       held.pop()\n\
         \x20   os.write(1, b'%d\\n' % (len(held) + 1))\n\
         \x20   time.sleep(0.5)\n\
         kids = []\n\
         for _ in range(3):\n\
         \x20   pid = os.fork()\n\
         \x20   if pid == 0:\n\
         \x20       hoard()\n\
         \x20       os._exit(0)\n\
         \x20   kids.append(pid)\n\
         hoard()\n\
         for kid in kids:\n\
         \x20   os.waitpid(kid, 0)\n\
         try:\n\
         \x20   os.memfd_create('hoard')\n\
         \x20   print('memfd made')\n\
         except OSError as e:\n\
         \x20   print('memfd refused')\n",
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", ran.stdout);
    let held: u64 = lines[..4].iter().map(|l| l.parse::<u64>().unwrap()).sum();
    assert!(held <= 128, "{held} MiB held at once: {}", ran.stdout);
    assert_eq!(lines[4], "memfd refused");

    // Four processes spin, each noting its CPU time as it goes: together they stop at the run's
    // 2 s, not at 2 s each.
    let ran = python(
        &sandbox,
        "import os, time\n\
         def spin(i):\n\
         \x20   n = 0\n\
         \x20   while True:\n\
         \x20       n += 1\n\
         \x20       if n % 100000 == 0:\n\
         \x20           with open('t%d' % i, 'w') as f:\n\
         \x20               f.write(str(time.process_time()))\n\
         \x20           os.replace('t%d' % i, 'cpu%d.txt' % i)\n\
         for i in range(1, 4):\n\
         \x20   if os.fork() == 0:\n\
         \x20       spin(i)\n\
         spin(0)\n",
    )
    .await;
    let limits = sandbox.limits().clone();
    assert!(
        ran.limit_hit(&limits)
            .is_some_and(|l| l.contains("CPU time")),
        "{ran:?}"
    );
    let used: f64 = ran
        .changes
        .ops
        .iter()
        .filter_map(|op| match op {
            WorkspaceOp::Put { path, contents } if path.starts_with("cpu") => {
                String::from_utf8_lossy(contents).parse::<f64>().ok()
            }
            _ => None,
        })
        .sum();
    assert!(
        used > 1.0 && used <= 2.0 + 0.8,
        "{used} s: {:?}",
        ran.changes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_neither_signal_processes_outside_it_nor_reach_their_abstract_sockets() {
    let Some(sandbox) = sandbox() else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let abi = needs::emulated_landlock_abi()
        .unwrap_or_else(|| autothread::sandbox::landlock_abi().expect("the probe found Landlock"));
    // The mode in force is the one this Landlock and this user give, and `check` names it.
    let expected = match (abi >= 6, root) {
        (true, _) => SignalContainment::LandlockScopes,
        (false, true) => SignalContainment::OwnUser,
        (false, false) => SignalContainment::Namespaces,
    };
    assert_eq!(sandbox.signal_containment(), expected);
    let described = sandbox.describe();
    assert!(
        described.contains(&format!("Landlock ABI {abi},")),
        "{described}"
    );
    if expected == SignalContainment::Namespaces {
        assert!(
            described.contains("kept in by the run's own PID and network namespaces"),
            "{described}"
        );
    }
    // A process of the bot's own user outside the run, and an abstract socket of the bot's.
    let marker = format!("4000.{}", std::process::id());
    let mut outside = std::process::Command::new("/bin/sleep")
        .arg(&marker)
        .spawn()
        .unwrap();
    let name = format!("autothread-test-{}", std::process::id());
    let listener = {
        use std::os::linux::net::SocketAddrExt;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&address).unwrap()
    };
    listener.set_nonblocking(true).unwrap();
    let code = format!(
        "import os, signal, socket\n\
         results = []\n\
         def attempt(what, action):\n\
         \x20   try:\n\
         \x20       action()\n\
         \x20       results.append(what + ': allowed')\n\
         \x20   except OSError as e:\n\
         \x20       results.append(what + ': denied ' + type(e).__name__)\n\
         def connect():\n\
         \x20   s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         \x20   s.connect('\\0{name}')\n\
         attempt('kill a process of the bot user', lambda: os.kill({outside}, signal.SIGKILL))\n\
         attempt('signal the bot', lambda: os.kill({bot}, 0))\n\
         attempt('connect to the bot abstract socket', connect)\n\
         print('\\n'.join(results))\n",
        outside = outside.id(),
        bot = std::process::id(),
    );
    let ran = python(&sandbox, &code).await;
    assert!(ran.succeeded(), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", ran.stdout);
    for line in &lines {
        assert!(line.contains(": denied"), "{line}\n{}", ran.stdout);
    }
    // What was asked did not happen: the process outside lives, and no one connected.
    assert!(
        outside.try_wait().unwrap().is_none(),
        "the sleeper was killed"
    );
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    outside.kill().unwrap();
    outside.wait().unwrap();
}

/// The tests above run as the bot runs here. A bot that is not root takes the other path (each
/// run in a user namespace of its own): when these tests run as root, the hostile programs and
/// the copy in and out are run again by this test binary as an unprivileged user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_bot_confines_its_runs_in_user_namespaces() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: the tests above took this path already.
        return;
    }
    if needs(needs::setpriv()).is_none() {
        return;
    }
    // Each mode this kernel allows: its own Landlock ABI (6 or later: the scopes), then as an
    // older kernel's, ABI 5 (Linux 6.7) and ABI 1 (Linux 5.13), where the run's namespaces stand
    // in for the scopes.
    let native = autothread::sandbox::landlock_abi().unwrap_or(0);
    let mut modes = vec![None];
    modes.extend([5, 1].into_iter().filter(|abi| *abi < native).map(Some));
    for mode in modes {
        let stdout = run_unprivileged(mode).await;
        assert!(
            stdout.contains("test result: ok. 11 passed"),
            "{mode:?}\n{stdout}"
        );
    }
}

/// The sandbox tests run by a copy of this binary as uid 10001, with the Landlock ABI of `mode`
/// emulated: its standard output, having succeeded.
async fn run_unprivileged(mode: Option<i64>) -> String {
    // A copy of this binary where that user can run it, wherever the checkout lies.
    let place = tempfile::tempdir().unwrap();
    let me = place.path().join("it");
    std::fs::copy(std::env::current_exe().unwrap(), &me).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for path in [place.path(), me.as_path()] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // While the copy was being written, another test may have forked: its child holds the
    // written file open until it execs, and running the copy fails with "Text file busy" until
    // then. That is retried.
    let mut output = None;
    for _ in 0..50 {
        let mut command = tokio::process::Command::new("setpriv");
        command.env_remove(needs::EMULATED_LANDLOCK_ABI);
        if let Some(abi) = mode {
            command.env(needs::EMULATED_LANDLOCK_ABI, abi.to_string());
        }
        let attempt = command
            .args(["--reuid=10001", "--regid=10001", "--clear-groups", "--"])
            .arg(&me)
            .args([
                "--exact",
                "sandbox::hostile_programs_end_within_the_limits",
                "sandbox::code_runs_on_a_copy_of_the_workspace_and_its_files_come_back",
                "sandbox::the_network_is_closed_even_to_this_machine",
                "sandbox::files_outside_the_run_can_be_neither_read_nor_written",
                "sandbox::a_folder_the_run_locks_loses_none_of_its_files",
                "sandbox::a_run_can_reach_neither_the_bot_nor_its_store_nor_the_host",
                "sandbox::sysv_objects_a_run_makes_are_its_own_and_gone_after_it",
                "sandbox::the_runs_folder_holds_no_more_than_its_limit_deleted_files_included",
                "sandbox::a_runs_processes_share_its_memory_and_its_cpu_time",
                "sandbox::an_older_kernel_is_refused_or_falls_back_and_says_so",
                "sandbox::a_run_can_neither_signal_processes_outside_it_nor_reach_their_abstract_sockets",
            ])
            .env("HOME", std::env::temp_dir())
            .output()
            .await
            .expect("setpriv (util-linux) runs the tests as another user");
        if !String::from_utf8_lossy(&attempt.stderr).contains("Text file busy") {
            output = Some(attempt);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = output.expect("the copy became runnable");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{mode:?}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A sandbox whose runs get a cgroup of their own, where this machine gives one to this process:
/// cgroup v1 to root (this project's machines), v2 where delegated. `None` (having said why) where
/// the test cannot run; under CI, a root bot without one fails.
fn cgroup_sandbox(config: SandboxConfig) -> Option<Sandbox> {
    let sandbox = sandbox_with(config)?;
    if sandbox.cgroup_version().is_some() {
        return Some(sandbox);
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let why = format!("runs get no cgroup here ({})", sandbox.missing().join("; "));
    // A bot that is not root gets one only where a cgroup is delegated to it.
    match root {
        true => needs::unmet(&why),
        false => eprintln!("skipped: {why}"),
    }
    None
}

/// Every directory of the run's cgroup existed during it and is gone after it.
fn cgroup_gone(ran: &Ran) {
    let usage = ran.usage.as_ref().expect("the run had a cgroup");
    assert!(!usage.dirs.is_empty(), "{usage:?}");
    for dir in &usage.dirs {
        assert!(!dir.exists(), "{} outlived its run", dir.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_cgroup_bounds_its_memory_as_a_whole_and_is_gone_after_it() {
    let Some(sandbox) = cgroup_sandbox(SandboxConfig {
        memory_mb: 1024,
        processes: 16,
        cpu_secs: 20,
        wall_secs: 60,
        ..config()
    }) else {
        return;
    };
    assert!(
        sandbox
            .describe()
            .contains("1024 MiB and 16 processes for the run as a whole"),
        "{}",
        sandbox.describe()
    );
    // Eight processes of 800 MB each (every page written) against the run's 1 GiB: the kernel
    // kills one, and the run is stopped; at most one ever held its 800 MB.
    let ran = python(
        &sandbox,
        "import os, time\n\
         kids = []\n\
         for _ in range(8):\n\
         \x20   pid = os.fork()\n\
         \x20   if pid == 0:\n\
         \x20       block = b'\\x01' * (800 * 1000 * 1000)\n\
         \x20       os.write(1, b'held\\n')\n\
         \x20       time.sleep(30)\n\
         \x20       os._exit(0)\n\
         \x20   kids.append(pid)\n\
         for kid in kids:\n\
         \x20   os.waitpid(kid, 0)\n\
         print('all ended')\n",
    )
    .await;
    assert_eq!(ran.stopped, Some(Stopped::Memory), "{ran:?}");
    assert!(
        ran.limit_hit(sandbox.limits())
            .is_some_and(|l| l.contains("1024 MiB of memory")),
        "{ran:?}"
    );
    assert!(ran.stdout.matches("held").count() <= 1, "{ran:?}");
    let usage = ran.usage.clone().unwrap();
    eprintln!("8 x 800 MB in 1 GiB: {usage:?}");
    assert!(usage.oom_kills >= 1, "{usage:?}");
    if let Some(peak) = usage.memory_peak {
        assert!(peak <= 1 << 30, "{peak} bytes at once: {usage:?}");
    }
    cgroup_gone(&ran);

    // Memory a memfd holds is the run's too: memfds are allowed, and their pages stop at it.
    let ran = python(
        &sandbox,
        "import os\n\
         held = 0\n\
         fds = []\n\
         try:\n\
         \x20   for _ in range(100):\n\
         \x20       fd = os.memfd_create('hoard')\n\
         \x20       for _ in range(16):\n\
         \x20           os.write(fd, b'\\x01' * (1 << 20))\n\
         \x20       fds.append(fd)\n\
         \x20       held += 16\n\
         except OSError as e:\n\
         \x20   print('refused', e.strerror)\n\
         print('held', held)\n",
    )
    .await;
    // The writer is killed (or refused) at the run's memory, never past it.
    assert!(
        ran.stopped == Some(Stopped::Memory) || ran.stdout.contains("refused"),
        "{ran:?}"
    );
    assert!(!ran.stdout.contains("held 1600"), "{ran:?}");
    let usage = ran.usage.clone().unwrap();
    if let Some(peak) = usage.memory_peak {
        assert!(peak <= 1 << 30, "{peak} bytes at once: {usage:?}");
    }
    cgroup_gone(&ran);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_cgroup_bounds_its_cpu_and_its_processes_as_a_whole() {
    let Some(sandbox) = cgroup_sandbox(SandboxConfig {
        memory_mb: 512,
        processes: 12,
        cpu_secs: 2,
        wall_secs: 30,
        ..config()
    }) else {
        return;
    };
    let limits = sandbox.limits().clone();
    // Four processes spin, each noting its CPU time as it goes: the cgroup counts them together
    // and the run stops at its 2 s.
    let ran = python(
        &sandbox,
        "import os, time\n\
         def spin(i):\n\
         \x20   n = 0\n\
         \x20   while True:\n\
         \x20       n += 1\n\
         \x20       if n % 100000 == 0:\n\
         \x20           with open('t%d' % i, 'w') as f:\n\
         \x20               f.write(str(time.process_time()))\n\
         \x20           os.replace('t%d' % i, 'cpu%d.txt' % i)\n\
         for i in range(1, 4):\n\
         \x20   if os.fork() == 0:\n\
         \x20       spin(i)\n\
         spin(0)\n",
    )
    .await;
    assert_eq!(ran.stopped, Some(Stopped::CpuTime), "{ran:?}");
    let noted: f64 = ran
        .changes
        .ops
        .iter()
        .filter_map(|op| match op {
            WorkspaceOp::Put { path, contents } if path.starts_with("cpu") => {
                String::from_utf8_lossy(contents).parse::<f64>().ok()
            }
            _ => None,
        })
        .sum();
    let usage = ran.usage.clone().unwrap();
    eprintln!("4 spinners, 2 s of CPU: {usage:?}, noted {noted} s");
    // The run's one core at a time, measured every 100 ms: at most a few tenths past the limit.
    let most = limits.cpu_secs as f64 + 0.5;
    assert!(
        usage.cpu.as_secs_f64() > 1.0 && usage.cpu.as_secs_f64() <= most,
        "{usage:?}"
    );
    assert!(noted > 1.0 && noted <= most, "{noted} s: {:?}", ran.changes);
    cgroup_gone(&ran);

    // A fork bomb meets the cgroup's process bound (the run's processes and its monitor), and
    // nothing of it survives the run.
    let forked_sleep = format!("3000.{}", std::process::id());
    let ran = python(
        &sandbox,
        &format!(
            "import os\n\
             made = 0\n\
             for _ in range(1000):\n\
             \x20   try:\n\
             \x20       if os.fork() == 0:\n\
             \x20           os.execv('/bin/sleep', ['sleep', '{forked_sleep}'])\n\
             \x20       made += 1\n\
             \x20   except OSError as e:\n\
             \x20       print('fork refused after', made, type(e).__name__)\n\
             \x20       break\n"
        ),
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    let made: u64 = ran
        .stdout
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("{ran:?}"))
        .parse()
        .unwrap();
    assert!(made < limits.processes, "{made}");
    let usage = ran.usage.clone().unwrap();
    eprintln!("fork bomb: {made} made, {usage:?}");
    assert!(usage.forks_refused >= 1, "the cgroup refused it: {usage:?}");
    assert!(
        processes_with(&forked_sleep).is_empty(),
        "the children are gone"
    );
    cgroup_gone(&ran);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_kernel_is_refused_or_falls_back_and_says_so() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // No Landlock at all: nothing runs, and the reason is given.
    let why = Sandbox::probe_lacking(&config(), &[Lack::LandlockAbi(0)]).unwrap_err();
    assert!(
        why.to_string().contains("does not enforce Landlock"),
        "{why}"
    );
    // The rest takes away from what this machine gives.
    if sandbox().is_none() {
        return;
    }
    // Landlock before its scopes (Linux 6.12): a root bot's runs are users of their own; a bot
    // that is not root shares its user with its runs, whose own PID and network namespaces then
    // keep their signals and abstract sockets in.
    let older = Sandbox::probe_lacking(&config(), &[Lack::LandlockAbi(5)])
        .unwrap_or_else(|why| panic!("{why}"));
    assert!(
        older.describe().contains("Landlock ABI 5"),
        "{}",
        older.describe()
    );
    match root {
        true => assert_eq!(older.signal_containment(), SignalContainment::OwnUser),
        false => {
            assert_eq!(older.signal_containment(), SignalContainment::Namespaces);
            assert_eq!(older.isolation(), &Isolation::Namespaces);
            // Without those namespaces too, it is refused, saying what is missing.
            let why = Sandbox::probe_lacking(&config(), &[Lack::LandlockAbi(5), Lack::Namespaces])
                .unwrap_err()
                .to_string();
            assert!(
                why.contains("Linux 6.12")
                    && why.contains("PID and network namespaces")
                    && why.contains("deploy/seccomp.json"),
                "{why}"
            );
        }
    }
    // No namespaces (Docker's default seccomp profile) and no cgroup: runs still work, on the
    // host's view Landlock narrows, with the memory divided and memfds refused; and the two
    // missing parts are named.
    let sandbox = Sandbox::probe_lacking(
        &SandboxConfig {
            cgroup: "off".into(),
            ..config()
        },
        &[Lack::Namespaces],
    )
    .unwrap_or_else(|why| panic!("{why}"));
    assert!(
        matches!(sandbox.isolation(), Isolation::Shared { why } if why.contains("refused")),
        "{:?}",
        sandbox.isolation()
    );
    let missing = sandbox.missing().join("\n");
    assert!(
        missing.contains("no PID, IPC or mount namespace of their own"),
        "{missing}"
    );
    assert!(
        missing.contains("no cgroup of their own (not v2: sandbox.cgroup is off"),
        "{missing}"
    );
    let ran = python(
        &sandbox,
        "import os\n\
         try:\n\
         \x20   os.memfd_create('m')\n\
         \x20   print('memfd made')\n\
         except OSError:\n\
         \x20   print('memfd refused', os.getpid() > 1)\n",
    )
    .await;
    assert!(ran.succeeded(), "{ran:?}");
    // Its process id is the host's (no PID namespace of its own).
    assert_eq!(ran.stdout.trim(), "memfd refused True", "{ran:?}");
    assert!(ran.usage.is_none(), "{ran:?}");
}

/// The container's seccomp profile (deploy/seccomp.json), as Docker reads it: a typed view that
/// refuses a misspelt field.
mod container_profile {
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Profile {
        pub default_action: String,
        pub default_errno_ret: Option<i64>,
        #[allow(dead_code)]
        pub arch_map: Vec<serde_json::Value>,
        pub syscalls: Vec<Rule>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Rule {
        pub names: Vec<String>,
        pub action: String,
        pub errno_ret: Option<i64>,
        #[serde(default)]
        pub args: Vec<Arg>,
        #[serde(default)]
        pub includes: Filter,
        #[serde(default)]
        pub excludes: Filter,
        #[allow(dead_code)]
        pub comment: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Arg {
        pub index: usize,
        pub value: u64,
        #[serde(rename = "valueTwo", default)]
        pub value_two: u64,
        pub op: String,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Filter {
        #[serde(default)]
        pub arches: Vec<String>,
        #[serde(default)]
        pub caps: Vec<String>,
        pub min_kernel: Option<String>,
    }

    /// What the profile answers a call: allowed, or refused with this errno.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Answer {
        Allowed,
        Refused(i64),
    }

    impl Profile {
        /// The answer to `name(args…)` from a container on amd64 with Docker's default
        /// capabilities (none of those the profile's rules ask for) on a 5.15 kernel.
        pub fn answer(&self, name: &str, args: &[u64]) -> Answer {
            let applies = |rule: &&Rule| {
                rule.names.iter().any(|n| n == name)
                    && rule.includes.caps.is_empty()
                    && (rule.includes.arches.is_empty()
                        || rule.includes.arches.iter().any(|a| a == "amd64"))
                    && !rule.excludes.arches.iter().any(|a| a == "amd64")
                    && rule.includes.min_kernel.as_deref().is_none_or(|k| {
                        let (major, minor) = k.split_once('.').unwrap();
                        (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap()) <= (5, 15)
                    })
                    && rule.args.iter().all(|arg| {
                        let given = args.get(arg.index).copied().unwrap_or(0);
                        match arg.op.as_str() {
                            "SCMP_CMP_EQ" => given == arg.value,
                            "SCMP_CMP_NE" => given != arg.value,
                            "SCMP_CMP_MASKED_EQ" => given & arg.value == arg.value_two,
                            other => panic!("an operator this test does not know: {other}"),
                        }
                    })
            };
            let errno = |action: &str, errno: Option<i64>| match action {
                "SCMP_ACT_ALLOW" => Answer::Allowed,
                "SCMP_ACT_ERRNO" => Answer::Refused(errno.unwrap_or(1)),
                other => panic!("an action this test does not know: {other}"),
            };
            let matching: Vec<&Rule> = self.syscalls.iter().filter(applies).collect();
            // libseccomp keeps one action per call and arguments: an allowing rule and a refusing
            // one for the same call would be ambiguous, so the profile must not have both.
            let allowed = matching.iter().any(|r| r.action == "SCMP_ACT_ALLOW");
            let refused = matching.iter().find(|r| r.action != "SCMP_ACT_ALLOW");
            assert!(
                !(allowed && refused.is_some()),
                "{name} is both allowed and refused"
            );
            match (allowed, refused) {
                (true, _) => Answer::Allowed,
                (false, Some(rule)) => errno(&rule.action, rule.errno_ret),
                (false, None) => errno(&self.default_action, self.default_errno_ret),
            }
        }
    }
}

#[test]
fn the_containers_seccomp_profile_allows_what_the_sandbox_needs_and_no_more_than_dockers() {
    use container_profile::{Answer, Profile};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/seccomp.json");
    let profile: Profile = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let namespaces = (libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWUTS) as u64;
    let user_and_network = (libc::CLONE_NEWUSER | libc::CLONE_NEWNET) as u64;
    let fork = libc::SIGCHLD as u64;
    // What src/sandbox makes the kernel do for a bot that is not root, from the probe's trial to a
    // run's exec: its namespaces (namespaces.rs), its confinement (confine.rs), its limits, and
    // the bot's own sockets and processes.
    let needed: &[(&str, &[u64])] = &[
        ("unshare", &[namespaces]),
        ("unshare", &[user_and_network]),
        ("unshare", &[libc::CLONE_NEWUSER as u64]),
        ("clone", &[fork]),
        ("clone", &[libc::CLONE_NEWUSER as u64 | fork]),
        ("mount", &[]),
        ("umount2", &[]),
        ("pivot_root", &[]),
        ("landlock_create_ruleset", &[]),
        ("landlock_add_rule", &[]),
        ("landlock_restrict_self", &[]),
        ("seccomp", &[]),
        ("prctl", &[]),
        ("setrlimit", &[]),
        ("prlimit64", &[]),
        ("setsid", &[]),
        ("setgroups", &[]),
        ("setgid", &[]),
        ("setuid", &[]),
        ("sendfile", &[]),
        ("mkdir", &[]),
        ("chown", &[]),
        ("chdir", &[]),
        ("openat", &[]),
        ("execve", &[]),
        ("wait4", &[]),
        ("kill", &[]),
        ("pipe2", &[]),
        ("memfd_create", &[]),
        ("socket", &[libc::AF_INET as u64]),
        ("socket", &[libc::AF_UNIX as u64]),
    ];
    for (call, args) in needed {
        assert_eq!(
            profile.answer(call, args),
            Answer::Allowed,
            "{call}({args:x?})"
        );
    }
    // clone3 falls back to clone, which a filter can read; what Docker's default keeps from a
    // container without the capabilities stays refused.
    assert_eq!(
        profile.answer("clone3", &[]),
        Answer::Refused(libc::ENOSYS as i64)
    );
    for call in [
        "kexec_load",
        "init_module",
        "finit_module",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "reboot",
        "setns",
        "open_by_handle_at",
        "userfaultfd",
        "swapon",
        "chroot",
    ] {
        assert_eq!(
            profile.answer(call, &[]),
            Answer::Refused(libc::EPERM as i64),
            "{call}"
        );
    }
    assert_eq!(
        profile.answer("socket", &[40]),
        Answer::Refused(libc::EPERM as i64),
        "AF_VSOCK"
    );
    // The compose file gives the container this profile.
    let compose =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/compose.yaml")).unwrap();
    assert!(compose.contains("seccomp=deploy/seccomp.json"), "{compose}");
}
