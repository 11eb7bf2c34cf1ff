//! `[images]`: the model `generate_image` uses (off unless one is named), its endpoint, the sizes
//! offered with their prices, and the largest image kept.
//!
//! `sizes` gives the config's sizes or else the model's known ones, 1024x1024 first; `validate`
//! checks that a named model has prices, each for a well-formed size and above zero.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Image generation through an OpenAI-compatible images endpoint.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct ImagesConfig {
    /// The images model (`dall-e-3`, `gpt-image-1`, …); `generate_image` is offered only when
    /// one is named.
    pub model: Option<String>,
    /// The endpoint, when it is not `llm.base_url` (the key is `llm.api_key` in both cases).
    pub base_url: Option<String>,
    /// The sizes offered, each with its price in dollars per image; the first is the default.
    /// Empty takes the known prices of `model`.
    pub usd_per_image: BTreeMap<String, f64>,
    /// The largest image kept in the workspace, in bytes (its own bound: a picture is larger
    /// than the files an agent writes; the workspace's total still applies).
    pub max_bytes: u64,
}

impl Default for ImagesConfig {
    fn default() -> Self {
        ImagesConfig {
            model: None,
            base_url: None,
            usd_per_image: BTreeMap::new(),
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

/// The published prices per image of OpenAI's images models at standard quality.
const KNOWN_PRICES: &[(&str, &[(&str, f64)])] = &[
    (
        "dall-e-3",
        &[
            ("1024x1024", 0.040),
            ("1024x1792", 0.080),
            ("1792x1024", 0.080),
        ],
    ),
    (
        "dall-e-2",
        &[("1024x1024", 0.020), ("512x512", 0.018), ("256x256", 0.016)],
    ),
    (
        "gpt-image-1",
        &[
            ("1024x1024", 0.042),
            ("1024x1536", 0.063),
            ("1536x1024", 0.063),
        ],
    ),
];

impl ImagesConfig {
    /// The sizes offered with their prices, the default first: the config's, or the model's
    /// known ones. Empty when the model is unknown and the config names none (then the command
    /// is off, and `validate` says why).
    pub fn sizes(&self) -> Vec<(String, f64)> {
        let mut sizes: Vec<(String, f64)> = if self.usd_per_image.is_empty() {
            let model = self.model.as_deref().unwrap_or_default();
            KNOWN_PRICES
                .iter()
                .find(|(name, _)| *name == model)
                .map(|(_, sizes)| sizes.iter().map(|(s, p)| (s.to_string(), *p)).collect())
                .unwrap_or_default()
        } else {
            self.usd_per_image
                .iter()
                .map(|(s, p)| (s.clone(), *p))
                .collect()
        };
        // 1024x1024 is every model's usual default; it goes first when offered.
        sizes.sort_by_key(|(size, _)| size != "1024x1024");
        sizes
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(model) = &self.model else {
            return Ok(());
        };
        if model.trim().is_empty() {
            return Err(invalid("images.model", "must not be empty when set"));
        }
        if self.sizes().is_empty() {
            return Err(invalid(
                "images.usd_per_image",
                format!("{model} has no known prices: give each size's, e.g. usd_per_image = {{ \"1024x1024\" = 0.04 }}"),
            ));
        }
        for (size, usd) in &self.usd_per_image {
            let well_formed = size
                .split_once('x')
                .is_some_and(|(w, h)| w.parse::<u32>().is_ok() && h.parse::<u32>().is_ok());
            if !well_formed {
                return Err(invalid(
                    "images.usd_per_image",
                    format!("{size:?} is not a size like \"1024x1024\""),
                ));
            }
            if !(usd.is_finite() && *usd > 0.0) {
                return Err(invalid(
                    "images.usd_per_image",
                    format!("the price of {size} must be more than 0"),
                ));
            }
        }
        if self.max_bytes == 0 {
            return Err(invalid("images.max_bytes", "must be more than 0"));
        }
        if let Some(url) = &self.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains('?') {
                return Err(invalid(
                    "images.base_url",
                    "must start with http:// or https:// and carry no query",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_bring_their_prices_and_others_need_them() {
        let dalle = ImagesConfig {
            model: Some("dall-e-3".into()),
            ..ImagesConfig::default()
        };
        assert!(dalle.validate().is_ok());
        assert_eq!(dalle.sizes()[0], ("1024x1024".to_string(), 0.040));
        let local = ImagesConfig {
            model: Some("sdxl".into()),
            ..ImagesConfig::default()
        };
        assert!(local
            .validate()
            .unwrap_err()
            .to_string()
            .contains("no known prices"));
        let mut priced = local.clone();
        priced.usd_per_image.insert("512x512".into(), 0.002);
        assert!(priced.validate().is_ok());
        priced.usd_per_image.insert("big".into(), 0.002);
        assert!(priced.validate().is_err());
        assert!(
            ImagesConfig::default().validate().is_ok(),
            "off needs nothing"
        );
    }
}
