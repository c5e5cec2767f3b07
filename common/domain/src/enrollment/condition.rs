//! The condition language of enrollment rules: terms on a user's attributes and groups, combined
//! with `all`, `any` and `not` (docs/enrollment-rules.md). Read from JSON with the path of each
//! term, so a refusal names the field as the caller wrote it (`condition.all[1].titleContains`).

use serde_json::{Map, Value, json};

use super::Profile;
use crate::{Invalid, TextRule};

/// Deepest nesting of `all`, `any` and `not` (a term alone is depth 1).
pub const MAX_DEPTH: usize = 5;

/// Most terms and combinators in one condition.
pub const MAX_TERMS: usize = 50;

/// Longest text of a term (a department, a title fragment, a group), in characters.
pub const MAX_TERM_CHARS: usize = 200;

/// A checked condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Every one holds.
    All(Vec<Condition>),
    /// At least one holds.
    Any(Vec<Condition>),
    /// It does not hold.
    Not(Box<Condition>),
    /// The department equals the text (case-insensitive, trimmed).
    DepartmentEquals(Text),
    /// The title contains the text (case-insensitive).
    TitleContains(Text),
    /// The user is a member of the group, named by its id or its display name.
    MemberOf(Group),
    /// The user has a start date (`true`) or has none (`false`).
    StartDatePresent(bool),
}

/// A term's text as written, and the lowercase form it is compared by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    written: String,
    lowercase: String,
}

impl Text {
    fn new(written: String) -> Self {
        let lowercase = written.to_lowercase();
        Self { written, lowercase }
    }
}

/// A group of a `memberOf` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    /// By id: a UUID, or a prefixed id such as `grp_0193…`.
    Id(uuid::Uuid, String),
    /// By display name (case-insensitive).
    Name(Text),
}

impl Group {
    fn parse(text: String) -> Self {
        let bare = text
            .split_once('_')
            .filter(|(prefix, rest)| {
                !prefix.is_empty()
                    && prefix.chars().all(|c| c.is_ascii_lowercase())
                    && rest.len() == 32
            })
            .map_or(text.as_str(), |(_, rest)| rest);
        match uuid::Uuid::try_parse(bare) {
            Ok(id) => Self::Id(id, text),
            Err(_) => Self::Name(Text::new(text)),
        }
    }
}

/// The names of the terms, for messages.
const TERMS: &str = "all, any, not, departmentEquals, titleContains, memberOf, startDatePresent";

impl Condition {
    /// Checks `value` as the condition in field `field` (`condition`).
    pub fn parse(field: &str, value: &Value) -> Result<Self, Invalid> {
        let mut terms = 0;
        Self::parse_at(field, value, 1, &mut terms)
    }

