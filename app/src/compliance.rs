//! Compliance across flows (issue 39, design §18): each person's standing in a set of flows (the
//! organization's required flows by default) at an instant — now, or a past `asOf` answered from
//! the assignment history — in keyset pages of people or rolled up per department, group or
//! manager, with the totals of the whole filtered population. Read on a fresh replica where one
//! is configured, else the primary, in one snapshot per answer. The rules of each status are in
//! `flow_common::db::compliance` and docs/compliance.md. With a format the request also records
//! an export of the whole report at the instant it judged (the report-worker writes the file).

use chrono::{DateTime, Datelike, NaiveTime, Utc};
use flow_common::db::compliance::{
    self, Cell, ComplianceParameters, Counts, GroupBy, GroupCounts, Population, Scope,
};
use flow_common::db::exports::{self, ExportCaps, ExportRecord, NewExport};
use flow_common::db::replicas::ReadPurpose;
use flow_domain::ids::{FlowId, GroupId, UserId};
use flow_domain::report::{ExportFormat, cost};
use flow_domain::{DayBound, Email, Invalid, parse_date_input};

use crate::ratelimit::{Operation, RateInfo, page_cost};
use crate::{Acting, Context, ServiceError};

pub use flow_common::db::compliance::ReportFlow;

/// Most flows in one report.
pub const MAX_FLOWS: usize = 50;
/// Most e-mails in `filter.userEmails`.
pub const MAX_EMAILS: usize = 1_000;
/// Page size without `limit`.
pub const DEFAULT_LIMIT: i64 = 100;
/// Largest page size.
pub const MAX_LIMIT: i64 = 1_000;
/// An open assignment due within this many days after the instant is `due_soon`: a week, the
/// horizon a manager acts on (the reminders' usual "due in 7 days").
pub const DUE_SOON_DAYS: i32 = 7;
/// Longest text filter (department, manager id), in characters.
pub const MAX_FILTER_CHARS: usize = 320;

/// A compliance report request as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct ComplianceFields {
    /// Flow ids (`flow_…`); absent: every required flow.
    pub flow_ids: Option<Vec<String>>,
    /// Only people of this department.
    pub department: Option<String>,
    /// Only members of this group (`grp_…`).
    pub group_id: Option<String>,
    /// Only people whose manager is this (the identity provider's manager id).
    pub manager_id: Option<String>,
    /// Only active (true) or deactivated (false) people.
    pub active: Option<bool>,
    /// Only these people.
    pub user_emails: Option<Vec<String>>,
    /// `department`, `group` or `manager`.
    pub group_by: Option<String>,
    /// The instant: RFC 3339, or a date (its end in the organization's time zone).
    pub as_of: Option<String>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page.
    pub limit: Option<i64>,
    /// Also export the whole report as a file: `csv`, `excel` or `pdf`.
    pub format: Option<String>,
}

/// Which flows a report covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowChoice {
    /// These, in this order.
    Given(Vec<FlowId>),
    /// The organization's required flows (not archived), by name.
    Required,
}

/// A checked compliance report request.
#[derive(Debug, Clone)]
pub struct ComplianceRequest {
    /// The flows.
    pub flows: FlowChoice,
    /// Who is counted.
    pub population: Population,
    /// Rows per group instead of people.
    pub group_by: Option<GroupBy>,
    /// The past instant asked for (`None`: now).
    pub as_of: Option<DateTime<Utc>>,
    /// Where the previous page ended, and the instant it judged.
    pub cursor: Option<ComplianceCursor>,
    /// Rows per page.
    pub limit: i64,
    /// The format of the export to record with the answer, when one is wanted.
    pub format: Option<ExportFormat>,
}

/// A page position: the instant the first page judged (every page judges the same one, so pages
/// and totals agree) and the last row's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComplianceCursor {
    /// The instant judged.
    pub at: DateTime<Utc>,
    /// The last row of the previous page.
    pub after: CursorKey,
}

