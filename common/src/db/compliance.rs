//! The compliance report's reads (issue 39, design §18): each person's standing in each flow at
//! an instant, from the assignment history alone, as one set-based statement per answer (a page
//! of people, the totals of the whole population, or its roll-up per group).
//!
//! Per (person, flow), with `T` the instant:
//! - the latest completion with `completed_at <= T` whose `expires_at` is unset or after `T`
//!   makes the person `compliant` (a renewal being open or late does not change that);
//! - otherwise the latest assignment with `assigned_at <= T` (ties by id) decides: none is
//!   `not_assigned`; cancelled by `T` is `cancelled`; completed by `T` (and so expired) is
//!   `expired`; open at `T` with its due date at or before `T` is `overdue`, due within the
//!   due-soon window `due_soon`, started by `T` `in_progress`, else `pending`.
//!
//! The due date an assignment had at `T` is read back from its applied changes after `T`
//! (`assignment_changes`, `dueDate.from` of the earliest); its other instants are stored.
//!
//! A flow required of an enrollment rule's audience (`flows.required_for_rule_id`) is required
//! of the people the rule matches now (`enrollment_matches.matching`; there is no history of
//! matches, so a past `T` is judged against the audience as it stands now). For anyone else the
//! pair is not required: `not_required`, unless a completion or an assignment of the flow that
//! is not cancelled decides otherwise (judged as above), and either way it is counted apart
//! (`not_required`), never in a summary of the required pairs.

use chrono::{DateTime, Utc};
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, GroupId, OrgId, UserId};
use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, FromRow, PgConnection, PgExecutor};

/// Who is counted: every filter given must hold.
#[derive(Debug, Clone, Default)]
pub struct Population {
    /// Department, compared case-insensitively.
    pub department: Option<String>,
    /// Members of this group.
    pub group_id: Option<GroupId>,
    /// Reports of this manager (the identity provider's manager id, exactly).
    pub manager_id: Option<String>,
    /// Active (true) or deactivated (false) people only.
    pub active: Option<bool>,
    /// These people only (normalized e-mails).
    pub emails: Option<Vec<String>>,
}

/// What one answer reads.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The organization.
    pub org_id: OrgId,
    /// The flows, in the order the answer lists them (all of `org_id`).
    pub flows: Vec<FlowId>,
    /// The instant judged.
    pub at: DateTime<Utc>,
    /// Whether `at` is a past instant asked for: people created after it are then left out.
    pub historical: bool,
    /// An open assignment due within this many days after `at` is `due_soon`.
    pub due_soon_days: i32,
    /// Who is counted.
    pub population: Population,
}

/// A compliance export's request as the report-worker replays it: the flows and the instant are
/// fixed when the export is requested, so the file says what the report said then, whenever it
/// is generated. Stored with the export, so its serialized shape must stay readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComplianceParameters {
    /// The flows, in report order.
    pub flow_ids: Vec<FlowId>,
    /// Whether they are the organization's required flows (the request named none).
    pub required: bool,
    /// Department filter.
    pub department: Option<String>,
    /// Group filter.
    pub group_id: Option<GroupId>,
    /// Manager filter.
    pub manager_id: Option<String>,
    /// Active filter.
    pub active: Option<bool>,
    /// Only these people (normalized e-mails).
    pub user_emails: Option<Vec<String>>,
    /// The roll-up asked for, listed beside the people in Excel and PDF.
    pub group_by: Option<GroupBy>,
    /// The instant judged: the request's `asOf`, else the instant of the request.
    pub as_of: DateTime<Utc>,
    /// Whether the request gave `asOf`.
    pub as_of_given: bool,
    /// An open assignment due within this many days after the instant is `due_soon`.
    pub due_soon_days: i32,
    /// The organization's time zone when requested (kept with the request; the files show UTC).
    pub timezone: String,
}

impl ComplianceParameters {
    /// Who is counted.
    pub fn population(&self) -> Population {
        Population {
            department: self.department.clone(),
            group_id: self.group_id,
            manager_id: self.manager_id.clone(),
            active: self.active,
            emails: self.user_emails.clone(),
        }
    }

    /// What the export reads in `org_id`: always judged as a past instant (the history read
    /// back), so a file generated later says what was true at the instant.
    pub fn scope(&self, org_id: OrgId) -> Scope {
        Scope {
            org_id,
            flows: self.flow_ids.clone(),
            at: self.as_of,
            historical: true,
            due_soon_days: self.due_soon_days,
            population: self.population(),
        }
    }
}

