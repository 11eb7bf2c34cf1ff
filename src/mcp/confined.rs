//! A stdio MCP server's program as it is started: confined like code execution unless its config
//! says `confine = false`, with the network its `network` setting gives it.
//!
//! `command` builds the process: an environment of PATH and LANG, a private HOME and TMPDIR (a
//! fresh folder per start, removed when the server ends), and the config's `env`; then, for a
//! confined server, `sandbox::server`'s confinement. It reads the system (`server::system_read_only`),
//! its program's files (the program as found in PATH, and the prefix it is installed in: the
//! folder above its `bin`, or above `node_modules`), any argument naming an existing file (a
//! script), and `read_paths`; it writes only its home, its instance's directory (`instances`: where
//! it starts, and what `{instance_dir}` names; given to the server's user at each start) and
//! `paths`. Nothing else is in reach, so
//! the bot's store, config and secrets are not, unless the operator names them. The network is
//! `none` (none at all), `guarded` (the proxy settings HTTP_PROXY, HTTPS_PROXY and ALL_PROXY, in
//! both cases, point at `web::egress_proxy`, started on first use, and the kernel lets it connect
//! nowhere else) or `open`. When the kernel cannot confine as asked, the server does not start and
//! the reason says why (`Unconfinable`). `Held` keeps what a started server holds (its home, its
//! user) until it ends; `Held::describe` is the line `autothread check` shows.
//!
//! A program that does not read the proxy settings (Node's own `fetch` before Node 24) reaches
//! nothing under `guarded`: its connections are refused by the kernel.

use std::path::{Path, PathBuf};

use crate::config::{McpNetwork, McpServerConfig, SandboxConfig, WebConfig};

use super::{in_instance, McpStartError};

/// What the confinement of every server of a bot is drawn from: the web guard's allow-list (for
/// the proxy) and the sandbox's range of users (for a root bot).
#[derive(Debug, Clone)]
pub struct ServerBox {
    allow_hosts: Vec<String>,
    first_uid: u32,
    first_gid: u32,
    uids: u32,
}

impl ServerBox {
    pub fn new(web: &WebConfig, sandbox: &SandboxConfig) -> ServerBox {
        ServerBox {
            allow_hosts: web.allow_hosts.clone(),
            first_uid: sandbox.run_as_uid,
            first_gid: sandbox.run_as_gid,
            uids: sandbox.run_as_uids,
        }
    }

    /// The egress proxy guarded servers go through (started on first use).
    pub fn proxy(&self) -> Result<std::sync::Arc<crate::web::egress_proxy::EgressProxy>, String> {
        crate::web::egress_proxy::EgressProxy::shared(&self.allow_hosts).map_err(|e| e.to_string())
    }
}

/// What a started server holds until it ends: its home folder (removed then) and its user (given
/// back then).
pub struct Held {
    _home: Option<tempfile::TempDir>,
    #[cfg(target_os = "linux")]
    _user: Option<crate::sandbox::server::ServerUser>,
    description: String,
}

impl Held {
    /// How the server runs: confined (as whom, with what network), or not.
    pub fn describe(&self) -> &str {
        &self.description
    }
}

/// The process for the server's `program`, and what it holds; refused with the reason when the
/// server cannot be confined as its config asks.
pub fn command(
    config: &McpServerConfig,
    server_box: &ServerBox,
    program: &str,
    instance_dir: &Path,
) -> Result<(tokio::process::Command, Held), McpStartError> {
    let unconfinable = |reason: String| McpStartError::Unconfinable {
        name: config.name.clone(),
        reason,
    };
    for path in config.paths.iter().chain(&config.read_paths) {
        if path.symlink_metadata().is_err() {
            return Err(unconfinable(format!(
                "{} (in its paths or read_paths) does not exist",
                path.display()
            )));
        }
    }
    let mut command = std::process::Command::new(program);
    command.current_dir(instance_dir).env_clear();
    // Its environment is what it needs to run and what the operator gives it: never the bot's,
    // where the Discord token and the API keys are.
    for kept in ["PATH", "LANG"] {
        if let Some(value) = std::env::var_os(kept) {
            command.env(kept, value);
        }
    }
    if !config.confine {
        // As before confinement existed: the bot's own HOME and TMPDIR.
        for kept in ["HOME", "TMPDIR"] {
            if let Some(value) = std::env::var_os(kept) {
                command.env(kept, value);
            }
        }
        let args = named_in(&config.args, instance_dir);
        command.args(&args).envs(config_env(config, instance_dir));
        let description = "not confined (confine = false): it runs as the bot's user, reads and writes what the bot can, and reaches every network the bot reaches".to_string();
        return Ok((
            tokio::process::Command::from(command),
            Held {
                _home: None,
                #[cfg(target_os = "linux")]
                _user: None,
                description,
            },
        ));
    }
    let home = tempfile::Builder::new()
        .prefix(&format!("autothread-mcp-{}-", config.name))
        .tempdir()
        .map_err(|e| unconfinable(format!("its home folder could not be made: {e}")))?;
    command.env("HOME", home.path()).env("TMPDIR", home.path());
    let place = Place { home, instance_dir };
    confine(config, server_box, program, command, place).map_err(unconfinable)
}

