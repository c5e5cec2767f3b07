//! Erasure of a person on request (issue 29, docs/privacy.md): their e-mail and names are
//! replaced by a pseudonym everywhere the service keeps them, in one transaction, while their
//! assignments, progress and the counts built on them stay. Only the organization's rows are
//! read or written, and only exact values that name the person are replaced: the addresses
//! they are known by (see [`addresses`]) where they stand as whole addresses, and, in rows about
//! them, the fields that name the assignee. The places (found by reading every migration):
//!
//! - `users`: e-mail, names and every profile column an identity provider sent; the user is
//!   deactivated, leaves their groups and is gone for SCIM from then on, as after a SCIM DELETE;
//! - the events of their assignments: `outbox.payload`, `webhook_deliveries.payload`, and the
//!   endpoints' answers kept in `webhook_deliveries.last_error` and `webhook_attempts`;
//! - commands kept for failed assignments (`assignment_failures.command`), an event's assign
//!   command until it is queued (`inbound_event_actions.command`), and every dead-lettered
//!   message about them (commands and events, by user id or assignment id);
//! - xAPI statements their content sent (`xapi_statements.statement`: `mbox`, `account.name`);
//! - free text callers wrote about them: assignment and schedule notes, `X-Request-ID`s;
//! - the organization's audit trail (`target` and `detail`, never `actor`: who did something
//!   stays) and export metadata (parameters, file names, errors);
//! - the sessions of the organization's dashboard accounts (a flash message naming them).
//!
//! JSON is rewritten by value, never as text: string values are rewritten, keys never are.

mod rewrite;

use rewrite::{Person, Rewriter};

use chrono::{DateTime, Utc};
use flow_domain::Email;
use flow_domain::events::{EventType, Transition};
use flow_domain::ids::{AssignmentId, EventId, OrgId, UserId};
use flow_domain::reminders::ReminderKind;
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
    /// Rows rewritten outside `users`, all of the organization (a dead-lettered batch counts
    /// once when its part about the person changed).
    pub rows: u64,
}

/// Erases the user `user_id` of `org_id` in `connection`'s transaction: replaces their e-mail
/// everywhere with their pseudonym and clears their names and profile, deactivates them, takes
/// them out of their groups, marks them deleted for SCIM and sets `erased_at`. `None` when the
/// organization has no such user. Erasing twice changes nothing more (but rewrites what events
/// in flight wrote since, about them).
pub async fn erase_user(
    connection: &mut PgConnection,
    org_id: OrgId,
    user_id: UserId,
) -> Result<Option<Erased>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "SELECT email, emails, erased_at FROM users WHERE org_id = $1 AND id = $2 FOR UPDATE",
    )
    .bind(org_id)
    .bind(user_id)
    .fetch_optional(&mut *connection)
    .await?
    else {
        return Ok(None);
    };
    let email: String = row.try_get("email")?;
    let emails: serde_json::Value = row.try_get("emails")?;
    let pseudonym = pseudonym(user_id);
    let mut erased = Erased {
        pseudonym: pseudonym.clone(),
        erased_at: row.try_get("erased_at")?,
        rows: 0,
    };
    let addresses = addresses(connection, org_id, user_id, &email, &emails, &pseudonym).await?;
    let erased_at: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE users SET
             email = $3, email_normalized = $3, name = NULL, given_name = NULL,
             family_name = NULL, formatted_name = NULL, title = NULL, employee_number = NULL,
             external_id = NULL, manager_id = NULL, manager_name = NULL, start_date = NULL,
             emails = '[]'::jsonb, scim_user_name = NULL, active = false,
             deactivated_at = COALESCE(deactivated_at, now()),
             scim_deleted_at = COALESCE(scim_deleted_at, now()),
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
    // Gone for SCIM as after a DELETE: a group read no longer lists them.
    super::groups::leave_all(&mut *connection, org_id, user_id).await?;
    // The user's assignments and the ids of every event about them (derived, so found even
    // once the outbox rows are pruned).
    // With the transitions that may recur: an overdue per changed due date, an update per change.
    let assignments: Vec<(AssignmentId, DateTime<Utc>, i32, Vec<uuid::Uuid>)> = sqlx::query_as(
        "SELECT a.id, a.assigned_at, a.due_changes,
                ARRAY(SELECT c.id FROM assignment_changes c
                      WHERE c.assignment_id = a.id AND c.kind = 'update') AS changes
         FROM assignments a WHERE a.org_id = $1 AND a.user_id = $2",
    )
    .bind(org_id)
    .bind(user_id)
    .fetch_all(&mut *connection)
    .await?;
    let assignment_ids: Vec<AssignmentId> = assignments.iter().map(|(id, ..)| *id).collect();
    let event_ids: Vec<EventId> = assignments
        .iter()
        .flat_map(|(id, assigned_at, due_changes, changes)| {
            EventType::ALL
                .iter()
                .map(|kind| Transition::Once(*kind))
                .chain(
                    (1..=*due_changes).map(|due_changes| Transition::OverdueAgain { due_changes }),
                )
                .chain(changes.iter().map(|change| Transition::Change(*change)))
                .map(|transition| EventId::for_transition(*id, &transition.key(), *assigned_at))
                .collect::<Vec<_>>()
        })
        .collect();
    // And the reminders sent about them.
    let reminders: Vec<SentReminder> = sqlx::query_as(
        "SELECT r.assignment_id, a.assigned_at, r.kind, r.offset_days, r.due_at
             FROM assignment_reminders r JOIN assignments a ON a.id = r.assignment_id
             WHERE r.assignment_id = ANY($1)",
    )
    .bind(&assignment_ids)
    .fetch_all(&mut *connection)
    .await?;
    let mut event_ids = event_ids;
    event_ids.extend(
        reminders
            .iter()
            .map(|(id, assigned_at, kind, offset_days, due_at)| {
                let transition = Transition::Reminder {
                    kind: *kind,
                    offset_days: *offset_days,
                    due_micros: due_at.timestamp_micros(),
                };
                EventId::for_transition(*id, &transition.key(), *assigned_at)
            }),
    );
    let rewriter = Rewriter::new(&addresses, &pseudonym);
    let scope = Scope {
        org_id,
        user_id,
        assignment_ids: &assignment_ids,
        event_ids: &event_ids,
    };
    for place in PLACES {
        erased.rows += rewrite_place(connection, place, &scope, &rewriter).await?;
    }
    erased.rows += rename_statement_actors(connection, org_id, &pseudonym).await?;
    let person = Person::new(org_id, user_id, &assignment_ids);
    erased.rows += rewrite_dead_letters(connection, &person, &rewriter).await?;
    Ok(Some(erased))
}

