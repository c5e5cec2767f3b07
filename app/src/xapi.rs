//! xAPI statements in (design §17), for the `/xapi` surface: each statement validated as the
//! specification asks (a malformed one refuses the whole request, nothing stored), stored per
//! organization under its id (the same id with other content is a conflict; the same statement
//! again changes nothing), and mapped onto progress: the learner by `actor.mbox` (or an
//! `account.name` that is an e-mail address), the module by its `activityId`, the assignment by
//! `context.registration` (cmi5) or else the learner's open assignment of that module's flow. What
//! maps is queued on the progress queue in one message, applied by the assign-worker as
//! `POST /v1/progress/bulk` is; what maps to nothing is stored and counted as unmatched.

use chrono::{DateTime, Utc};
use flow_common::db::xapi::{self as statements, Existing, NewStatement, Target};
use flow_domain::ids::AssignmentId;
use flow_domain::messages::{ModuleResult, PROGRESS_COMMAND_VERSION, ProgressCommand};
use flow_domain::xapi::{Reading, VerbEffect, validate};
use flow_domain::{AssignmentStatus, Email, Invalid, ModuleStatus};
use serde_json::Value;

use crate::{Acting, Context, ServiceError};

/// Most statements in one request.
pub const MAX_STATEMENTS: usize = 1_000;

/// What storing a request's statements came to.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The statements' ids, in request order.
    pub ids: Vec<uuid::Uuid>,
    /// How many of them mapped onto no assignment (stored all the same).
    pub unmatched: usize,
}

/// A statement that passed validation, with its id.
struct Checked {
    id: uuid::Uuid,
    statement: Value,
}

/// Validates `statements` (`put_id`: the `statementId` of a PUT, which the statement's own `id`
/// must equal when it has one) and gives each its id: the statement's, or a new v4 UUID written
/// into it. A refusal names the statement by its index.
fn check_all(
    statements: Vec<Value>,
    put_id: Option<uuid::Uuid>,
) -> Result<Vec<Checked>, ServiceError> {
    if statements.is_empty() || statements.len() > MAX_STATEMENTS {
        return Err(Invalid(format!(
            "a request holds between 1 and {MAX_STATEMENTS} statements"
        ))
        .into());
    }
    let many = statements.len() > 1;
    let mut checked: Vec<Checked> = Vec::with_capacity(statements.len());
    for (index, mut statement) in statements.into_iter().enumerate() {
        let name = |problem: Invalid| {
            if many {
                Invalid(format!("statements[{index}]: {}", problem.0))
            } else {
                problem
            }
        };
        validate(&statement).map_err(name)?;
        let given = statement["id"]
            .as_str()
            .and_then(|text| uuid::Uuid::parse_str(text).ok());
        let id = match (given, put_id) {
            (Some(given), Some(put)) if given != put => {
                return Err(
                    Invalid("statement.id differs from the statementId parameter".into()).into(),
                );
            }
            (Some(given), _) => given,
            (None, Some(put)) => put,
            (None, None) => uuid::Uuid::new_v4(),
        };
        if let Some(map) = statement.as_object_mut() {
            map.insert("id".into(), Value::String(id.hyphenated().to_string()));
        }
        if checked.iter().any(|earlier| earlier.id == id) {
            return Err(Invalid(format!(
                "statements[{index}].id repeats the id of an earlier statement of the request"
            ))
            .into());
        }
        checked.push(Checked { id, statement });
    }
    Ok(checked)
}

/// When the activity happened: the statement's timestamp, not before the assignment and not in
/// the future; now without one.
fn happened_at(statement: &Value, target: &Target, now: DateTime<Utc>) -> DateTime<Utc> {
    statement["timestamp"]
        .as_str()
        .and_then(flow_domain::xapi::parse_timestamp)
        .map_or(now, |at| at.with_timezone(&Utc).min(now))
        .max(target.assigned_at)
}

