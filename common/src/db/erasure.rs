//! Erasure of a person on request (issue 29, docs/privacy.md): their e-mail and names are
//! replaced by a pseudonym everywhere the service keeps them, in one transaction, while their
//! assignments, progress and the counts built on them stay. The places are every text and JSON
//! column that can hold an assignee's e-mail or name (found by reading every migration):
//!
//! - `users`: e-mail, names and every profile column an identity provider sent;
//! - the events of their assignments: `outbox.payload`, `webhook_deliveries.payload`, and the
//!   endpoints' answers kept in `webhook_deliveries.last_error` and `webhook_attempts`;
//! - commands kept for failed assignments (`assignment_failures.command`, and the dead-lettered
//!   messages behind them);
//! - free text callers wrote about them: assignment and schedule notes, `X-Request-ID`s;
//! - the organization's audit trail and export metadata (parameters, file names, errors);
//! - dashboard sessions (a flash message naming them).
//!
//! Text is replaced case-insensitively wherever the e-mail appears in it; JSON is replaced in its
//! text form, which keeps it valid (an e-mail holds no character JSON escapes).

use chrono::{DateTime, Utc};
use flow_domain::events::EventType;
use flow_domain::ids::{AssignmentId, EventId, OrgId, UserId};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, Row};

/// The domain of every pseudonym: reserved (RFC 2606), so no mail ever reaches it.
pub const PSEUDONYM_DOMAIN: &str = "erased.invalid";

/// The pseudonym of a user: `erased-<16 hex digits>@erased.invalid`, derived from the user's id
/// (not from anything about the person), the same each time and unique in the organization.
pub fn pseudonym(user_id: UserId) -> String {
    let digest = Sha256::digest(
        [
            b"flow.erasure\0".as_slice(),
            user_id.0.as_bytes().as_slice(),
        ]
        .concat(),
    );
    let hex: String = digest[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("erased-{hex}@{PSEUDONYM_DOMAIN}")
}

/// What an erasure changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Erased {
    /// The user's pseudonym.
    pub pseudonym: String,
    /// When the user was erased (the first erasure's time when erased before).
    pub erased_at: Option<DateTime<Utc>>,
    /// Rows rewritten outside `users`.
    pub rows: u64,
}

/// A regular expression (Postgres ARE) matching `text` literally: every character that is not a
/// letter or a digit is escaped.
fn literal_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() * 2);
    for character in text.chars() {
        if !character.is_alphanumeric() {
            pattern.push('\\');
        }
        pattern.push(character);
    }
    pattern
}

