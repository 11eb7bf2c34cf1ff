//! Web search backends behind one trait: DuckDuckGo's HTML results page (no key, as AutoGPT),
//! a SearxNG instance's JSON API, and the Brave Search API.

use std::time::Duration;

use async_trait::async_trait;
use dom_query::Document;
use reqwest::Url;
use serde::Deserialize;

use crate::config::{SearchBackendKind, Secret, WebConfig};

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("the search service {service} could not be reached: {why}")]
    Network { service: &'static str, why: String },
    #[error("the search service {service} answered with HTTP status {status}{hint}")]
    Status {
        service: &'static str,
        status: u16,
        hint: &'static str,
    },
    #[error("the search service {service} answered with something unexpected: {why}")]
    Format { service: &'static str, why: String },
}

#[async_trait]
pub trait SearchBackend: Send + Sync {
    fn name(&self) -> &'static str;
    async fn search(&self, query: &str, count: usize) -> Result<Vec<SearchHit>, SearchError>;
}

/// The backend the config names. Search services are the operator's choice, so they are not
/// behind the private-network guard (a SearxNG instance is often on the operator's own network).
pub fn backend(config: &WebConfig) -> Result<Box<dyn SearchBackend>, super::SetupError> {
    let client = |redirects: reqwest::redirect::Policy| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .user_agent(config.user_agent.clone())
            .redirect(redirects)
            .build()
    };
    let url =
        |text: &str| Url::parse(text.trim()).map_err(|_| super::SetupError::Url(text.to_string()));
    let follow = || reqwest::redirect::Policy::limited(3);
    Ok(match config.search_backend {
        SearchBackendKind::Duckduckgo => Box::new(DuckDuckGo {
            client: client(follow())?,
            url: url(&config.duckduckgo_url)?,
        }),
        SearchBackendKind::Searxng => Box::new(Searxng {
            client: client(follow())?,
            url: url(&config.searxng_url)?,
        }),
        SearchBackendKind::Brave => Box::new(Brave {
            // The key travels in a header that reqwest would carry across a redirect to
            // another host; the API never redirects, so none is followed.
            client: client(reqwest::redirect::Policy::none())?,
            url: url(&config.brave_url)?,
            key: config
                .brave_api_key
                .clone()
                .unwrap_or_else(|| Secret::new("")),
        }),
    })
}

pub(super) async fn get(
    service: &'static str,
    request: reqwest::RequestBuilder,
) -> Result<String, SearchError> {
    let response = request.send().await.map_err(|e| SearchError::Network {
        service,
        why: if e.is_timeout() {
            "timed out".into()
        } else {
            e.to_string()
        },
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(SearchError::Status {
            service,
            status: status.as_u16(),
            hint: if status.as_u16() == 429 {
                " (rate limited: try again later)"
            } else {
                ""
            },
        });
    }
    // A results page is small; a service that sends more than this is cut off rather than read
    // into memory whole.
    let mut response = response;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| SearchError::Network {
        service,
        why: e.to_string(),
    })? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_RESULTS_BYTES {
            return Err(SearchError::Format {
                service,
                why: format!("the answer is larger than {MAX_RESULTS_BYTES} bytes"),
            });
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The most a search service's answer may weigh.
const MAX_RESULTS_BYTES: usize = 4 * 1024 * 1024;

fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

struct DuckDuckGo {
    client: reqwest::Client,
    url: Url,
}

#[async_trait]
impl SearchBackend for DuckDuckGo {
    fn name(&self) -> &'static str {
        "DuckDuckGo"
    }

    async fn search(&self, query: &str, count: usize) -> Result<Vec<SearchHit>, SearchError> {
        let mut url = self.url.clone();
        url.query_pairs_mut().append_pair("q", query);
        let html = get(self.name(), self.client.get(url)).await?;
        let hits = parse_duckduckgo(&html, count);
        // DuckDuckGo answers a client it takes for a bot with a challenge page instead of results.
        if hits.is_empty() && html.contains("anomaly") {
            return Err(SearchError::Format {
                service: self.name(),
                why: "it asked for a challenge (too many searches); try again later".into(),
            });
        }
        Ok(hits)
    }
}

/// Reads DuckDuckGo's HTML results: organic results only (ads are skipped), with the target URL
/// taken out of DuckDuckGo's click-tracking redirect.
pub fn parse_duckduckgo(html: &str, count: usize) -> Vec<SearchHit> {
    let document = Document::from(html);
    let mut hits = Vec::new();
    for result in document.select("div.result").iter() {
        if hits.len() >= count {
            break;
        }
        if result.has_class("result--ad") {
            continue;
        }
        let anchor = result.select("a.result__a");
        let Some(href) = anchor.attr("href") else {
            continue;
        };
        let Some(url) = duckduckgo_target(&href) else {
            continue;
        };
        hits.push(SearchHit {
            title: words(&anchor.text()),
            url,
            snippet: words(&result.select(".result__snippet").text()),
        });
    }
    hits
}

fn duckduckgo_target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_string()
    };
    let url = Url::parse(&absolute).ok()?;
    let target = match url.query_pairs().find(|(k, _)| k == "uddg") {
        Some((_, target)) => Url::parse(&target).ok()?,
        None => url,
    };
    matches!(target.scheme(), "http" | "https").then(|| target.to_string())
}