/// A reminder sent about an assignment: the assignment, when it was made, the reminder's kind
/// and offset, and the due date it was about (what its event id is derived from).
type SentReminder = (
    AssignmentId,
    DateTime<Utc>,
    ReminderKind,
    i32,
    DateTime<Utc>,
);

/// The addresses that name the person, to replace: the one the service identifies them by,
/// and each other one their identity provider sent (SCIM `emails`) that is an e-mail address
/// and not another user's or a dashboard account's of the organization (a provider may send
/// anything there; such a value names no one, or someone else). The pseudonym is left out.
async fn addresses(
    connection: &mut PgConnection,
    org_id: OrgId,
    user_id: UserId,
    email: &str,
    emails: &serde_json::Value,
    pseudonym: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let primary = Email::parse("email", email).ok();
    let mut others: Vec<String> = emails
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("value")?.as_str())
        .filter_map(|value| Email::parse("emails", value).ok())
        .map(|address| address.normalized())
        .filter(|address| {
            primary
                .as_ref()
                .is_none_or(|primary| *address != primary.normalized())
        })
        .collect();
    others.sort();
    others.dedup();
    let taken: Vec<String> = if others.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar(
            "SELECT email_normalized FROM users
             WHERE org_id = $1 AND id <> $2 AND email_normalized = ANY($3)
             UNION
             SELECT email_normalized FROM dashboard_accounts
             WHERE org_id = $1 AND email_normalized = ANY($3)",
        )
        .bind(org_id)
        .bind(user_id)
        .bind(&others)
        .fetch_all(&mut *connection)
        .await?
    };
    Ok(primary
        .map(|primary| primary.normalized())
        .into_iter()
        .chain(
            others
                .into_iter()
                .filter(|address| !taken.contains(address)),
        )
        .filter(|address| !address.eq_ignore_ascii_case(pseudonym))
        .collect())
}

/// Who an erasure is about, bound in every statement of a [`Place`]: `$1` the organization,
/// `$2` the user, `$3` the user's id as text (`usr_…`, as commands name them), `$4` their
/// assignments, `$5` the events about them, `$6` what a row must contain to name them
/// ([`Rewriter::needles`]).
struct Scope<'a> {
    org_id: OrgId,
    user_id: UserId,
    assignment_ids: &'a [AssignmentId],
    event_ids: &'a [EventId],
}