/// Erases the user `user_id` of `org_id` in `connection`'s transaction: replaces their e-mail
/// everywhere with their pseudonym and clears their names and profile, deactivates them and sets
/// `erased_at`. `None` when the organization has no such user. Erasing twice changes nothing more.
pub async fn erase_user(
    connection: &mut PgConnection,
    org_id: OrgId,
    user_id: UserId,
) -> Result<Option<Erased>, sqlx::Error> {
    let Some(row) =
        sqlx::query("SELECT email, erased_at FROM users WHERE org_id = $1 AND id = $2 FOR UPDATE")
            .bind(org_id)
            .bind(user_id)
            .fetch_optional(&mut *connection)
            .await?
    else {
        return Ok(None);
    };
    let email: String = row.try_get("email")?;
    let pseudonym = pseudonym(user_id);
    let mut erased = Erased {
        pseudonym: pseudonym.clone(),
        erased_at: row.try_get("erased_at")?,
        rows: 0,
    };
    // The addresses to replace: the one the service identifies them by and any other their
    // identity provider sent (SCIM `emails`).
    let mut addresses: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT value FROM (
             SELECT $3::text AS value
             UNION ALL
             SELECT e->>'value' FROM users u, jsonb_array_elements(
                 CASE WHEN jsonb_typeof(u.emails) = 'array' THEN u.emails ELSE '[]' END) e
             WHERE u.org_id = $1 AND u.id = $2 AND e->>'value' IS NOT NULL) v
         WHERE value <> ''",
    )
    .bind(org_id)
    .bind(user_id)
    .bind(&email)
    .fetch_all(&mut *connection)
    .await?;
    addresses.retain(|address| !address.eq_ignore_ascii_case(&pseudonym));
    let erased_at: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE users SET
             email = $3, email_normalized = $3, name = NULL, given_name = NULL,
             family_name = NULL, formatted_name = NULL, title = NULL, employee_number = NULL,
             external_id = NULL, manager_id = NULL, manager_name = NULL, start_date = NULL,
             emails = '[]'::jsonb, active = false,
             deactivated_at = COALESCE(deactivated_at, now()),
             erased_at = COALESCE(erased_at, now()), updated_at = now()
         WHERE org_id = $1 AND id = $2
         RETURNING erased_at",
    )
    .bind(org_id)
    .bind(user_id)
    .bind(&pseudonym)
    .fetch_one(&mut *connection)
    .await?;
    erased.erased_at = Some(erased_at);
    // The user's assignments and the ids of every event about them (derived, so found even
    // once the outbox rows are pruned).
    let assignments: Vec<(AssignmentId, DateTime<Utc>)> = sqlx::query_as(
        "SELECT id, assigned_at FROM assignments WHERE org_id = $1 AND user_id = $2",
    )
    .bind(org_id)
    .bind(user_id)
    .fetch_all(&mut *connection)
    .await?;
    let assignment_ids: Vec<AssignmentId> = assignments.iter().map(|(id, _)| *id).collect();
    let event_ids: Vec<EventId> = assignments
        .iter()
        .flat_map(|(id, assigned_at)| {
            EventType::ALL
                .iter()
                .map(|kind| EventId::for_transition(*id, kind.as_str(), *assigned_at))
        })
        .collect();
    for address in addresses {
        let pattern = literal_pattern(&address);
        erased.rows += replace_everywhere(
            connection,
            org_id,
            user_id,
            &assignment_ids,
            &event_ids,
            &pattern,
            &pseudonym,
        )
        .await?;
    }
    Ok(Some(erased))
}

