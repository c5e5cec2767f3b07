//! List responses and paging (RFC 7644 §3.4.2, §3.4.2.4): `startIndex` is 1-based and a
//! value below 1 means 1; `count` below 0 means 0 (only `totalResults` is returned) and above
//! [`MAX_PAGE_SIZE`] means [`MAX_PAGE_SIZE`]; without `count` a page holds
//! [`DEFAULT_PAGE_SIZE`] resources.

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};
use serde_json::Value;

use crate::LIST_RESPONSE_SCHEMA;
use crate::error::ScimError;

/// Resources per page when the request has no `count` (Okta asks for 100).
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// The most resources a page holds; a larger `count` is lowered to it, as RFC 7644 §3.4.2.4
/// lets a service provider do (it is announced as `filter.maxResults`).
pub const MAX_PAGE_SIZE: usize = 200;

/// The page a list request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// 1-based index of the first resource.
    pub start_index: u64,
    /// How many resources at most.
    pub count: usize,
}

impl Default for Page {
    fn default() -> Self {
        Self {
            start_index: 1,
            count: DEFAULT_PAGE_SIZE,
        }
    }
}

impl Page {
    /// Reads the `startIndex` and `count` query parameters. A value that is not an integer
    /// is 400 (without a `scimType`: the RFC defines none for query parameters).
    pub fn parse(start_index: Option<&str>, count: Option<&str>) -> Result<Self, ScimError> {
        let start_index = match start_index {
            None => 1,
            Some(text) => integer(text, "startIndex")?.clamp(1, i64::MAX as i128) as u64,
        };
        let count = match count {
            None => DEFAULT_PAGE_SIZE,
            Some(text) => integer(text, "count")?.clamp(0, MAX_PAGE_SIZE as i128) as usize,
        };
        Ok(Self { start_index, count })
    }

    /// How many resources to skip: `startIndex - 1`.
    pub fn offset(&self) -> u64 {
        self.start_index - 1
    }
}

fn integer(text: &str, parameter: &str) -> Result<i128, ScimError> {
    let trimmed = text.trim();
    let digits = trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(ScimError::bad_request(format!(
            "{parameter} must be an integer, not {}",
            Value::String(text.to_owned())
        )));
    }
    // Too many digits for i128 is still a number: clamp it like any large one.
    Ok(trimmed
        .parse::<i128>()
        .unwrap_or(if trimmed.starts_with('-') {
            i128::MIN
        } else {
            i128::MAX
        }))
}

/// A `ListResponse` message.
#[derive(Debug, Clone, PartialEq)]
pub struct ListResponse {
    /// How many resources match, over all pages.
    pub total_results: u64,
    /// The 1-based index of the first resource of this page.
    pub start_index: u64,
    /// The resources of this page, already rendered (and projected).
    pub resources: Vec<Value>,
}

impl ListResponse {
    /// The page `page` of `total_results` resources.
    pub fn new(page: Page, total_results: u64, resources: Vec<Value>) -> Self {
        Self {
            total_results,
            start_index: page.start_index,
            resources,
        }
    }

    /// The response body.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "schemas": [LIST_RESPONSE_SCHEMA],
            "totalResults": self.total_results,
            "startIndex": self.start_index,
            "itemsPerPage": self.resources.len(),
            "Resources": self.resources,
        })
    }
}

impl Serialize for ListResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_struct("ListResponse", 5)?;
        body.serialize_field("schemas", &[LIST_RESPONSE_SCHEMA])?;
        body.serialize_field("totalResults", &self.total_results)?;
        body.serialize_field("startIndex", &self.start_index)?;
        body.serialize_field("itemsPerPage", &self.resources.len())?;
        body.serialize_field("Resources", &self.resources)?;
        body.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_and_okta_paging() {
        assert_eq!(Page::parse(None, None).unwrap(), Page::default());
        assert_eq!(
            Page::parse(Some("1"), Some("100")).unwrap(),
            Page {
                start_index: 1,
                count: 100
            }
        );
        assert_eq!(Page::parse(Some("201"), Some("50")).unwrap().offset(), 200);
    }

    #[test]
    fn out_of_range_values_are_clamped() {
        assert_eq!(Page::parse(Some("0"), None).unwrap().start_index, 1);
        assert_eq!(Page::parse(Some("-5"), None).unwrap().start_index, 1);
        assert_eq!(Page::parse(None, Some("-1")).unwrap().count, 0);
        assert_eq!(
            Page::parse(None, Some("100000")).unwrap().count,
            MAX_PAGE_SIZE
        );
        assert_eq!(
            Page::parse(
                Some("99999999999999999999999999999999999999999999"),
                Some(" +7 ")
            )
            .unwrap(),
            Page {
                start_index: i64::MAX as u64,
                count: 7
            }
        );
        assert_eq!(
            Page::parse(None, Some("-99999999999999999999999999999999999999999999"))
                .unwrap()
                .count,
            0
        );
    }

    #[test]
    fn non_integers_are_400() {
        for (start, count, expected) in [
            (
                Some("one"),
                None,
                r#"startIndex must be an integer, not "one""#,
            ),
            (None, Some("1.5"), r#"count must be an integer, not "1.5""#),
            (None, Some(""), r#"count must be an integer, not """#),
            (None, Some("-"), r#"count must be an integer, not "-""#),
        ] {
            let error = Page::parse(start, count).unwrap_err();
            assert_eq!(error.status(), 400);
            assert_eq!(error.detail(), expected);
        }
    }

    #[test]
    fn list_response_shape() {
        let page = Page::parse(Some("3"), Some("2")).unwrap();
        let response = ListResponse::new(
            page,
            7,
            vec![json!({"id": "usr_3"}), json!({"id": "usr_4"})],
        );
        let expected = json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
            "totalResults": 7,
            "startIndex": 3,
            "itemsPerPage": 2,
            "Resources": [{"id": "usr_3"}, {"id": "usr_4"}]
        });
        assert_eq!(response.to_json(), expected);
        assert_eq!(serde_json::to_value(&response).unwrap(), expected);
        // Okta's look-up before create finds nobody.
        let empty = ListResponse::new(Page::default(), 0, Vec::new()).to_json();
        assert_eq!(empty["itemsPerPage"], json!(0));
        assert_eq!(empty["Resources"], json!([]));
    }
}
