//! The Agent Protocol surface (v1, the API AutoGPT's `serve` speaks): `/ap/v1/agent/tasks`, their
//! steps and artifacts, for any Agent Protocol client. `autothread serve` runs it alone (`run`);
//! inside the Discord bot it is served beside Discord when `api.listen` is set. Either way an
//! agent started here is an ordinary agent: created by `AgentService`, run by the `Supervisor`'s
//! actors, shown through `ApiSurface` (the runtime's port), decided with `Supervisor::decide`
//! under the same policy, quorum, deadlines, brake, audit and budgets as a card's click.
//!
//! The mapping is AutoGPT's. Creating a task creates and starts an agent (`input` is its task;
//! `additional_input` may give its `name` and `role`, its `model` from the offered list,
//! `budget_usd`, `continuous`: commands of automatic classes to run without asking, and
//! `discord_channel`: a channel whose new thread the agent lives in too, see `threads`). A step
//! answers what the previous step showed (`RestPoint`): with no input or `y` it approves the
//! proposed command, with other text it gives feedback, or answers the agent's question; a
//! paused agent resumes. It then waits (at most `api.step_wait_secs`) until the agent rests again
//! (a new proposal, a question, a pause, the end) and answers with the newest step (see `steps`);
//! past the wait the step is `running`, and a later step shows where the agent got to. Input
//! is applied only to a point its caller was shown, so the first step only shows the first
//! proposal, and a point decided meanwhile elsewhere (Discord) is never decided twice.
//!
//! Access (`access`): a bearer token per caller, compared in constant time; 401 without a
//! known one; another caller's task answers 404 as if it did not exist. Request bodies are held
//! to `api.max_body_bytes`. Errors answer `{"message": …}`: 404, 422 for a bad body or page, 503
//! when the agent cannot take a decision now; anything else is logged and answered 500 with a
//! reference. Artifacts are the agent's workspace files (`artifacts`).

mod access;
mod artifacts;
pub mod protocol;
mod steps;
mod threads;
mod waiting;

pub use access::{started_over_the_api, Caller, Tokens};
pub use threads::{BindRefusal, ThreadHost, ThreadPlace};
pub use waiting::{ApiSurface, RestPoint};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use crate::app::App;
use crate::budget::Budgets;
use crate::core::budget::{usd_to_micros, Micros};
use crate::core::decision::{Decision, APPROVE_N_MAX};
use crate::core::event::Event;
use crate::core::state::{AgentState, Profile};
use crate::runtime::supervisor::{SendError, Supervisor};
use crate::runtime::DecideError;
use crate::service::{counts_against_caps, AgentService, NewAgent};
use protocol::{PageQuery, Step, StepRequestBody, Task, TaskRequestBody};
use steps::TaskRecord;

/// The longest text a step's input may be (feedback, an answer), as a Discord form allows.
pub const MAX_INPUT_CHARS: usize = 4_000;

/// The keys `additional_input` may hold when a task is created.
const TASK_OPTIONS: &[&str] = &[
    "name",
    "role",
    "model",
    "budget_usd",
    "continuous",
    "discord_channel",
];

/// Why a request was not served; its text is the answer's `message`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("A known bearer token is needed: Authorization: Bearer <token>.")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("Something went wrong (ref {0}); the server's log says more.")]
    Internal(String),
}

impl ApiError {
    /// Logs what went wrong under a reference the answer gives.
    fn internal(error: impl std::fmt::Display) -> ApiError {
        let reference = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
        tracing::error!(reference, %error, "an API request failed");
        ApiError::Internal(reference)
    }

