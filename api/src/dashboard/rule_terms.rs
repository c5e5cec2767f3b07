//! The rule form's condition pickers: a condition built from rows of (term, value), combined
//! with "all" or "any", and the rows read back from a stored condition when it has that shape.
//! Conditions the rows cannot show (nesting, more rows than the form has) stay JSON.

use serde_json::{Value, json};

/// Rows the form offers.
pub const ROWS: usize = 5;

/// What a row can say: `(form value, label, the term's key, negated, takes a value)`.
const KINDS: [(&str, &str, &str, bool, bool); 8] = [
    (
        "department_is",
        "Department is",
        "departmentEquals",
        false,
        true,
    ),
    (
        "department_is_not",
        "Department is not",
        "departmentEquals",
        true,
        true,
    ),
    (
        "title_contains",
        "Title contains",
        "titleContains",
        false,
        true,
    ),
    (
        "title_lacks",
        "Title does not contain",
        "titleContains",
        true,
        true,
    ),
    ("member_of", "Member of group", "memberOf", false, true),
    (
        "not_member_of",
        "Not member of group",
        "memberOf",
        true,
        true,
    ),
    (
        "has_start_date",
        "Has a start date",
        "startDatePresent",
        false,
        false,
    ),
    (
        "has_no_start_date",
        "Has no start date",
        "startDatePresent",
        true,
        false,
    ),
];

/// A choice of the term select.
pub struct KindChoice {
    pub value: &'static str,
    pub label: &'static str,
    pub selected: bool,
}

/// One row of the form, as shown.
pub struct TermRow {
    pub kinds: Vec<KindChoice>,
    pub value: String,
}

/// `ROWS` rows showing `terms` (kind, value), the rest blank.
pub fn rows(terms: &[(String, String)]) -> Vec<TermRow> {
    (0..ROWS)
        .map(|index| {
            let (kind, value) = terms
                .get(index)
                .map_or(("", ""), |(kind, value)| (kind.as_str(), value.as_str()));
            TermRow {
                kinds: KINDS
                    .iter()
                    .map(|&(choice, label, ..)| KindChoice {
                        value: choice,
                        label,
                        selected: choice == kind,
                    })
                    .collect(),
                value: value.to_owned(),
            }
        })
        .collect()
}

/// The condition the rows say: one term as it is, several under `combine` (`all` or `any`).
/// Blank rows are skipped; a row missing its value is refused, naming it.
pub fn build(combine: &str, kinds: &[String], values: &[String]) -> Result<Value, String> {
    let mut terms = Vec::new();
    for (index, kind) in kinds.iter().enumerate() {
        let value = values.get(index).map_or("", |value| value.trim());
        if kind.is_empty() {
            if value.is_empty() {
                continue;
            }
            return Err(format!(
                "Condition row {}: choose what to match.",
                index + 1
            ));
        }
        let Some(&(_, label, key, negated, takes_value)) =
            KINDS.iter().find(|(choice, ..)| choice == kind)
        else {
            return Err(format!("Condition row {}: unknown choice.", index + 1));
        };
        let term = if takes_value {
            if value.is_empty() {
                return Err(format!(
                    "Condition row {} ({label}) needs a value.",
                    index + 1
                ));
            }
            json!({ key: value })
        } else {
            json!({ key: !negated })
        };
        terms.push(if negated && takes_value {
            json!({ "not": term })
        } else {
            term
        });
    }
    let combine = if combine == "any" { "any" } else { "all" };
    match terms.len() {
        0 => Err("Add at least one condition: choose what to match in a row.".to_owned()),
        1 => Ok(terms.remove(0)),
        _ => Ok(json!({ combine: terms })),
    }
}

