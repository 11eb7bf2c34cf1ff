//! The egress proxy: an HTTP proxy on 127.0.0.1 through which confined MCP servers with
//! `network = "guarded"` reach the web, applying `read_webpage`'s rules (`web::guard`) to every
//! connection they ask for.
//!
//! A server is given the proxy in `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (see
//! `mcp::confined`), and the kernel lets it connect to nothing else. The proxy takes plain HTTP
//! requests with an absolute URI (`GET http://host/path`) and `CONNECT host:port` tunnels for
//! HTTPS. Either way the host and port are checked with `Guard::check_url` (scheme, an address
//! written as the host, the allow-list's port) and the name is resolved through `Guard::resolve`,
//! which hands back only the addresses a fetch may reach (public ones, or the operator's
//! `web.allow_hosts`); the proxy connects only to one of those, so a name cannot resolve to a
//! public address for the check and a private one for the connection. A refusal is answered with
//! 403 and the guard's reason in the body, which the server passes on to the agent. Redirects are
//! the client's to follow, and each one comes back through the proxy, to be checked again.
//!
//! HTTP parsing, upgrades and forwarding are hyper's. Everything is bounded: at most
//! `MAX_CONNECTIONS` connections at once (one more is closed at once), a request's head must
//! arrive within `HEAD_TIMEOUT`, a connection to a target must open within `CONNECT_TIMEOUT`, and
//! no connection or tunnel lasts longer than `CONNECTION_LIFETIME`. The proxy runs on a thread of
//! its own with its own runtime, so it outlives whichever task first asked for it; `shared`
//! starts one per allow-list (one in a bot) on first use. `recent` keeps the last
//! `RECENT_PASSAGES` decisions (method, host and port, never a path or query) for `check` and the
//! tests.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::guard::{Blocked, Guard, Lookup, SystemLookup};
use crate::locks::LockRecovered;

/// Connections the proxy serves at once; one more is closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a request's head may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connection to a target may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection (a tunnel included) is kept.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(600);
/// Decisions kept for `recent`.
pub const RECENT_PASSAGES: usize = 64;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// What the proxy did with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connected to the target.
    Passed,
    /// Refused by the guard (the reason, as the client read it).
    Refused(String),
    /// Allowed, but the target could not be reached (the reason).
    Failed(String),
}

/// One request the proxy decided on: its method and the `host:port` it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    pub method: String,
    pub target: String,
    pub verdict: Verdict,
}

/// A running egress proxy.
pub struct EgressProxy {
    address: SocketAddr,
    recent: Arc<Mutex<VecDeque<Passage>>>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyStartError {
    #[error("the egress proxy could not listen on 127.0.0.1: {0}")]
    NoListener(#[source] io::Error),
    #[error("the egress proxy's thread could not be started: {0}")]
    NoThread(#[source] io::Error),
}

impl EgressProxy {
    /// The proxy for this allow-list, started on first use and shared by every server after.
    pub fn shared(allow_hosts: &[String]) -> Result<Arc<EgressProxy>, ProxyStartError> {
        // One per distinct allow-list: a bot has one; tests with their own lists have theirs.
        static STARTED: Mutex<Vec<(Vec<String>, Arc<EgressProxy>)>> = Mutex::new(Vec::new());
        let mut started = STARTED.lock_recovered();
        if let Some((_, proxy)) = started.iter().find(|(list, _)| list == allow_hosts) {
            return Ok(proxy.clone());
        }
        let proxy = Arc::new(EgressProxy::start(allow_hosts, Arc::new(SystemLookup))?);
        started.push((allow_hosts.to_vec(), proxy.clone()));
        Ok(proxy)
    }

    /// A new proxy on an ephemeral port of 127.0.0.1, resolving names with `lookup`, on a thread
    /// of its own that lives as long as the process.
    pub fn start(
        allow_hosts: &[String],
        lookup: Arc<dyn Lookup>,
    ) -> Result<EgressProxy, ProxyStartError> {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(ProxyStartError::NoListener)?;
        listener
            .set_nonblocking(true)
            .map_err(ProxyStartError::NoListener)?;
        let address = listener.local_addr().map_err(ProxyStartError::NoListener)?;
        let recent = Arc::new(Mutex::new(VecDeque::new()));
        let shared = Shared {
            guard: Guard::new(allow_hosts, lookup),
            recent: recent.clone(),
        };
        std::thread::Builder::new()
            .name("egress-proxy".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        tracing::error!(error = %e, "the egress proxy has no runtime; guarded MCP servers reach nothing");
                        return;
                    }
                };
                runtime.block_on(serve(listener, shared));
            })
            .map_err(ProxyStartError::NoThread)?;
        Ok(EgressProxy { address, recent })
    }