    fn no_task(task_id: &str) -> ApiError {
        ApiError::NotFound(format!("No task {:?}.", shown_id(task_id)))
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status(),
            Json(protocol::ErrorBody {
                message: self.to_string(),
            }),
        )
            .into_response();
        if matches!(self, ApiError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(error: crate::store::StoreError) -> ApiError {
        ApiError::internal(error)
    }
}

/// An id as a caller sent it, cut short and printable, for a message.
fn shown_id(id: &str) -> String {
    id.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// What every handler is handed.
#[derive(Clone)]
pub struct Api {
    app: App,
    agents: AgentService,
    supervisor: Supervisor,
    surface: Arc<ApiSurface>,
    tokens: Arc<Tokens>,
    /// Discord, when the API runs inside the bot: where a bound task's thread opens.
    threads: Option<Arc<dyn ThreadHost>>,
}

impl Api {
    pub fn new(app: App, supervisor: Supervisor, surface: Arc<ApiSurface>, tokens: Tokens) -> Api {
        Api {
            agents: app.agents(),
            app,
            supervisor,
            surface,
            tokens: Arc::new(tokens),
            threads: None,
        }
    }

    /// The API inside the Discord bot, which can bind a task to a thread of `host`.
    pub fn with_threads(self, host: Arc<dyn ThreadHost>) -> Api {
        Api {
            threads: Some(host),
            ..self
        }
    }

    /// The caller's task `task_id`; another caller's is as absent as one that never was.
    fn owned(&self, caller: &Caller, task_id: &str) -> Result<AgentState, ApiError> {
        match self.app.store.load_agent_record(task_id)? {
            Some(state) if caller.owns(&state) => Ok(state),
            _ => Err(ApiError::no_task(task_id)),
        }
    }

    fn spent(&self, agent: &str) -> Micros {
        self.app
            .budgets
            .ledger()
            .account(&Budgets::agent_account(agent))
            .map(|account| account.spent)
            .unwrap_or_default()
    }

    /// Every step of the task, oldest first.
    fn steps(&self, state: &AgentState) -> Result<Vec<Step>, ApiError> {
        let episodes = self.app.store.all_episodes(&state.id)?;
        Ok(TaskRecord {
            state,
            episodes: &episodes,
            question: self.surface.question(&state.id),
            spent: self.spent(&state.id),
        }
        .steps())
    }

    fn task(&self, state: &AgentState) -> Result<Task, ApiError> {
        let mut options = Map::new();
        if let Some(profile) = &state.brief.profile {
            options.insert("name".into(), json!(profile.name));
        }
        options.insert("model".into(), json!(state.brief.settings.model));
        if let Some(budget) = state.brief.settings.budget {
            options.insert("budget_usd".into(), json!(budget.0 as f64 / 1e6));
        }
        options.insert("phase".into(), json!(state.progress.phase.label()));
        if state.brief.api_caller.is_some() {
            if let Some(binding) = self.app.store.binding(&state.id)? {
                options.insert(
                    "discord_channel".into(),
                    json!(binding.parent_channel_id.to_string()),
                );
                options.insert(
                    "discord_thread".into(),
                    json!(binding.thread_id.to_string()),
                );
            }
        }
        Ok(Task {
            task_id: state.id.clone(),
            input: Some(state.brief.task.clone()),
            additional_input: Value::Object(options),
            artifacts: artifacts::list(&self.app.store, state)?,
            created_at: state.created_at,
            modified_at: state.updated_at,
        })
    }

    fn page(&self, query: &PageQuery) -> Result<protocol::Page, ApiError> {
        query
            .page(self.app.config.api.max_page_size)
            .map_err(|e| ApiError::Invalid(e.to_string()))
    }

    /// Where the agent rests now, read from the store and the surface.
    fn rest_point(&self, agent: &str) -> Result<(AgentState, Option<RestPoint>), ApiError> {
        let state = self
            .app
            .store
            .load_agent_record(agent)?
            .ok_or_else(|| ApiError::no_task(agent))?;
        let question = self.surface.question(agent).map(|(cycle, _)| cycle);
        let point = RestPoint::of(&state, question);
        Ok((state, point))
    }

    /// Waits until the agent rests somewhere other than `left`, or until `deadline`.
    async fn wait_for_rest(
        &self,
        agent: &str,
        left: Option<&RestPoint>,
        deadline: tokio::time::Instant,
    ) -> Result<(AgentState, Option<RestPoint>), ApiError> {
        let mut changes = self.surface.watch(agent);
        loop {
            let (state, point) = self.rest_point(agent)?;
            if point.is_some() && point.as_ref() != left {
                return Ok((state, point));
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                // The surface forgot the agent (it finished): read it once more.
                Ok(Err(_)) => changes = self.surface.watch(agent),
                Err(_) => return Ok((state, None)),
            }
        }
    }

    /// Applies a step's input to where the agent rests; says what was not applied.
    async fn apply(
        &self,
        caller: &Caller,
        state: &AgentState,
        point: &RestPoint,
        input: Option<&str>,
    ) -> Result<Option<String>, ApiError> {
        let agent = &state.id;
        let text = input.map(str::trim).unwrap_or("");
        match point {
            RestPoint::Decision { cycle, .. } => {
                let decision = match text.to_lowercase().as_str() {
                    "" | "y" | "yes" => Decision::Approve,
                    _ => Decision::Feedback(text.to_string()),
                };
                match self
                    .supervisor
                    .decide(agent, *cycle, decision, &caller.person())
                    .await
                {
                    Ok(()) => Ok(None),
                    Err(e @ (DecideError::Busy | DecideError::Storage)) => {
                        Err(ApiError::Unavailable(e.to_string()))
                    }
                    Err(e) => Ok(Some(e.to_string())),
                }
            }
            RestPoint::Question { .. } => {
                if self.surface.answer(agent, text.to_string()) {
                    Ok(None)
                } else {
                    Ok(Some("The question was no longer open.".into()))
                }
            }
            RestPoint::Paused { .. } => {
                let resume = Event::Resume {
                    by: caller.person(),
                    follow_up: None,
                };
                match self.supervisor.send(agent, resume) {
                    Ok(()) => Ok(None),
                    Err(e @ (SendError::Busy | SendError::ShuttingDown)) => {
                        Err(ApiError::Unavailable(e.to_string()))
                    }
                    Err(e) => Err(ApiError::internal(e)),
                }
            }
            RestPoint::Finished { .. } => Ok(Some(
                "The task has finished; create a new task to go on.".into(),
            )),
        }
    }
}

/// The caller a request's bearer token names.
impl FromRequestParts<Api> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Api) -> Result<Caller, ApiError> {
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        api.tokens
            .caller(authorization)
            .ok_or(ApiError::Unauthorized)
    }
}