    fn parse_at(
        path: &str,
        value: &Value,
        depth: usize,
        terms: &mut usize,
    ) -> Result<Self, Invalid> {
        if depth > MAX_DEPTH {
            return Err(Invalid(format!(
                "{path} is nested too deep: conditions nest at most {MAX_DEPTH} levels"
            )));
        }
        *terms += 1;
        if *terms > MAX_TERMS {
            return Err(Invalid(format!(
                "{path}: a condition has at most {MAX_TERMS} terms"
            )));
        }
        let object = value
            .as_object()
            .filter(|object| object.len() == 1)
            .ok_or_else(|| {
                Invalid(format!(
                    "{path} must be an object with exactly one of: {TERMS}"
                ))
            })?;
        let (name, inner) = object.iter().next().expect("one entry");
        let inner_path = format!("{path}.{name}");
        match name.as_str() {
            "all" | "any" => {
                let items = inner
                    .as_array()
                    .filter(|items| !items.is_empty())
                    .ok_or_else(|| {
                        Invalid(format!(
                            "{inner_path} must be a non-empty list of conditions"
                        ))
                    })?;
                let parsed = items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| {
                        Self::parse_at(&format!("{inner_path}[{index}]"), item, depth + 1, terms)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(if name == "all" {
                    Self::All(parsed)
                } else {
                    Self::Any(parsed)
                })
            }
            "not" => Ok(Self::Not(Box::new(Self::parse_at(
                &inner_path,
                inner,
                depth + 1,
                terms,
            )?))),
            "departmentEquals" => Ok(Self::DepartmentEquals(Text::new(text(&inner_path, inner)?))),
            "titleContains" => Ok(Self::TitleContains(Text::new(text(&inner_path, inner)?))),
            "memberOf" => Ok(Self::MemberOf(Group::parse(text(&inner_path, inner)?))),
            "startDatePresent" => inner
                .as_bool()
                .map(Self::StartDatePresent)
                .ok_or_else(|| Invalid(format!("{inner_path} must be true or false"))),
            other => Err(Invalid(format!(
                "{path}.{other} is not a known term; use one of: {TERMS}"
            ))),
        }
    }

    /// Whether the condition holds for `profile`.
    pub fn matches(&self, profile: &Profile) -> bool {
        match self {
            Self::All(items) => items.iter().all(|item| item.matches(profile)),
            Self::Any(items) => items.iter().any(|item| item.matches(profile)),
            Self::Not(item) => !item.matches(profile),
            Self::DepartmentEquals(text) => profile
                .department
                .as_deref()
                .is_some_and(|department| department.trim().to_lowercase() == text.lowercase),
            Self::TitleContains(text) => profile
                .title
                .as_deref()
                .is_some_and(|title| title.to_lowercase().contains(&text.lowercase)),
            Self::MemberOf(Group::Id(id, _)) => profile.group_ids.contains(id),
            Self::MemberOf(Group::Name(name)) => profile
                .group_names
                .iter()
                .any(|group| group.trim() == name.lowercase),
            Self::StartDatePresent(present) => profile.start_date.is_some() == *present,
        }
    }

    /// The condition as JSON, as it is stored and shown (the texts as written).
    pub fn to_json(&self) -> Value {
        let (name, value) = match self {
            Self::All(items) => ("all", Value::from_iter(items.iter().map(Self::to_json))),
            Self::Any(items) => ("any", Value::from_iter(items.iter().map(Self::to_json))),
            Self::Not(item) => ("not", item.to_json()),
            Self::DepartmentEquals(text) => ("departmentEquals", json!(text.written)),
            Self::TitleContains(text) => ("titleContains", json!(text.written)),
            Self::MemberOf(Group::Id(_, written)) => ("memberOf", json!(written)),
            Self::MemberOf(Group::Name(text)) => ("memberOf", json!(text.written)),
            Self::StartDatePresent(present) => ("startDatePresent", json!(present)),
        };
        Value::Object(Map::from_iter([(name.to_owned(), value)]))
    }
}

/// A term's text: a non-empty string of one line, at most [`MAX_TERM_CHARS`] characters.
fn text(path: &str, value: &Value) -> Result<String, Invalid> {
    let text = value
        .as_str()
        .ok_or_else(|| Invalid(format!("{path} must be a string")))?;
    let rule = TextRule {
        max_chars: MAX_TERM_CHARS,
        multiline: false,
    };
    let text = rule.parse(path, text)?;
    if text.is_empty() {
        return Err(Invalid(format!("{path} must not be empty")));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile {
            id: crate::ids::UserId::new(),
            email: "a@example.com".into(),
            name: None,
            active: true,
            department: Some(" Sales ".into()),
            title: Some("Senior Account Executive".into()),
            start_date: None,
            group_ids: vec![uuid::Uuid::nil()],
            group_names: vec!["emea".into()],
        }
    }

    #[test]
    fn terms_match_case_insensitively_and_combine() {
        let condition = Condition::parse(
            "condition",
            &json!({"all": [
                {"departmentEquals": "sales"},
                {"titleContains": "EXECUTIVE"},
                {"any": [{"memberOf": "EMEA"}, {"memberOf": "Americas"}]},
                {"not": {"startDatePresent": true}},
            ]}),
        )
        .expect("valid");
        assert!(condition.matches(&profile()));
        let group_by_id = Condition::parse(
            "condition",
            &json!({"memberOf": "grp_00000000000000000000000000000000"}),
        )
        .expect("valid");
        assert!(group_by_id.matches(&profile()));
        let other =
            Condition::parse("condition", &json!({"departmentEquals": "Support"})).expect("valid");
        assert!(!other.matches(&profile()));
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (
                json!({"all": []}),
                "condition.all must be a non-empty list of conditions",
            ),
            (
                json!({"all": [{"titleContains": 3}]}),
                "condition.all[0].titleContains must be a string",
            ),
            (
                json!({"any": [{"department": "x"}]}),
                "condition.any[0].department is not a known term",
            ),
            (
                json!({"departmentEquals": "x", "titleContains": "y"}),
                "condition must be an object with exactly one of",
            ),
        ];
        for (value, message) in cases {
            let error = Condition::parse("condition", &value).expect_err("invalid");
            assert!(error.0.starts_with(message), "{} for {value}", error.0);
        }
        let deep = json!({"not": {"not": {"not": {"not": {"not": {"startDatePresent": true}}}}}});
        let error = Condition::parse("condition", &deep).expect_err("too deep");
        assert!(error.0.contains("nested too deep"), "{}", error.0);
        let many: Vec<Value> = (0..60).map(|_| json!({"startDatePresent": true})).collect();
        let error = Condition::parse("condition", &json!({"any": many})).expect_err("too many");
        assert!(error.0.contains("at most 50 terms"), "{}", error.0);
        let long = "x".repeat(201);
        let error =
            Condition::parse("condition", &json!({"titleContains": long})).expect_err("long");
        assert_eq!(
            error.0,
            "condition.titleContains must be at most 200 characters"
        );
    }

    #[test]
    fn stored_form_reads_back_the_same() {
        let value = json!({"any": [{"memberOf": "EMEA"}, {"not": {"titleContains": "Intern"}}]});
        let condition = Condition::parse("condition", &value).expect("valid");
        assert_eq!(condition.to_json(), value);
        assert_eq!(
            Condition::parse("condition", &condition.to_json()),
            Ok(condition)
        );
    }
}
