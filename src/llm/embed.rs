//! Embeddings: the `Embedder` trait and its OpenAI-compatible implementation (async-openai's
//! embeddings endpoint through the same retrying transport as chat), with separate model names for
//! storing and for searching, as E5-style models need.
//!
//! `parse_embeddings` checks one vector per input, reading the answer as an `EmbeddingsBody`
//! straight into numbers rather than through `serde_json::Value`.

use async_openai::Client;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::openai::{classify, openai_client, Endpoint};
use super::LlmError;
use crate::config::{LlmConfig, MemoryConfig};

/// Whether a text is stored (a passage) or searched with (a query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedPurpose {
    Passage,
    Query,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    /// One unit-length vector per input text, in order.
    pub vectors: Vec<Vec<f32>>,
    /// Input tokens the endpoint reported, if it did.
    pub prompt_tokens: Option<u64>,
}

#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model used for `purpose` (for prices and logs).
    fn model(&self, purpose: EmbedPurpose) -> &str;
    async fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Embedded, LlmError>;
}

/// Scales a vector to unit length, so that a dot product is the cosine similarity; a zero vector
/// is refused because it has no direction to compare.
pub fn normalise(mut vector: Vec<f32>) -> Result<Vec<f32>, LlmError> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Err(LlmError::BadResponse(
            "the embedding is zero or not finite".into(),
        ));
    }
    vector.iter_mut().for_each(|x| *x /= norm);
    Ok(vector)
}

pub struct OpenAiEmbedder {
    client: Client<Endpoint>,
    passage_model: String,
    query_model: String,
    batch_size: usize,
    dimensions: Option<u32>,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("passage_model", &self.passage_model)
            .field("query_model", &self.query_model)
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedder {
    pub fn new(llm: &LlmConfig, memory: &MemoryConfig) -> Result<Self, LlmError> {
        let base = memory.base_url.as_deref().unwrap_or(&llm.base_url);
        // Memory is an aid to the cycle, not part of it: its requests get memory's tighter
        // timeout and attempts, so a slow endpoint costs a cycle seconds, not minutes.
        let bounded = LlmConfig {
            timeout_secs: memory.timeout_secs,
            max_attempts: memory.max_attempts,
            retry_max_ms: llm.retry_max_ms.min(2_000),
            retry_initial_ms: llm.retry_initial_ms.min(500),
            ..llm.clone()
        };
        Ok(OpenAiEmbedder {
            client: openai_client(base, &bounded)?,
            passage_model: memory.passage_model.clone(),
            query_model: memory.query_model().to_string(),
            batch_size: memory.batch_size.max(1),
            dimensions: memory.dimensions,
        })
    }
}

/// An embeddings response as read: only the fields used, each optional, since local servers
/// leave some out. Read straight into numbers: going through a `serde_json::Value` (one boxed
/// value per dimension) took more of a cycle than the search.
#[derive(Debug, Default, Deserialize)]
pub struct EmbeddingsBody {
    data: Option<Vec<EmbeddingItem>>,
    usage: Option<EmbeddingsUsage>,
}

#[derive(Debug, Deserialize)]
struct EmbeddingItem {
    index: Option<u64>,
    embedding: Option<Vec<f32>>,
}

#[derive(Debug, Deserialize)]
struct EmbeddingsUsage {
    prompt_tokens: Option<u64>,
}

/// Reads `data[i].embedding` in index order; tolerant of the fields local servers leave out.
pub fn parse_embeddings(body: EmbeddingsBody, expected: usize) -> Result<Embedded, LlmError> {
    let data = body
        .data
        .ok_or_else(|| LlmError::BadResponse("the response has no data array".into()))?;
    let mut indexed: Vec<(usize, Vec<f32>)> = Vec::with_capacity(data.len());
    for (position, item) in data.into_iter().enumerate() {
        let index = item.index.map_or(position, |i| i as usize);
        let vector = item
            .embedding
            .ok_or_else(|| LlmError::BadResponse("an item has no embedding".into()))?;
        indexed.push((index, normalise(vector)?));
    }
    indexed.sort_by_key(|(i, _)| *i);
    if indexed.len() != expected {
        return Err(LlmError::BadResponse(format!(
            "asked for {expected} embeddings, got {}",
            indexed.len()
        )));
    }
    let prompt_tokens = body.usage.and_then(|usage| usage.prompt_tokens);
    Ok(Embedded {
        vectors: indexed.into_iter().map(|(_, v)| v).collect(),
        prompt_tokens,
    })
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model(&self, purpose: EmbedPurpose) -> &str {
        match purpose {
            EmbedPurpose::Passage => &self.passage_model,
            EmbedPurpose::Query => &self.query_model,
        }
    }

    async fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Embedded, LlmError> {
        let mut all = Embedded {
            vectors: Vec::with_capacity(texts.len()),
            prompt_tokens: Some(0),
        };
        for batch in texts.chunks(self.batch_size) {
            let mut body =
                json!({"model": self.model(purpose), "input": batch, "encoding_format": "float"});
            if let Some(dimensions) = self.dimensions {
                body["dimensions"] = json!(dimensions);
            }
            let response: EmbeddingsBody = self
                .client
                .embeddings()
                .create_byot(body)
                .await
                .map_err(classify)?;
            let part = parse_embeddings(response, batch.len())?;
            all.vectors.extend(part.vectors);
            all.prompt_tokens = match (all.prompt_tokens, part.prompt_tokens) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: serde_json::Value) -> EmbeddingsBody {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn embeddings_are_read_in_index_order_and_normalised() {
        let both = json!({"object": "list", "data": [
            {"index": 1, "embedding": [0.0, 2.0], "object": "embedding"},
            {"index": 0, "embedding": [3.0, 4.0]}
        ], "usage": {"prompt_tokens": 7, "total_tokens": 7}});
        let parsed = parse_embeddings(body(both.clone()), 2).unwrap();
        assert_eq!(parsed.vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(parsed.prompt_tokens, Some(7));
        assert!(parse_embeddings(body(both), 3).is_err());
        let zero = json!({"data": [{"embedding": [0.0, 0.0]}]});
        assert!(parse_embeddings(body(zero), 1).is_err());
        let no_usage = parse_embeddings(body(json!({"data": [{"embedding": [1.0]}]})), 1).unwrap();
        assert_eq!(no_usage.prompt_tokens, None);
        assert!(parse_embeddings(body(json!({"object": "list"})), 1).is_err());
        let without_vector = json!({"data": [{"index": 0}]});
        assert!(parse_embeddings(body(without_vector), 1).is_err());
        // A server that ignores `encoding_format` and answers in base64 is not read as numbers.
        let base64 = json!({"data": [{"embedding": "AACAPw=="}]});
        assert!(serde_json::from_value::<EmbeddingsBody>(base64).is_err());
    }
}