/// Where a confined program lives: its fresh home, and its instance's directory (kept between
/// starts).
struct Place<'a> {
    home: tempfile::TempDir,
    instance_dir: &'a Path,
}

/// `texts` with `{instance_dir}` replaced by `dir`.
fn named_in(texts: &[String], dir: &Path) -> Vec<String> {
    texts.iter().map(|text| in_instance(text, dir)).collect()
}

/// The config's `env`, with `{instance_dir}` replaced by `dir`.
fn config_env<'a>(
    config: &'a McpServerConfig,
    dir: &'a Path,
) -> impl Iterator<Item = (&'a String, String)> + 'a {
    config
        .env
        .iter()
        .map(move |(name, value)| (name, in_instance(value, dir)))
}

/// How a server running as its own user names its instance's directory: through its working
/// directory. The directory is under the bot's data directory, which only the bot's user may
/// enter, so its path does not reach it; the bot enters it before the server's user is taken
/// (the working directory is set first), and `/proc/self/cwd` leads there without passing
/// through the folders above it.
#[cfg(target_os = "linux")]
const DIRECTORY_SEEN_BY_ITS_OWN_USER: &str = "/proc/self/cwd";

#[cfg(not(target_os = "linux"))]
fn confine(
    _config: &McpServerConfig,
    _server_box: &ServerBox,
    _program: &str,
    _command: std::process::Command,
    _place: Place<'_>,
) -> Result<(tokio::process::Command, Held), String> {
    Err("confinement needs Linux; set confine = false and network = \"open\" to run it unconfined, as the bot's user".into())
}

#[cfg(target_os = "linux")]
fn confine(
    config: &McpServerConfig,
    server_box: &ServerBox,
    program: &str,
    mut command: std::process::Command,
    place: Place<'_>,
) -> Result<(tokio::process::Command, Held), String> {
    use crate::sandbox::server::{
        system_read_only, ServerConfinement, ServerNetwork, ServerPaths, ServerUser,
    };
    let user = ServerUser::take(server_box.first_uid, server_box.first_gid, server_box.uids)
        .map_err(|e| e.to_string())?;
    let Place { home, instance_dir } = place;
    // As the bot's user (in a namespace of its own), the server reaches its directory by its path.
    let seen_dir = match user.ids() {
        Some(_) => Path::new(DIRECTORY_SEEN_BY_ITS_OWN_USER),
        None => instance_dir,
    };
    let args = named_in(&config.args, seen_dir);
    command.args(&args).envs(config_env(config, seen_dir));
    if let Some((uid, gid)) = user.ids() {
        // The server's own user owns its home, and nobody else may enter it.
        std::os::unix::fs::chown(home.path(), Some(uid), Some(gid))
            .map_err(|e| format!("its home folder could not be given to uid {uid}: {e}"))?;
        // Its instance's directory too, whole: an earlier start may have run as another user of
        // the range, and what it wrote must stay the server's.
        give_tree(instance_dir, uid, gid).map_err(|e| {
            format!(
                "its directory {} could not be given to uid {uid}: {e}",
                instance_dir.display()
            )
        })?;
    }
    let mut read_only = system_read_only();
    read_only.extend(program_paths(program));
    // A script named in its arguments, found as the bot finds it.
    read_only.extend(
        named_in(&config.args, instance_dir)
            .iter()
            .map(Path::new)
            .filter(|arg| arg.is_file())
            .filter_map(|arg| arg.canonicalize().ok()),
    );
    read_only.extend(config.read_paths.iter().cloned());
    let mut read_write = vec![home.path().to_path_buf(), instance_dir.to_path_buf()];
    read_write.extend(config.paths.iter().cloned());
    let (chosen, fallback) = network_on(config, crate::sandbox::landlock_abi());
    let network = match chosen {
        McpNetwork::None => ServerNetwork::None,
        McpNetwork::Open => ServerNetwork::Open,
        McpNetwork::Guarded => {
            let proxy = server_box.proxy()?;
            let url = proxy.url();
            for variable in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
                command.env(variable, &url);
                command.env(variable.to_ascii_lowercase(), &url);
            }
            // Nothing is left out of the proxy, and Node (24 and later) is told to use it.
            command
                .env_remove("NO_PROXY")
                .env_remove("no_proxy")
                .env("NODE_USE_ENV_PROXY", "1");
            ServerNetwork::Proxy {
                port: proxy.address().port(),
            }
        }
    };
    let paths = ServerPaths {
        read_only,
        read_write,
    };
    let confinement =
        ServerConfinement::prepare(&paths, network, &user).map_err(|e| e.to_string())?;
    let mut description = confinement.describe();
    if let Some(why) = fallback {
        description.push_str(&format!(" ({why})"));
    }
    confinement.apply_to(&mut command);
    Ok((
        tokio::process::Command::from(command),
        Held {
            _home: Some(home),
            _user: Some(user),
            description,
        },
    ))
}

