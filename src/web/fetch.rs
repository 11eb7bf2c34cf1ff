//! Fetching one page for the agent: redirects followed by hand (each target checked by the guard),
//! a size cap read off the stream, a timeout, and only text/html and text/plain accepted.
//!
//! `WebClient::fetch` uses no proxy from the environment, so a request goes where the guard
//! checked.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::Url;

use super::guard::{blocked_in, Blocked, Guard, Lookup};
use crate::config::WebConfig;

/// A fetched page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where the content came from, after redirects.
    pub url: Url,
    pub kind: PageKind,
    pub body: String,
    /// The body was longer than the cap; `body` holds its beginning.
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    Html,
    Text,
}

/// Why a page could not be read; the text is written for the model and the user.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url} was not fetched: {blocked}")]
    Blocked { url: String, blocked: Blocked },
    #[error("{0} is not a valid URL")]
    BadUrl(String),
    #[error("{url} answered with HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("{url} is {content_type}; only text/html and text/plain pages can be read")]
    ContentType { url: String, content_type: String },
    #[error("{url} redirected more than {max} times")]
    TooManyRedirects { url: String, max: usize },
    #[error("{url} could not be fetched: {why}")]
    Network { url: String, why: String },
}

/// The HTTP client for pages named by the model: guarded resolver, no proxy from the environment
/// (a proxy would resolve names where the guard cannot see), no automatic redirects.
#[derive(Clone)]
pub struct WebClient {
    client: reqwest::Client,
    guard: Guard,
    max_bytes: usize,
    max_redirects: usize,
}

impl WebClient {
    pub fn new(config: &WebConfig, lookup: Arc<dyn Lookup>) -> Result<Self, reqwest::Error> {
        let guard = Guard::new(&config.allow_hosts, lookup);
        let client = reqwest::Client::builder()
            .dns_resolver(guard.clone())
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(config.timeout_secs))
            .connect_timeout(Duration::from_secs(config.timeout_secs.min(10)))
            .user_agent(config.user_agent.clone())
            .build()?;
        Ok(WebClient {
            client,
            guard,
            max_bytes: config.max_page_bytes,
            max_redirects: config.max_redirects,
        })
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Redirects one request may follow, each checked again.
    pub fn max_redirects(&self) -> usize {
        self.max_redirects
    }

    /// The guarded client itself, for protocols other than page reads (git's smart HTTP): its
    /// resolver is the guard's, and it follows no redirect by itself.
    pub(super) fn http(&self) -> &reqwest::Client {
        &self.client
    }

    /// Fetches `url`, following at most `max_redirects` redirects, each one checked again.
    pub async fn fetch(&self, url: &str) -> Result<Page, FetchError> {
        let mut url = Url::parse(url.trim()).map_err(|_| FetchError::BadUrl(url.to_string()))?;
        let mut redirects = 0;
        loop {
            self.guard
                .check_url(&url)
                .map_err(|blocked| FetchError::Blocked {
                    url: url.to_string(),
                    blocked,
                })?;
            let response = self
                .client
                .get(url.clone())
                .header(
                    reqwest::header::ACCEPT,
                    "text/html,application/xhtml+xml,text/plain;q=0.9",
                )
                .send()
                .await
                .map_err(|e| network_error(&url, &e))?;
            let status = response.status();
            if status.is_redirection() {
                let Some(location) = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                else {
                    return Err(FetchError::Status {
                        url: url.to_string(),
                        status: status.as_u16(),
                    });
                };
                redirects += 1;
                if redirects > self.max_redirects {
                    return Err(FetchError::TooManyRedirects {
                        url: url.to_string(),
                        max: self.max_redirects,
                    });
                }
                url = url
                    .join(location)
                    .map_err(|_| FetchError::BadUrl(location.to_string()))?;
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.to_string(),
                    status: status.as_u16(),
                });
            }
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let kind = match content_type.split(';').next().unwrap_or("").trim() {
                "text/html" => PageKind::Html,
                "text/plain" => PageKind::Text,
                other => {
                    return Err(FetchError::ContentType {
                        url: url.to_string(),
                        content_type: if other.is_empty() {
                            "of no declared type".into()
                        } else {
                            other.to_string()
                        },
                    })
                }
            };
            let (bytes, truncated) = self.read_capped(response, &url).await?;
            // Pages that declare another charset are rare on the text web; invalid bytes become
            // replacement characters rather than failing the whole page.
            let body = String::from_utf8_lossy(&bytes).into_owned();
            return Ok(Page {
                url,
                kind,
                body,
                truncated,
            });
        }
    }

    /// Reads the body up to the cap, stopping the download there.
    async fn read_capped(
        &self,
        mut response: reqwest::Response,
        url: &Url,
    ) -> Result<(Vec<u8>, bool), FetchError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| network_error(url, &e))? {
            let room = self.max_bytes - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                // Cut at a character boundary so that the text does not end in a broken character.
                if let Err(e) = std::str::from_utf8(&bytes) {
                    if e.error_len().is_none() {
                        bytes.truncate(e.valid_up_to());
                    }
                }
                return Ok((bytes, true));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((bytes, false))
    }
}

pub(super) fn network_error(url: &Url, error: &reqwest::Error) -> FetchError {
    if let Some(blocked) = blocked_in(error) {
        return FetchError::Blocked {
            url: url.to_string(),
            blocked,
        };
    }
    let why = if error.is_timeout() {
        "timed out".to_string()
    } else {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(e) = source {
            text = format!("{text}: {e}");
            source = e.source();
        }
        text
    };
    FetchError::Network {
        url: url.to_string(),
        why,
    }
}