/// A table an erasure rewrites: the rows of the person or the organization (`rows`, over the
/// binds of [`Scope`]), and its text and JSON columns that can name the person.
struct Place {
    table: &'static str,
    rows: &'static str,
    text: &'static [&'static str],
    json: &'static [&'static str],
    /// The rows are about the person (their events, commands, assignments): every
    /// `assigneeEmail` in them is theirs. Otherwise only their addresses are replaced.
    own: bool,
}

/// Every place outside `users` and `dead_letters` that can name the person.
const PLACES: &[Place] = &[
    Place {
        table: "outbox",
        rows: "org_id = $1 AND assignment_id = ANY($4)",
        text: &[],
        json: &["payload"],
        own: true,
    },
    Place {
        table: "webhook_deliveries",
        rows: "id IN (SELECT id FROM webhook_deliveries
                      WHERE org_id = $1 AND event_id = ANY($5)
                        AND endpoint_id IN (SELECT id FROM webhook_endpoints WHERE org_id = $1))",
        text: &["last_error"],
        json: &["payload"],
        own: true,
    },
    Place {
        table: "webhook_attempts",
        rows: "delivery_id IN (SELECT id FROM webhook_deliveries
                               WHERE org_id = $1 AND event_id = ANY($5)
                                 AND endpoint_id IN (SELECT id FROM webhook_endpoints
                                                     WHERE org_id = $1))",
        text: &["error", "response_excerpt"],
        json: &[],
        own: true,
    },
    Place {
        table: "assignments",
        rows: "org_id = $1 AND id = ANY($4)",
        text: &["notes", "request_id", "cancel_reason"],
        json: &[],
        own: true,
    },
    Place {
        // A change's notes (from and to) and a cancellation's reason.
        table: "assignment_changes",
        rows: "org_id = $1 AND assignment_id = ANY($4)",
        text: &["reason"],
        json: &["changed"],
        own: true,
    },
    Place {
        table: "schedules",
        rows: "org_id = $1 AND user_id = $2",
        text: &["notes"],
        json: &[],
        own: true,
    },
    Place {
        table: "assignment_failures",
        rows: "org_id = $1 AND command ->> 'userId' = $3",
        text: &["reason"],
        json: &["command"],
        own: true,
    },
    Place {
        // An event's assign command kept until the broker confirms it (and a cancel's reason).
        table: "inbound_event_actions",
        rows: "org_id = $1 AND (user_id = $2 OR command ->> 'userId' = $3
                                OR assignment_id = ANY($4))",
        text: &["reason"],
        json: &["command"],
        own: true,
    },
    Place {
        // xAPI statements as their content sent them: the learner's `mbox` (`mailto:` + address)
        // or an `account.name` that is their address; anyone's statement may name them.
        table: "xapi_statements",
        rows: "org_id = $1",
        text: &[],
        json: &["statement"],
        own: false,
    },
    Place {
        // Who acted (`actor`) is never rewritten: a key's label or an admin's address stays.
        table: "audit_events",
        rows: "org_id = $1",
        text: &["target", "detail"],
        json: &[],
        own: false,
    },
    Place {
        table: "exports",
        rows: "org_id = $1",
        text: &["file_name", "error", "error_detail", "request_id"],
        json: &["parameters"],
        own: false,
    },
    Place {
        // The sessions of the organization's dashboard accounts (`acc_…` in the session).
        table: "dashboard_sessions",
        rows: "data ->> 'account' IN (SELECT 'acc_' || replace(id::text, '-', '')
                                      FROM dashboard_accounts WHERE org_id = $1)",
        text: &[],
        json: &["data"],
        own: false,
    },
];

