//! Embeddings: the `Embedder` trait and its OpenAI-compatible implementation (async-openai's
//! embeddings endpoint through the same retrying transport as chat), with separate model names for
//! storing and for searching, as E5-style models need.

use async_openai::Client;
use async_trait::async_trait;
use serde_json::{json, Value};

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

/// Reads `data[i].embedding` in index order; tolerant of the fields local servers leave out.
pub fn parse_embeddings(body: &Value, expected: usize) -> Result<Embedded, LlmError> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::BadResponse("the response has no data array".into()))?;
    let mut indexed: Vec<(usize, Vec<f32>)> = Vec::with_capacity(data.len());
    for (position, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(position, |i| i as usize);
        let vector: Vec<f32> = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| LlmError::BadResponse("an item has no embedding".into()))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| LlmError::BadResponse("an embedding holds a non-number".into()))?;
        indexed.push((index, normalise(vector)?));
    }
    indexed.sort_by_key(|(i, _)| *i);
    if indexed.len() != expected {
        return Err(LlmError::BadResponse(format!(
            "asked for {expected} embeddings, got {}",
            indexed.len()
        )));
    }
    let prompt_tokens = body.pointer("/usage/prompt_tokens").and_then(Value::as_u64);
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
            let response: Value = self
                .client
                .embeddings()
                .create_byot(body)
                .await
                .map_err(classify)?;
            let part = parse_embeddings(&response, batch.len())?;
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

    #[test]
    fn embeddings_are_read_in_index_order_and_normalised() {
        let body = json!({"data": [
            {"index": 1, "embedding": [0.0, 2.0]},
            {"index": 0, "embedding": [3.0, 4.0]}
        ], "usage": {"prompt_tokens": 7}});
        let parsed = parse_embeddings(&body, 2).unwrap();
        assert_eq!(parsed.vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(parsed.prompt_tokens, Some(7));
        assert!(parse_embeddings(&body, 3).is_err());
        let zero = json!({"data": [{"embedding": [0.0, 0.0]}]});
        assert!(parse_embeddings(&zero, 1).is_err());
        assert!(parse_embeddings(&json!({"object": "list"}), 1).is_err());
    }
}
