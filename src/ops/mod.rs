//! Operations: the local HTTP listener a deployment watches (`/healthz`, `/readyz`, `/metrics`),
//! the readiness facts it reports, and the names of the metrics the rest of the crate records
//! (`names`).
//!
//! Metrics go through the `metrics` facade, so recording them costs nothing where no recorder is
//! installed (the console, the tests, a bot without the listener); `run` installs the Prometheus
//! recorder (`install_metrics`) only when `ops.listen` is set, with a task that runs its upkeep
//! every few seconds: the recorder keeps each histogram sample until its upkeep folds them into
//! buckets, and without a scrape they grew with every click. Readiness is process-wide (`health()`:
//! the gateway connected, the model endpoint's last answer) for the same reason: one process has
//! one gateway and one model endpoint to report on. `serve` reads the store's gauges at scrape time
//! and probes the model endpoint's `/models` when idle; `check_health` is `autothread health`.

pub mod names;
pub mod proc_counters;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::clock::Clock;
use crate::locks::LockRecovered;
use crate::store::Store;

/// The model endpoint counts as answering for this long after its last answer.
const MODEL_FRESH: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// When nothing has reached the model endpoint for this long, the listener checks it is there.
const PROBE_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Contact {
    ok: bool,
    at: DateTime<Utc>,
    detail: String,
}

/// What `/readyz` reports on, recorded where it happens.
#[derive(Debug, Default)]
pub struct Health {
    gateway: AtomicBool,
    model: Mutex<Option<Contact>>,
}

/// The process's readiness facts.
pub fn health() -> &'static Health {
    static HEALTH: OnceLock<Health> = OnceLock::new();
    HEALTH.get_or_init(Health::default)
}

/// Whether the Discord gateway is up, as `Health::set_gateway` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gateway {
    /// Ready or resumed.
    Connected,
    /// The connection dropped.
    Disconnected,
}

impl Health {
    /// The Discord gateway connected (Ready or resumed) or dropped.
    pub fn set_gateway(&self, gateway: Gateway) {
        self.gateway
            .store(gateway == Gateway::Connected, Ordering::Relaxed);
    }

    /// The model endpoint answered (any status below 500: it is there and speaking HTTP).
    pub fn model_answered(&self, at: DateTime<Utc>) {
        self.set_model(Contact {
            ok: true,
            at,
            detail: String::new(),
        });
    }

    /// The model endpoint failed after its retries.
    pub fn model_failed(&self, at: DateTime<Utc>, detail: &str) {
        self.set_model(Contact {
            ok: false,
            at,
            detail: detail.chars().take(200).collect(),
        });
    }

    fn set_model(&self, contact: Contact) {
        *self.model.lock_recovered() = Some(contact);
    }

    fn model(&self) -> Option<Contact> {
        self.model.lock_recovered().clone()
    }

    /// Each check with its verdict; ready when all pass.
    pub fn readiness(
        &self,
        store: &Store,
        now: DateTime<Utc>,
    ) -> Vec<(&'static str, Result<String, NotReady>)> {
        let store_check = match store.db().get(b"readiness-probe") {
            Ok(_) => Ok("open".to_string()),
            Err(e) => Err(NotReady::StoreUnreadable(e)),
        };
        let gateway = if self.gateway.load(Ordering::Relaxed) {
            Ok("connected".to_string())
        } else {
            Err(NotReady::Disconnected)
        };
        let model = match self.model() {
            None => Err(NotReady::NoAnswerYet),
            Some(c) if !c.ok => Err(NotReady::ModelFailed {
                at: c.at,
                detail: c.detail,
            }),
            Some(c) if now - c.at > MODEL_FRESH => Err(NotReady::Stale { at: c.at }),
            Some(c) => Ok(format!("answered at {}", c.at.format("%H:%M:%S"))),
        };
        vec![
            ("store", store_check),
            ("gateway", gateway),
            ("model endpoint", model),
        ]
    }
}

/// Why one readiness check fails, as `/readyz` shows it after the check's name.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("cannot read: {0}")]
    StoreUnreadable(#[source] crate::store::kv::Error),
    #[error("not connected")]
    Disconnected,
    #[error("has not answered yet")]
    NoAnswerYet,
    #[error("failed at {}: {detail}", .at.format("%H:%M:%S"))]
    ModelFailed { at: DateTime<Utc>, detail: String },
    #[error("last answered at {}, over 10 minutes ago", .at.format("%H:%M:%S"))]
    Stale { at: DateTime<Utc> },
}

/// How often the recorder's histogram samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder for this process, with its upkeep on the current runtime;
/// `None` (with a warning) if one already is.
pub fn install_metrics() -> Option<PrometheusHandle> {
    match PrometheusBuilder::new()
        .set_buckets(&[
            0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
        ])
        .and_then(|b| b.install_recorder())
    {
        Ok(handle) => {
            names::describe();
            // The recorder keeps every histogram sample (an ack's and a model call's seconds)
            // until upkeep folds them into the buckets; installed this way nothing runs it, so
            // without a scrape they piled up for as long as the bot ran.
            let upkept = handle.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(METRICS_UPKEEP);
                loop {
                    every.tick().await;
                    upkept.run_upkeep();
                }
            });
            Some(handle)
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics are off: cannot install the recorder");
            None
        }
    }
}

#[derive(Clone)]
struct Served {
    store: Store,
    clock: std::sync::Arc<dyn Clock>,
    metrics: Option<PrometheusHandle>,
}

