//! Learns unknown models' context windows from the server's `/models` listing (llama.cpp, vLLM, LM
//! Studio and OpenRouter report them), and says so when a window stays a guess.
//!
//! `learn_context_windows` reads llama.cpp's `meta.n_ctx` (what the server was started with),
//! vLLM's `max_model_len`, OpenRouter's `context_length` and LM Studio's `max_context_length`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_openai::config::Config as _;
use serde_json::Value;

use super::openai::{http_client, Endpoint};
use crate::config::{ContextSource, LlmConfig};

/// How long start-up waits for the listing; a server that is slow to list is not worth a stall.
const LISTING_TIMEOUT: Duration = Duration::from_secs(5);

/// The windows a `/models` body reports, by model id. Each server names the field its own way:
/// llama.cpp `meta.n_ctx` (what the server was started with; `n_ctx_train` is only the most it
/// could be), vLLM `max_model_len`, OpenRouter `context_length`, LM Studio `max_context_length`.
pub fn reported_contexts(body: &Value) -> BTreeMap<String, u32> {
    let fields = [
        "/meta/n_ctx",
        "/max_model_len",
        "/context_length",
        "/max_context_length",
        "/meta/n_ctx_train",
    ];
    body.get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|model| {
            let id = model.get("id")?.as_str()?;
            let window = fields
                .iter()
                .find_map(|field| model.pointer(field)?.as_u64())
                .filter(|&n| n >= 512)?;
            Some((id.to_string(), u32::try_from(window).unwrap_or(u32::MAX)))
        })
        .collect()
}

/// Asks the endpoint for its models' windows when a model the config names has none from the
/// config or the catalogue, and logs each model's window and where it came from (a warning when
/// it is a guess). `also` is a model besides the config's (a resumed agent's). A server without a
/// listing changes nothing.
pub async fn learn_context_windows(config: &mut LlmConfig, also: Option<&str>) {
    for model in ask_for_unknown_windows(config, also).await {
        log_context_window(config, &model);
    }
}

/// As `learn_context_windows`, without logging; returns the models the config names.
pub async fn ask_for_unknown_windows(config: &mut LlmConfig, also: Option<&str>) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for model in [Some(config.model.as_str()), config.smart_model(), also]
        .into_iter()
        .flatten()
    {
        if !models.iter().any(|m| m == model) {
            models.push(model.to_string());
        }
    }
    let unknown = |config: &LlmConfig, model: &str| {
        config.model_spec_with_source(model).1 == ContextSource::Guessed
    };
    if models.iter().any(|m| unknown(config, m)) {
        match list_models(config).await {
            Ok(reported) => config.reported_contexts = reported,
            Err(why) => tracing::debug!("the endpoint lists no models ({why})"),
        }
    }
    models
}

/// One line about `model`'s window: a warning when it is the 4k guess.
pub fn log_context_window(config: &LlmConfig, model: &str) {
    if let Some(warning) = config.guessed_context_warning(model) {
        tracing::warn!("{warning}");
        return;
    }
    let (spec, source) = config.model_spec_with_source(model);
    if source == ContextSource::Reported {
        tracing::info!(
            "model {model}: context window {} tokens, as the server reports",
            spec.context_tokens
        );
    }
}

/// Why the endpoint gave no listing of its models (logged, and otherwise ignored).
#[derive(Debug, thiserror::Error)]
enum ListingError {
    #[error(transparent)]
    Client(#[from] super::LlmError),
    /// The request got no answer: the network failure's short name.
    #[error("{0}")]
    NoAnswer(&'static str),
    #[error("HTTP {0}")]
    Status(u16),
    #[error(transparent)]
    Body(reqwest::Error),
}

async fn list_models(config: &LlmConfig) -> Result<BTreeMap<String, u32>, ListingError> {
    let endpoint = Endpoint::new(&config.base_url, config);
    let response = http_client(LISTING_TIMEOUT)?
        .get(endpoint.url("/models"))
        .headers(endpoint.headers())
        .query(&endpoint.query())
        .send()
        .await
        .map_err(|e| {
            ListingError::NoAnswer(crate::ops::network_failure(&e).unwrap_or("no answer"))
        })?;
    if !response.status().is_success() {
        return Err(ListingError::Status(response.status().as_u16()));
    }
    let body: Value = response.json().await.map_err(ListingError::Body)?;
    Ok(reported_contexts(&body))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn each_servers_field_is_read() {
        let body = json!({"data": [
            {"id": "llama", "meta": {"n_ctx": 4096, "n_ctx_train": 8192}},
            {"id": "vllm", "max_model_len": 32768},
            {"id": "router", "context_length": 131072},
            {"id": "studio", "max_context_length": 16384},
            {"id": "old-llama", "meta": {"n_ctx_train": 2048}},
            {"id": "silent", "owned_by": "nobody"},
            {"id": "nonsense", "max_model_len": 3},
        ]});
        let reported = super::reported_contexts(&body);
        let windows: Vec<(&str, u32)> = reported.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            windows,
            [
                ("llama", 4096),
                ("old-llama", 2048),
                ("router", 131072),
                ("studio", 16384),
                ("vllm", 32768)
            ]
        );
        assert!(super::reported_contexts(&json!({"models": []})).is_empty());
    }
}