/// A JSON body, or an empty one as `T::default()`; anything else is a 422 saying why.
fn body<T: serde::de::DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Invalid(format!("The body is not the JSON this call takes: {e}.")))
}

/// An optional `additional_input` as an object.
fn options(value: Option<Value>) -> Result<Map<String, Value>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(ApiError::Invalid(
            "additional_input must be an object.".into(),
        )),
    }
}

fn text_option(options: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.trim().is_empty() && text.chars().count() <= 200 => {
            Ok(Some(text.trim().to_string()))
        }
        Some(_) => Err(ApiError::Invalid(format!(
            "additional_input.{key} must be a text of 1 to 200 characters."
        ))),
    }
}

/// What a new task asks of its agent, from `additional_input`.
struct TaskOptions {
    profile: Option<Profile>,
    model: Option<String>,
    budget: Option<Micros>,
    auto_approvals: u32,
    /// The Discord channel whose thread the agent lives in too (see `threads`).
    discord_channel: Option<u64>,
}

fn task_options(value: Option<Value>) -> Result<TaskOptions, ApiError> {
    let options = options(value)?;
    if let Some(unknown) = options.keys().find(|k| !TASK_OPTIONS.contains(&k.as_str())) {
        return Err(ApiError::Invalid(format!(
            "additional_input.{} is not an option; the options are {}.",
            shown_id(unknown),
            TASK_OPTIONS.join(", ")
        )));
    }
    let name = text_option(&options, "name")?;
    let role = text_option(&options, "role")?;
    let profile = (name.is_some() || role.is_some()).then(|| {
        let fallback = Profile::fallback();
        Profile {
            name: name.unwrap_or(fallback.name),
            role: role.unwrap_or(fallback.role),
            best_practices: Vec::new(),
            constraints: Vec::new(),
        }
    });
    let budget = match options.get("budget_usd") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(usd) if usd.is_finite() && usd > 0.0 && usd <= 1_000_000.0 => {
                Some(usd_to_micros(usd))
            }
            _ => {
                return Err(ApiError::Invalid(
                    "additional_input.budget_usd must be a number of dollars above 0.".into(),
                ))
            }
        },
    };
    let auto_approvals = match options.get("continuous") {
        None | Some(Value::Null) => 0,
        Some(value) => match value.as_u64() {
            Some(n) if n <= u64::from(APPROVE_N_MAX) => n as u32,
            _ => {
                return Err(ApiError::Invalid(format!(
                    "additional_input.continuous must be a whole number from 0 to {APPROVE_N_MAX}: the commands of automatic classes to run without asking."
                )))
            }
        },
    };
    let discord_channel = match options.get("discord_channel") {
        None | Some(Value::Null) => None,
        Some(value) => Some(threads::channel_option(value)?),
    };
    Ok(TaskOptions {
        profile,
        model: text_option(&options, "model")?,
        budget,
        auto_approvals,
        discord_channel,
    })
}