/// How the roll-up groups people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// `users.department` (people without one form the group with an empty key).
    Department,
    /// Groups pushed by the identity provider (a person counts in each of theirs; people in none
    /// form the group with an empty key).
    Group,
    /// `users.manager_id` (people without one form the group with an empty key).
    Manager,
}

impl GroupBy {
    /// The wire name: `department`, `group` or `manager`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Department => "department",
            Self::Group => "group",
            Self::Manager => "manager",
        }
    }

    /// The key and the label of a person's group(s), over `u` (users) and `g` (user_groups,
    /// joined for [`GroupBy::Group`] only).
    fn key_and_label(self) -> &'static str {
        match self {
            Self::Department => "COALESCE(u.department, '') AS key, u.department AS label",
            Self::Group => "COALESCE(g.id::text, '') AS key, g.display_name AS label",
            Self::Manager => "COALESCE(u.manager_id, '') AS key, u.manager_name AS label",
        }
    }

    fn joins(self) -> &'static str {
        match self {
            Self::Group => {
                "LEFT JOIN user_group_members m ON m.user_id = u.id
                 LEFT JOIN user_groups g ON g.id = m.group_id"
            }
            Self::Department | Self::Manager => "",
        }
    }
}

/// People of the population, over `users u`: `$1` organization, `$3` instant, `$4` historical,
/// `$5` department, `$6` group, `$7` manager, `$8` active, `$9` e-mails.
const POPULATION: &str = "u.org_id = $1
    AND (NOT $4 OR u.created_at <= $3)
    AND ($5::text IS NULL OR lower(u.department) = lower($5))
    AND ($6::uuid IS NULL OR EXISTS (SELECT 1 FROM user_group_members gm
                                     WHERE gm.group_id = $6 AND gm.user_id = u.id))
    AND ($7::text IS NULL OR u.manager_id = $7)
    AND ($8::bool IS NULL OR u.active = $8)
    AND ($9::text[] IS NULL OR u.email_normalized = ANY($9))";

/// The latest assignment of each (person, flow) of the organization `$1` among the flows `$2`
/// assigned by `$3` (`latest`), and the latest completion by `$3` (`completed`): one ordered
/// pass each, for the answers over a whole population.
const LATEST_SETS: &str = "latest AS (
    SELECT DISTINCT ON (a.user_id, a.flow_id) a.user_id, a.flow_id, a.id, a.assigned_at,
           a.due_at, a.started_at, a.completed_at, a.expires_at, a.cancelled_at
    FROM assignments a
    WHERE a.org_id = $1 AND a.flow_id = ANY($2) AND a.assigned_at <= $3
    ORDER BY a.user_id, a.flow_id, a.assigned_at DESC, a.id DESC
), completed AS (
    SELECT DISTINCT ON (a.user_id, a.flow_id) a.user_id, a.flow_id, a.id, a.assigned_at,
           a.due_at, a.completed_at, a.expires_at
    FROM assignments a
    WHERE a.org_id = $1 AND a.flow_id = ANY($2) AND a.completed_at IS NOT NULL
      AND a.completed_at <= $3
    ORDER BY a.user_id, a.flow_id, a.completed_at DESC, a.id DESC
)";

/// The earliest due-date change of each of the organization's assignments applied after `$3`
/// (`moved`), for an answer over a whole population at a past instant: few rows, read by the
/// applied changes' index, where a lookup per cell would probe every cell.
const MOVED_SET: &str = "moved AS (
    SELECT DISTINCT ON (c.assignment_id) c.assignment_id, true AS changed_since,
           c.changed -> 'dueDate' ->> 'from' AS due_from
    FROM assignment_changes c
    WHERE c.org_id = $1 AND c.outcome = 'applied' AND c.applied_at > $3
      AND c.changed ? 'dueDate'
    ORDER BY c.assignment_id, c.applied_at
)";

/// The join of [`MOVED_SET`] to the latest assignment `l`, as `h`.
const MOVED_JOIN: &str = "LEFT JOIN moved h ON h.assignment_id = l.id";

