//! The OpenAI-compatible `ChatModel` (`OpenAiChat`): async-openai against any base URL, with an
//! HTTP timeout, the retrying transport, and the endpoint's structured-output mode.
//!
//! Our own JSON bodies go through async-openai's `byot` API, with the purpose header,
//! `response_format` as configured, and for reasoning models `max_completion_tokens` and
//! `reasoning_effort` without a temperature; the agent's `prompt_cache_key` where the endpoint
//! takes it (`config::PromptCacheKeyMode`). A streamed reply asks for its usage
//! (`stream_options.include_usage`) and its chunks are added up; a stream that ends without a
//! finish reason is an error, not half a reply. `Endpoint` is the client config that signs requests
//! (a bearer token, or Azure's `api-key` and `api-version`) and sends nothing unconfigured.
//! `SharedContextTurns`: once a server says that concurrent requests overflowed the context they
//! share (llama.cpp with a unified KV cache), requests take turns, after those under way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_openai::config::Config as ClientConfig;
use async_openai::error::OpenAIError;
use async_openai::Client;
use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::retry::{
    refuses_reply_schema, RetryPolicy, RetryingTransport, TransportError, REPLY_SCHEMA_REFUSED,
    SHARED_CONTEXT_FULL,
};
use super::{Billing, ChatModel, ChatReply, ChatRequest, LlmError, PURPOSE_HEADER};
use crate::config::{LlmConfig, PromptCacheKeyMode, Provider, ResponseFormatMode};
use crate::core::message::Role;
use crate::core::usage::Usage;
use async_openai::traits::RequestOptionsBuilder;

pub struct OpenAiChat {
    client: Client<Endpoint>,
    response_format: ResponseFormatMode,
    /// Decides per model whether a request is a reasoning model's, and what it is sent.
    llm: LlmConfig,
    /// Sends one request at a time once the server has said that concurrent ones overflow the
    /// context they share.
    turns: SharedContextTurns,
    /// Set once the server refused `response_format: json_schema`: the schema then goes as
    /// `json_object` with a `schema` (which llama-cpp-python's server turns into a grammar).
    schema_refused: AtomicBool,
    /// Whether requests carry their agent's `prompt_cache_key`.
    cache_key: CacheKeyUse,
}

/// Whether this endpoint is sent the agent's prompt-cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CacheKeyUse {
    Sent,
    Withheld,
}

/// OpenAI's own API, where `prompt_cache_key` is known; any other server might refuse an
/// unknown field, so `PromptCacheKeyMode::Auto` sends it nowhere else.
fn is_openai_api(base_url: &str) -> bool {
    reqwest::Url::parse(base_url).is_ok_and(|url| {
        url.scheme() == "https" && url.host_str() == Some("api.openai.com") && url.port().is_none()
    })
}

impl CacheKeyUse {
    fn for_config(config: &LlmConfig) -> CacheKeyUse {
        let sent = match config.prompt_cache_key {
            PromptCacheKeyMode::Always => true,
            PromptCacheKeyMode::Never => false,
            PromptCacheKeyMode::Auto => {
                config.provider == Provider::Openai && is_openai_api(&config.base_url)
            }
        };
        if sent {
            CacheKeyUse::Sent
        } else {
            CacheKeyUse::Withheld
        }
    }
}

/// Concurrent requests share a read turn; after the server reports its shared context full, every
/// request takes the write turn, so they run one after another. The write turn also waits for the
/// requests already under way, which would otherwise fill the context again.
#[derive(Default)]
struct SharedContextTurns {
    one_at_a_time: AtomicBool,
    turns: tokio::sync::RwLock<()>,
}

/// Whether the call failed because the server does not take the `json_schema` reply format.
fn is_reply_schema_refused(error: &LlmError) -> bool {
    match error {
        LlmError::Unavailable { detail, .. } => detail.contains(REPLY_SCHEMA_REFUSED),
        LlmError::Rejected { status, message } => {
            (400..500).contains(status) && refuses_reply_schema(message)
        }
        LlmError::BadResponse(_) => false,
    }
}

fn is_shared_context_full(error: &LlmError) -> bool {
    match error {
        LlmError::Unavailable { detail, .. } => detail.contains(SHARED_CONTEXT_FULL),
        LlmError::Rejected { message, .. } => message.contains(SHARED_CONTEXT_FULL),
        LlmError::BadResponse(_) => false,
    }
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("response_format", &self.response_format)
            .finish_non_exhaustive()
    }
}

