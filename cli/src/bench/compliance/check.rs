//! The compliance benchmark's checks: a direct SQL count of the cells a report judges, by a
//! statement written apart from the service's, to compare with the report's totals.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use flow_domain::ids::{FlowId, OrgId};
use serde_json::Value;
use sqlx::PgPool;

use super::seed::Seeded;

/// People of the organization counted at `at` (the `asOf` reads leave out people created after
/// it), of `department` when given: a `WHERE` over `users u`.
fn population_sql(org_id: OrgId, at: &str, historical: bool, department: Option<&str>) -> String {
    let mut sql = format!("u.org_id = '{}'", org_id.0);
    if historical {
        let _ = write!(sql, " AND u.created_at <= {at}");
    }
    if let Some(department) = department {
        let _ = write!(
            sql,
            " AND lower(u.department) = lower('{}')",
            department.replace('\'', "''")
        );
    }
    sql
}

/// The standing of every (person, flow) of the population at `at`, by a plain statement of the
/// rules of docs/compliance.md written apart from the service's (the latest completion by `at`
/// still valid, else the latest assignment by `at`; with `historical`, the due date read back
/// from the changes applied after `at`): the CSV export's columns in its order (people by id,
/// each person's flows in report order). A literal statement, for `COPY`.
pub(super) fn standing_sql(
    org_id: OrgId,
    flows: &[FlowId],
    at: DateTime<Utc>,
    historical: bool,
    department: Option<&str>,
) -> String {
    let at = format!(
        "'{}'::timestamptz",
        at.to_rfc3339_opts(SecondsFormat::Micros, true)
    );
    let org = org_id.0;
    let flows = flows
        .iter()
        .map(|flow| format!("'{}'", flow.0))
        .collect::<Vec<_>>()
        .join(",");
    let population = population_sql(org_id, &at, historical, department);
    let (changes, due) = if historical {
        (
            format!(
                "LEFT JOIN LATERAL (
                    SELECT true AS moved, c.changed -> 'dueDate' ->> 'from' AS due_from
                    FROM assignment_changes c
                    WHERE c.assignment_id = l.id AND c.outcome = 'applied'
                      AND c.applied_at > {at} AND c.changed ? 'dueDate'
                    ORDER BY c.applied_at LIMIT 1) h ON true"
            ),
            "CASE WHEN h.moved THEN h.due_from::timestamptz ELSE l.due_at END",
        )
    } else {
        (String::new(), "l.due_at")
    };
    let due_soon = flow_app::compliance::DUE_SOON_DAYS;
    format!(
        "WITH people AS (
            SELECT u.id, u.email, u.name, u.department,
                   COALESCE(u.manager_name, u.manager_id) AS manager
            FROM users u WHERE {population}
         ),
         required AS (
            SELECT f.id, f.name, o.position
            FROM unnest(ARRAY[{flows}]::uuid[]) WITH ORDINALITY AS o(id, position)
            JOIN flows f ON f.id = o.id
         ),
         latest AS (
            SELECT DISTINCT ON (user_id, flow_id) user_id, flow_id, id, assigned_at, due_at,
                   started_at, completed_at, expires_at, cancelled_at
            FROM assignments
            WHERE org_id = '{org}' AND flow_id = ANY(ARRAY[{flows}]::uuid[])
              AND assigned_at <= {at}
            ORDER BY user_id, flow_id, assigned_at DESC, id DESC
         ),
         completion AS (
            SELECT DISTINCT ON (user_id, flow_id) user_id, flow_id, id, assigned_at, due_at,
                   completed_at, expires_at
            FROM assignments
            WHERE org_id = '{org}' AND flow_id = ANY(ARRAY[{flows}]::uuid[])
              AND completed_at <= {at}
            ORDER BY user_id, flow_id, completed_at DESC, id DESC
         ),
         cells AS (
            SELECT p.id AS user_id, p.email, p.name, p.department, p.manager,
                   r.name AS flow, r.position,
                   l.id AS l_id, l.assigned_at AS l_assigned_at, {due} AS l_due_at,
                   l.started_at AS l_started_at, l.completed_at AS l_completed_at,
                   l.expires_at AS l_expires_at, l.cancelled_at AS l_cancelled_at,
                   d.id AS d_id, d.assigned_at AS d_assigned_at, d.due_at AS d_due_at,
                   d.completed_at AS d_completed_at, d.expires_at AS d_expires_at
            FROM people p CROSS JOIN required r
            LEFT JOIN latest l ON l.user_id = p.id AND l.flow_id = r.id
            LEFT JOIN completion d ON d.user_id = p.id AND d.flow_id = r.id
            {changes}
         ),
         judged AS (
            SELECT c.*, CASE
                WHEN c.d_id IS NOT NULL AND (c.d_expires_at IS NULL OR c.d_expires_at > {at})
                    THEN 'compliant'
                WHEN c.l_id IS NULL THEN 'not_assigned'
                WHEN c.l_cancelled_at <= {at} THEN 'cancelled'
                WHEN c.l_completed_at <= {at} THEN 'expired'
                WHEN c.l_due_at <= {at} THEN 'overdue'
                WHEN c.l_due_at <= {at} + make_interval(days => {due_soon}) THEN 'due_soon'
                WHEN c.l_started_at <= {at} THEN 'in_progress'
                ELSE 'pending' END AS status
            FROM cells c
         )
         SELECT email, name, department, manager, flow, status,
                CASE WHEN status = 'compliant' THEN d_assigned_at ELSE l_assigned_at END
                    AS assigned_at,
                CASE WHEN status = 'compliant' THEN d_due_at ELSE l_due_at END AS due_date,
                CASE WHEN status = 'compliant' THEN d_completed_at
                     WHEN l_completed_at <= {at} THEN l_completed_at END AS completed_at,
                CASE WHEN status = 'compliant' THEN d_expires_at
                     WHEN l_completed_at <= {at} THEN l_expires_at END AS expires_at
         FROM judged ORDER BY user_id, position"
    )
}