/// The same looked up for the latest assignment `l`, as `h`, at a past instant (`$4`); for the
/// present, a condition Postgres folds away before it runs (no change can be applied after now).
const MOVED_LOOKUP: &str = "LEFT JOIN LATERAL (
        SELECT true AS changed_since, c.changed -> 'dueDate' ->> 'from' AS due_from
        FROM assignment_changes c
        WHERE $4 AND c.assignment_id = l.id AND c.outcome = 'applied'
          AND c.applied_at > $3 AND c.changed ? 'dueDate'
        ORDER BY c.applied_at LIMIT 1) h ON true";

/// The same per (person, flow), looked up one cell at a time (a page of people).
const LATEST_LOOKUPS: &str = "LEFT JOIN LATERAL (
        SELECT a.id, a.assigned_at, a.due_at, a.started_at, a.completed_at, a.expires_at,
               a.cancelled_at
        FROM assignments a
        WHERE a.org_id = $1 AND a.user_id = p.id AND a.flow_id = f.flow_id
          AND a.assigned_at <= $3
        ORDER BY a.assigned_at DESC, a.id DESC LIMIT 1) l ON true
    LEFT JOIN LATERAL (
        SELECT a.id, a.assigned_at, a.due_at, a.completed_at, a.expires_at
        FROM assignments a
        WHERE a.org_id = $1 AND a.user_id = p.id AND a.flow_id = f.flow_id
          AND a.completed_at IS NOT NULL AND a.completed_at <= $3
        ORDER BY a.completed_at DESC, a.id DESC LIMIT 1) d ON true";

/// Joins of [`LATEST_SETS`] to the cells.
const LATEST_JOINS: &str = "LEFT JOIN latest l ON l.user_id = p.id AND l.flow_id = f.flow_id
    LEFT JOIN completed d ON d.user_id = p.id AND d.flow_id = f.flow_id";

/// `cells`: each person of `people` (a relation with `id`) crossed with the flows `$2`, with
/// whether the flow is required of them (`required`: of everyone, or they are in its rule's
/// audience; only the matches of the rules of these flows are read, by the primary key's
/// `rule_id` prefix, never another organization's), the assignments that decide the standing at `$3` (`l_*` the latest assigned, its
/// due date as it stood then, read back through the changes joined by `moved`; `d_*` the latest
/// completion, joined by `latest`) and the `status` they make (module docs; `$10` the due-soon
/// window in days).
fn cells(latest: &str, moved: &str) -> String {
    format!(
        "cells AS (
    SELECT x.*, CASE
        WHEN x.d_id IS NOT NULL AND (x.d_expires_at IS NULL OR x.d_expires_at > $3)
            THEN 'compliant'
        WHEN NOT x.required AND (x.l_id IS NULL OR x.l_cancelled_at <= $3) THEN 'not_required'
        WHEN x.l_id IS NULL THEN 'not_assigned'
        WHEN x.l_cancelled_at <= $3 THEN 'cancelled'
        WHEN x.l_completed_at <= $3 THEN 'expired'
        WHEN x.l_due_at <= $3 THEN 'overdue'
        WHEN x.l_due_at <= $3 + make_interval(days => $10) THEN 'due_soon'
        WHEN x.l_started_at <= $3 THEN 'in_progress'
        ELSE 'pending' END AS status
    FROM (
        SELECT p.id AS user_id, f.flow_id, f.position,
               (audience.required_for_rule_id IS NULL OR em.user_id IS NOT NULL) AS required,
               l.id AS l_id, l.assigned_at AS l_assigned_at, l.started_at AS l_started_at,
               l.completed_at AS l_completed_at, l.expires_at AS l_expires_at,
               l.cancelled_at AS l_cancelled_at,
               CASE WHEN h.changed_since THEN h.due_from::timestamptz ELSE l.due_at END
                   AS l_due_at,
               d.id AS d_id, d.assigned_at AS d_assigned_at, d.due_at AS d_due_at,
               d.completed_at AS d_completed_at, d.expires_at AS d_expires_at
        FROM people p
        CROSS JOIN UNNEST($2::uuid[]) WITH ORDINALITY AS f(flow_id, position)
        LEFT JOIN flows audience ON audience.id = f.flow_id
        LEFT JOIN (
            SELECT m.rule_id, m.user_id FROM enrollment_matches m
            WHERE m.matching AND m.rule_id IN (
                SELECT r.required_for_rule_id FROM flows r
                WHERE r.org_id = $1 AND r.id = ANY($2))
        ) em ON em.rule_id = audience.required_for_rule_id AND em.user_id = p.id
        {latest}
        {moved}
    ) x
)"
    )
}

