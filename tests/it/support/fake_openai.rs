//! A scripted OpenAI-compatible server on 127.0.0.1 for tests: plays queued replies to the agent's
//! cycle calls, answers summaries, profiles and critiques, records every request and checks it.
//! Anything it did not expect is recorded as an error that the test asserts is absent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// What the fake answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A normal completion whose message content is this text.
    Content(String),
    /// An error status with a body of the given content type.
    Status(u16, &'static str, String),
    /// A 200 whose body is not a completion at all.
    RawBody(String),
    /// Waits, then answers.
    Delay(Duration, Box<Reply>),
    /// A streamed reply whose connection breaks after its first `pieces` pieces of text (of
    /// `STREAMED_PIECE_CHARS` each): no finish, no usage, no `[DONE]`. A request that does not
    /// stream gets the same text cut short as its whole body.
    BrokenStream { text: String, pieces: usize },
}

/// Checks a cycle request; returns a description of what is wrong.
pub type Check = Box<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

pub struct Step {
    pub reply: Reply,
    pub check: Option<Check>,
}

/// The kinds of request the agent makes, told apart by the purpose header (`kind_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cycle,
    Summary,
    Profile,
    Critique,
    /// `autothread check`'s probe.
    Check,
}

/// The kind of a request, from the purpose the client marks it with (never from prompt text,
/// so that rewording a prompt cannot misroute it).
pub fn kind_of(headers: &HeaderMap) -> Result<Kind, String> {
    let purpose = headers
        .get(autothread::llm::PURPOSE_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or("a chat request without a purpose header")?;
    match purpose {
        "summary" => Ok(Kind::Summary),
        "profile" => Ok(Kind::Profile),
        "self_critique" => Ok(Kind::Critique),
        "check" => Ok(Kind::Check),
        "think" | "reask" | "rethink" | "tool" => Ok(Kind::Cycle),
        other => Err(format!("a chat request with an unknown purpose {other:?}")),
    }
}

/// Expectations applied to every cycle request.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    pub max_tokens: Option<u64>,
    /// "json_schema", "json_object", or None for no response_format.
    pub response_format: Option<&'static str>,
    /// Context window: the prompt must fit in it with max_tokens to spare.
    pub context_tokens: Option<usize>,
}

impl Expect {
    /// What `TestEnv`'s model (4096-token context, 500-token replies) must be sent.
    pub fn test_model() -> Expect {
        Expect {
            max_tokens: Some(500),
            response_format: Some("json_schema"),
            context_tokens: Some(4096),
        }
    }
}

#[derive(Default)]
struct Inner {
    cycle_steps: VecDeque<Step>,
    profiles: VecDeque<String>,
    critiques: VecDeque<String>,
    requests: Vec<(Kind, Value)>,
    /// When each cycle request arrived: with a model that answers at once, the time between two
    /// is what the bot spends on a cycle outside the model.
    cycle_arrivals: Vec<std::time::Instant>,
    errors: Vec<String>,
    expect: Expect,
    /// Reported usage (prompt, completion, cached prompt, written to the cache); (100, 20, 0, 0)
    /// unless a test sets it.
    usage: Option<(u64, u64, u64, u64)>,
    /// Inputs of every embeddings request, and the error status the endpoint answers, if any.
    embedded: Vec<(String, Vec<String>)>,
    /// The `dimensions` each embeddings request asked for.
    embedding_dimensions: Vec<Option<u64>>,
    embeddings_failing: Option<u16>,
    /// How long the embeddings endpoint takes to answer, so that a test's kill can land while a
    /// call is under way.
    embeddings_delay: Option<Duration>,
    /// The body of every images request.
    images_requested: Vec<Value>,
    /// What `GET /v1/models` answers; `None`: 404, as servers without a listing do.
    models_listing: Option<Value>,
    models_listed: usize,
    /// (deployment, api-version) of every Azure OpenAI request.
    azure_calls: Vec<(String, String)>,
    /// What a cycle request gets once the script is used up (a load benchmark's endless agent);
    /// `None`: an error, as an unscripted request is a test's mistake.
    endless: Option<Reply>,
    /// Requests are kept for tests to inspect unless a long benchmark turns that off.
    forget_requests: bool,
    endless_served: u64,
    /// Like llama.cpp with one KV cache shared by its slots: a chat request that arrives while
    /// another is under way overflows it and gets llama.cpp's 500.
    shared_context: bool,
    /// Like llama-cpp-python's server: `response_format` may be `text` or `json_object` (with a
    /// `schema`), and `json_schema` gets HTTP 500 with its validation error.
    refuses_json_schema: bool,
    schema_refusals: usize,
    in_flight: usize,
    overflows: usize,
    /// The usage (prompt, completion) of every request the fake generated a reply for, as a
    /// provider bills them: whether or not the client waited for the answer.
    billed: Vec<(u64, u64)>,
}

