//! How an erasure rewrites what it finds, without a database: the person's exact addresses are
//! replaced where they stand as whole e-mail addresses (never inside a longer one), in text and in
//! JSON string values (never in keys or the document's text); in rows that are the person's own,
//! the fields known to name the assignee (`assigneeEmail`) become the pseudonym whatever they
//! hold; and a dead-lettered message is rewritten only in the parts about the person.

use std::collections::HashSet;

use flow_domain::ids::{AssignmentId, OrgId, UserId};
use serde_json::Value;

/// The JSON field naming the assignee in events and commands.
const ASSIGNEE_FIELD: &str = "assigneeEmail";

/// Replaces a person's addresses with their pseudonym.
#[derive(Debug, Clone)]
pub struct Rewriter {
    /// The addresses, lower-cased, longest first (so a longer address wins where two overlap).
    addresses: Vec<String>,
    pseudonym: String,
}

impl Rewriter {
    /// A rewriter of `addresses` (compared case-insensitively) into `pseudonym`.
    pub fn new(addresses: &[String], pseudonym: &str) -> Self {
        let mut addresses: Vec<String> = addresses
            .iter()
            .map(|address| address.to_lowercase())
            .filter(|address| !address.is_empty())
            .collect();
        addresses.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        addresses.dedup();
        Self {
            addresses,
            pseudonym: pseudonym.to_owned(),
        }
    }

    /// The addresses, lower-cased, and their JSON-escaped forms: what a row's text must contain
    /// (case-insensitively) for the rewriter to change it.
    pub fn needles(&self) -> Vec<String> {
        let mut needles = self.addresses.clone();
        for address in &self.addresses {
            let escaped = serde_json::to_string(address).unwrap_or_default();
            let escaped = escaped.trim_matches('"');
            if escaped != address {
                needles.push(escaped.to_owned());
            }
        }
        needles
    }