/// The common table expressions that precede `cells` and `cells` itself, for an answer over the
/// whole population of `scope`: one ordered pass over the organization's assignments for the
/// whole organization (or everyone active or not), and at a past instant one read of the due
/// dates moved since; a lookup per cell for a narrower population (a department, a group, a
/// manager's team, a list of people), which reads far fewer rows.
fn whole(scope: &Scope) -> (String, String) {
    let population = &scope.population;
    let narrow = population.department.is_some()
        || population.group_id.is_some()
        || population.manager_id.is_some()
        || population.emails.is_some();
    if narrow {
        (String::new(), cells(LATEST_LOOKUPS, MOVED_LOOKUP))
    } else if scope.historical {
        (
            format!("{LATEST_SETS}, {MOVED_SET},"),
            cells(LATEST_JOINS, MOVED_JOIN),
        )
    } else {
        // The present: no set to read (joined, even empty, it changes the plan for the worse).
        (format!("{LATEST_SETS},"), cells(LATEST_JOINS, MOVED_LOOKUP))
    }
}

/// Counts per status of the required cells, and the cells not required, over `cells` grouped
/// per person as `per_person`.
const PER_PERSON: &str = "per_person AS (
    SELECT user_id, count(*) FILTER (WHERE required) AS cells,
           count(*) FILTER (WHERE required AND status = 'compliant') AS compliant,
           count(*) FILTER (WHERE required AND status = 'due_soon') AS due_soon,
           count(*) FILTER (WHERE required AND status = 'overdue') AS overdue,
           count(*) FILTER (WHERE required AND status = 'expired') AS expired,
           count(*) FILTER (WHERE required AND status = 'pending') AS pending,
           count(*) FILTER (WHERE required AND status = 'in_progress') AS in_progress,
           count(*) FILTER (WHERE required AND status = 'not_assigned') AS not_assigned,
           count(*) FILTER (WHERE required AND status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE NOT required) AS not_required
    FROM cells GROUP BY user_id
)";

/// The sums of [`PER_PERSON`]'s counts over the rows of `per_person q`: a person of whom no
/// flow is required is not counted among the people.
const SUMS: &str = "count(*) FILTER (WHERE q.cells > 0) AS people,
    count(*) FILTER (WHERE q.cells > 0 AND q.compliant = q.cells) AS people_compliant,
    COALESCE(sum(q.cells), 0)::int8 AS cells,
    COALESCE(sum(q.compliant), 0)::int8 AS compliant,
    COALESCE(sum(q.due_soon), 0)::int8 AS due_soon,
    COALESCE(sum(q.overdue), 0)::int8 AS overdue,
    COALESCE(sum(q.expired), 0)::int8 AS expired,
    COALESCE(sum(q.pending), 0)::int8 AS pending,
    COALESCE(sum(q.in_progress), 0)::int8 AS in_progress,
    COALESCE(sum(q.not_assigned), 0)::int8 AS not_assigned,
    COALESCE(sum(q.cancelled), 0)::int8 AS cancelled,
    COALESCE(sum(q.not_required), 0)::int8 AS not_required";

/// Counts of people and of their (person, flow) cells per status: the statuses count the
/// required cells, `not_required` the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, FromRow)]
pub struct Counts {
    /// People counted: those of whom at least one of the flows is required.
    pub people: i64,
    /// People compliant in every flow required of them.
    pub people_compliant: i64,
    /// Required cells (people × flows required of them).
    pub cells: i64,
    pub compliant: i64,
    pub due_soon: i64,
    pub overdue: i64,
    pub expired: i64,
    pub pending: i64,
    pub in_progress: i64,
    pub not_assigned: i64,
    pub cancelled: i64,
    /// Cells not required (outside a flow's audience), whatever their status.
    pub not_required: i64,
}

impl Counts {
    /// Every cell, required or not: the rows of an export.
    pub fn rows(&self) -> i64 {
        self.cells + self.not_required
    }
}