async fn create_task(
    State(api): State<Api>,
    caller: Caller,
    bytes: Bytes,
) -> Result<Json<Task>, ApiError> {
    let request: TaskRequestBody = body(&bytes)?;
    let task = request.input.as_deref().map(str::trim).unwrap_or("");
    if task.is_empty() {
        return Err(ApiError::Invalid(
            "input must be the task, a text that is not empty.".into(),
        ));
    }
    if task.chars().count() > MAX_INPUT_CHARS {
        return Err(ApiError::Invalid(format!(
            "input is longer than {MAX_INPUT_CHARS} characters."
        )));
    }
    let options = task_options(request.additional_input)?;
    let state = match options.discord_channel {
        Some(channel) => threads::start_bound(&api, &caller, task, options, channel).await?,
        None => start_unbound(&api, &caller, task, options)?,
    };
    let view = api.task(&state)?;
    api.supervisor
        .start_new(state)
        .await
        .map_err(ApiError::internal)?;
    tracing::info!(task = %view.task_id, caller = %caller.name, "task created over the API");
    Ok(Json(view))
}

/// An agent outside any Discord server, paid for by the caller, after the caps on its agents.
fn start_unbound(
    api: &Api,
    caller: &Caller,
    task: &str,
    options: TaskOptions,
) -> Result<AgentState, ApiError> {
    let running = api
        .app
        .store
        .list_agents()?
        .iter()
        .filter_map(|summary| api.app.store.load_agent_record(&summary.id).ok().flatten())
        .filter(|state| caller.owns(state) && counts_against_caps(&state.progress.phase))
        .count();
    api.agents
        .check_start_outside_servers(running, options.model.as_deref(), options.budget)
        .map_err(|e| ApiError::Invalid(e.to_string()))?;
    let state = api.agents.new_agent(
        AgentService::new_agent_id(),
        NewAgent {
            task: task.to_string(),
            profile: options.profile,
            model: options.model,
            budget: options.budget,
            auto_approvals: options.auto_approvals,
            spender: caller.spender(),
            ..NewAgent::default()
        },
    );
    Ok(state)
}

async fn list_tasks(
    State(api): State<Api>,
    caller: Caller,
    Query(query): Query<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let page = api.page(&query)?;
    let mut owned: Vec<AgentState> = Vec::new();
    for summary in api.app.store.list_agents()? {
        if let Some(state) = api.app.store.load_agent_record(&summary.id)? {
            if caller.owns(&state) {
                owned.push(state);
            }
        }
    }
    owned.sort_by_key(|state| state.created_at);
    let (states, pagination) = page.of(owned);
    let tasks = states
        .iter()
        .map(|state| api.task(state))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({"tasks": tasks, "pagination": pagination})))
}

