//! Image generation: the `ImageModel` trait and its OpenAI-compatible implementation
//! (async-openai's images endpoint), one image per call, read from base64 and bounded in size.
//!
//! `OpenAiImages` makes one attempt only, since a request that timed out may still have been made
//! and billed; it asks for base64 except from the gpt-image models, which always answer so and
//! refuse the parameter. `parse_image` bounds the size before decoding.

use async_openai::Client;
use async_trait::async_trait;
use base64::Engine as _;
use serde_json::{json, Value};

use super::openai::{classify, openai_client, Endpoint};
use super::LlmError;
use crate::config::{ImagesConfig, LlmConfig};

/// One generated image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub bytes: Vec<u8>,
    /// The prompt as the model rewrote it, when it says (DALL·E 3 does).
    pub revised_prompt: Option<String>,
}

#[async_trait]
pub trait ImageModel: Send + Sync {
    fn model(&self) -> &str;
    /// One image of `size` ("1024x1024") for `prompt`, at most `max_bytes`.
    async fn generate(&self, prompt: &str, size: &str, max_bytes: u64) -> Result<Image, LlmError>;
}

pub struct OpenAiImages {
    client: Client<Endpoint>,
    model: String,
}

impl OpenAiImages {
    /// `None` when no images model is configured.
    pub fn from_config(llm: &LlmConfig, images: &ImagesConfig) -> Result<Option<Self>, LlmError> {
        let Some(model) = &images.model else {
            return Ok(None);
        };
        let base = images.base_url.as_deref().unwrap_or(&llm.base_url);
        // One attempt: a request that timed out may still have been made and billed, and a
        // second one would be paid for twice. An image takes longer than a reply.
        let once = LlmConfig {
            max_attempts: 1,
            timeout_secs: llm.timeout_secs.max(120),
            ..llm.clone()
        };
        Ok(Some(OpenAiImages {
            client: openai_client(base, &once)?,
            model: model.clone(),
        }))
    }
}

#[async_trait]
impl ImageModel for OpenAiImages {
    fn model(&self) -> &str {
        &self.model
    }

    async fn generate(&self, prompt: &str, size: &str, max_bytes: u64) -> Result<Image, LlmError> {
        let mut body = json!({"model": self.model, "prompt": prompt, "n": 1, "size": size});
        // The gpt-image models always answer in base64 and refuse the parameter; DALL·E and most
        // compatible servers answer with a URL unless asked.
        if !self.model.starts_with("gpt-image") {
            body["response_format"] = json!("b64_json");
        }
        let response: Value = self
            .client
            .images()
            .generate_byot(body)
            .await
            .map_err(classify)?;
        parse_image(&response, max_bytes)
    }
}

/// Reads `data[0].b64_json`, refusing an image larger than `max_bytes` before decoding it.
pub fn parse_image(response: &Value, max_bytes: u64) -> Result<Image, LlmError> {
    let first = response
        .pointer("/data/0")
        .ok_or_else(|| LlmError::BadResponse("the answer holds no image".into()))?;
    let Some(encoded) = first.get("b64_json").and_then(Value::as_str) else {
        return Err(LlmError::BadResponse(
            "the image came as a URL, not as base64 (this endpoint ignores response_format)".into(),
        ));
    };
    // Base64 holds 3 bytes in 4 characters.
    let decoded_len = (encoded.len() as u64 / 4) * 3;
    if decoded_len > max_bytes {
        return Err(LlmError::BadResponse(format!(
            "the image is about {decoded_len} bytes, more than images.max_bytes ({max_bytes})"
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| LlmError::BadResponse(format!("the image is not valid base64: {e}")))?;
    Ok(Image {
        bytes,
        revised_prompt: first
            .get("revised_prompt")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_read_from_base64_and_bounded() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        let encoded = base64::engine::general_purpose::STANDARD.encode(png);
        let answer = json!({"data": [{"b64_json": encoded, "revised_prompt": "a red fox"}]});
        let image = parse_image(&answer, 1000).unwrap();
        assert_eq!(image.bytes, png);
        assert_eq!(image.revised_prompt.as_deref(), Some("a red fox"));
        assert!(parse_image(&answer, 4).is_err(), "larger than the bound");
        let url = json!({"data": [{"url": "https://example.com/x.png"}]});
        assert!(parse_image(&url, 1000)
            .unwrap_err()
            .to_string()
            .contains("URL"));
    }
}