/// Binds `listen` and serves until the process ends; returns the bound address (port 0 picks one).
/// Also checks, when nothing else has, that the model endpoint at `model_base` answers.
pub async fn serve(
    listen: &str,
    store: Store,
    clock: std::sync::Arc<dyn Clock>,
    metrics: Option<PrometheusHandle>,
    model_base: String,
    more: Router,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen} (ops.listen): {e}"))?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Served {
            store,
            clock: clock.clone(),
            metrics,
        })
        .merge(more);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the ops listener stopped");
        }
    });
    tokio::spawn(probe_model(model_base, clock));
    Ok(addr)
}

async fn readyz(State(served): State<Served>) -> Response {
    let checks = health().readiness(&served.store, served.clock.now());
    let ready = checks.iter().all(|(_, verdict)| verdict.is_ok());
    let body: String = checks
        .iter()
        .map(|(name, verdict)| match verdict {
            Ok(detail) => format!("ok    {name}: {detail}\n"),
            Err(why) => format!("FAIL  {name}: {why}\n"),
        })
        .collect();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

async fn metrics_text(State(served): State<Served>) -> Response {
    let Some(handle) = &served.metrics else {
        return (StatusCode::NOT_FOUND, "metrics are off\n").into_response();
    };
    record_store_gauges(&served.store);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// Gauges read from the store when scraped: agents by state, cards waiting, the store's size.
fn record_store_gauges(store: &Store) {
    let mut by_phase = std::collections::BTreeMap::<String, u64>::new();
    match store.list_agents() {
        Ok(agents) => {
            for agent in agents {
                *by_phase.entry(agent.phase).or_default() += 1;
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot list agents"),
    }
    for phase in names::PHASES {
        let count = by_phase.get(*phase).copied().unwrap_or(0);
        metrics::gauge!(names::AGENTS, "state" => *phase).set(count as f64);
    }
    let waiting = by_phase.get("awaiting decision").copied().unwrap_or(0);
    metrics::gauge!(names::PENDING_CARDS).set(waiting as f64);
    if let Ok(bytes) = store.db().size_on_disk() {
        metrics::gauge!(names::STORE_BYTES).set(bytes as f64);
    }
}

/// Readiness needs a recent answer from the model endpoint, and an idle bot makes no calls, so an
/// idle endpoint is asked for its model list (free, and served by every OpenAI-compatible server
/// we know; any status below 500 proves it is there).
async fn probe_model(base: String, clock: std::sync::Arc<dyn Clock>) {
    let Ok(client) = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    else {
        return;
    };
    let url = format!("{}/models", base.trim_end_matches('/'));
    loop {
        let recent = health()
            .model()
            .is_some_and(|c| c.ok && clock.now() - c.at < MODEL_FRESH / 2);
        if !recent {
            match client.get(&url).send().await {
                Ok(r) if !r.status().is_server_error() => health().model_answered(clock.now()),
                Ok(r) => health().model_failed(clock.now(), &format!("HTTP {}", r.status())),
                Err(e) => health().model_failed(clock.now(), unreachable_kind(&e)),
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// `autothread health`: whether the listener at `listen` answers /healthz. A wildcard address is
/// asked on loopback, where the process that bound it also answers.
pub async fn check_health(listen: &str) -> anyhow::Result<std::process::ExitCode> {
    let mut addr: SocketAddr = listen
        .parse()
        .map_err(|_| anyhow::anyhow!("ops.listen is not set to an address (it is {listen:?})"))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?;
    match client.get(format!("http://{addr}/healthz")).send().await {
        Ok(r) if r.status().is_success() => {
            println!("ok: http://{addr}/healthz answered");
            Ok(std::process::ExitCode::SUCCESS)
        }
        Ok(r) => {
            println!(
                "not healthy: http://{addr}/healthz answered HTTP {}",
                r.status()
            );
            Ok(std::process::ExitCode::FAILURE)
        }
        Err(e) => {
            println!(
                "not healthy: http://{addr}/healthz: {}",
                unreachable_kind(&e)
            );
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

/// What went wrong, without the URL reqwest's message would carry.
/// What kind of network failure `error` is, in words safe to log (reqwest's own message carries
/// the URL, which may carry a provider's query); `None` when the server did answer.
pub fn network_failure(error: &reqwest::Error) -> Option<&'static str> {
    if error.is_timeout() {
        Some("timed out")
    } else if error.is_connect() {
        Some("connection failed")
    } else if error.is_request() {
        Some("request failed")
    } else {
        None
    }
}

fn unreachable_kind(error: &reqwest::Error) -> &'static str {
    network_failure(error).unwrap_or("request failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(health: &Health, store: &Store, now: DateTime<Utc>) -> Vec<bool> {
        health
            .readiness(store, now)
            .into_iter()
            .map(|(_, v)| v.is_ok())
            .collect()
    }

    #[test]
    fn ready_only_with_the_gateway_up_and_a_recent_answer_from_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let health = Health::default();
        let now = DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::days(20_000);
        assert_eq!(verdicts(&health, &store, now), [true, false, false]);
        health.set_gateway(Gateway::Connected);
        health.model_answered(now);
        assert_eq!(verdicts(&health, &store, now), [true, true, true]);
        let later = now + chrono::TimeDelta::minutes(11);
        assert_eq!(verdicts(&health, &store, later), [true, true, false]);
        health.model_failed(later, "HTTP 503");
        let report = health.readiness(&store, later);
        assert!(
            matches!(&report[2].1, Err(why) if why.to_string().contains("HTTP 503")),
            "{report:?}"
        );
        health.set_gateway(Gateway::Disconnected);
        assert_eq!(verdicts(&health, &store, later), [true, false, false]);
    }
}