/// [`Counts`] taken from the cells themselves as they pass, each person's cells together (the
/// order [`every_cell`] reads them in), counting what [`totals`] counts: an export counts its
/// rows as it writes them instead of reading the population a second time.
#[derive(Debug, Default)]
pub struct Tally {
    counts: Counts,
    /// The person whose cells are passing, with their required and compliant cells so far.
    person: Option<UserId>,
    required: i64,
    compliant: i64,
}

impl Tally {
    /// Counts one cell of `user_id`.
    pub fn add(&mut self, user_id: UserId, required: bool, status: &str) {
        if self.person != Some(user_id) {
            self.end_person();
            self.person = Some(user_id);
        }
        let counts = &mut self.counts;
        if !required {
            counts.not_required += 1;
            return;
        }
        self.required += 1;
        counts.cells += 1;
        let count = match status {
            "compliant" => {
                self.compliant += 1;
                &mut counts.compliant
            }
            "due_soon" => &mut counts.due_soon,
            "overdue" => &mut counts.overdue,
            "expired" => &mut counts.expired,
            "pending" => &mut counts.pending,
            "in_progress" => &mut counts.in_progress,
            "not_assigned" => &mut counts.not_assigned,
            "cancelled" => &mut counts.cancelled,
            _ => return,
        };
        *count += 1;
    }

    /// The counts of every cell added.
    pub fn counts(mut self) -> Counts {
        self.end_person();
        self.counts
    }

    /// Counts the person whose cells have passed: among the people when a flow is required of
    /// them, and compliant when every required one is.
    fn end_person(&mut self) {
        if self.required > 0 {
            self.counts.people += 1;
            if self.compliant == self.required {
                self.counts.people_compliant += 1;
            }
        }
        self.required = 0;
        self.compliant = 0;
    }
}

/// One person's standing in one flow.
#[derive(Debug, Clone, FromRow)]
pub struct Cell {
    pub user_id: UserId,
    pub email: String,
    pub name: Option<String>,
    pub department: Option<String>,
    pub manager_id: Option<String>,
    /// The manager's name, as the identity provider gave it.
    pub manager_name: Option<String>,
    pub active: bool,
    pub flow_id: FlowId,
    /// compliant, due_soon, overdue, expired, pending, in_progress, not_assigned, cancelled or
    /// not_required.
    pub status: String,
    /// Whether the flow is required of the person (of everyone, or they are in its audience).
    pub required: bool,
    /// The assignment that decided it (the valid completion when compliant, else the latest).
    pub assignment_id: Option<AssignmentId>,
    pub assigned_at: Option<DateTime<Utc>>,
    /// Its due date as it stood at the instant.
    pub due_at: Option<DateTime<Utc>>,
    /// When it was completed, if by the instant.
    pub completed_at: Option<DateTime<Utc>>,
    /// When that completion expires (or expired), if completed by the instant.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was cancelled, if by the instant.
    pub cancelled_at: Option<DateTime<Utc>>,
}

/// One group of the roll-up.
#[derive(Debug, Clone, FromRow)]
pub struct GroupCounts {
    /// The group's key: a department, a group id (`uuid` text) or a manager id; empty for the
    /// people without one.
    pub key: String,
    /// The department, the group's display name or the manager's name.
    pub label: Option<String>,
    #[sqlx(flatten)]
    pub counts: Counts,
}

fn bind_scope<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    scope: &'q Scope,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    let flows: Vec<uuid::Uuid> = scope.flows.iter().map(|flow| flow.0).collect();
    query
        .bind(scope.org_id)
        .bind(flows)
        .bind(scope.at)
        .bind(scope.historical)
        .bind(scope.population.department.as_deref())
        .bind(scope.population.group_id)
        .bind(scope.population.manager_id.as_deref())
        .bind(scope.population.active)
        .bind(scope.population.emails.as_deref())
        .bind(scope.due_soon_days)
}

