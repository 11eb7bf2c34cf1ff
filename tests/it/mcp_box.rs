//! MCP servers confined like code execution, with a guarded network: the egress proxy applies the
//! web guard to what a server fetches; a guarded server reaches the web only through it, a server
//! with `network = "none"` reaches nothing, and none reads the bot's files; confined servers still
//! list and run their tools. Against `fixtures/mcp_reach_server.py` (which tries to reach things
//! on demand) and the protocol's reference server.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use autothread::config::{McpServerConfig, WebConfig};
use autothread::mcp::McpServer;
use autothread::web::egress_proxy::{EgressProxy, Verdict};
use autothread::web::guard::Lookup;
use serde_json::json;

const REACH_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/mcp_reach_server.py"
);

/// A page on 127.0.0.1 that counts the requests it gets.
struct Page {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Page {
    async fn start() -> Page {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>("the private page")
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Page { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The reach server as configured with `more`, with `web`; `None` (said why) without python3 or
/// where this machine cannot confine a server.
fn reach_server(more: &str, web: &WebConfig) -> Option<Arc<McpServer>> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("python3 is not installed ({e})"));
    crate::support::needs::needs(python)?;
    crate::support::needs::needs(confinable())?;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"reach\"\ncommand = \"python3\"\nargs = [\"{REACH_SERVER}\"]\n{more}"
    ))
    .unwrap();
    Some(McpServer::new(&config, web).unwrap())
}

/// Whether this kernel gives a guarded server its walls: Landlock with TCP rules (ABI 4).
fn confinable() -> Result<(), String> {
    match autothread::sandbox::landlock_abi() {
        Some(abi) if abi >= 4 => Ok(()),
        found => Err(format!(
            "a guarded MCP server needs Landlock ABI 4 (Linux 6.7); this kernel has {found:?}"
        )),
    }
}