struct Searxng {
    client: reqwest::Client,
    url: Url,
}

#[derive(Deserialize)]
struct SearxngReply {
    #[serde(default)]
    results: Vec<SearxngResult>,
}

#[derive(Deserialize)]
struct SearxngResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    content: String,
}

#[async_trait]
impl SearchBackend for Searxng {
    fn name(&self) -> &'static str {
        "SearxNG"
    }

    async fn search(&self, query: &str, count: usize) -> Result<Vec<SearchHit>, SearchError> {
        let mut url = self.url.clone();
        if !url.path().ends_with("/search") {
            let path = format!("{}/search", url.path().trim_end_matches('/'));
            url.set_path(&path);
        }
        url.query_pairs_mut()
            .append_pair("q", query)
            .append_pair("format", "json");
        let body = get(self.name(), self.client.get(url)).await?;
        let reply: SearxngReply = serde_json::from_str(&body).map_err(|e| SearchError::Format {
            service: self.name(),
            why: format!("{e} (is the json format enabled in its settings.yml?)"),
        })?;
        Ok(reply
            .results
            .into_iter()
            .take(count)
            .map(|r| SearchHit {
                title: words(&r.title),
                url: r.url,
                snippet: words(&r.content),
            })
            .collect())
    }
}

struct Brave {
    client: reqwest::Client,
    url: Url,
    key: Secret,
}

#[derive(Deserialize)]
struct BraveReply {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    description: String,
}

#[async_trait]
impl SearchBackend for Brave {
    fn name(&self) -> &'static str {
        "Brave Search"
    }

    async fn search(&self, query: &str, count: usize) -> Result<Vec<SearchHit>, SearchError> {
        let mut url = self.url.clone();
        url.query_pairs_mut()
            .append_pair("q", query)
            .append_pair("count", &count.min(20).to_string());
        let request = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .header("X-Subscription-Token", self.key.expose());
        let body = get(self.name(), request).await?;
        let reply: BraveReply = serde_json::from_str(&body).map_err(|e| SearchError::Format {
            service: self.name(),
            why: e.to_string(),
        })?;
        Ok(reply
            .web
            .map(|w| w.results)
            .unwrap_or_default()
            .into_iter()
            .take(count)
            .map(|r| SearchHit {
                title: words(&strip_tags(&r.title)),
                url: r.url,
                snippet: words(&strip_tags(&r.description)),
            })
            .collect())
    }
}

/// Brave marks query words in its texts with `<strong>`; the model gets plain text.
fn strip_tags(text: &str) -> String {
    Document::from(format!("<p>{text}</p>").as_str())
        .select("p")
        .text()
        .to_string()
}

/// The results as the model reads them.
pub fn render(query: &str, hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return format!("No search results for \"{query}\".");
    }
    let mut out = format!("## Search results for \"{query}\"\n");
    for (n, hit) in hits.iter().enumerate() {
        out.push_str(&format!(
            "\n{}. {}\n   URL: {}\n   Excerpt: {}\n",
            n + 1,
            hit.title,
            hit.url,
            hit.snippet
        ));
    }
    out
}