/// The progress commands a statement maps onto, with the assignment; none when it maps onto
/// nothing (no such learner, activity or open assignment, a verb Flow does not map, or an
/// assignment that takes no more progress).
async fn map_statement(
    ctx: &Context,
    acting: Acting<'_>,
    statement: &Value,
    bulk: bool,
    now: DateTime<Utc>,
) -> Result<Option<(AssignmentId, Vec<ProgressCommand>)>, ServiceError> {
    let reading = Reading::of(statement);
    let effect = reading.verb_effect();
    let (Some(email), Some(activity)) = (&reading.email, &reading.activity) else {
        return Ok(None);
    };
    let Ok(email) = Email::parse("actor", email) else {
        return Ok(None);
    };
    let email = email.normalized();
    let org = acting.org_id();
    let (target, modules) = match effect {
        VerbEffect::Nothing => return Ok(None),
        VerbEffect::Satisfied => {
            let Some(target) =
                statements::flow_target(&ctx.db, org, &email, activity, reading.registration)
                    .await?
            else {
                return Ok(None);
            };
            let modules = statements::open_modules(&ctx.db, target.assignment_id).await?;
            (target, modules)
        }
        VerbEffect::InProgress | VerbEffect::Completed => {
            let Some(target) =
                statements::module_target(&ctx.db, org, &email, activity, reading.registration)
                    .await?
            else {
                return Ok(None);
            };
            let modules = target.module_id.into_iter().collect();
            (target, modules)
        }
    };
    if matches!(
        target.status,
        AssignmentStatus::Completed | AssignmentStatus::Cancelled
    ) {
        return Ok(None);
    }
    let (status, result) = match effect {
        VerbEffect::InProgress => (ModuleStatus::InProgress, result_of(&reading)),
        VerbEffect::Completed => (ModuleStatus::Completed, result_of(&reading)),
        _ => (ModuleStatus::Completed, ModuleResult::default()),
    };
    let at = happened_at(statement, &target, now);
    let commands = modules
        .into_iter()
        .map(|module_id| ProgressCommand {
            version: PROGRESS_COMMAND_VERSION,
            org_id: org,
            assignment_id: target.assignment_id,
            module_id,
            status,
            at,
            request_id: None,
            result,
            bulk,
        })
        .collect();
    Ok(Some((target.assignment_id, commands)))
}

/// The module result a statement reports, within Flow's bounds (a duration beyond a year is
/// left out rather than refusing a valid statement).
fn result_of(reading: &Reading) -> ModuleResult {
    ModuleResult {
        score: reading.score,
        success: reading.success,
        duration_seconds: reading
            .duration_seconds
            .filter(|seconds| (0..=crate::progress::MAX_DURATION_SECONDS).contains(seconds)),
    }
}