/// The key of a page's last row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorKey {
    /// A person (pages of people, in user id order).
    Person(UserId),
    /// A group key (pages of groups, in key order).
    Group(String),
}

const PERSON_TAG: u8 = b'p';
const GROUP_TAG: u8 = b'g';

impl ComplianceCursor {
    /// The opaque text handed to callers: hex of the instant's microseconds, a tag and the key.
    pub fn encode(&self) -> String {
        let mut bytes = self.at.timestamp_micros().to_be_bytes().to_vec();
        match &self.after {
            CursorKey::Person(id) => {
                bytes.push(PERSON_TAG);
                bytes.extend_from_slice(id.0.as_bytes());
            }
            CursorKey::Group(key) => {
                bytes.push(GROUP_TAG);
                bytes.extend_from_slice(key.as_bytes());
            }
        }
        hex::encode(bytes)
    }

    /// Parses [`ComplianceCursor::encode`]'s output; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = hex::decode(text.trim()).ok()?;
        if bytes.len() < 9 {
            return None;
        }
        let micros = i64::from_be_bytes(bytes[..8].try_into().ok()?);
        let at = DateTime::<Utc>::from_timestamp_micros(micros)
            .filter(|at| flow_domain::year_in_range(at.year()))?;
        let after = match bytes[8] {
            PERSON_TAG => CursorKey::Person(UserId(uuid::Uuid::from_slice(&bytes[9..]).ok()?)),
            GROUP_TAG => CursorKey::Group(String::from_utf8(bytes[9..].to_vec()).ok()?),
            _ => return None,
        };
        Some(Self { at, after })
    }
}

/// A text filter: trimmed, not empty, at most [`MAX_FILTER_CHARS`].
fn text_filter(field: &str, text: Option<String>) -> Result<Option<String>, Invalid> {
    match text.as_deref().map(str::trim) {
        None => Ok(None),
        Some("") => Err(Invalid(format!("{field} must not be empty when given"))),
        Some(text) if text.chars().count() > MAX_FILTER_CHARS => Err(Invalid(format!(
            "{field} must be at most {MAX_FILTER_CHARS} characters"
        ))),
        Some(text) => Ok(Some(text.to_owned())),
    }
}

/// The flows asked for: at most [`MAX_FLOWS`], none twice; an id that cannot name a flow is
/// not found (404), as a flow id is everywhere else.
fn check_flows(ids: Option<Vec<String>>) -> Result<FlowChoice, ServiceError> {
    let Some(ids) = ids else {
        return Ok(FlowChoice::Required);
    };
    if ids.is_empty() || ids.len() > MAX_FLOWS {
        return Err(Invalid(format!(
            "flowIds must contain between 1 and {MAX_FLOWS} flow ids"
        ))
        .into());
    }
    let mut flows = Vec::with_capacity(ids.len());
    for text in &ids {
        let id = FlowId::parse(text.trim()).ok_or(ServiceError::NotFound("flow"))?;
        if !flows.contains(&id) {
            flows.push(id);
        }
    }
    Ok(FlowChoice::Given(flows))
}

