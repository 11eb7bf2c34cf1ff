//! Wikipedia search (aiflows' WikiSearch) through the MediaWiki API, behind a trait: one request
//! finds the best-matching articles and brings back each one's introduction as plain text.
//!
//! `MediaWiki` (`web.wikipedia_url`) makes one API request (search as a generator, plain-text
//! introductions and canonical URLs); `parse_mediawiki` ranks the articles by the search's `index`
//! and names an API error.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;
use serde::Deserialize;

use super::search::SearchError;
use crate::config::WebConfig;

/// One article found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Article {
    pub title: String,
    pub url: String,
    /// The article's introduction, as plain text.
    pub summary: String,
}

#[async_trait]
pub trait WikiBackend: Send + Sync {
    async fn search(&self, query: &str, count: usize) -> Result<Vec<Article>, SearchError>;
}

/// The MediaWiki API at `web.wikipedia_url` (any wiki's `api.php`).
pub struct MediaWiki {
    client: reqwest::Client,
    api: Url,
}

const SERVICE: &str = "Wikipedia";

/// An introduction longer than this is cut: the agent reads the article with `read_webpage` when
/// it needs more.
const SUMMARY_CHARS: usize = 1_500;

impl MediaWiki {
    pub fn new(config: &WebConfig) -> Result<Self, super::SetupError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .user_agent(config.user_agent.clone())
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()?;
        let api = Url::parse(config.wikipedia_url.trim())
            .map_err(|_| super::SetupError::Url(config.wikipedia_url.clone()))?;
        Ok(MediaWiki { client, api })
    }

    /// The request: search as a generator, with each page's plain-text introduction and its
    /// canonical URL, in the API's second format (pages as a list).
    fn request_url(&self, query: &str, count: usize) -> Url {
        let mut url = self.api.clone();
        url.query_pairs_mut()
            .append_pair("action", "query")
            .append_pair("format", "json")
            .append_pair("formatversion", "2")
            .append_pair("generator", "search")
            .append_pair("gsrsearch", query)
            .append_pair("gsrlimit", &count.to_string())
            .append_pair("prop", "extracts|info")
            .append_pair("inprop", "url")
            .append_pair("exintro", "1")
            .append_pair("explaintext", "1")
            .append_pair("exlimit", &count.to_string());
        url
    }
}

#[async_trait]
impl WikiBackend for MediaWiki {
    async fn search(&self, query: &str, count: usize) -> Result<Vec<Article>, SearchError> {
        let request = self.client.get(self.request_url(query, count.max(1)));
        let body = super::search::get(SERVICE, request).await?;
        parse_mediawiki(&body)
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    query: Option<Query>,
    #[serde(default)]
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct Query {
    #[serde(default)]
    pages: Vec<Page>,
}

#[derive(Deserialize)]
struct Page {
    title: String,
    /// The rank in the search: pages come back in page-id order.
    #[serde(default)]
    index: u32,
    #[serde(default)]
    extract: String,
    #[serde(default)]
    fullurl: String,
    #[serde(default)]
    missing: bool,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: String,
    #[serde(default)]
    info: String,
}

/// Reads the API's answer: the articles in search order. No `query` at all means no match.
pub fn parse_mediawiki(body: &str) -> Result<Vec<Article>, SearchError> {
    let answer: Answer = serde_json::from_str(body).map_err(|e| SearchError::Format {
        service: SERVICE,
        why: e.to_string(),
    })?;
    if let Some(error) = answer.error {
        return Err(SearchError::Format {
            service: SERVICE,
            why: format!("{}: {}", error.code, error.info),
        });
    }
    let mut pages: Vec<Page> = answer
        .query
        .map(|q| q.pages)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !p.missing)
        .collect();
    pages.sort_by_key(|p| p.index);
    Ok(pages
        .into_iter()
        .map(|page| Article {
            summary: crate::core::text::truncate_chars(page.extract.trim(), SUMMARY_CHARS),
            title: page.title,
            url: page.fullurl,
        })
        .collect())
}

/// The articles as the agent reads them.
pub fn render(query: &str, articles: &[Article]) -> String {
    if articles.is_empty() {
        return format!("No Wikipedia article matches '{query}'.");
    }
    let mut text = format!("Wikipedia articles for '{query}':");
    for (n, article) in articles.iter().enumerate() {
        text.push_str(&format!(
            "\n\n{}. {} ({})\n{}",
            n + 1,
            article.title,
            article.url,
            article.summary
        ));
    }
    text
}