/// What each row of a read of cells holds, over `cells c` joined to `users u`, in user id order,
/// each person's cells in the order of the scope's flows.
const CELL_ROWS: &str = "SELECT c.user_id, u.email, u.name, u.department, u.manager_id,
                u.manager_name, u.active, c.flow_id, c.status, c.required,
                CASE WHEN c.status = 'compliant' THEN c.d_id ELSE c.l_id END AS assignment_id,
                CASE WHEN c.status = 'compliant' THEN c.d_assigned_at ELSE c.l_assigned_at END
                    AS assigned_at,
                CASE WHEN c.status = 'compliant' THEN c.d_due_at ELSE c.l_due_at END AS due_at,
                CASE WHEN c.status = 'compliant' THEN c.d_completed_at
                     WHEN c.l_completed_at <= $3 THEN c.l_completed_at END AS completed_at,
                CASE WHEN c.status = 'compliant' THEN c.d_expires_at
                     WHEN c.l_completed_at <= $3 THEN c.l_expires_at END AS expires_at,
                CASE WHEN c.l_cancelled_at <= $3 AND c.status <> 'compliant'
                     THEN c.l_cancelled_at END AS cancelled_at
         FROM cells c JOIN users u ON u.id = c.user_id
         ORDER BY c.user_id, c.position";

/// The cells of up to `limit` people of the population after the person `after`, in user id
/// order, each person's cells in the order of the scope's flows.
pub async fn page(
    connection: &mut PgConnection,
    scope: &Scope,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<Cell>, sqlx::Error> {
    let cells = cells(LATEST_LOOKUPS, MOVED_LOOKUP);
    let sql = format!(
        "WITH people AS (
            SELECT u.id FROM users u
            WHERE {POPULATION} AND ($11::uuid IS NULL OR u.id > $11)
            ORDER BY u.id LIMIT $12
         ), {cells}
         {CELL_ROWS}"
    );
    bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope)
        .bind(after)
        .bind(limit)
        .fetch_all(connection)
        .await
}

/// Every cell of the population, in user id order, each person's cells in the order of the
/// scope's flows, as one statement read as it streams (an export of every row): for the whole
/// organization one ordered pass over its assignments, as the totals read them, instead of a
/// lookup per cell page by page.
pub fn every_cell<'c>(
    connection: &'c mut PgConnection,
    scope: &'c Scope,
) -> futures::stream::BoxStream<'c, Result<Cell, sqlx::Error>> {
    let (sets, cells) = whole(scope);
    let sql = format!(
        "WITH people AS (SELECT u.id FROM users u WHERE {POPULATION}), {sets} {cells}
         {CELL_ROWS}"
    );
    bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope).fetch(connection)
}

/// How many people the population holds (an export's rows are these people × the flows).
pub async fn population_size(
    connection: &mut PgConnection,
    scope: &Scope,
) -> Result<i64, sqlx::Error> {
    let sql = format!("SELECT count(*) FROM users u WHERE {POPULATION}");
    let (size,): (i64,) = bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope)
        .fetch_one(connection)
        .await?;
    Ok(size)
}

/// The counts of the whole population.
pub async fn totals(connection: &mut PgConnection, scope: &Scope) -> Result<Counts, sqlx::Error> {
    let (sets, cells) = whole(scope);
    let sql = format!(
        "WITH people AS (SELECT u.id FROM users u WHERE {POPULATION}), {sets} {cells},
              {PER_PERSON}
         SELECT {SUMS} FROM per_person q"
    );
    bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope)
        .fetch_one(connection)
        .await
}

/// The common table expressions up to `keyed`: each person's counts ([`PER_PERSON`]) with the
/// key and label of their group(s) by `by`.
fn keyed(scope: &Scope, by: GroupBy) -> String {
    let key_and_label = by.key_and_label();
    let joins = by.joins();
    let (sets, cells) = whole(scope);
    format!(
        "WITH people AS (SELECT u.id FROM users u WHERE {POPULATION}), {sets} {cells},
              {PER_PERSON},
         keyed AS (
            SELECT {key_and_label}, q.*
            FROM per_person q JOIN users u ON u.id = q.user_id {joins}
         )"
    )
}

/// The counts of up to `limit` groups of the population by `by`, after the key `after`, in key
/// order.
pub async fn groups(
    connection: &mut PgConnection,
    scope: &Scope,
    by: GroupBy,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<GroupCounts>, sqlx::Error> {
    let keyed = keyed(scope, by);
    let sql = format!(
        "{keyed}
         SELECT q.key, max(q.label) AS label, {SUMS}
         FROM keyed q
         WHERE $11::text IS NULL OR q.key > $11
         GROUP BY q.key ORDER BY q.key LIMIT $12"
    );
    bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope)
        .bind(after)
        .bind(limit)
        .fetch_all(connection)
        .await
}