    /// `text` with every whole occurrence of an address replaced; `None` when there is none.
    pub fn text(&self, text: &str) -> Option<String> {
        if self.addresses.is_empty() {
            return None;
        }
        let mut out = String::new();
        let mut copied = 0;
        let mut position = 0;
        let mut previous: Option<char> = None;
        while position < text.len() {
            let rest = &text[position..];
            let starts_token = !previous.is_some_and(continues_before);
            let matched = starts_token
                .then(|| {
                    self.addresses.iter().find_map(|address| {
                        let end = position + matched_len(rest, address)?;
                        (!continues_after(&text[end..])).then_some(end)
                    })
                })
                .flatten();
            if let Some(end) = matched {
                out.push_str(&text[copied..position]);
                out.push_str(&self.pseudonym);
                copied = end;
                previous = text[..end].chars().next_back();
                position = end;
            } else {
                let character = rest.chars().next().unwrap_or_default();
                previous = Some(character);
                position += character.len_utf8().max(1);
            }
        }
        if copied == 0 && out.is_empty() {
            return None;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }

    /// Rewrites the string values of `value` (never its keys); when `own` (the row is the
    /// person's own: an event or command about them), also sets every `assigneeEmail` to the
    /// pseudonym. Whether anything changed.
    pub fn json(&self, value: &mut Value, own: bool) -> bool {
        match value {
            Value::String(text) => match self.text(text) {
                Some(new) => {
                    *text = new;
                    true
                }
                None => false,
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.json(item, own) | changed),
            Value::Object(fields) => {
                let mut changed = false;
                for (key, item) in fields.iter_mut() {
                    if own && key == ASSIGNEE_FIELD && item.is_string() {
                        if item.as_str() != Some(self.pseudonym.as_str()) {
                            *item = Value::String(self.pseudonym.clone());
                            changed = true;
                        }
                    } else {
                        changed |= self.json(item, own);
                    }
                }
                changed
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    /// Rewrites the parts of a dead-lettered message (`value`, its JSON body) that are about
    /// `person` (see [`Person::owns`]); the rest — other people's commands and other
    /// organizations' events in the same batch — stays as it is. Whether anything changed.
    pub fn dead_letter(&self, value: &mut Value, person: &Person) -> bool {
        match value {
            Value::Object(fields) if person.owns(fields) => self.json(value, true),
            Value::Object(fields) => fields.values_mut().fold(false, |changed, item| {
                self.dead_letter(item, person) | changed
            }),
            Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
                self.dead_letter(item, person) | changed
            }),
            _ => false,
        }
    }
}

/// The erased person as messages name them: by organization and user id (assign commands), or
/// by one of their assignments (events, progress commands).
#[derive(Debug, Clone)]
pub struct Person {
    org: String,
    user: String,
    assignments: HashSet<String>,
}

impl Person {
    /// The user `user` of `org`, with their assignments.
    pub fn new(org: OrgId, user: UserId, assignments: &[AssignmentId]) -> Self {
        Self {
            org: org.to_string(),
            user: user.to_string(),
            assignments: assignments.iter().map(ToString::to_string).collect(),
        }
    }

    /// The texts that a message about the person contains (their user id, their assignments'
    /// ids), to find candidates among stored messages.
    pub fn ids(&self) -> Vec<String> {
        std::iter::once(self.user.clone())
            .chain(self.assignments.iter().cloned())
            .collect()
    }

    /// Whether a JSON object is about the person: a command naming the organization and the
    /// user, or anything naming one of their assignments (and, if it names an organization,
    /// theirs). Assignment ids are unique across organizations.
    fn owns(&self, fields: &serde_json::Map<String, Value>) -> bool {
        let text = |key: &str| fields.get(key).and_then(Value::as_str);
        let org = text("orgId");
        (org == Some(self.org.as_str()) && text("userId") == Some(self.user.as_str()))
            || (org.is_none_or(|org| org == self.org)
                && text("assignmentId").is_some_and(|id| self.assignments.contains(id)))
    }
}

/// How many bytes of `text`'s start spell `address` (lower-cased), case-insensitively.
fn matched_len(text: &str, address: &str) -> Option<usize> {
    let mut characters = text.chars();
    let mut length = 0;
    for expected in address.chars() {
        let character = characters.next()?;
        if !character.to_lowercase().eq(expected.to_lowercase()) {
            return None;
        }
        length += character.len_utf8();
    }
    Some(length)
}

/// Whether `character` before a match would make it part of a longer address (any character
/// of an address's local part, RFC 5322 `atext` and the dot, or an `@`).
fn continues_before(character: char) -> bool {
    character.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.@".contains(character)
}

/// Whether what follows a match (`rest`) makes it part of a longer address: more of a domain
/// (a letter, digit, hyphen, or a dot followed by one), or an `@`. A sentence's full stop ends it.
fn continues_after(rest: &str) -> bool {
    let mut characters = rest.chars();
    match characters.next() {
        Some(character) if character.is_alphanumeric() || "-_@".contains(character) => true,
        Some('.') => characters
            .next()
            .is_some_and(|next| next.is_alphanumeric() || next == '-'),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PSEUDONYM: &str = "erased-0@erased.invalid";

    fn rewriter(addresses: &[&str]) -> Rewriter {
        let addresses: Vec<String> = addresses.iter().map(|a| (*a).to_owned()).collect();
        Rewriter::new(&addresses, PSEUDONYM)
    }

    #[test]
    fn whole_addresses_are_replaced_whatever_their_case() {
        let rewriter = rewriter(&["Harriet.Vane+hr@Example.com"]);
        assert_eq!(
            rewriter.text("For harriet.vane+HR@example.COM, then <Harriet.Vane+hr@example.com>."),
            Some(format!("For {PSEUDONYM}, then <{PSEUDONYM}>."))
        );
        assert_eq!(
            rewriter.text("\"assigneeEmail\":\"harriet.vane+hr@example.com\""),
            Some(format!("\"assigneeEmail\":\"{PSEUDONYM}\""))
        );
        assert_eq!(rewriter.text("nothing here"), None);
    }

    #[test]
    fn an_address_inside_a_longer_one_is_not_replaced() {
        let rewriter = rewriter(&["al@example.com"]);
        for text in [
            "val@example.com",
            "x.al@example.com",
            "al@example.com.au",
            "al@example.community",
            "al@example.com-x.org",
            "bob+al@example.com",
        ] {
            assert_eq!(rewriter.text(text), None, "{text}");
        }
        assert_eq!(
            rewriter.text("al@example.com, val@example.com; (al@example.com)"),
            Some(format!("{PSEUDONYM}, val@example.com; ({PSEUDONYM})"))
        );
    }

    #[test]
    fn json_is_rewritten_by_value_never_in_keys() {
        let rewriter = rewriter(&["account@example.com"]);
        let mut session = json!({
            "account": "acc_1",
            "flash": {"kind": "success", "text": "Assigned to account@example.com."},
            "account@example.com": 1
        });
        assert!(rewriter.json(&mut session, false));
        assert_eq!(
            session,
            json!({
                "account": "acc_1",
                "flash": {"kind": "success", "text": format!("Assigned to {PSEUDONYM}.")},
                "account@example.com": 1
            })
        );
        // The person's own event: the assignee field whatever it holds (an earlier address).
        let mut event = json!({"data": {"assigneeEmail": "old@example.com", "flowName": "x"}});
        assert!(!rewriter.json(&mut event.clone(), false));
        assert!(rewriter.json(&mut event, true));
        assert_eq!(event["data"]["assigneeEmail"], PSEUDONYM);
        assert!(!rewriter.json(&mut event, true), "twice changes nothing");
    }

    #[test]
    fn a_dead_letter_is_rewritten_only_where_it_is_about_the_person() {
        let (org, other_org, user) = (OrgId::new(), OrgId::new(), UserId::new());
        let assignment = AssignmentId::new();
        let person = Person::new(org, user, &[assignment]);
        let rewriter = rewriter(&["carol@example.com"]);
        let mut batch = json!({"version": 1, "commands": [
            {"orgId": org, "userId": user, "assigneeEmail": "carol@example.com",
             "notes": "for carol@example.com"},
            {"orgId": org, "userId": UserId::new(), "assigneeEmail": "dave@example.com",
             "notes": "cc carol@example.com"},
            {"orgId": other_org, "userId": user, "assigneeEmail": "carol@example.com"},
        ]});
        assert!(rewriter.dead_letter(&mut batch, &person));
        assert_eq!(batch["commands"][0]["assigneeEmail"], PSEUDONYM);
        assert_eq!(batch["commands"][0]["notes"], format!("for {PSEUDONYM}"));
        assert_eq!(batch["commands"][1]["notes"], "cc carol@example.com");
        assert_eq!(batch["commands"][2]["assigneeEmail"], "carol@example.com");
        let mut events = json!({"version": 1, "events": [
            {"orgId": org, "event": {"id": "evt", "data": {"assignmentId": assignment,
                                                          "assigneeEmail": "carol@example.com"}}},
            {"orgId": other_org, "event": {"id": "evt", "data": {"assignmentId": AssignmentId::new(),
                                                               "assigneeEmail": "carol@example.com"}}},
        ]});
        assert!(rewriter.dead_letter(&mut events, &person));
        assert_eq!(
            events["events"][0]["event"]["data"]["assigneeEmail"],
            PSEUDONYM
        );
        assert_eq!(
            events["events"][1]["event"]["data"]["assigneeEmail"],
            "carol@example.com"
        );
    }
}