/// Counts a chat request as under way until it has been answered.
struct InFlight(Arc<Mutex<Inner>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_flight -= 1;
    }
}

/// The endless reply with `{n}` replaced by its count, so that no two replies are the same command
/// (the agent refuses to repeat the command it just ran).
fn numbered(reply: Reply, n: &str) -> Reply {
    match reply {
        Reply::Content(text) => Reply::Content(text.replace("{n}", n)),
        Reply::Delay(wait, inner) => Reply::Delay(wait, Box::new(numbered(*inner, n))),
        other => other,
    }
}

/// The key the fake's Azure OpenAI deployments accept in their `api-key` header.
pub const AZURE_KEY: &str = "azure-test-key";

#[derive(Clone)]
pub struct FakeOpenAi {
    inner: Arc<Mutex<Inner>>,
    pub base_url: String,
}

impl FakeOpenAi {
    pub async fn start(expect: Expect) -> FakeOpenAi {
        let inner = Arc::new(Mutex::new(Inner {
            expect,
            ..Default::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .route("/v1/images/generations", post(images))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(azure_completions),
            )
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeOpenAi {
            inner,
            base_url: format!("http://{addr}/v1"),
        }
    }

    pub fn push(&self, reply: Reply) {
        self.push_checked(reply, None);
    }

    pub fn push_content(&self, text: impl Into<String>) {
        self.push(Reply::Content(text.into()));
    }

    pub fn push_checked(&self, reply: Reply, check: Option<Check>) {
        self.inner
            .lock()
            .unwrap()
            .cycle_steps
            .push_back(Step { reply, check });
    }

    /// Answers every cycle request past the script with `reply` (its `{n}` counting the replies),
    /// and keeps no requests: for a benchmark that runs agents for minutes.
    pub fn set_endless(&self, reply: Reply) {
        let mut inner = self.inner.lock().unwrap();
        inner.endless = Some(reply);
        inner.forget_requests = true;
    }

    /// Makes the embeddings endpoint answer `status` (503: down; 501: llama.cpp's server without
    /// `--embeddings`), or work again with `None`.
    pub fn set_embeddings_failing(&self, status: Option<u16>) {
        self.inner.lock().unwrap().embeddings_failing = status;
    }

    /// Makes every later embeddings request wait this long before it is answered.
    pub fn set_embeddings_delay(&self, delay: Duration) {
        self.inner.lock().unwrap().embeddings_delay = Some(delay);
    }

    /// Makes chat requests that overlap fail as llama.cpp's do when they fill its shared context.
    pub fn set_shared_context(&self) {
        self.inner.lock().unwrap().shared_context = true;
    }

    /// Makes the server refuse `response_format: json_schema` as llama-cpp-python's does.
    pub fn set_refuses_json_schema(&self) {
        self.inner.lock().unwrap().refuses_json_schema = true;
    }

    /// How many requests were refused for asking for `json_schema`.
    pub fn schema_refusals(&self) -> usize {
        self.inner.lock().unwrap().schema_refusals
    }

    /// How many requests overlapped another and were refused for it.
    pub fn overflows(&self) -> usize {
        self.inner.lock().unwrap().overflows
    }

    /// How many requests the fake generated a reply for (and a provider would bill), answered
    /// or not.
    pub fn billed_generations(&self) -> usize {
        self.inner.lock().unwrap().billed.len()
    }

    /// What the fake has billed at `price`: every generation's usage, answered or not.
    pub fn bill(&self, price: autothread::core::budget::Price) -> autothread::core::budget::Micros {
        self.inner
            .lock()
            .unwrap()
            .billed
            .iter()
            .map(|(prompt, completion)| price.cost(*prompt, *completion))
            .sum()
    }

    /// Makes `GET /v1/models` answer this body.
    pub fn set_models_listing(&self, body: Value) {
        self.inner.lock().unwrap().models_listing = Some(body);
    }

    /// How many times the model listing was asked for.
    pub fn models_listed(&self) -> usize {
        self.inner.lock().unwrap().models_listed
    }

    /// The root of the fake's Azure OpenAI resource; a deployment's URL is
    /// `{root}/openai/deployments/{name}`.
    pub fn azure_root(&self) -> String {
        self.base_url.trim_end_matches("/v1").to_string()
    }

    /// (deployment, api-version) of every Azure OpenAI request so far.
    pub fn azure_calls(&self) -> Vec<(String, String)> {
        self.inner.lock().unwrap().azure_calls.clone()
    }

    /// The body of every images request so far.
    pub fn images_requested(&self) -> Vec<Value> {
        self.inner.lock().unwrap().images_requested.clone()
    }

    /// (model, inputs) of every embeddings request so far.
    pub fn embedded(&self) -> Vec<(String, Vec<String>)> {
        self.inner.lock().unwrap().embedded.clone()
    }

    /// The `dimensions` each embeddings request asked for, in order.
    pub fn embedding_dimensions(&self) -> Vec<Option<u64>> {
        self.inner.lock().unwrap().embedding_dimensions.clone()
    }

    /// The usage every later completion reports.
    pub fn set_usage(&self, prompt_tokens: u64, completion_tokens: u64) {
        self.set_usage_with_cache(prompt_tokens, completion_tokens, 0);
    }

    /// Like `set_usage`, with `cached_tokens` of the prompt reported as served from the prompt
    /// cache (`usage.prompt_tokens_details.cached_tokens`, as OpenAI reports it).
    pub fn set_usage_with_cache(
        &self,
        prompt_tokens: u64,
        completion_tokens: u64,
        cached_tokens: u64,
    ) {
        self.set_usage_with_cache_writes(prompt_tokens, completion_tokens, cached_tokens, 0);
    }

    /// Like `set_usage_with_cache`, with `written_tokens` of the prompt reported as written to
    /// the cache (`usage.prompt_tokens_details.cache_write_tokens`).
    pub fn set_usage_with_cache_writes(
        &self,
        prompt_tokens: u64,
        completion_tokens: u64,
        cached_tokens: u64,
        written_tokens: u64,
    ) {
        self.inner.lock().unwrap().usage = Some((
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            written_tokens,
        ));
    }

    pub fn push_profile(&self, text: impl Into<String>) {
        self.inner.lock().unwrap().profiles.push_back(text.into());
    }

    pub fn push_critique(&self, text: impl Into<String>) {
        self.inner.lock().unwrap().critiques.push_back(text.into());
    }

    pub fn requests(&self, kind: Kind) -> Vec<Value> {
        self.inner
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// When each cycle request arrived, in order.
    pub fn cycle_arrivals(&self) -> Vec<std::time::Instant> {
        self.inner.lock().unwrap().cycle_arrivals.clone()
    }

    pub fn remaining_cycle_steps(&self) -> usize {
        self.inner.lock().unwrap().cycle_steps.len()
    }

    pub fn errors(&self) -> Vec<String> {
        self.inner.lock().unwrap().errors.clone()
    }

    /// Fails the test if the fake saw anything wrong or unexpected.
    pub fn assert_clean(&self) {
        let errors = self.errors();
        assert!(
            errors.is_empty(),
            "the fake OpenAI server saw problems:\n{}",
            errors.join("\n")
        );
    }
}

/// Words hashed into 1024 buckets (few collisions between the words of a test), normalised: texts sharing words are similar, deterministically.
pub fn hash_embedding(text: &str) -> Vec<f32> {
    hash_embedding_of(text, 1024)
}

/// `hash_embedding` with `dimensions` buckets, as a request's `dimensions` asks.
pub fn hash_embedding_of(text: &str, dimensions: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; dimensions];
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
    {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in word.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        v[(h % dimensions as u64) as usize] += 1.0;
    }
    v[0] += 0.01;
    autothread::llm::embed::normalise(v).unwrap()
}

/// The bytes of every image the fake draws: a PNG signature and the prompt.
pub fn fake_image(prompt: &str) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend_from_slice(prompt.as_bytes());
    bytes
}

/// One image in OpenAI's shape: base64 when asked for (as the bot does), and the prompt as the
/// model "revised" it.
async fn images(State(inner): State<Arc<Mutex<Inner>>>, Json(body): Json<Value>) -> Response {
    use base64::Engine as _;
    inner.lock().unwrap().images_requested.push(body.clone());
    let prompt = body["prompt"].as_str().unwrap_or_default();
    if body["response_format"] != "b64_json" {
        return Json(json!({"created": 0, "data": [{"url": "https://images.example/1.png"}]}))
            .into_response();
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(fake_image(prompt));
    Json(json!({"created": 0, "data": [{"b64_json": encoded, "revised_prompt": format!("{prompt}, drawn")}]}))
        .into_response()
}

/// Deterministic embeddings (`hash_embedding`), in OpenAI's response shape.
async fn embeddings(State(inner): State<Arc<Mutex<Inner>>>, Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_string();
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or("").to_string())
            .collect(),
        _ => Vec::new(),
    };
    let (failing, delay) = {
        let mut inner = inner.lock().unwrap();
        if !inner.forget_requests {
            inner.embedded.push((model.clone(), inputs.clone()));
            inner.embedding_dimensions.push(body["dimensions"].as_u64());
        }
        (inner.embeddings_failing, inner.embeddings_delay)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    match failing {
        // llama.cpp's words and shape when the server was started without embeddings.
        Some(501) => {
            return respond(
                Reply::Status(
                    501,
                    "application/json",
                    json!({"error": {"code": 501, "type": "not_supported_error",
                        "message": "This server does not support embeddings. Start it with `--embeddings`"}})
                    .to_string(),
                ),
                (0, 0, 0, 0),
            )
            .await
        }
        Some(status) => {
            return respond(
                Reply::Status(status, "text/plain", "embeddings are down".into()),
                (0, 0, 0, 0),
            )
            .await
        }
        None => {}
    }
    // OpenAI's text-embedding-3 models shorten their vectors on request.
    let dimensions = match body["dimensions"].as_u64() {
        Some(d) if (1..=8192).contains(&d) => d as usize,
        Some(d) => {
            let error = json!({"error": {"message": format!("dimensions {d} is out of range"), "type": "invalid_request_error"}});
            return respond(
                Reply::Status(400, "application/json", error.to_string()),
                (0, 0, 0, 0),
            )
            .await;
        }
        None => 1024,
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": hash_embedding_of(text, dimensions)}))
        .collect();
    let tokens: u64 = inputs.iter().map(|t| t.len() as u64 / 4 + 1).sum();
    Json(json!({"object": "list", "model": model, "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    .into_response()
}

fn completion(content: &str, (prompt, completion, cached, written): (u64, u64, u64, u64)) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written, "audio_tokens": 0}}
    })
}