/// Replaces `pattern` (case-insensitive) with `pseudonym` in every place outside `users` that
/// can hold it; answers the rows rewritten.
async fn replace_everywhere(
    connection: &mut PgConnection,
    org_id: OrgId,
    user_id: UserId,
    assignment_ids: &[AssignmentId],
    event_ids: &[EventId],
    pattern: &str,
    pseudonym: &str,
) -> Result<u64, sqlx::Error> {
    // Each statement: $1 organization, $2 pattern, $3 pseudonym, then its own scope.
    let text = |column: &str| format!("{column} = regexp_replace({column}, $2, $3, 'gi')");
    let json =
        |column: &str| format!("{column} = regexp_replace({column}::text, $2, $3, 'gi')::jsonb");
    let hit = |column: &str| format!("{column} ~* $2");
    let json_hit = |column: &str| format!("{column}::text ~* $2");
    let user_text = user_id.to_string();
    let statements: Vec<(String, Scope)> = vec![
        (
            format!(
                "UPDATE outbox SET {} WHERE org_id = $1 AND assignment_id = ANY($4) AND {}",
                json("payload"),
                json_hit("payload")
            ),
            Scope::Assignments,
        ),
        (
            format!(
                "UPDATE webhook_deliveries SET {}, last_error = regexp_replace(last_error, $2, $3, 'gi')
                 WHERE org_id = $1 AND event_id = ANY($4)
                   AND endpoint_id IN (SELECT id FROM webhook_endpoints WHERE org_id = $1)
                   AND ({} OR {})",
                json("payload"),
                json_hit("payload"),
                hit("last_error")
            ),
            Scope::Events,
        ),
        (
            format!(
                "UPDATE webhook_attempts t SET {}, {}
                 FROM webhook_deliveries d
                 WHERE d.id = t.delivery_id AND d.org_id = $1 AND d.event_id = ANY($4)
                   AND d.endpoint_id IN (SELECT id FROM webhook_endpoints WHERE org_id = $1)
                   AND ({} OR {})",
                text("error"),
                text("response_excerpt"),
                hit("t.error"),
                hit("t.response_excerpt")
            ),
            Scope::Events,
        ),
        (
            format!(
                "UPDATE assignments SET {}, {} WHERE org_id = $1 AND id = ANY($4) AND ({} OR {})",
                text("notes"),
                text("request_id"),
                hit("notes"),
                hit("request_id")
            ),
            Scope::Assignments,
        ),
        (
            format!(
                "UPDATE schedules SET {} WHERE org_id = $1 AND user_id = $4::uuid AND {}",
                text("notes"),
                hit("notes")
            ),
            Scope::User,
        ),
        (
            "UPDATE dead_letters d
             SET payload = convert_to(regexp_replace(convert_from(d.payload, 'UTF8'), $2, $3, 'gi'), 'UTF8')
             WHERE d.id IN (SELECT f.dead_letter_id FROM assignment_failures f
                            WHERE f.org_id = $1 AND f.command->>'userId' = $4::text)
               AND convert_from(d.payload, 'UTF8') ~* $2"
                .to_owned(),
            Scope::UserText,
        ),
        (
            format!(
                "UPDATE assignment_failures SET {}, {}
                 WHERE org_id = $1 AND command->>'userId' = $4::text AND ({} OR {})",
                json("command"),
                text("reason"),
                json_hit("command"),
                hit("reason")
            ),
            Scope::UserText,
        ),
        (
            format!(
                "UPDATE audit_events SET {}, {}, {} WHERE org_id = $1 AND ({} OR {} OR {})",
                text("target"),
                text("detail"),
                text("actor"),
                hit("target"),
                hit("detail"),
                hit("actor")
            ),
            Scope::Organization,
        ),
        (
            format!(
                "UPDATE exports SET {}, {}, {}, {}, {}
                 WHERE org_id = $1 AND ({} OR {} OR {} OR {} OR {})",
                json("parameters"),
                text("file_name"),
                text("error"),
                text("error_detail"),
                text("request_id"),
                json_hit("parameters"),
                hit("file_name"),
                hit("error"),
                hit("error_detail"),
                hit("request_id")
            ),
            Scope::Organization,
        ),
        (
            format!(
                "UPDATE dashboard_sessions SET {} WHERE $1::uuid IS NOT NULL AND {}",
                json("data"),
                json_hit("data")
            ),
            Scope::Organization,
        ),
    ];
    let mut rows = 0;
    for (statement, scope) in statements {
        let query = sqlx::query(sqlx::AssertSqlSafe(statement))
            .bind(org_id)
            .bind(pattern)
            .bind(pseudonym);
        let query = match scope {
            Scope::Assignments => query.bind(assignment_ids),
            Scope::Events => query.bind(event_ids),
            Scope::User => query.bind(user_id),
            Scope::UserText => query.bind(&user_text),
            Scope::Organization => query,
        };
        rows += query.execute(&mut *connection).await?.rows_affected();
    }
    Ok(rows)
}

/// What a statement of [`replace_everywhere`] is limited to, bound as `$4`.
enum Scope {
    /// The user's assignments.
    Assignments,
    /// The events about them.
    Events,
    /// The user, by id.
    User,
    /// The user, by id as text (`usr_…`), as commands name them.
    UserText,
    /// The whole organization (its audit trail, its exports).
    Organization,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudonyms_are_stable_and_reserved() {
        let user = UserId::new();
        assert_eq!(pseudonym(user), pseudonym(user));
        assert_ne!(pseudonym(user), pseudonym(UserId::new()));
        assert!(pseudonym(user).ends_with("@erased.invalid"));
        assert_eq!(literal_pattern("a.b+c@x.io"), "a\\.b\\+c\\@x\\.io");
    }
}