/// Why a server whose config names no network gets none here rather than the guarded one.
#[cfg(target_os = "linux")]
const NO_GUARD_ON_THIS_KERNEL: &str = "no network: this kernel cannot hold a program to the egress proxy (that needs Landlock's TCP rules, Linux 6.7); write network = \"open\" to let it reach every network, or \"none\" to say so";

/// The network a confined server gets on a kernel with Landlock ABI `abi`, and why, when it is
/// not the one its config gives. A config that names none gets the guarded one where the kernel
/// can hold the program to the proxy, and none below that: a server that needs no network (most
/// do not) then starts on every kernel, and one that does fails its fetches saying why. A network
/// the config names is never changed: `guarded` on such a kernel refuses to start.
#[cfg(target_os = "linux")]
fn network_on(config: &McpServerConfig, abi: Option<i64>) -> (McpNetwork, Option<&'static str>) {
    let guard_holds = abi.is_some_and(|abi| abi >= 4);
    match config.network {
        None if config.network() == McpNetwork::Guarded && !guard_holds => {
            (McpNetwork::None, Some(NO_GUARD_ON_THIS_KERNEL))
        }
        _ => (config.network(), None),
    }
}

/// Gives `dir` and everything under it to `uid`:`gid`, links themselves rather than what they
/// lead to. The walk keeps to the directory: it never follows a link.
#[cfg(target_os = "linux")]
fn give_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        if std::fs::symlink_metadata(&path)?.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// The files a program needs to read beyond the system's: for the program as found and for the
/// file its links lead to, the prefix it is installed in (the folder holding `node_modules`, or
/// the one above `bin`), or else the file alone.
fn program_paths(program: &str) -> Vec<PathBuf> {
    let Some(found) = find_in_path(program) else {
        return Vec::new();
    };
    let mut paths = installed_paths(&found);
    // A script brings its interpreter's installation too (a virtual environment's python may
    // lead outside /usr).
    if let Some(interpreter) = interpreter_of(&found).and_then(|i| find_in_path(&i)) {
        paths.extend(installed_paths(&interpreter));
    }
    paths
}

/// The interpreter a script's `#!` line names (the program `env` is given, for `/usr/bin/env`).
fn interpreter_of(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(head[..read].strip_prefix(b"#!")?)
        .ok()?
        .lines()
        .next()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    match Path::new(first).file_name() {
        Some(name) if name == "env" => words.find(|w| !w.starts_with('-')).map(str::to_string),
        _ => Some(first.to_string()),
    }
}

/// For a program and the file its links lead to, its installation prefix, or the file alone.
fn installed_paths(found: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for path in [Some(found.to_path_buf()), found.canonicalize().ok()]
        .into_iter()
        .flatten()
    {
        let packages = path
            .ancestors()
            .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .last()
            .and_then(Path::parent);
        match (packages, path.parent()) {
            (Some(prefix), _) => paths.push(prefix.to_path_buf()),
            (None, Some(bin)) if bin.file_name().is_some_and(|n| n == "bin") => {
                if let Some(prefix) = bin.parent() {
                    paths.push(prefix.to_path_buf());
                }
            }
            _ => paths.push(path),
        }
    }
    paths
}

/// `program` as a path: itself when it has a slash, else the first file of that name in the
/// bot's PATH (which the server is given too).
fn find_in_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_server_that_names_no_network_gets_none_where_the_guard_cannot_hold() {
        let config = |more: &str| -> McpServerConfig {
            toml::from_str(&format!("name = \"s\"\ncommand = \"srv\"\n{more}")).unwrap()
        };
        // Ubuntu 22.04 (5.15) and Debian 12 (6.1) have ABI 1 and 2; 6.7 has 4.
        for abi in [None, Some(1), Some(2), Some(3)] {
            assert_eq!(
                network_on(&config(""), abi),
                (McpNetwork::None, Some(NO_GUARD_ON_THIS_KERNEL)),
                "{abi:?}"
            );
            assert_eq!(
                network_on(&config("network = \"guarded\"\n"), abi),
                (McpNetwork::Guarded, None),
                "what is written stays, and refuses to start there"
            );
            assert_eq!(
                network_on(&config("network = \"open\"\n"), abi),
                (McpNetwork::Open, None)
            );
        }
        for abi in [Some(4), Some(6)] {
            assert_eq!(network_on(&config(""), abi), (McpNetwork::Guarded, None));
        }
    }

    #[test]
    fn a_program_brings_its_installation_prefix_only() {
        assert_eq!(
            program_paths("/opt/venv/bin/mcp-server-time"),
            vec![PathBuf::from("/opt/venv")]
        );
        assert_eq!(
            program_paths("/srv/npm/node_modules/.bin/mcp-server-everything"),
            vec![PathBuf::from("/srv/npm")]
        );
        assert_eq!(
            program_paths("/srv/tools/server"),
            vec![PathBuf::from("/srv/tools/server")],
            "not the whole of /srv/tools"
        );
    }
}