/// The statuses in the order the report lists them, with their wire names in `totals.statuses`.
pub(super) const STATUSES: [(&str, &str); 8] = [
    ("compliant", "compliant"),
    ("due_soon", "dueSoon"),
    ("overdue", "overdue"),
    ("expired", "expired"),
    ("pending", "pending"),
    ("in_progress", "inProgress"),
    ("not_assigned", "notAssigned"),
    ("cancelled", "cancelled"),
];

/// Counts of cells per status, and people.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) people: i64,
    pub(super) statuses: BTreeMap<String, i64>,
}

impl Tally {
    /// The `totals` of a report answer.
    pub(super) fn of_answer(body: &Value) -> anyhow::Result<Self> {
        let totals = &body["totals"];
        let count = |value: &Value, name: &str| {
            value
                .as_i64()
                .with_context(|| format!("totals.{name} missing in {totals}"))
        };
        let mut statuses = BTreeMap::new();
        for (status, wire) in STATUSES {
            statuses.insert(status.to_owned(), count(&totals["statuses"][wire], wire)?);
        }
        Ok(Self {
            people: count(&totals["people"], "people")?,
            statuses,
        })
    }

    pub(super) fn cells(&self) -> i64 {
        self.statuses.values().sum()
    }

    /// The statuses as `compliant 1 · due_soon 2 …`.
    pub(super) fn describe(&self) -> String {
        STATUSES
            .iter()
            .map(|(status, _)| {
                format!(
                    "{status} {}",
                    self.statuses.get(*status).copied().unwrap_or(0)
                )
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// A connection of the pool's options that logs no statement: the direct counts are slow by
/// nature, and a warning with each one's text would bury the figures.
async fn quiet_connection(pool: &PgPool) -> anyhow::Result<sqlx::PgConnection> {
    use sqlx::ConnectOptions as _;
    let options = (*pool.connect_options())
        .clone()
        .disable_statement_logging();
    Ok(options.connect().await?)
}

/// The direct SQL count of the cells [`standing_sql`] judges.
pub(super) async fn count_directly(
    pool: &PgPool,
    seeded: &Seeded,
    at: DateTime<Utc>,
    historical: bool,
    department: Option<&str>,
) -> anyhow::Result<Tally> {
    let mut connection = quiet_connection(pool).await?;
    let standing = standing_sql(seeded.org_id, &seeded.flows, at, historical, department);
    let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT status, count(*) FROM ({standing}) s GROUP BY status"
    )))
    .fetch_all(&mut connection)
    .await?;
    let at = format!(
        "'{}'::timestamptz",
        at.to_rfc3339_opts(SecondsFormat::Micros, true)
    );
    let people: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM users u WHERE {}",
        population_sql(seeded.org_id, &at, historical, department)
    )))
    .fetch_one(&mut connection)
    .await?;
    let mut statuses: BTreeMap<String, i64> = STATUSES
        .iter()
        .map(|(status, _)| ((*status).to_owned(), 0))
        .collect();
    for (status, count) in rows {
        statuses.insert(status, count);
    }
    Ok(Tally { people, statuses })
}

/// Compares a report's totals with the direct count; the mismatches, if any, as text.
pub(super) fn compare(label: &str, reported: &Tally, direct: &Tally) -> Option<String> {
    if reported == direct {
        println!(
            "check {label}: totals = direct SQL count ({} people, {} cells: {})",
            direct.people,
            direct.cells(),
            direct.describe()
        );
        None
    } else {
        let mismatch = format!(
            "{label}: the report counted {} people, {}; a direct SQL count {} people, {}",
            reported.people,
            reported.describe(),
            direct.people,
            direct.describe()
        );
        println!("check FAILED {mismatch}");
        Some(mismatch)
    }
}