fn check_cycle_request(body: &Value, expect: &Expect) -> Vec<String> {
    let mut problems = Vec::new();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    if roles.first() != Some(&"system") {
        problems.push(format!(
            "first message must be the system prompt, roles were {roles:?}"
        ));
    }
    if roles.get(1) != Some(&"user") {
        problems.push(format!(
            "second message must be the task, roles were {roles:?}"
        ));
    }
    let task = messages
        .get(1)
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    if !task.starts_with("\"\"\"") {
        problems.push("the task must be in triple quotes".into());
    }
    if roles.last() != Some(&"user") {
        problems.push(format!(
            "the last message must be a user message, roles were {roles:?}"
        ));
    }
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    for heading in [
        "## Constraints",
        "## Commands",
        "## Best practices",
        "## Your Task",
    ] {
        if !system.contains(heading) {
            problems.push(format!("the system prompt lacks {heading}"));
        }
    }
    if !messages.iter().any(|m| {
        m["content"]
            .as_str()
            .unwrap_or("")
            .starts_with("The current time and date is")
    }) {
        problems.push("no time message".into());
    }
    let reply_tokens = body["max_tokens"]
        .as_u64()
        .or(body["max_completion_tokens"].as_u64());
    // The model's reserve, or less (down to the 256-token floor) when the budget left covers
    // only a shorter reply.
    if let Some(max) = expect.max_tokens {
        if !reply_tokens.is_some_and(|n| (max.min(256)..=max).contains(&n)) {
            problems.push(format!(
                "max_tokens should be {max} (or down to 256 for a budget's last calls), was {reply_tokens:?}"
            ));
        }
    }
    match (expect.response_format, body.get("response_format")) {
        (Some("json_schema"), Some(rf)) => {
            if rf["type"] != "json_schema"
                || rf
                    .pointer("/json_schema/schema/properties/command")
                    .is_none()
            {
                problems.push(format!(
                    "response_format should carry the reply schema, was {rf}"
                ));
            }
        }
        (Some(kind), Some(rf)) if rf["type"] == kind => {}
        (None, None) => {}
        (want, got) => problems.push(format!("response_format should be {want:?}, was {got:?}")),
    }
    if let (Some(context), Some(max)) = (expect.context_tokens, reply_tokens) {
        let counter = tiktoken_rs::cl100k_base_singleton();
        let tokens: usize = messages
            .iter()
            .map(|m| {
                counter
                    .encode_ordinary(m["content"].as_str().unwrap_or(""))
                    .len()
                    + 4
            })
            .sum::<usize>()
            + 3;
        if tokens + max as usize > context {
            problems.push(format!(
                "prompt of {tokens} tokens + max_tokens {max} exceeds the context of {context}"
            ));
        }
    }
    problems
}