/// Stores `statements` for the organization and queues the progress they map onto: all or
/// nothing (a malformed statement, an id repeated in the request, or an id stored with other
/// content refuses the request; a broker that does not confirm stores nothing). A statement
/// stored before with the same content is not stored again, and its progress is queued again
/// (applying progress twice changes nothing): a client retrying after a failure recovers.
pub async fn store(
    ctx: &Context,
    acting: Acting<'_>,
    statements: Vec<Value>,
    put_id: Option<uuid::Uuid>,
    request_id: Option<&str>,
) -> Result<Stored, ServiceError> {
    let checked = check_all(statements, put_id)?;
    let org = acting.org_id();
    let ids: Vec<uuid::Uuid> = checked.iter().map(|item| item.id).collect();
    let bodies: Vec<Value> = checked.iter().map(|item| item.statement.clone()).collect();
    let existing = statements::compare(&ctx.db, org, &ids, &bodies).await?;
    if let Some(index) = existing
        .iter()
        .position(|seen| *seen == Existing::Different)
    {
        return Err(conflict(ids[index]));
    }
    let bulk = checked.len() > 1;
    let now = Utc::now();
    let mut rows = Vec::with_capacity(checked.len());
    let mut commands = Vec::new();
    for item in checked {
        let mapped = map_statement(ctx, acting, &item.statement, bulk, now).await?;
        let assignment_id = mapped.as_ref().map(|(id, _)| *id);
        if let Some((_, mapped)) = mapped {
            commands.extend(mapped);
        }
        rows.push(NewStatement {
            id: item.id,
            statement: item.statement,
            matched: assignment_id.is_some(),
            assignment_id,
        });
    }
    let unmatched = rows.iter().filter(|row| !row.matched).count();
    let fresh: Vec<NewStatement> = rows
        .into_iter()
        .zip(&existing)
        .filter(|(_, seen)| **seen == Existing::New)
        .map(|(row, _)| row)
        .collect();
    let mut transaction = ctx.db.begin().await?;
    let raced = statements::insert(&mut transaction, org, &fresh).await?;
    if !raced.is_empty() {
        // Stored meanwhile by a concurrent request: the same statement is fine, another is not.
        let bodies: Vec<Value> = fresh
            .iter()
            .filter(|row| raced.contains(&row.id))
            .map(|row| row.statement.clone())
            .collect();
        let again = statements::compare(&mut *transaction, org, &raced, &bodies).await?;
        if let Some(index) = again.iter().position(|seen| *seen != Existing::Same) {
            return Err(conflict(raced[index]));
        }
    }
    if !commands.is_empty() {
        crate::progress::publish_commands(ctx, commands, request_id).await?;
    }
    transaction.commit().await?;
    Ok(Stored { ids, unmatched })
}

fn conflict(id: uuid::Uuid) -> ServiceError {
    ServiceError::Conflict(format!(
        "a different statement is already stored with the id {id}"
    ))
}

/// The organization's statement `id` as sent, with `stored` (when Flow stored it) added when the
/// statement did not carry one; not found for another organization's.
pub async fn get(ctx: &Context, acting: Acting<'_>, id: &str) -> Result<Value, ServiceError> {
    let not_found = || ServiceError::NotFound("statement");
    let id = uuid::Uuid::parse_str(id.trim()).map_err(|_| not_found())?;
    let stored = statements::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or_else(not_found)?;
    let mut statement = stored.statement;
    if let Some(map) = statement.as_object_mut()
        && !map.contains_key("stored")
    {
        map.insert(
            "stored".into(),
            Value::String(flow_domain::format_timestamp(stored.stored_at)),
        );
    }
    Ok(statement)
}

/// How many of the organization's statements mapped onto nothing.
pub async fn unmatched(ctx: &Context, acting: Acting<'_>) -> Result<i64, ServiceError> {
    Ok(statements::unmatched_count(&ctx.db, acting.org_id()).await?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn statement(id: Option<&str>) -> Value {
        let mut statement = json!({
            "actor": { "mbox": "mailto:ann@example.com" },
            "verb": { "id": "http://adlnet.gov/expapi/verbs/completed" },
            "object": { "id": "https://courses.example.com/phishing" },
        });
        if let Some(id) = id {
            statement["id"] = json!(id);
        }
        statement
    }

    #[test]
    fn ids_are_given_where_missing_and_repeats_refused() {
        let id = "aa97b177-9383-4934-8543-0f91a7a02836";
        let checked = check_all(vec![statement(Some(id)), statement(None)], None).unwrap();
        assert_eq!(checked[0].id.to_string(), id);
        assert_eq!(checked[1].id.get_version_num(), 4);
        assert_eq!(checked[1].statement["id"], json!(checked[1].id.to_string()));
        assert!(check_all(vec![statement(Some(id)), statement(Some(id))], None).is_err());
        let other = uuid::Uuid::new_v4();
        assert!(check_all(vec![statement(Some(id))], Some(other)).is_err());
        assert_eq!(
            check_all(vec![statement(None)], Some(other)).unwrap()[0].id,
            other
        );
    }
}