async fn said(server: &McpServer, tool: &str, arguments: serde_json::Value) -> String {
    let result = server
        .call(tool, arguments.as_object().unwrap().clone())
        .await
        .unwrap_or_else(|failure| panic!("{tool}: {failure}"));
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_server_reaches_only_what_the_web_guard_allows_and_only_through_the_proxy() {
    let page = Page::start().await;
    let private_url = format!("http://127.0.0.1:{}/secret.txt", page.port);
    let Some(guarded) = reach_server("", &WebConfig::default()) else {
        return;
    };
    // Listing and calling tools works as before, confined.
    assert_eq!(guarded.commands().await.unwrap().len(), 5);
    let proxy = guarded
        .egress_proxy()
        .expect("a guarded server has the proxy");
    assert_eq!(
        said(&guarded, "env", json!({"name": "HTTPS_PROXY"})).await,
        proxy.url()
    );
    let how = guarded.confinement().await.unwrap();
    assert!(
        how.contains("confined") && how.contains(&format!("127.0.0.1:{}", proxy.address().port())),
        "{how}"
    );
    // Through the proxy, a private address is refused with the guard's reason, which the server
    // passes on to the agent.
    let refused = said(&guarded, "fetch", json!({"url": private_url})).await;
    assert!(
        refused.contains("403") && refused.contains("private or reserved address"),
        "{refused}"
    );
    assert!(proxy.recent().iter().any(|passage| {
        passage.target == format!("127.0.0.1:{}", page.port)
            && matches!(&passage.verdict, Verdict::Refused(why) if why.contains("private"))
    }));
    // Past the proxy, the kernel refuses the connection itself.
    let direct = said(
        &guarded,
        "connect",
        json!({"host": "127.0.0.1", "port": page.port}),
    )
    .await;
    assert!(direct.starts_with("failed"), "{direct}");
    assert_eq!(page.hits(), 0, "nothing reached the private page");

    // With the page in the operator's allow-list, the same fetch passes, through the proxy.
    let web = WebConfig {
        allow_hosts: vec![format!("127.0.0.1:{}", page.port)],
        ..WebConfig::default()
    };
    let allowed = reach_server("", &web).unwrap();
    let fetched = said(&allowed, "fetch", json!({"url": private_url})).await;
    assert_eq!(fetched, "status 200: the private page");
    assert_eq!(page.hits(), 1);
    let allowed_proxy = allowed.egress_proxy().unwrap();
    assert!(allowed_proxy.recent().iter().any(|passage| {
        passage.method == "GET"
            && passage.target == format!("127.0.0.1:{}", page.port)
            && passage.verdict == Verdict::Passed
    }));
    // And still not past it.
    let direct = said(
        &allowed,
        "connect",
        json!({"host": "127.0.0.1", "port": page.port}),
    )
    .await;
    assert!(direct.starts_with("failed"), "{direct}");
    assert_eq!(page.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_network_connects_nowhere() {
    let page = Page::start().await;
    let web = WebConfig {
        allow_hosts: vec![format!("127.0.0.1:{}", page.port)],
        ..WebConfig::default()
    };
    let Some(offline) = reach_server("network = \"none\"\n", &web) else {
        return;
    };
    assert!(offline.egress_proxy().is_none());
    assert_eq!(
        said(&offline, "env", json!({"name": "HTTP_PROXY"})).await,
        "None"
    );
    let fetched = said(
        &offline,
        "fetch",
        json!({"url": format!("http://127.0.0.1:{}/", page.port)}),
    )
    .await;
    assert!(fetched.starts_with("failed"), "{fetched}");
    let direct = said(
        &offline,
        "connect",
        json!({"host": "127.0.0.1", "port": page.port}),
    )
    .await;
    assert!(direct.starts_with("failed"), "{direct}");
    assert_eq!(page.hits(), 0, "no connection was made");
    let how = offline.confinement().await.unwrap();
    assert!(how.contains("no network"), "{how}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_server_cannot_read_the_bots_store_but_uses_its_home_and_paths() {
    use std::os::unix::fs::PermissionsExt;
    let bot = tempfile::tempdir().unwrap();
    // Readable by anyone as far as file modes go: only the confinement keeps the server out.
    let store = bot.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(bot.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o777)).unwrap();
    let record = store.join("db");
    std::fs::write(&record, "the agents' records").unwrap();
    std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o644)).unwrap();
    let notes = bot.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Some(server) = reach_server(
        &format!("paths = [\"{}\"]\n", notes.display()),
        &WebConfig::default(),
    ) else {
        return;
    };
    let read = said(&server, "read", json!({"path": record})).await;
    assert!(
        read.starts_with("failed") && read.contains("ermission"),
        "{read}"
    );
    let written = said(
        &server,
        "write",
        json!({"path": store.join("planted"), "text": "x"}),
    )
    .await;
    assert!(written.starts_with("failed"), "{written}");
    assert!(!store.join("planted").exists());
    // Its paths, read and written.
    let kept = notes.join("kept.txt");
    assert_eq!(
        said(&server, "write", json!({"path": kept, "text": "a note"})).await,
        "written"
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "a note");
    // Its private home, which is no folder of the bot's.
    let home = said(&server, "env", json!({"name": "HOME"})).await;
    assert!(home.contains("autothread-mcp-reach-"), "{home}");
    assert_eq!(
        said(
            &server,
            "write",
            json!({"path": format!("{home}/cache"), "text": "c"})
        )
        .await,
        "written"
    );
    // Unconfined only when the config says so, and then it says so too.
    let unconfined = reach_server(
        "confine = false\nnetwork = \"open\"\n",
        &WebConfig::default(),
    )
    .unwrap();
    assert_eq!(
        said(&unconfined, "read", json!({"path": record})).await,
        "read: the agents' records"
    );
    let how = unconfined.confinement().await.unwrap();
    assert!(how.starts_with("not confined (confine = false)"), "{how}");
}

/// The installed reference server, or `None` (said why).
fn everything_server() -> Option<String> {
    let installed = format!(
        "{}/target/mcp-npm/node_modules/.bin/mcp-server-everything",
        env!("CARGO_MANIFEST_DIR")
    );
    let found = std::env::var("MCP_EVERYTHING_SERVER")
        .ok()
        .filter(|path| !path.is_empty())
        .or_else(|| {
            std::path::Path::new(&installed)
                .exists()
                .then_some(installed)
        });
    crate::support::needs::needs(found.ok_or_else(|| {
        "mcp-server-everything is not installed (run scripts/mcp-test-servers.sh; .ci/run does)"
            .to_string()
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_runs_confined_and_its_fetch_of_a_private_page_is_refused() {
    let Some(program) = everything_server() else {
        return;
    };
    if crate::support::needs::needs(confinable()).is_none() {
        return;
    }
    let page = Page::start().await;
    let config: McpServerConfig = toml::from_str(&format!(
        "name = \"everything\"\ncommand = \"{program}\"\nargs = [\"stdio\"]\n"
    ))
    .unwrap();
    let everything = McpServer::new(&config, &WebConfig::default()).unwrap();
    let names: Vec<String> = everything
        .commands()
        .await
        .unwrap()
        .iter()
        .map(|c| c.spec().name)
        .collect();
    assert!(
        names.contains(&"everything.gzip-file-as-resource".to_string()),
        "{names:?}"
    );
    assert!(said(&everything, "echo", json!({"message": "still works"}))
        .await
        .contains("still works"));
    let fetched = everything
        .call(
            "gzip-file-as-resource",
            json!({
                "name": "secret.gz",
                "data": format!("http://127.0.0.1:{}/secret.txt", page.port),
                "outputType": "resource"
            })
            .as_object()
            .unwrap()
            .clone(),
        )
        .await;
    // The agent reads why, whichever way the server reports it.
    let why = match fetched {
        Ok(result) => {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            format!("{:?}", result.content)
        }
        Err(failure) => failure.to_string(),
    };
    assert!(why.to_lowercase().contains("fetch"), "{why}");
    assert_eq!(page.hits(), 0, "nothing reached the private page");
}

/// Names for the proxy's own tests: one private, one public (and one of its addresses reserved,
/// which the proxy never tries).
struct Names;

impl Lookup for Names {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>,
    > {
        Box::pin(async move {
            Ok(match host {
                "intranet.test" => vec!["127.0.0.1".parse().unwrap()],
                "public.test" => vec![
                    "192.0.0.170".parse().unwrap(),
                    "93.184.216.34".parse().unwrap(),
                ],
                other => match other.parse() {
                    Ok(address) => vec![address],
                    Err(_) => return Err(std::io::Error::other("no such host")),
                },
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_proxy_applies_the_web_guard_to_requests_and_tunnels() {
    let page = Page::start().await;
    let proxy = EgressProxy::start(&[], Arc::new(Names)).unwrap();
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy.url()).unwrap())
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    // A plain request to a private address, and to a name that resolves to one: 403 and why.
    for url in [
        format!("http://127.0.0.1:{}/", page.port),
        format!("http://intranet.test:{}/", page.port),
    ] {
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 403, "{url}");
        let body = response.text().await.unwrap();
        assert!(body.contains("never reach private networks"), "{body}");
    }
    // A tunnel to a private address is refused before it opens.
    let tunnel = client
        .get(format!("https://127.0.0.1:{}/", page.port))
        .send()
        .await;
    assert!(tunnel.is_err());
    assert!(proxy.recent().iter().any(
        |passage| passage.method == "CONNECT" && matches!(passage.verdict, Verdict::Refused(_))
    ));
    // A public name is allowed, and only its public address tried: whatever this machine's
    // network then does with it (no internet, or a filter answering), it is no refusal.
    let public = client.get("http://public.test/").send().await.unwrap();
    assert_ne!(public.status(), 403);
    let last = proxy.recent().last().cloned().unwrap();
    assert_eq!(last.target, "public.test:80");
    assert!(
        matches!(&last.verdict, Verdict::Passed | Verdict::Failed(_)),
        "{last:?}"
    );
    assert_eq!(page.hits(), 0);
    // The operator's allow-list opens the page, for requests and tunnels alike.
    let open = EgressProxy::start(&[format!("127.0.0.1:{}", page.port)], Arc::new(Names)).unwrap();
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(open.url()).unwrap())
        .build()
        .unwrap();
    let body = client
        .get(format!("http://127.0.0.1:{}/x?y=1", page.port))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "the private page");
    // The page speaks no TLS, so the request in the tunnel fails, but the tunnel opened.
    let _ = client
        .get(format!("https://127.0.0.1:{}/", page.port))
        .send()
        .await;
    assert!(open
        .recent()
        .iter()
        .any(|passage| passage.method == "CONNECT" && passage.verdict == Verdict::Passed));
    // A request that is not a proxy's is refused plainly.
    let plain = reqwest::get(format!("{}/", open.url())).await.unwrap();
    assert_eq!(plain.status(), 400);
}