/// OpenAI's rule for its reasoning families (o-series, gpt-5): `max_tokens` and a temperature other
/// than 1 are refused with a 400, in OpenAI's words.
fn reasoning_refusal(body: &Value) -> Option<String> {
    let model = body["model"].as_str().unwrap_or("");
    let o_series =
        model.len() > 1 && model.starts_with('o') && model.as_bytes()[1].is_ascii_digit();
    if !(o_series || model.starts_with("gpt-5")) {
        return None;
    }
    if body.get("max_tokens").is_some() {
        return Some(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use \
             'max_completion_tokens' instead."
                .into(),
        );
    }
    match body.get("temperature").and_then(Value::as_f64) {
        Some(t) if t != 1.0 => Some(format!(
            "Unsupported value: 'temperature' does not support {t} with this model. Only the \
             default (1) value is supported."
        )),
        _ => None,
    }
}

fn openai_error(status: u16, message: &str) -> Reply {
    Reply::Status(
        status,
        "application/json",
        json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string(),
    )
}

async fn models(State(inner): State<Arc<Mutex<Inner>>>) -> Response {
    let mut inner = inner.lock().unwrap();
    inner.models_listed += 1;
    match &inner.models_listing {
        Some(body) => Json(body.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Azure OpenAI's deployment route: the version comes as the `api-version` query and the key as
/// the `api-key` header (a bearer token is someone else's scheme and is refused); then the
/// request is answered like any other.
async fn azure_completions(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path(deployment): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Json<Value>,
) -> Response {
    let Some(version) = query.get("api-version") else {
        return respond(openai_error(404, "Resource not found"), (0, 0, 0, 0)).await;
    };
    let key = headers.get("api-key").and_then(|v| v.to_str().ok());
    if key != Some(AZURE_KEY) || headers.contains_key(header::AUTHORIZATION) {
        let problem = format!(
            "an Azure request with api-key {key:?} and authorization {:?}",
            headers.get(header::AUTHORIZATION)
        );
        inner.lock().unwrap().errors.push(problem);
        return respond(
            openai_error(
                401,
                "Access denied due to invalid subscription key or wrong API endpoint.",
            ),
            (0, 0, 0, 0),
        )
        .await;
    }
    inner
        .lock()
        .unwrap()
        .azure_calls
        .push((deployment, version.clone()));
    completions(State(inner), headers, body).await
}

async fn completions(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(refusal) = reasoning_refusal(&body) {
        inner.lock().unwrap().errors.push(refusal.clone());
        return respond(openai_error(400, &refusal), (0, 0, 0, 0)).await;
    }
    let kind = match kind_of(&headers) {
        Ok(kind) => kind,
        Err(problem) => {
            inner.lock().unwrap().errors.push(problem.clone());
            return respond(Reply::Status(418, "text/plain", problem), (0, 0, 0, 0)).await;
        }
    };
    let refused = {
        let mut state = inner.lock().unwrap();
        let refused = state.refuses_json_schema && body["response_format"]["type"] == "json_schema";
        state.schema_refusals += usize::from(refused);
        refused
    };
    if refused {
        // Its words, as its server sends them (a validation error answered with status 500).
        let message = "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}";
        let body = json!({"error": {"message": message, "type": "internal_server_error"}});
        return respond(
            Reply::Status(500, "application/json", body.to_string()),
            (0, 0, 0, 0),
        )
        .await;
    }
    let overflowed = {
        let mut state = inner.lock().unwrap();
        let overflowed = state.shared_context && state.in_flight > 0;
        if overflowed {
            state.overflows += 1;
        } else {
            state.in_flight += 1;
        }
        overflowed
    };
    if overflowed {
        let body = json!({"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}});
        return respond(
            Reply::Status(500, "application/json", body.to_string()),
            (0, 0, 0, 0),
        )
        .await;
    }
    let _in_flight = InFlight(inner.clone());
    let usage = inner.lock().unwrap().usage.unwrap_or((100, 20, 0, 0));
    let streams = body["stream"] == true;
    if body.get("stream_options").is_some() && !streams {
        // OpenAI refuses stream options on a request that does not stream.
        let problem = "stream_options given without stream: true".to_string();
        inner.lock().unwrap().errors.push(problem.clone());
        return respond(openai_error(400, &problem), (0, 0, 0, 0)).await;
    }
    let with_usage = body.pointer("/stream_options/include_usage") == Some(&json!(true));
    let reply = {
        let mut inner = inner.lock().unwrap();
        if !inner.forget_requests {
            inner.requests.push((kind, body.clone()));
            if kind == Kind::Cycle {
                inner.cycle_arrivals.push(std::time::Instant::now());
            }
        }
        match kind {
            Kind::Check => Reply::Content("{\"ok\": true}".into()),
            Kind::Summary => Reply::Content(format!(
                "Summary: {}",
                body.pointer("/messages/1/content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("### ")
            )),
            Kind::Profile => match inner.profiles.pop_front() {
                Some(text) => Reply::Content(text),
                None => {
                    inner.errors.push("unexpected profile request".into());
                    Reply::Status(418, "text/plain", "unexpected profile request".into())
                }
            },
            Kind::Critique => match inner.critiques.pop_front() {
                Some(text) => Reply::Content(text),
                None => {
                    inner.errors.push("unexpected critique request".into());
                    Reply::Status(418, "text/plain", "unexpected critique request".into())
                }
            },
            Kind::Cycle => {
                let problems = check_cycle_request(&body, &inner.expect);
                let n = inner
                    .requests
                    .iter()
                    .filter(|(k, _)| *k == Kind::Cycle)
                    .count();
                for p in problems {
                    inner.errors.push(format!("cycle request {n}: {p}"));
                }
                match inner.cycle_steps.pop_front() {
                    Some(step) => {
                        if let Some(check) = &step.check {
                            if let Err(p) = check(&body) {
                                inner.errors.push(format!("cycle request {n}: {p}"));
                            }
                        }
                        step.reply
                    }
                    None if inner.endless.is_some() => {
                        inner.endless_served += 1;
                        let n = inner.endless_served.to_string();
                        numbered(inner.endless.clone().unwrap(), &n)
                    }
                    None => {
                        inner.errors.push(format!("unexpected cycle request {n}"));
                        Reply::Status(418, "text/plain", "no scripted reply left".into())
                    }
                }
            }
        }
    };
    if let Reply::BrokenStream { text, pieces } = &reply {
        // A provider bills a reply that broke off for the prompt and what it generated before
        // the break, which is what was sent.
        let sent = streamed_prefix(text, *pieces);
        let counter = tiktoken_rs::cl100k_base_singleton();
        let completion = counter.encode_ordinary(&sent).len() as u64;
        let billed = (prompt_tokens(&body), completion);
        inner.lock().unwrap().billed.push(billed);
    } else if generates(&reply) {
        // The model generates as soon as the request is taken, however long the answer then
        // takes to arrive and whether or not the client still waits for it.
        inner.lock().unwrap().billed.push((usage.0, usage.1));
    }
    if streams {
        return respond_streaming(reply, usage, with_usage).await;
    }
    respond(reply, usage).await
}

/// Whether a reply is generated by the model (and billed), rather than refused before.
fn generates(reply: &Reply) -> bool {
    match reply {
        Reply::Content(_) | Reply::RawBody(_) | Reply::BrokenStream { .. } => true,
        Reply::Status(..) => false,
        Reply::Delay(_, inner) => generates(inner),
    }
}

/// A reply as OpenAI streams it: server-sent `chat.completion.chunk` events of a few characters
/// each, the finish, the usage when asked for (`stream_options.include_usage`), then `[DONE]`.
/// Other replies (a status, a raw body) are answered as they are.
fn respond_streaming(
    reply: Reply,
    usage: (u64, u64, u64, u64),
    with_usage: bool,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>> {
    Box::pin(async move {
        match reply {
            Reply::Content(text) => {
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000,
                        "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                let mut events = vec![chunk(
                    json!({"role": "assistant", "content": ""}),
                    Value::Null,
                )];
                let chars: Vec<char> = text.chars().collect();
                for piece in chars.chunks(STREAMED_PIECE_CHARS) {
                    let piece: String = piece.iter().collect();
                    events.push(chunk(json!({"content": piece}), Value::Null));
                }
                events.push(chunk(json!({}), json!("stop")));
                if with_usage {
                    let full = completion("", usage);
                    events.push(json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                        "created": 1_700_000_000, "model": "fake", "choices": [], "usage": full["usage"]}));
                }
                let mut sse: String = events
                    .iter()
                    .map(|event| format!("data: {event}\n\n"))
                    .collect();
                sse.push_str("data: [DONE]\n\n");
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "text/event-stream")],
                    sse,
                )
                    .into_response()
            }
            Reply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                respond_streaming(*inner, usage, with_usage).await
            }
            Reply::BrokenStream { text, pieces } => broken_stream(&text, pieces),
            other => respond(other, usage).await,
        }
    })
}