/// The row (kind, value) of one term, when the rows can show it.
fn row_of(term: &Value) -> Option<(String, String)> {
    let (negated, inner) = match term.get("not") {
        Some(inner) if term.as_object()?.len() == 1 => (true, inner),
        _ => (false, term),
    };
    let object = inner.as_object()?;
    if object.len() != 1 {
        return None;
    }
    let (key, value) = object.iter().next()?;
    if key == "startDatePresent" {
        let present = value.as_bool()? != negated;
        let kind = if present {
            "has_start_date"
        } else {
            "has_no_start_date"
        };
        return Some((kind.to_owned(), String::new()));
    }
    let text = value.as_str()?;
    KINDS
        .iter()
        .find(|&&(_, _, term_key, term_negated, takes_value)| {
            takes_value && term_key == key && term_negated == negated
        })
        .map(|&(kind, ..)| (kind.to_owned(), text.to_owned()))
}

/// The combination (`all` or `any`) and rows of a stored condition, when the rows can show it:
/// one term (or its `not`), or `all`/`any` of at most [`ROWS`] such terms.
pub fn read(condition: &Value) -> Option<(String, Vec<(String, String)>)> {
    for combine in ["all", "any"] {
        if let Some(list) = condition.get(combine).and_then(Value::as_array) {
            if condition.as_object()?.len() != 1 || list.is_empty() || list.len() > ROWS {
                return None;
            }
            let rows = list.iter().map(row_of).collect::<Option<Vec<_>>>()?;
            return Some((combine.to_owned(), rows));
        }
    }
    row_of(condition).map(|row| ("all".to_owned(), vec![row]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn rows_build_the_condition_and_read_back() {
        let built = build(
            "any",
            &strings(&["department_is", "", "title_lacks", "has_no_start_date"]),
            &strings(&[" Sales ", "", "Intern", "ignored"]),
        )
        .unwrap();
        assert_eq!(
            built,
            json!({"any": [
                {"departmentEquals": "Sales"},
                {"not": {"titleContains": "Intern"}},
                {"startDatePresent": false},
            ]})
        );
        assert_eq!(
            read(&built),
            Some((
                "any".to_owned(),
                vec![
                    ("department_is".to_owned(), "Sales".to_owned()),
                    ("title_lacks".to_owned(), "Intern".to_owned()),
                    ("has_no_start_date".to_owned(), String::new()),
                ]
            ))
        );
        let one = build("all", &strings(&["member_of"]), &strings(&["EMEA"])).unwrap();
        assert_eq!(one, json!({"memberOf": "EMEA"}));
        assert_eq!(
            read(&one),
            Some((
                "all".to_owned(),
                vec![("member_of".to_owned(), "EMEA".to_owned())]
            ))
        );
        assert_eq!(
            read(&json!({"not": {"startDatePresent": true}})),
            Some((
                "all".to_owned(),
                vec![("has_no_start_date".to_owned(), String::new())]
            ))
        );
    }

    #[test]
    fn rows_refuse_what_is_missing_and_leave_nesting_to_json() {
        assert_eq!(
            build("all", &strings(&["department_is"]), &strings(&[" "])),
            Err("Condition row 1 (Department is) needs a value.".to_owned())
        );
        assert_eq!(
            build("all", &strings(&["", ""]), &strings(&["", "Sales"])),
            Err("Condition row 2: choose what to match.".to_owned())
        );
        assert!(build("all", &strings(&["", ""]), &strings(&["", ""])).is_err());
        assert!(build("all", &strings(&["bogus"]), &strings(&["x"])).is_err());
        assert_eq!(
            read(&json!({"all": [{"any": [{"memberOf": "A"}]}]})),
            None,
            "nesting stays JSON"
        );
        assert_eq!(read(&json!({"all": []})), None);
        let six: Vec<Value> = (0..6).map(|_| json!({"memberOf": "A"})).collect();
        assert_eq!(
            read(&json!({ "all": six })),
            None,
            "more rows than the form"
        );
        assert_eq!(read(&json!({"not": {"not": {"memberOf": "A"}}})), None);
    }
}