/// The people named: at most [`MAX_EMAILS`] valid addresses, normalized.
fn check_emails(emails: Option<Vec<String>>) -> Result<Option<Vec<String>>, Invalid> {
    let Some(emails) = emails else {
        return Ok(None);
    };
    if emails.is_empty() || emails.len() > MAX_EMAILS {
        return Err(Invalid(format!(
            "filter.userEmails must contain between 1 and {MAX_EMAILS} addresses"
        )));
    }
    emails
        .iter()
        .enumerate()
        .map(|(index, text)| {
            Email::parse(&format!("filter.userEmails[{index}]"), text)
                .map(|email| email.normalized())
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn check_group_by(text: Option<&str>) -> Result<Option<GroupBy>, Invalid> {
    match text.map(str::trim) {
        None => Ok(None),
        Some("department") => Ok(Some(GroupBy::Department)),
        Some("group") => Ok(Some(GroupBy::Group)),
        Some("manager") => Ok(Some(GroupBy::Manager)),
        Some(_) => Err(Invalid::new(
            "groupBy must be one of department, group, manager",
        )),
    }
}

/// `asOf`: an RFC 3339 instant, or a date standing for the end of that day in `zone` (the
/// current instant when that day is today); never after `now`.
pub fn check_as_of(
    text: Option<&str>,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, Invalid> {
    let Some(text) = text else {
        return Ok(None);
    };
    let at = parse_date_input("asOf", text, zone, DayBound::End)?;
    let instant = DateTime::parse_from_rfc3339(text.trim()).is_ok();
    // A plain date's last second: one second before the next local midnight, made the midnight
    // itself so everything of that day (to the microsecond) counts.
    let at = if instant {
        at
    } else {
        at + chrono::Duration::seconds(1) - chrono::Duration::microseconds(1)
    };
    if at <= now {
        return Ok(Some(at));
    }
    let today_started = !instant && {
        let local_midnight = at
            .with_timezone(&zone)
            .date_naive()
            .and_time(NaiveTime::MIN);
        flow_domain::local_to_utc(zone, local_midnight).is_some_and(|start| start <= now)
    };
    if today_started {
        Ok(Some(now))
    } else {
        Err(Invalid::new("asOf must not be in the future"))
    }
}

/// Checks a request's fields; `zone` reads plain dates, `now` bounds `asOf`.
pub fn check(
    fields: ComplianceFields,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Result<ComplianceRequest, ServiceError> {
    let flows = check_flows(fields.flow_ids)?;
    let group_id = fields
        .group_id
        .map(|text| {
            GroupId::parse(text.trim())
                .ok_or_else(|| Invalid::new("filter.groupId must be a group id (grp_…)"))
        })
        .transpose()?;
    let population = Population {
        department: text_filter("filter.department", fields.department)?,
        group_id,
        manager_id: text_filter("filter.managerId", fields.manager_id)?,
        active: fields.active,
        emails: check_emails(fields.user_emails)?,
    };
    let group_by = check_group_by(fields.group_by.as_deref())?;
    let as_of = check_as_of(fields.as_of.as_deref(), zone, now)?;
    let format = fields
        .format
        .as_deref()
        .map(|text| ExportFormat::parse_field("format", text.trim()))
        .transpose()?;
    let limit = match fields.limit {
        None => DEFAULT_LIMIT,
        Some(limit) if (1..=MAX_LIMIT).contains(&limit) => limit,
        Some(_) => return Err(Invalid(format!("limit must be between 1 and {MAX_LIMIT}")).into()),
    };
    let invalid_cursor =
        || Invalid::new("cursor is not valid: pass the nextCursor of the previous page");
    let cursor = match fields.cursor.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => {
            let cursor = ComplianceCursor::decode(text).ok_or_else(invalid_cursor)?;
            let fits = matches!(
                (&cursor.after, group_by),
                (CursorKey::Person(_), None) | (CursorKey::Group(_), Some(_))
            );
            if !fits || cursor.at > now {
                return Err(invalid_cursor().into());
            }
            Some(cursor)
        }
    };
    Ok(ComplianceRequest {
        flows,
        population,
        group_by,
        as_of,
        cursor,
        limit,
        format,
    })
}

/// One person's row: their standing in each flow, in the report's flow order.
#[derive(Debug, Clone)]
pub struct PersonStanding {
    /// The person.
    pub user_id: UserId,
    /// Their e-mail.
    pub email: String,
    /// Their name.
    pub name: Option<String>,
    /// Their department.
    pub department: Option<String>,
    /// Their manager's id.
    pub manager_id: Option<String>,
    /// Whether they are active now.
    pub active: bool,
    /// One cell per flow.
    pub flows: Vec<Cell>,
    /// Flows required of them (all, but those of an audience they are not in).
    pub required: i64,
    /// Required flows they are compliant in.
    pub compliant: i64,
}

/// One group of a roll-up.
#[derive(Debug, Clone)]
pub struct GroupStanding {
    /// The department, group id or manager id; `None` for the people without one.
    pub key: Option<String>,
    /// The department, group name or manager name.
    pub name: Option<String>,
    /// Its counts.
    pub counts: Counts,
}

/// A compliance report as read.
#[derive(Debug, Clone)]
pub struct ComplianceAnswer {
    /// The instant judged.
    pub at: DateTime<Utc>,
    /// Whether that is a past instant asked for (`asOf`).
    pub historical: bool,
    /// The instant the data is current to (a replica's may be a moment behind the primary's).
    pub data_as_of: DateTime<Utc>,
    /// The flows, in the order of each row's cells.
    pub flows: Vec<ReportFlow>,
    /// The page of people (empty with a roll-up).
    pub people: Vec<PersonStanding>,
    /// The page of groups, with a roll-up.
    pub groups: Option<Vec<GroupStanding>>,
    /// The counts of the whole filtered population.
    pub totals: Counts,
    /// The cursor of the next page.
    pub next_cursor: Option<String>,
    /// The export recorded with the answer, when a format was asked.
    pub export: Option<ExportRecord>,
    /// Where the organization stands against its report limit.
    pub rate: RateInfo,
}

/// The flows of the request, checked against the organization: a flow it does not have is not
/// found (another organization's too); with none named, its required flows (400 when there are
/// none, or more than [`MAX_FLOWS`]).
async fn resolve_flows(
    ctx: &Context,
    acting: Acting<'_>,
    choice: &FlowChoice,
) -> Result<Vec<ReportFlow>, ServiceError> {
    match choice {
        FlowChoice::Given(ids) => {
            let found = compliance::flows_of(&ctx.db, acting.org_id(), ids).await?;
            ids.iter()
                .map(|id| {
                    found
                        .iter()
                        .find(|flow| flow.id == *id)
                        .cloned()
                        .ok_or(ServiceError::NotFound("flow"))
                })
                .collect()
        }
        FlowChoice::Required => {
            let limit = i64::try_from(MAX_FLOWS).unwrap_or(i64::MAX) + 1;
            let flows = compliance::required_flows(&ctx.db, acting.org_id(), limit).await?;
            if flows.is_empty() {
                return Err(Invalid::new(
                    "no flow of the organization is marked required: name flowIds, or mark \
                     flows required (PATCH /v1/flows/{id} {\"required\": true})",
                )
                .into());
            }
            if flows.len() > MAX_FLOWS {
                return Err(Invalid(format!(
                    "more than {MAX_FLOWS} flows are marked required: name at most {MAX_FLOWS} \
                     in flowIds"
                ))
                .into());
            }
            Ok(flows)
        }
    }
}

/// What one snapshot read.
struct Read {
    at: DateTime<Utc>,
    cells: Vec<Cell>,
    groups: Option<Vec<GroupCounts>>,
    totals: Counts,
}

/// The export a request with a format records, and what its cost left of the allowance.
struct Recorded {
    export: ExportRecord,
    rate: RateInfo,
    at: DateTime<Utc>,
}

/// The export a request asks for: its format, the caller's request id (kept with the export) and
/// what is left of the caller's report allowance before its cost.
#[derive(Clone, Copy)]
struct ExportAsked<'a> {
    format: ExportFormat,
    request_id: Option<&'a str>,
    rate: RateInfo,
}

/// Reads the page and the totals in one snapshot at the instant the cursor carries, else
/// `as_of`, else the snapshot's now. With a format, the export is recorded first, at that
/// instant, once the population is counted (its rows: people × flows), so the report-worker
/// writes the file while this request counts its own page and totals. A later attempt (the
/// first one's replica failed) judges the instant the export was recorded at, as a past one. When
/// the answer cannot be read after all, the export recorded for it is withdrawn (failed, unless
/// its file is already written), so an error leaves no export the caller did not hear of.
async fn read(
    ctx: &Context,
    acting: Acting<'_>,
    request: &ComplianceRequest,
    flows: &[ReportFlow],
    asked: Option<ExportAsked<'_>>,
) -> Result<(Read, DateTime<Utc>, Option<Recorded>), ServiceError> {
    let mut recorded: Option<Recorded> = None;
    let attempts = async {
        let mut reading = ctx.reads.read(ReadPurpose::Report, None);
        loop {
            let (mut snapshot, source) = reading.begin().await?;
            let at = request
                .cursor
                .as_ref()
                .map(|cursor| cursor.at)
                .or(request.as_of)
                .or(recorded.as_ref().map(|recorded| recorded.at))
                .unwrap_or_else(|| snapshot.now());
            let scope = Scope {
                org_id: acting.org_id(),
                flows: flows.iter().map(|flow| flow.id).collect(),
                at,
                historical: request.as_of.is_some() || recorded.is_some(),
                due_soon_days: DUE_SOON_DAYS,
                population: request.population.clone(),
            };
            let outcome = async {
                if let (Some(asked), None) = (asked, &recorded) {
                    let people = compliance::population_size(snapshot.connection(), &scope).await?;
                    let rows =
                        people.saturating_mul(i64::try_from(flows.len()).unwrap_or(i64::MAX));
                    let export =
                        record_export(ctx, acting, request, flows, asked, at, rows).await?;
                    recorded = Some(export);
                }
                Ok::<_, ServiceError>(read_on(snapshot.connection(), &scope, request).await?)
            }
            .await;
            if let Some(served) = reading.end(snapshot, source, outcome).await? {
                return Ok::<_, ServiceError>((served.value, served.source.data_as_of));
            }
        }
    }
    .await;
    match attempts {
        Ok((read, data_as_of)) => Ok((read, data_as_of, recorded)),
        Err(error) => {
            if let Some(recorded) = recorded {
                let id = recorded.export.id;
                if let Err(withdrawing) = exports::withdraw(&ctx.db, id, WITHDRAWN).await {
                    tracing::error!(
                        export_id = %id, error = %withdrawing,
                        "the compliance report failed after its export was recorded, and the \
                         export could not be withdrawn: its file will be written"
                    );
                }
            }
            Err(error)
        }
    }
}

/// Why an export is failed when the request that recorded it could not answer.
const WITHDRAWN: &str = "the compliance report that asked for this export failed before it \
                         answered; ask again";

/// Records the export of the report `request` asks for, judged at `at`, of `rows` rows: refused
/// (429) past the organization's export caps, and costing one more report request per started
/// 10,000 rows.
async fn record_export(
    ctx: &Context,
    acting: Acting<'_>,
    request: &ComplianceRequest,
    flows: &[ReportFlow],
    asked: ExportAsked<'_>,
    at: DateTime<Utc>,
    rows: i64,
) -> Result<Recorded, ServiceError> {
    let mut rate = asked.rate;
    let caller = acting.caller;
    let allowance = Operation::Report.limit(caller);
    if let Some(export_cost) = cost::export(rows, allowance) {
        rate = ctx
            .limiter
            .check(caller, Operation::Report, export_cost)
            .await?;
    }
    let parameters = ComplianceParameters {
        flow_ids: flows.iter().map(|flow| flow.id).collect(),
        required: request.flows == FlowChoice::Required,
        department: request.population.department.clone(),
        group_id: request.population.group_id,
        manager_id: request.population.manager_id.clone(),
        active: request.population.active,
        user_emails: request.population.emails.clone(),
        group_by: request.group_by,
        as_of: at,
        as_of_given: request.as_of.is_some(),
        due_soon_days: DUE_SOON_DAYS,
        timezone: caller.zone.name().to_owned(),
    };
    let new = NewExport::new(
        acting.org_id(),
        asked.format,
        parameters,
        rows,
        asked.request_id,
        Utc::now(),
    );
    let export_caps = ExportCaps::for_tier(caller.org.tier());
    let export = exports::create(&ctx.db, &new, export_caps).await?;
    Ok(Recorded { export, rate, at })
}

async fn read_on(
    connection: &mut sqlx::PgConnection,
    scope: &Scope,
    request: &ComplianceRequest,
) -> Result<Read, sqlx::Error> {
    let after = request.cursor.as_ref().map(|cursor| &cursor.after);
    let (cells, groups, totals) = match request.group_by {
        None => {
            let after = match after {
                Some(CursorKey::Person(id)) => Some(*id),
                _ => None,
            };
            let totals = compliance::totals(&mut *connection, scope).await?;
            let cells = compliance::page(connection, scope, after, request.limit + 1).await?;
            (cells, None, totals)
        }
        Some(by) => {
            let after = match after {
                Some(CursorKey::Group(key)) => Some(key.as_str()),
                _ => None,
            };
            let limit = request.limit + 1;
            let (groups, totals) = if by == GroupBy::Group {
                // A person counts in each of their groups: the totals are counted apart.
                let totals = compliance::totals(&mut *connection, scope).await?;
                let groups = compliance::groups(connection, scope, by, after, limit).await?;
                (groups, totals)
            } else {
                compliance::groups_with_totals(connection, scope, by, after, limit).await?
            };
            (Vec::new(), Some(groups), totals)
        }
    };
    Ok(Read {
        at: scope.at,
        cells,
        groups,
        totals,
    })
}

/// Gathers the cells (a person's in a row, in flow order) into people.
fn people_of(cells: Vec<Cell>) -> Vec<PersonStanding> {
    let mut people: Vec<PersonStanding> = Vec::new();
    for cell in cells {
        let required = i64::from(cell.required);
        let compliant = i64::from(cell.required && cell.status == "compliant");
        match people.last_mut() {
            Some(person) if person.user_id == cell.user_id => {
                person.required += required;
                person.compliant += compliant;
                person.flows.push(cell);
            }
            _ => people.push(PersonStanding {
                user_id: cell.user_id,
                email: cell.email.clone(),
                name: cell.name.clone(),
                department: cell.department.clone(),
                manager_id: cell.manager_id.clone(),
                active: cell.active,
                required,
                compliant,
                flows: vec![cell],
            }),
        }
    }
    people
}

/// A group's key as callers see it: a group's id with its prefix, `None` for "without one".
fn group_standing(by: GroupBy, row: GroupCounts) -> GroupStanding {
    let key = match (by, row.key.as_str()) {
        (_, "") => None,
        (GroupBy::Group, key) => Some(
            uuid::Uuid::parse_str(key)
                .map(|id| GroupId(id).to_string())
                .unwrap_or_else(|_| key.to_owned()),
        ),
        (_, key) => Some(key.to_owned()),
    };
    GroupStanding {
        key,
        name: row.label,
        counts: row.counts,
    }
}

/// The compliance report `request` asks for: a page of people (or of groups) and the totals of
/// the whole population, at one instant. Counts against the report limit, one request per
/// started 100 rows of `limit`. With a format, see [`report_with_request_id`].
pub async fn report(
    ctx: &Context,
    acting: Acting<'_>,
    request: ComplianceRequest,
) -> Result<ComplianceAnswer, ServiceError> {
    report_with_request_id(ctx, acting, request, None).await
}

/// [`report`], and with a format an export of the whole report, judged at the same instant as
/// the answer (the request's `asOf`, else the instant it was read), whose row is the request's
/// one commit point, written before the answer's page and totals are counted (the worker starts
/// the file meanwhile). The export is refused (429) when the organization is at its export caps,
/// as a flow report's is, and costs one more report request per started 10,000 rows of the file
/// (people × flows). `request_id` is the caller's own request id, kept with the export.
pub async fn report_with_request_id(
    ctx: &Context,
    acting: Acting<'_>,
    request: ComplianceRequest,
    request_id: Option<&str>,
) -> Result<ComplianceAnswer, ServiceError> {
    let caller = acting.caller;
    let rate = ctx
        .limiter
        .check(caller, Operation::Report, page_cost(request.limit))
        .await?;
    // Refused before the report is read; checked again when the export row is written.
    let export_caps = ExportCaps::for_tier(caller.org.tier());
    if request.format.is_some() {
        exports::usage(&ctx.db, acting.org_id())
            .await?
            .check(export_caps)?;
    }
    let flows = resolve_flows(ctx, acting, &request.flows).await?;
    let asked = request.format.map(|format| ExportAsked {
        format,
        request_id,
        rate,
    });
    let (read, data_as_of, recorded) = read(ctx, acting, &request, &flows, asked).await?;
    let limit = usize::try_from(request.limit).unwrap_or(usize::MAX);
    let at = read.at;
    let mut next_cursor = None;
    let mut people = people_of(read.cells);
    if people.len() > limit {
        people.truncate(limit);
        next_cursor = people.last().map(|person| ComplianceCursor {
            at,
            after: CursorKey::Person(person.user_id),
        });
    }
    let groups = match (request.group_by, read.groups) {
        (Some(by), Some(mut rows)) => {
            if rows.len() > limit {
                rows.truncate(limit);
                next_cursor = rows.last().map(|row| ComplianceCursor {
                    at,
                    after: CursorKey::Group(row.key.clone()),
                });
            }
            Some(
                rows.into_iter()
                    .map(|row| group_standing(by, row))
                    .collect(),
            )
        }
        _ => None,
    };
    let (export, rate) = match recorded {
        Some(recorded) => (Some(recorded.export), recorded.rate),
        None => (None, rate),
    };
    Ok(ComplianceAnswer {
        at,
        historical: request.as_of.is_some(),
        data_as_of,
        flows,
        people,
        groups,
        totals: read.totals,
        next_cursor: next_cursor.map(|cursor| cursor.encode()),
        export,
        rate,
    })
}

/// `part` of `whole` in percent, to one decimal; `None` when `whole` is zero.
pub fn percent(part: i64, whole: i64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 * 1000.0 / whole as f64).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let at = DateTime::parse_from_rfc3339("2026-06-30T21:59:59.999999Z")
            .expect("instant")
            .with_timezone(&Utc);
        for after in [
            CursorKey::Person(UserId::new()),
            CursorKey::Group("Sales".into()),
            CursorKey::Group(String::new()),
        ] {
            let cursor = ComplianceCursor { at, after };
            assert_eq!(ComplianceCursor::decode(&cursor.encode()), Some(cursor));
        }
        for text in ["", "zz", "00", "0000000000000000", "00000000000000007a"] {
            assert_eq!(ComplianceCursor::decode(text), None, "{text}");
        }
    }

    #[test]
    fn a_plain_date_as_of_is_the_end_of_that_day_in_the_zone() {
        let zone: chrono_tz::Tz = "Pacific/Auckland".parse().expect("zone");
        let now = Utc::now();
        let at = check_as_of(Some("2026-06-30"), zone, now)
            .expect("valid")
            .expect("given");
        // Midnight at the end of June 30 in Auckland (UTC+12 in winter) is 12:00 UTC that day.
        assert_eq!(at.to_rfc3339(), "2026-06-30T11:59:59.999999+00:00");
        assert!(check_as_of(Some("2999-01-01"), zone, now).is_err());
        assert!(check_as_of(Some("yesterday"), zone, now).is_err());
        let today = now.with_timezone(&zone).date_naive().to_string();
        assert_eq!(
            check_as_of(Some(&today), zone, now).expect("today"),
            Some(now)
        );
    }

    #[test]
    fn percent_rounds_to_one_decimal() {
        assert_eq!(percent(1, 3), Some(33.3));
        assert_eq!(percent(2, 3), Some(66.7));
        assert_eq!(percent(0, 0), None);
    }
}