/// One row of [`groups_with_totals`]: a group, or (`whole`) the whole population.
#[derive(Debug, FromRow)]
struct RolledUp {
    whole: bool,
    #[sqlx(flatten)]
    group: GroupCounts,
}

/// [`groups`] and [`totals`] in one pass over the population, for a roll-up that puts each
/// person in exactly one group (by department or manager; not by group, where a person counts in
/// each of theirs): the groups are summed with the whole population (`GROUPING SETS`), so the
/// cells are computed once instead of once per statement.
pub async fn groups_with_totals(
    connection: &mut PgConnection,
    scope: &Scope,
    by: GroupBy,
    after: Option<&str>,
    limit: i64,
) -> Result<(Vec<GroupCounts>, Counts), sqlx::Error> {
    debug_assert!(by != GroupBy::Group, "a person may be in several groups");
    let keyed = keyed(scope, by);
    let sql = format!(
        "{keyed},
         rolled AS MATERIALIZED (
            SELECT GROUPING(q.key) = 1 AS whole, COALESCE(q.key, '') AS key,
                   max(q.label) AS label, {SUMS}
            FROM keyed q
            GROUP BY GROUPING SETS ((q.key), ())
         )
         (SELECT * FROM rolled WHERE whole)
         UNION ALL
         (SELECT * FROM rolled WHERE NOT whole AND ($11::text IS NULL OR key > $11)
          ORDER BY key LIMIT $12)"
    );
    let rows: Vec<RolledUp> = bind_scope(sqlx::query_as(AssertSqlSafe(sql)), scope)
        .bind(after)
        .bind(limit)
        .fetch_all(connection)
        .await?;
    let mut totals = Counts::default();
    let mut groups = Vec::with_capacity(rows.len());
    for row in rows {
        if row.whole {
            totals = row.group.counts;
        } else {
            groups.push(row.group);
        }
    }
    Ok((groups, totals))
}

/// A flow as the report names it.
#[derive(Debug, Clone, FromRow)]
pub struct ReportFlow {
    pub id: FlowId,
    pub name: String,
    pub required: bool,
    /// Required only of this enrollment rule's audience.
    pub required_for_rule_id: Option<EnrollmentRuleId>,
}

/// The organization's flows among `ids` (the others, and other organizations' flows, left out).
pub async fn flows_of<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    ids: &[FlowId],
) -> Result<Vec<ReportFlow>, sqlx::Error> {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|flow| flow.0).collect();
    sqlx::query_as(
        "SELECT id, name, required, required_for_rule_id FROM flows
         WHERE org_id = $1 AND id = ANY($2)",
    )
    .bind(org_id)
    .bind(ids)
    .fetch_all(executor)
    .await
}

/// Up to `limit` of the organization's required flows that are not archived, by name then id.
pub async fn required_flows<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    limit: i64,
) -> Result<Vec<ReportFlow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, name, required, required_for_rule_id FROM flows
         WHERE org_id = $1 AND required AND archived_at IS NULL
         ORDER BY lower(name), id LIMIT $2",
    )
    .bind(org_id)
    .bind(limit)
    .fetch_all(executor)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_people_by_their_run_of_cells_as_the_totals_do() {
        let (ann, bob, cid, dee) = (UserId::new(), UserId::new(), UserId::new(), UserId::new());
        let mut tally = Tally::default();
        // ann: compliant in both required flows; bob: one of two, and one not required;
        // cid: nothing required of them; dee: one required, overdue.
        for (user, required, status) in [
            (ann, true, "compliant"),
            (ann, true, "compliant"),
            (bob, true, "compliant"),
            (bob, true, "not_assigned"),
            (bob, false, "pending"),
            (cid, false, "not_required"),
            (cid, false, "compliant"),
            (dee, true, "overdue"),
        ] {
            tally.add(user, required, status);
        }
        assert_eq!(
            tally.counts(),
            Counts {
                people: 3,
                people_compliant: 1,
                cells: 5,
                compliant: 3,
                overdue: 1,
                not_assigned: 1,
                not_required: 3,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn a_tally_of_nothing_counts_nothing_and_the_last_person_is_counted() {
        assert_eq!(Tally::default().counts(), Counts::default());
        let mut tally = Tally::default();
        tally.add(UserId::new(), true, "compliant");
        let counts = tally.counts();
        assert_eq!((counts.people, counts.people_compliant), (1, 1));
    }
}
