//! The web as the agent's commands see it: search backends, Wikipedia, the guarded page fetcher,
//! git clones through it, and the extraction of readable text and links from what was fetched;
//! and the egress proxy through which confined MCP servers reach it under the same guard.

pub mod egress_proxy;
pub mod extract;
pub mod fetch;
pub mod git;
pub mod guard;
pub mod search;
pub mod wiki;

use std::sync::Arc;

use crate::config::WebConfig;

/// Why the web services could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("{0:?} is not a valid URL for the search service")]
    Url(String),
}

/// What the web commands use: one search backend, one guarded fetcher, their limits.
pub struct Web {
    pub search: Box<dyn search::SearchBackend>,
    pub wiki: Box<dyn wiki::WikiBackend>,
    pub fetcher: fetch::WebClient,
    pub config: WebConfig,
}

impl Web {
    /// The web services for this configuration, resolving names with the system resolver.
    pub fn from_config(config: &WebConfig) -> Result<Web, SetupError> {
        Web::with_lookup(config, Arc::new(guard::SystemLookup))
    }

    /// The web services when the config turns them on.
    pub fn for_config(config: &crate::config::Config) -> Result<Option<Arc<Web>>, SetupError> {
        if !config.web.enabled {
            return Ok(None);
        }
        Ok(Some(Arc::new(Web::from_config(&config.web)?)))
    }

    /// As `from_config`, with another resolver (tests map names to addresses of their choosing).
    pub fn with_lookup(
        config: &WebConfig,
        lookup: Arc<dyn guard::Lookup>,
    ) -> Result<Web, SetupError> {
        Ok(Web {
            search: search::backend(config)?,
            wiki: Box::new(wiki::MediaWiki::new(config)?),
            fetcher: fetch::WebClient::new(config, lookup)?,
            config: config.clone(),
        })
    }
}