async fn get_task(
    State(api): State<Api>,
    caller: Caller,
    Path(task_id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let state = api.owned(&caller, &task_id)?;
    Ok(Json(api.task(&state)?))
}

async fn list_steps(
    State(api): State<Api>,
    caller: Caller,
    Path(task_id): Path<String>,
    Query(query): Query<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let page = api.page(&query)?;
    let state = api.owned(&caller, &task_id)?;
    let (steps, pagination) = page.of(api.steps(&state)?);
    Ok(Json(json!({"steps": steps, "pagination": pagination})))
}

async fn get_step(
    State(api): State<Api>,
    caller: Caller,
    Path((task_id, step_id)): Path<(String, String)>,
) -> Result<Json<Step>, ApiError> {
    let state = api.owned(&caller, &task_id)?;
    api.steps(&state)?
        .into_iter()
        .find(|step| step.step_id == step_id)
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "Task {:?} has no step {:?}.",
                shown_id(&task_id),
                shown_id(&step_id)
            ))
        })
}

/// A step: applies the input to what the caller was last shown, waits for the agent to rest
/// again, and answers with the newest step.
async fn execute_step(
    State(api): State<Api>,
    caller: Caller,
    Path(task_id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Step>, ApiError> {
    let request: StepRequestBody = body(&bytes)?;
    if let Some(input) = &request.input {
        if input.chars().count() > MAX_INPUT_CHARS {
            return Err(ApiError::Invalid(format!(
                "input is longer than {MAX_INPUT_CHARS} characters."
            )));
        }
    }
    options(request.additional_input)?;
    api.owned(&caller, &task_id)?;
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(api.app.config.api.step_wait_secs);
    let (state, point) = api.rest_point(&task_id)?;
    let shown = api.surface.shown(&task_id);
    let mut note = None;
    let (_, rested) = match point {
        // The caller saw this point: the input answers it.
        Some(point) if Some(&point) == shown.as_ref() => {
            note = api
                .apply(&caller, &state, &point, request.input.as_deref())
                .await?;
            match &point {
                RestPoint::Finished { .. } => (state, Some(point)),
                _ => api.wait_for_rest(&task_id, Some(&point), deadline).await?,
            }
        }
        // A point the caller has not seen yet (the first proposal, a decision made on Discord):
        // shown first, decided by the next step.
        Some(point) => (state, Some(point)),
        None => {
            if request
                .input
                .as_deref()
                .is_some_and(|i| !i.trim().is_empty())
            {
                note = Some(
                    "The agent was working, so the input was not applied; send it again with the next step."
                        .into(),
                );
            }
            api.wait_for_rest(&task_id, None, deadline).await?
        }
    };
    match rested {
        // Nothing more can be applied to a finished task, so it need not be remembered.
        Some(RestPoint::Finished { .. }) => api.surface.forget(&task_id),
        Some(point) => api.surface.set_shown(&task_id, Some(point)),
        None => {}
    }
    let state = api.owned(&caller, &task_id)?;
    let mut step = api
        .steps(&state)?
        .pop()
        .ok_or_else(|| ApiError::internal("a task without steps"))?;
    if let Value::Object(more) = &mut step.additional_output {
        // The newest step may be a completed one, behind which the agent paused or finished.
        more.insert("phase".into(), json!(state.progress.phase.label()));
        if let Some(note) = note {
            more.insert("note".into(), json!(note));
        }
    }
    step.input = request.input.or(step.input);
    Ok(Json(step))
}

/// The API's routes over `api`, with bodies held to `api.max_body_bytes`.
pub fn router(api: Api) -> Router {
    let limit = api.app.config.api.max_body_bytes;
    Router::new()
        .route("/ap/v1/agent/tasks", get(list_tasks).post(create_task))
        .route("/ap/v1/agent/tasks/{task_id}", get(get_task))
        .route(
            "/ap/v1/agent/tasks/{task_id}/steps",
            get(list_steps).post(execute_step),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/steps/{step_id}",
            get(get_step),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/artifacts",
            get(artifacts::list_artifacts).post(artifacts::upload_artifact),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}",
            get(artifacts::download_artifact),
        )
        .layer(axum::middleware::from_fn(count_request))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(api)
}

/// Counts each request and its latency by route and status, beside the bot's metrics.
async fn count_request(
    matched: Option<axum::extract::MatchedPath>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().to_string();
    let route = matched.map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(crate::ops::names::API_REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status).increment(1);
    metrics::histogram!(crate::ops::names::API_REQUEST_SECONDS, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Serves the API on `listen` until the process ends; returns the address it listens on.
pub async fn listen(api: Api, listen: &str) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen} (api.listen): {e}"))?;
    let addr = listener.local_addr()?;
    let routes = router(api);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, routes).await {
            tracing::error!(error = %e, "the Agent Protocol listener stopped");
        }
    });
    Ok(addr)
}

