//! Turning a fetched page into what the model reads: the readable text (Mozilla's Readability
//! algorithm, through dom_smoothie), the title, and the page's links.

use dom_query::Document;
use dom_smoothie::{Readability, TextMode};
use reqwest::Url;

use super::fetch::{Page, PageKind};

/// A page's readable content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readable {
    pub title: String,
    pub text: String,
    pub links: Vec<Link>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub text: String,
    pub url: String,
}

/// Extracts the readable text. Pages that Readability cannot make sense of (short pages, link
/// lists) fall back to the whole body's text, so that nothing readable is lost.
pub fn readable(page: &Page, max_links: usize) -> Readable {
    match page.kind {
        PageKind::Text => Readable {
            title: String::new(),
            text: page.body.clone(),
            links: Vec::new(),
        },
        PageKind::Html => {
            let document = Document::from(page.body.as_str());
            let links = links(&document, &page.url, max_links);
            let config = dom_smoothie::Config {
                text_mode: TextMode::Formatted,
                ..Default::default()
            };
            let article =
                Readability::with_document(document.clone(), Some(page.url.as_str()), Some(config))
                    .and_then(|mut r| r.parse());
            let (title, text) = match article {
                Ok(article) if !article.text_content.trim().is_empty() => {
                    (article.title, article.text_content.to_string())
                }
                _ => {
                    document
                        .select("script, style, noscript, template")
                        .remove();
                    let title = document.select("title").text().to_string();
                    (title, document.select("body").formatted_text().to_string())
                }
            };
            Readable {
                title: title.trim().to_string(),
                text: tidy(&text),
                links,
            }
        }
    }
}

/// Collapses runs of blank lines and trailing spaces, which cost tokens and carry nothing.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// The page's http(s) links, absolute, first occurrence only, at most `max`.
fn links(document: &Document, base: &Url, max: usize) -> Vec<Link> {
    let mut out: Vec<Link> = Vec::new();
    for anchor in document.select("a[href]").iter() {
        if out.len() >= max {
            break;
        }
        let Some(href) = anchor.attr("href") else {
            continue;
        };
        let Ok(url) = base.join(href.trim()) else {
            continue;
        };
        if !matches!(url.scheme(), "http" | "https") {
            continue;
        }
        let url = url.to_string();
        if out.iter().any(|l| l.url == url) {
            continue;
        }
        let text = anchor
            .text()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Link { text, url });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(body: &str) -> Page {
        Page {
            url: Url::parse("https://example.org/docs/intro.html").unwrap(),
            kind: PageKind::Html,
            body: body.into(),
            truncated: false,
        }
    }

    #[test]
    fn article_text_comes_without_navigation_and_scripts() {
        let paragraph = "The tardigrade survives temperatures close to absolute zero and doses of radiation hundreds of times higher than what would kill a human. ";
        let html = format!(
            "<html><head><title>Water bears</title><script>var secret = 1;</script></head><body>\
             <nav><a href='/'>Home</a> <a href='/shop'>Shop</a></nav>\
             <article><h1>Water bears</h1><p>{}</p><p>{}</p><p><a href='../facts.html'>More facts</a></p></article>\
             <footer><a href='mailto:x@y.z'>Mail</a> <a href='javascript:alert(1)'>x</a></footer></body></html>",
            paragraph.repeat(4),
            paragraph.repeat(3)
        );
        let out = readable(&page(&html), 10);
        assert_eq!(out.title, "Water bears");
        assert!(out.text.contains("tardigrade survives"), "{}", out.text);
        assert!(!out.text.contains("secret"));
        let urls: Vec<&str> = out.links.iter().map(|l| l.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://example.org/",
                "https://example.org/shop",
                "https://example.org/facts.html"
            ]
        );
        assert_eq!(out.links[2].text, "More facts");
        assert_eq!(readable(&page(&html), 1).links.len(), 1);
    }

    #[test]
    fn short_pages_fall_back_to_the_body_text() {
        let out = readable(
            &page("<html><head><title>Tiny</title><style>p{}</style></head><body><p>Only one line.</p></body></html>"),
            5,
        );
        assert_eq!(out.title, "Tiny");
        assert_eq!(out.text, "Only one line.");
    }
}