    /// Where it listens (127.0.0.1 and its port).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its URL, as a server's proxy settings give it.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The last decisions, oldest first.
    pub fn recent(&self) -> Vec<Passage> {
        self.recent.lock_recovered().iter().cloned().collect()
    }
}

#[derive(Clone)]
struct Shared {
    guard: Guard,
    recent: Arc<Mutex<VecDeque<Passage>>>,
}

impl Shared {
    fn note(&self, method: &Method, target: &str, verdict: Verdict) {
        match &verdict {
            Verdict::Refused(why) => {
                tracing::info!(%method, target, "the egress proxy refused a connection: {why}")
            }
            Verdict::Failed(why) => tracing::debug!(%method, target, "egress failed: {why}"),
            Verdict::Passed => tracing::debug!(%method, target, "egress passed"),
        }
        let mut recent = self.recent.lock_recovered();
        if recent.len() == RECENT_PASSAGES {
            recent.pop_front();
        }
        recent.push_back(Passage {
            method: method.to_string(),
            target: target.to_string(),
            verdict,
        });
    }
}

async fn serve(listener: std::net::TcpListener, shared: Shared) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(error = %e, "the egress proxy cannot listen; guarded MCP servers reach nothing");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // A failed accept (out of descriptors, say) passes; the listener stays.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                "the egress proxy has {MAX_CONNECTIONS} connections open; one more was closed"
            );
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(serve_connection(stream, shared, Arc::new(permit)));
    }
}