/// Builds the HTTP client shared by chat and embeddings: rustls, a whole-request timeout.
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| LlmError::BadResponse(format!("cannot build the HTTP client: {e}")))
}

/// Where requests go and how they are signed: OpenAI's bearer token, or Azure OpenAI's `api-key`
/// header with the `api-version` query. async-openai's own configs read `OPENAI_API_KEY` behind
/// our back and always send an `Authorization` header; this one sends only what is configured.
pub struct Endpoint {
    base: String,
    key: Option<SecretString>,
    provider: Provider,
    query: Vec<(&'static str, String)>,
    /// The trait hands out a key even when there is none.
    no_key: SecretString,
}

impl Endpoint {
    pub fn new(base_url: &str, config: &LlmConfig) -> Endpoint {
        let query = match (config.provider, &config.api_version) {
            (Provider::Azure, Some(version)) => vec![("api-version", version.clone())],
            _ => Vec::new(),
        };
        Endpoint {
            base: base_url.trim_end_matches('/').to_string(),
            key: config
                .api_key
                .as_ref()
                .map(|key| SecretString::from(key.expose())),
            provider: config.provider,
            query,
            no_key: SecretString::from(""),
        }
    }
}

impl ClientConfig for Endpoint {
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let Some(key) = &self.key else {
            return headers;
        };
        let (name, value) = match self.provider {
            Provider::Openai => (AUTHORIZATION, format!("Bearer {}", key.expose_secret())),
            Provider::Azure => (
                HeaderName::from_static("api-key"),
                key.expose_secret().to_string(),
            ),
        };
        // A key with characters no header can carry is left out; the server's 401 says so,
        // where a panic here would take the bot down.
        if let Ok(mut value) = HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        headers
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn query(&self) -> Vec<(&str, &str)> {
        self.query.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    fn api_base(&self) -> &str {
        &self.base
    }

    fn api_key(&self) -> &SecretString {
        self.key.as_ref().unwrap_or(&self.no_key)
    }
}

/// An async-openai client for `base_url` with the key, timeout and retry rules of `config`; chat
/// and embeddings share it so both retry the same way.
pub fn openai_client(base_url: &str, config: &LlmConfig) -> Result<Client<Endpoint>, LlmError> {
    let http = http_client(Duration::from_secs(config.timeout_secs))?;
    let transport = RetryingTransport::new(
        http.clone(),
        RetryPolicy {
            max_attempts: config.max_attempts,
            initial: Duration::from_millis(config.retry_initial_ms),
            max: Duration::from_millis(config.retry_max_ms),
        },
    );
    Ok(Client::with_config(Endpoint::new(base_url, config))
        .with_http_client(http)
        .with_http_service(transport))
}

impl OpenAiChat {
    pub fn new(config: &LlmConfig) -> Result<Self, LlmError> {
        Ok(OpenAiChat {
            client: openai_client(&config.base_url, config)?,
            response_format: config.response_format,
            llm: config.clone(),
            turns: SharedContextTurns::default(),
            schema_refused: AtomicBool::new(false),
            cache_key: CacheKeyUse::for_config(config),
        })
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                json!({"role": role, "content": m.content})
            })
            .collect();
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": false,
        });
        if let (CacheKeyUse::Sent, Some(key)) = (self.cache_key, &request.cache_key) {
            body["prompt_cache_key"] = json!(key);
        }
        // Reasoning models refuse `max_tokens` and any temperature but their default, and take
        // an effort instead; every other server knows `max_tokens`.
        if self.llm.is_reasoning(&request.model) {
            body["max_completion_tokens"] = json!(request.max_tokens);
            if let Some(effort) = &self.llm.reasoning_effort {
                body["reasoning_effort"] = json!(effort);
            }
        } else {
            body["max_tokens"] = json!(request.max_tokens);
            if let Some(t) = self.llm.temperature {
                body["temperature"] = json!(t);
            }
        }
        if let Some(schema) = &request.json_schema {
            match self.response_format {
                ResponseFormatMode::JsonSchema if self.schema_refused.load(Ordering::Acquire) => {
                    body["response_format"] = json!({"type": "json_object", "schema": schema});
                }
                ResponseFormatMode::JsonSchema => {
                    body["response_format"] = json!({
                        "type": "json_schema",
                        "json_schema": {"name": "reply", "schema": schema, "strict": false}
                    });
                }
                ResponseFormatMode::JsonObject => {
                    body["response_format"] = json!({"type": "json_object"});
                }
                ResponseFormatMode::None => {}
            }
        }
        body
    }
}