/// Rewrites the rows of `place` that name the person; answers how many changed. The rows are
/// read (locked), rewritten by [`Rewriter`] and written back one by one: erasure is rare, and
/// one rewriting rule for text and JSON values is worth more than one statement per table.
async fn rewrite_place(
    connection: &mut PgConnection,
    place: &Place,
    scope: &Scope<'_>,
    rewriter: &Rewriter,
) -> Result<u64, sqlx::Error> {
    let columns: Vec<&str> = place.text.iter().chain(place.json).copied().collect();
    // Rows of the person's own with JSON are all read (their `assigneeEmail` may hold an
    // address they no longer have); others only when they contain an address.
    let candidates = if place.own && !place.json.is_empty() {
        "true".to_owned()
    } else {
        let tests: Vec<String> = columns
            .iter()
            .map(|column| format!("strpos(lower({column}::text), needle) > 0"))
            .collect();
        format!(
            "EXISTS (SELECT 1 FROM unnest($6::text[]) AS n(needle) WHERE {})",
            tests.join(" OR ")
        )
    };
    // A row is written back where it was read: its `ctid` stays put while this transaction
    // holds its lock, and tables such as `webhook_attempts` have no single-column key.
    let select = format!(
        "SELECT ctid::text, {} FROM {} WHERE ({}) AND {candidates} FOR UPDATE",
        columns.join(", "),
        place.table,
        place.rows,
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(select))
        .bind(scope.org_id)
        .bind(scope.user_id)
        .bind(scope.user_id.to_string())
        .bind(scope.assignment_ids)
        .bind(scope.event_ids)
        .bind(rewriter.needles())
        .fetch_all(&mut *connection)
        .await?;
    let assignments: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(index, column)| format!("{column} = ${}", index + 2))
        .collect();
    let update = format!(
        "UPDATE {} SET {} WHERE ctid = $1::tid",
        place.table,
        assignments.join(", ")
    );
    let mut changed = 0;
    for row in rows {
        let location: String = row.try_get(0)?;
        let mut texts: Vec<Option<String>> = Vec::with_capacity(place.text.len());
        let mut dirty = false;
        for index in 0..place.text.len() {
            let value: Option<String> = row.try_get(index + 1)?;
            match value.as_deref().and_then(|text| rewriter.text(text)) {
                Some(new) => {
                    dirty = true;
                    texts.push(Some(new));
                }
                None => texts.push(value),
            }
        }
        let mut documents: Vec<Option<serde_json::Value>> = Vec::with_capacity(place.json.len());
        for index in 0..place.json.len() {
            let mut value: Option<serde_json::Value> = row.try_get(place.text.len() + index + 1)?;
            if let Some(document) = value.as_mut() {
                dirty |= rewriter.json(document, place.own);
            }
            documents.push(value);
        }
        if !dirty {
            continue;
        }
        let mut query = sqlx::query(sqlx::AssertSqlSafe(update.clone())).bind(location);
        for text in texts {
            query = query.bind(text);
        }
        for document in documents {
            query = query.bind(document);
        }
        changed += query.execute(&mut *connection).await?.rows_affected();
    }
    Ok(changed)
}

/// Replaces the display name (`actor.name`) of the xAPI statements whose learner is the person
/// — their address already replaced by `pseudonym` — with the pseudonym; answers how many
/// changed.
async fn rename_statement_actors(
    connection: &mut PgConnection,
    org_id: OrgId,
    pseudonym: &str,
) -> Result<u64, sqlx::Error> {
    let renamed = sqlx::query(
        "UPDATE xapi_statements
         SET statement = jsonb_set(statement, '{actor,name}', to_jsonb($2::text))
         WHERE org_id = $1 AND statement -> 'actor' ? 'name'
           AND statement -> 'actor' ->> 'name' IS DISTINCT FROM $2
           AND (statement -> 'actor' ->> 'mbox' = 'mailto:' || $2
                OR statement -> 'actor' -> 'account' ->> 'name' = $2)",
    )
    .bind(org_id)
    .bind(pseudonym)
    .execute(&mut *connection)
    .await?;
    Ok(renamed.rows_affected())
}

/// Rewrites the dead-lettered messages about the person (found by their user id or one of
/// their assignments' ids in the body), only in the parts about them ([`Rewriter::dead_letter`]):
/// a batch may hold other people's commands and other organizations' events. A body that is not
/// JSON cannot be told apart and is left. Answers how many changed.
async fn rewrite_dead_letters(
    connection: &mut PgConnection,
    person: &Person,
    rewriter: &Rewriter,
) -> Result<u64, sqlx::Error> {
    let needles: Vec<Vec<u8>> = person.ids().into_iter().map(String::into_bytes).collect();
    let letters: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, payload FROM dead_letters
         WHERE EXISTS (SELECT 1 FROM unnest($1::bytea[]) AS n(needle)
                       WHERE position(n.needle IN payload) > 0)
         ORDER BY id FOR UPDATE",
    )
    .bind(&needles)
    .fetch_all(&mut *connection)
    .await?;
    let mut changed = 0;
    for (id, payload) in letters {
        let Ok(mut body) = serde_json::from_slice::<serde_json::Value>(&payload) else {
            continue;
        };
        if !rewriter.dead_letter(&mut body, person) {
            continue;
        }
        let payload =
            serde_json::to_vec(&body).map_err(|error| sqlx::Error::Encode(error.into()))?;
        changed += sqlx::query("UPDATE dead_letters SET payload = $2 WHERE id = $1")
            .bind(id)
            .bind(payload)
            .execute(&mut *connection)
            .await?
            .rows_affected();
    }
    Ok(changed)
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
    }
}