/// Characters per streamed event: about a token's worth.
pub const STREAMED_PIECE_CHARS: usize = 4;

/// The text a `Reply::BrokenStream` sends before its connection breaks.
pub fn streamed_prefix(text: &str, pieces: usize) -> String {
    text.chars().take(pieces * STREAMED_PIECE_CHARS).collect()
}

/// The prompt's tokens as the fake counts them for its bill: each message's text and its
/// framing, as `check_cycle_request` counts them.
fn prompt_tokens(body: &Value) -> u64 {
    let counter = tiktoken_rs::cl100k_base_singleton();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let text: usize = messages
        .iter()
        .map(|m| {
            counter
                .encode_ordinary(m["content"].as_str().unwrap_or(""))
                .len()
                + 4
        })
        .sum();
    (text + 3) as u64
}

/// Streams the first `pieces` pieces of `text` as OpenAI does, then breaks the connection: the
/// body ends in an error, which makes the server drop the connection without the chunked
/// encoding's last chunk, as a provider's stream cut off mid-reply looks to the client.
fn broken_stream(text: &str, pieces: usize) -> Response {
    use futures_util::StreamExt;
    let chunk = |delta: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}))];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(STREAMED_PIECE_CHARS).take(pieces) {
        let piece: String = piece.iter().collect();
        events.push(chunk(json!({"content": piece})));
    }
    let sent: String = events
        .iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect();
    let sent = futures_util::stream::iter([Ok::<_, std::io::Error>(sent)]);
    // The break comes after the text has had time to reach the client, as a reply cut off by a
    // failing provider does, rather than with the same write.
    let broken = futures_util::stream::once(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the fake breaks the stream",
        ))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        axum::body::Body::from_stream(sent.chain(broken)),
    )
        .into_response()
}

fn respond(
    reply: Reply,
    usage: (u64, u64, u64, u64),
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>> {
    Box::pin(async move {
        match reply {
            Reply::Content(text) => Json(completion(&text, usage)).into_response(),
            Reply::Status(code, content_type, body) => (
                StatusCode::from_u16(code).unwrap(),
                [(header::CONTENT_TYPE, content_type)],
                body,
            )
                .into_response(),
            Reply::RawBody(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response(),
            Reply::BrokenStream { text, pieces } => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                streamed_prefix(&text, pieces),
            )
                .into_response(),
            Reply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                respond(*inner, usage).await
            }
        }
    })
}

/// A reply in the agent's JSON format.
pub fn agent_reply(command: &str, args: Value) -> String {
    json!({
        "thoughts": {
            "observations": "what I saw",
            "text": format!("I will use {command}"),
            "reasoning": format!("{command} moves the task forward"),
            "self_criticism": "keep it short",
            "plan": "- do it\n- check it",
            "speak": format!("Running {command}")
        },
        "command": {"name": command, "args": args}
    })
    .to_string()
}

/// The content of the "## Progress" message of a cycle request, or "" when absent.
pub fn progress_of(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("## Progress"))
        .unwrap_or("")
        .to_string()
}