pub(crate) fn classify(error: OpenAIError) -> LlmError {
    match error {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<TransportError>() {
            Ok(transport) => LlmError::Unavailable {
                attempts: transport.attempts(),
                detail: transport.to_string(),
                billing: transport.billing(),
            },
            Err(other) => LlmError::BadResponse(other.to_string()),
        },
        OpenAIError::ApiError(api) => LlmError::Rejected {
            status: api.status_code.as_u16(),
            message: error_message(&api.api_error.message)
                .chars()
                .take(300)
                .collect(),
        },
        // The answer had begun to come: the model generated for it.
        OpenAIError::Reqwest(e) if e.is_timeout() => LlmError::Unavailable {
            attempts: 1,
            detail: "timed out while reading the response".into(),
            billing: Billing::MayBeBilled,
        },
        OpenAIError::JSONDeserialize(_, content) => LlmError::BadResponse(format!(
            "not JSON: {}",
            content.chars().take(200).collect::<String>()
        )),
        other => LlmError::BadResponse(other.to_string()),
    }
}

/// The server's own words: async-openai passes a 5xx body through whole, and OpenAI-compatible
/// servers (llama.cpp's 501 among them) wrap their message in `{"error": {"message": …}}`.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.to_string())
}

/// A reported usage; `None` when a count is missing.
fn parse_usage(u: &Value) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: u.get("prompt_tokens")?.as_u64()?,
        completion_tokens: u.get("completion_tokens")?.as_u64()?,
        // OpenAI's report of the prompt-cache hit; servers without a cache leave it out.
        cached_prompt_tokens: u
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        // What was written to the cache, which some models bill above the input price; OpenAI
        // reports it beside the hit, as part of `prompt_tokens`.
        cache_write_tokens: u
            .pointer("/prompt_tokens_details/cache_write_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Reads the first choice's text and the usage; tolerant of fields local servers leave out.
pub fn parse_completion(body: &Value) -> Result<ChatReply, LlmError> {
    let content = body
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            LlmError::BadResponse("the response has no choices[0].message.content".into())
        })?;
    let usage = body.get("usage").and_then(parse_usage);
    Ok(ChatReply {
        content: content.to_string(),
        usage,
    })
}

/// A streamed reply as its events arrive: the text so far, the usage once reported, and whether
/// the server said the reply was complete.
#[derive(Debug, Default)]
pub struct StreamedReply {
    content: String,
    usage: Option<Usage>,
    finished: bool,
}

impl StreamedReply {
    /// Takes one event (`chat.completion.chunk`); returns the piece of text it added, if any. An
    /// error the server sends inside the stream is its own (its message kept, so a full shared
    /// context is still recognised).
    pub fn take<'e>(&mut self, event: &'e Value) -> Result<Option<&'e str>, LlmError> {
        if let Some(error) = event.get("error").filter(|e| !e.is_null()) {
            return Err(LlmError::Rejected {
                status: error
                    .get("code")
                    .and_then(Value::as_u64)
                    .and_then(|code| u16::try_from(code).ok())
                    .unwrap_or(500),
                message: error_message(&event.to_string())
                    .chars()
                    .take(300)
                    .collect(),
            });
        }
        if let Some(usage) = event.get("usage").filter(|u| !u.is_null()) {
            self.usage = parse_usage(usage);
        }
        let Some(choice) = event.pointer("/choices/0") else {
            return Ok(None);
        };
        if choice
            .get("finish_reason")
            .is_some_and(|reason| !reason.is_null())
        {
            self.finished = true;
        }
        let Some(piece) = choice
            .pointer("/delta/content")
            .and_then(Value::as_str)
            .filter(|piece| !piece.is_empty())
        else {
            return Ok(None);
        };
        self.content.push_str(piece);
        Ok(Some(piece))
    }

    /// The whole reply, or why the stream did not make one.
    pub fn finish(self) -> Result<ChatReply, LlmError> {
        if !self.finished {
            return Err(LlmError::BadResponse(format!(
                "the reply stream ended before the reply did ({} characters in)",
                self.content.chars().count()
            )));
        }
        Ok(ChatReply {
            content: self.content,
            usage: self.usage,
        })
    }
}