async fn serve_connection(stream: TcpStream, shared: Shared, permit: Arc<OwnedSemaphorePermit>) {
    let service = hyper::service::service_fn(move |request| {
        let (shared, permit) = (shared.clone(), permit.clone());
        async move { Ok::<_, Infallible>(handle(request, shared, permit).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
}

async fn handle(
    request: Request<Incoming>,
    shared: Shared,
    permit: Arc<OwnedSemaphorePermit>,
) -> Response<ProxyBody> {
    if request.method() == Method::CONNECT {
        tunnel(request, shared, permit).await
    } else {
        forward(request, shared).await
    }
}

fn answer(status: StatusCode, text: String) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(text + "\n"))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Why the proxy did not connect: refused by the guard (403) or not reachable (502).
enum NotConnected {
    Refused(Blocked),
    Unreachable(String),
}

impl NotConnected {
    fn into_response(self, shared: &Shared, method: &Method, target: &str) -> Response<ProxyBody> {
        match self {
            NotConnected::Refused(Blocked::Unresolved { host, why }) => {
                let why = format!("{host} could not be resolved: {why}");
                shared.note(method, target, Verdict::Failed(why.clone()));
                answer(StatusCode::BAD_GATEWAY, why)
            }
            NotConnected::Refused(blocked) => {
                let why = format!("refused by autothread's egress guard: {blocked}");
                shared.note(method, target, Verdict::Refused(why.clone()));
                answer(StatusCode::FORBIDDEN, why)
            }
            NotConnected::Unreachable(why) => {
                shared.note(method, target, Verdict::Failed(why.clone()));
                answer(StatusCode::BAD_GATEWAY, why)
            }
        }
    }
}

/// Checks `url` (its scheme, host and port) with the guard, resolves its host through it, and
/// connects to the first checked address that answers.
async fn connect_checked(guard: &Guard, url: &url::Url) -> Result<TcpStream, NotConnected> {
    guard.check_url(url).map_err(NotConnected::Refused)?;
    let host = url
        .host_str()
        .ok_or(NotConnected::Refused(Blocked::NoHost))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let addresses: Vec<IpAddr> = guard
        .resolve(host.trim_matches(['[', ']']))
        .await
        .map_err(NotConnected::Refused)?;
    let mut last = String::from("no address");
    for address in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((address, port))).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(NotConnected::Unreachable(format!(
        "{host}:{port} could not be reached: {last}"
    )))
}

/// `CONNECT host:port`: checked, connected, answered 200, and then the two streams copied into
/// each other until either ends (or the connection's lifetime does).
async fn tunnel(
    request: Request<Incoming>,
    shared: Shared,
    permit: Arc<OwnedSemaphorePermit>,
) -> Response<ProxyBody> {
    let method = request.method().clone();
    let Some(authority) = request.uri().authority().cloned() else {
        return answer(
            StatusCode::BAD_REQUEST,
            "CONNECT needs host:port".to_string(),
        );
    };
    let target = authority.to_string();
    // The tunnel carries TLS, so the target is checked as an https URL on its port.
    let Ok(url) = url::Url::parse(&format!("https://{authority}/")) else {
        return answer(
            StatusCode::BAD_REQUEST,
            format!("{target} is not a host and port"),
        );
    };
    let outbound = match connect_checked(&shared.guard, &url).await {
        Ok(stream) => stream,
        Err(not) => return not.into_response(&shared, &method, &target),
    };
    shared.note(&method, &target, Verdict::Passed);
    tokio::spawn(async move {
        // The tunnel holds the connection's place among the proxy's connections.
        let _permit = permit;
        let Ok(upgraded) = hyper::upgrade::on(request).await else {
            return;
        };
        let mut inbound = TokioIo::new(upgraded);
        let mut outbound = outbound;
        let _ = tokio::time::timeout(
            CONNECTION_LIFETIME,
            tokio::io::copy_bidirectional(&mut inbound, &mut outbound),
        )
        .await;
    });
    Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    )
}

/// Headers that belong to one hop, not to the request passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// A plain HTTP request with an absolute URI: checked, connected, sent on in origin form, and
/// its response passed back.
async fn forward(request: Request<Incoming>, shared: Shared) -> Response<ProxyBody> {
    let method = request.method().clone();
    let Ok(url) = url::Url::parse(&request.uri().to_string()) else {
        return answer(
            StatusCode::BAD_REQUEST,
            "a proxy request needs an absolute http:// URI".to_string(),
        );
    };
    let target = format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(80)
    );
    if url.scheme() != "http" {
        let why = match url.scheme() {
            "https" => "an https URL goes through CONNECT".to_string(),
            other => format!("only http and https URLs can be read (got {other}:)"),
        };
        shared.note(&method, &target, Verdict::Refused(why.clone()));
        return answer(StatusCode::BAD_REQUEST, why);
    }
    let stream = match connect_checked(&shared.guard, &url).await {
        Ok(stream) => stream,
        Err(not) => return not.into_response(&shared, &method, &target),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => {
                return NotConnected::Unreachable(format!("{target}: {e}"))
                    .into_response(&shared, &method, &target)
            }
        };
    tokio::spawn(connection);
    let (mut parts, body) = request.into_parts();
    let origin_form = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    let Ok(uri) = origin_form.parse() else {
        return answer(
            StatusCode::BAD_REQUEST,
            "the request's path is not valid".to_string(),
        );
    };
    parts.uri = uri;
    for header in HOP_BY_HOP {
        parts.headers.remove(*header);
    }
    if !parts.headers.contains_key(hyper::header::HOST) {
        if let Ok(host) = target.parse() {
            parts.headers.insert(hyper::header::HOST, host);
        }
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            shared.note(&method, &target, Verdict::Passed);
            response.map(BodyExt::boxed)
        }
        Err(e) => NotConnected::Unreachable(format!("{target} did not answer: {e}"))
            .into_response(&shared, &method, &target),
    }
}
