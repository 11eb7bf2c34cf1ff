//! The Agent Protocol's wire format (v1, the OpenAPI spec AutoGPT's `serve` implements): `Task`,
//! `Step`, `Artifact`, the paginated lists and the error body, with field names as the spec
//! writes them, and the paging of a list (`Page`).
//!
//! A list is asked for with `current_page` (from 1) and `page_size` (from 1 to
//! `api.max_page_size`) and answered with the items under their name (`tasks`, `steps`,
//! `artifacts`) beside `pagination: {total_items, total_pages, current_page, page_size}`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /ap/v1/agent/tasks`: the task, and what the caller asks of its agent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskRequestBody {
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub additional_input: Option<Value>,
}

/// `POST …/steps`: the caller's answer to what the last step showed; the body may be absent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StepRequestBody {
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub additional_input: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub task_id: String,
    pub input: Option<String>,
    pub additional_input: Value,
    pub artifacts: Vec<Artifact>,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
}

/// A step's status as the spec names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Created,
    Running,
    Completed,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub step_id: String,
    pub task_id: String,
    pub name: Option<String>,
    pub status: StepStatus,
    pub input: Option<String>,
    pub additional_input: Value,
    pub output: Option<String>,
    pub additional_output: Value,
    pub artifacts: Vec<Artifact>,
    pub is_last: bool,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Artifact {
    pub artifact_id: String,
    pub agent_created: bool,
    pub file_name: String,
    pub relative_path: String,
    pub created_at: DateTime<Utc>,
    pub modified_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pagination {
    pub total_items: usize,
    pub total_pages: usize,
    pub current_page: usize,
    pub page_size: usize,
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody {
    pub message: String,
}

/// Which page of a list a caller asked for, as given in the query.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PageQuery {
    #[serde(default)]
    pub current_page: Option<String>,
    #[serde(default)]
    pub page_size: Option<String>,
}

/// A page the caller may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub current_page: usize,
    pub page_size: usize,
}

/// The page size when the caller names none (the spec's default).
pub const DEFAULT_PAGE_SIZE: usize = 10;

/// Why a page cannot be served; its text is the 422's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("current_page must be a whole number from 1 (got {0:?})")]
    BadPage(String),
    #[error("page_size must be a whole number from 1 to {max} (got {given:?})")]
    BadSize { given: String, max: usize },
}

impl PageQuery {
    /// The page asked for, within `max_page_size`.
    pub fn page(&self, max_page_size: usize) -> Result<Page, PageError> {
        let current_page = match &self.current_page {
            None => 1,
            Some(text) => text
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| PageError::BadPage(text.clone()))?,
        };
        let page_size = match &self.page_size {
            None => DEFAULT_PAGE_SIZE.min(max_page_size),
            Some(text) => text
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max_page_size).contains(n))
                .ok_or_else(|| PageError::BadSize {
                    given: text.clone(),
                    max: max_page_size,
                })?,
        };
        Ok(Page {
            current_page,
            page_size,
        })
    }
}

impl Page {
    /// This page's items of `all`, and the pagination that describes them.
    pub fn of<T>(&self, all: Vec<T>) -> (Vec<T>, Pagination) {
        let total_items = all.len();
        let total_pages = total_items.div_ceil(self.page_size);
        let items = all
            .into_iter()
            .skip((self.current_page - 1).saturating_mul(self.page_size))
            .take(self.page_size)
            .collect();
        (
            items,
            Pagination {
                total_items,
                total_pages,
                current_page: self.current_page,
                page_size: self.page_size,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(page: Option<&str>, size: Option<&str>) -> PageQuery {
        PageQuery {
            current_page: page.map(str::to_string),
            page_size: size.map(str::to_string),
        }
    }

    #[test]
    fn twenty_five_items_in_pages_of_ten_are_ten_ten_and_five() {
        let all: Vec<u32> = (1..=25).collect();
        let page = |n: &str| query(Some(n), Some("10")).page(100).unwrap();
        let (first, pagination) = page("1").of(all.clone());
        assert_eq!(first, (1..=10).collect::<Vec<_>>());
        assert_eq!(
            pagination,
            Pagination {
                total_items: 25,
                total_pages: 3,
                current_page: 1,
                page_size: 10
            }
        );
        assert_eq!(page("3").of(all.clone()).0, vec![21, 22, 23, 24, 25]);
        let (beyond, pagination) = page("4").of(all);
        assert!(beyond.is_empty());
        assert_eq!(pagination.total_pages, 3);
        let (none, pagination) = page("1").of(Vec::<u32>::new());
        assert!(none.is_empty());
        assert_eq!((pagination.total_items, pagination.total_pages), (0, 0));
    }

    #[test]
    fn a_page_out_of_range_is_refused_saying_why() {
        assert_eq!(
            query(None, None).page(100).unwrap(),
            Page {
                current_page: 1,
                page_size: DEFAULT_PAGE_SIZE
            }
        );
        assert!(matches!(
            query(Some("0"), None).page(100),
            Err(PageError::BadPage(_))
        ));
        assert!(matches!(
            query(Some("two"), None).page(100),
            Err(PageError::BadPage(_))
        ));
        let too_big = query(None, Some("101")).page(100).unwrap_err();
        assert_eq!(
            too_big.to_string(),
            "page_size must be a whole number from 1 to 100 (got \"101\")"
        );
        assert!(query(None, Some("0")).page(100).is_err());
    }
}