#[async_trait]
impl ChatModel for OpenAiChat {
    async fn complete_streaming(
        &self,
        request: ChatRequest,
        on_text: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<ChatReply, LlmError> {
        // The shared-context fallback of `complete` is kept: the request waits its turn, and a
        // server out of shared context is asked again one request at a time.
        if self.turns.one_at_a_time.load(Ordering::Acquire) {
            let _turn = self.turns.turns.write().await;
            return self.send_streaming(&request, on_text).await;
        }
        let first = {
            let _turn = self.turns.turns.read().await;
            self.send_streaming(&request, on_text).await
        };
        match first {
            Err(error) if is_shared_context_full(&error) => {
                self.turns.one_at_a_time.store(true, Ordering::Release);
                let _turn = self.turns.turns.write().await;
                self.send_streaming(&request, on_text).await
            }
            other => other,
        }
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatReply, LlmError> {
        if self.turns.one_at_a_time.load(Ordering::Acquire) {
            let _turn = self.turns.turns.write().await;
            return self.send(&request).await;
        }
        let first = {
            let _turn = self.turns.turns.read().await;
            self.send(&request).await
        };
        match first {
            Err(error) if is_shared_context_full(&error) => {
                if !self.turns.one_at_a_time.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        "the model server ran out of the context its concurrent requests share; \
                         sending it one request at a time from now on"
                    );
                }
                let _turn = self.turns.turns.write().await;
                self.send(&request).await
            }
            other => other,
        }
    }
}

impl OpenAiChat {
    /// Streams the reply (server-sent events), handing each piece of text to `on_text`. The
    /// usage comes in the last event when the server honours `stream_options.include_usage`.
    /// A stream cut short is an error: half a reply is not a reply.
    async fn send_streaming(
        &self,
        request: &ChatRequest,
        on_text: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<ChatReply, LlmError> {
        match self.send_streaming_once(request, on_text).await {
            Err(error) if self.falls_back_from_reply_schema(&error) => {
                self.send_streaming_once(request, on_text).await
            }
            other => other,
        }
    }

    async fn send_streaming_once(
        &self,
        request: &ChatRequest,
        on_text: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<ChatReply, LlmError> {
        use futures_util::StreamExt;
        let mut body = self.request_body(request);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let mut events = self
            .client
            .chat()
            .header(PURPOSE_HEADER, request.purpose)
            .map_err(classify)?
            .create_stream_byot::<Value, Value>(body)
            .await
            .map_err(classify)?;
        let mut streamed = StreamedReply::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| match e {
                // The connection failed or timed out mid-reply: the endpoint, not the reply.
                OpenAIError::StreamError(_) | OpenAIError::Reqwest(_) => LlmError::Unavailable {
                    attempts: 1,
                    detail: format!("the reply stream broke off: {e}"),
                    billing: Billing::MayBeBilled,
                },
                other => classify(other),
            })?;
            if let Some(piece) = streamed.take(&event)? {
                on_text(piece);
            }
        }
        streamed.finish()
    }

    async fn send(&self, request: &ChatRequest) -> Result<ChatReply, LlmError> {
        match self.send_once(request).await {
            Err(error) if self.falls_back_from_reply_schema(&error) => {
                self.send_once(request).await
            }
            other => other,
        }
    }