/// `autothread serve`: the agents started over the API, served on `listen` until SIGTERM or
/// SIGINT, which lets what is under way finish (for `ops.shutdown_grace_secs`) and flushes.
pub async fn serve(app: App, listen_on: &str) -> anyhow::Result<()> {
    let tokens = Tokens::from_config(&app.config.api)?;
    let surface = Arc::new(ApiSurface::alone());
    let supervisor = Supervisor::new(app.deps(surface.clone()));
    let resumer = supervisor.clone();
    let resumed =
        tokio::task::spawn_blocking(move || resumer.resume_where(started_over_the_api)).await??;
    if resumed > 0 {
        tracing::info!(agents = resumed, "resumed agents after a restart");
    }
    supervisor.keep_leases(Arc::new(started_over_the_api));
    let addr = listen(
        Api::new(app.clone(), supervisor.clone(), surface, tokens),
        listen_on,
    )
    .await?;
    println!("Agent Protocol: http://{addr}/ap/v1/agent/tasks");
    let signal = crate::surface::shutdown::shutdown_signal().await;
    tracing::info!(
        signal,
        "shutting down: calls and commands under way may finish"
    );
    let grace = Duration::from_secs(app.config.ops.shutdown_grace_secs);
    let still_running = supervisor.shutdown(grace).await;
    if !still_running.is_empty() {
        tracing::warn!(agents = ?still_running, "shut down with work still running; it is settled at the next start");
    }
    app.store.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_options_are_read_and_bad_ones_refused_saying_why() {
        let options = task_options(Some(
            json!({"name": "Scribe", "model": "m2", "budget_usd": 1.5, "continuous": 3}),
        ))
        .unwrap();
        assert_eq!(options.profile.unwrap().name, "Scribe");
        assert_eq!(options.model.as_deref(), Some("m2"));
        assert_eq!(options.budget, Some(Micros(1_500_000)));
        assert_eq!(options.auto_approvals, 3);
        let refused = |value: Value| match task_options(Some(value)) {
            Err(ApiError::Invalid(why)) => why,
            _ => panic!("accepted"),
        };
        assert!(refused(json!({"colour": 1})).contains("not an option"));
        assert!(refused(json!({"budget_usd": -1})).contains("budget_usd"));
        assert!(refused(json!({"continuous": 10_000})).contains("continuous"));
        assert!(refused(json!({"name": ""})).contains("name"));
        assert!(refused(json!([1])).contains("object"));
        assert!(refused(json!({"discord_channel": 12})).contains("discord_channel"));
        let bound = task_options(Some(json!({"discord_channel": "3000000000000000001"}))).unwrap();
        assert_eq!(bound.discord_channel, Some(3_000_000_000_000_000_001));
        assert!(task_options(None).is_ok());
    }
}
