//! Keyset pagination for list endpoints: `?limit=&cursor=`, answered with `nextCursor`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

/// Default page size of list endpoints.
pub const DEFAULT_LIMIT: i64 = 100;
/// Largest page size of list endpoints.
pub const MAX_LIMIT: i64 = 1_000;

/// `limit` and `cursor` query parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page size (1 to 1,000; default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

impl PageQuery {
    /// The validated page size.
    pub fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
            Some(_) => Err(ApiError::InvalidRequest(format!(
                "limit must be between 1 and {MAX_LIMIT}"
            ))),
        }
    }

    /// Parses the cursor with `parse`; an unparsable cursor is a 400.
    pub fn cursor<T>(&self, parse: impl FnOnce(&str) -> Option<T>) -> Result<Option<T>, ApiError> {
        match self.cursor.as_deref() {
            None | Some("") => Ok(None),
            Some(text) => parse(text)
                .map(Some)
                .ok_or_else(|| ApiError::InvalidRequest("cursor is not valid".into())),
        }
    }
}

/// A page of results.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The items.
    pub data: Vec<T>,
    /// Cursor of the next page; null on the last page.
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// A page from `limit + 1` fetched rows: the extra row only says whether more exist.
    pub fn from_rows<R>(
        mut rows: Vec<R>,
        limit: i64,
        cursor_of: impl Fn(&R) -> String,
        view: impl FnMut(R) -> T,
    ) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(&cursor_of)
        } else {
            None
        };
        Self {
            data: rows.into_iter().map(view).collect(),
            next_cursor,
        }
    }
}