    /// Whether `error` is the server refusing the `json_schema` reply format: from then on the
    /// schema goes as `json_object`, and the caller sends its request once more. Nothing was
    /// generated, so nothing is charged twice.
    fn falls_back_from_reply_schema(&self, error: &LlmError) -> bool {
        if self.response_format != ResponseFormatMode::JsonSchema || !is_reply_schema_refused(error)
        {
            return false;
        }
        if !self.schema_refused.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                "the model server does not take response_format json_schema; sending the reply \
                 schema as json_object from now on (set [llm] response_format = \"json_object\" \
                 to skip this)"
            );
        }
        true
    }

    async fn send_once(&self, request: &ChatRequest) -> Result<ChatReply, LlmError> {
        let body = self.request_body(request);
        let response: Value = self
            .client
            .chat()
            .header(PURPOSE_HEADER, request.purpose)
            .map_err(classify)?
            .create_byot(body)
            .await
            .map_err(classify)?;
        parse_completion(&response)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::StreamedReply;

    #[test]
    fn a_streamed_reply_adds_up_its_pieces_and_takes_the_usage_from_the_last_event() {
        let mut streamed = StreamedReply::default();
        let chunk = |delta: serde_json::Value, finish: Option<&str>| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        let role = chunk(json!({"role": "assistant", "content": ""}), None);
        assert_eq!(streamed.take(&role).unwrap(), None);
        let first = chunk(json!({"content": "{\"thoughts\""}), None);
        assert_eq!(streamed.take(&first).unwrap(), Some("{\"thoughts\""));
        let second = chunk(json!({"content": ": {}}"}), None);
        assert_eq!(streamed.take(&second).unwrap(), Some(": {}}"));
        let done = chunk(json!({}), Some("stop"));
        assert_eq!(streamed.take(&done).unwrap(), None);
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}});
        assert_eq!(streamed.take(&usage).unwrap(), None);
        let reply = streamed.finish().unwrap();
        assert_eq!(reply.content, "{\"thoughts\": {}}");
        assert_eq!(
            reply.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((12, 5))
        );
    }

    #[test]
    fn a_stream_cut_short_is_an_error_not_half_a_reply() {
        let mut streamed = StreamedReply::default();
        let cut = json!({"choices": [{"index": 0, "delta": {"content": "{\"thou"}, "finish_reason": null}]});
        assert_eq!(streamed.take(&cut).unwrap(), Some("{\"thou"));
        let error = streamed.finish().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("ended before the reply did (6 characters in)"),
            "{error}"
        );
        // An error sent inside the stream keeps the server's words.
        let full = json!({"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}});
        let error = StreamedReply::default().take(&full).unwrap_err();
        assert_eq!(
            error,
            crate::llm::LlmError::Rejected {
                status: 500,
                message: "Context size has been exceeded.".into()
            }
        );
    }

    #[test]
    fn the_prompt_cache_key_goes_only_where_it_is_known_unless_an_operator_says_so() {
        use super::{is_openai_api, CacheKeyUse};
        use crate::config::{LlmConfig, PromptCacheKeyMode, Provider};
        assert!(is_openai_api("https://api.openai.com/v1"));
        assert!(is_openai_api("https://api.openai.com/v1/"));
        for other in [
            "http://api.openai.com/v1",
            "https://api.openai.com:8443/v1",
            "https://api.openai.com.example.org/v1",
            "https://openrouter.ai/api/v1",
            "http://127.0.0.1:8080/v1",
            "not a url",
        ] {
            assert!(!is_openai_api(other), "{other}");
        }
        let config = |base_url: &str, provider, mode| LlmConfig {
            base_url: base_url.into(),
            provider,
            prompt_cache_key: mode,
            ..LlmConfig::default()
        };
        let openai = "https://api.openai.com/v1";
        let local = "http://127.0.0.1:8080/v1";
        for (base_url, provider, mode, expected) in [
            (
                openai,
                Provider::Openai,
                PromptCacheKeyMode::Auto,
                CacheKeyUse::Sent,
            ),
            (
                local,
                Provider::Openai,
                PromptCacheKeyMode::Auto,
                CacheKeyUse::Withheld,
            ),
            (
                openai,
                Provider::Azure,
                PromptCacheKeyMode::Auto,
                CacheKeyUse::Withheld,
            ),
            (
                local,
                Provider::Openai,
                PromptCacheKeyMode::Always,
                CacheKeyUse::Sent,
            ),
            (
                openai,
                Provider::Openai,
                PromptCacheKeyMode::Never,
                CacheKeyUse::Withheld,
            ),
        ] {
            assert_eq!(
                CacheKeyUse::for_config(&config(base_url, provider, mode)),
                expected,
                "{base_url} {provider:?} {mode:?}"
            );
        }
    }

    #[test]
    fn reported_cache_reads_and_writes_are_read_from_the_usage() {
        let usage = super::parse_usage(&json!({
            "prompt_tokens": 2000, "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 512, "audio_tokens": 0}
        }))
        .unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.cached_prompt_tokens,
                usage.cache_write_tokens
            ),
            (2000, 1024, 512)
        );
        // A server without a cache reports neither.
        let plain =
            super::parse_usage(&json!({"prompt_tokens": 7, "completion_tokens": 1})).unwrap();
        assert_eq!(
            (plain.cached_prompt_tokens, plain.cache_write_tokens),
            (0, 0)
        );
    }

    #[test]
    fn an_error_body_gives_the_servers_message() {
        let llama = r#"{"error":{"code":501,"message":"This server does not support embeddings.","type":"not_supported_error"}}"#;
        assert_eq!(
            super::error_message(llama),
            "This server does not support embeddings."
        );
        assert_eq!(super::error_message("Bad Gateway"), "Bad Gateway");
    }
}
