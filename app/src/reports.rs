//! Reports on a flow, for every surface: the figures, schedules, aggregates and one page of
//! assignments, read in one snapshot (on a replica within its staleness bound, else the
//! primary), and with a format an export of the whole report, whose row is the request's one
//! commit point. The request is typed ([`ReportParams`], built by the domain's parser from the
//! API's fields or directly from domain types by the dashboard); the report's cost is counted
//! against the organization's report limit whatever the surface.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flow_common::db::exports::{self, ExportCaps, ExportRecord, NewExport};
use flow_common::db::flows::FlowSummary;
use flow_common::db::replicas::ReadPurpose;
use flow_domain::AssignmentStatus;
use flow_domain::ids::FlowId;
use flow_domain::report::cost;
use flow_domain::report::params::{PageRequest, ReportParams};
use flow_domain::report::{AggregateMetric, AggregateSpec, ExportFormat, Period, ReportParameters};

use crate::Context;
use crate::engine::report::{Page, Report};
use crate::ratelimit::{Operation, RateInfo};
use crate::{Acting, ServiceError};

/// A report request.
#[derive(Debug, Clone)]
pub struct ReportQuery {
    /// What to report on, validated.
    pub params: ReportParams,
    /// Whether the caller chose the page size: a detailed report then refuses a size its
    /// module progress cannot fit, rather than shrinking the page.
    pub limit_given: bool,
}

impl ReportQuery {
    /// The first page of the figures of `flow_id` in `zone`, every assignment counted, with the
    /// list filtered to `status` and aggregated as `aggregate` asks; with `format`, exported too.
    pub fn of_flow(
        flow_id: FlowId,
        zone: chrono_tz::Tz,
        status: Option<AssignmentStatus>,
        aggregate: Option<AggregateSpec>,
        format: Option<ExportFormat>,
        page_size: i64,
    ) -> Self {
        Self {
            params: ReportParams {
                flow_id: Some(flow_id),
                start: None,
                end: None,
                status,
                include_cancelled: status == Some(AssignmentStatus::Cancelled),
                detailed: false,
                format,
                aggregate,
                zone,
                page: PageRequest {
                    limit: page_size,
                    after: None,
                },
            },
            limit_given: true,
        }
    }
}

/// The weekly totals and completions of a flow, as the dashboard's chart shows them.
pub fn weekly_completion() -> AggregateSpec {
    AggregateSpec {
        by: Period::Week,
        metrics: vec![
            AggregateMetric::TotalAssignments,
            AggregateMetric::CompletedAssignments,
        ],
    }
}

/// A report as read.
#[derive(Debug)]
pub struct ReportAnswer {
    /// The flow reported on.
    pub flow: Arc<FlowSummary>,
    /// The parameters applied (an export replays them).
    pub parameters: ReportParameters,
    /// Figures, schedules and aggregates.
    pub report: Report,
    /// The page of assignments.
    pub page: Page,
    /// The instant the data is current to (a replica's may be a moment behind the primary's).
    pub data_as_of: DateTime<Utc>,
    /// The export requested with it, when a format was asked.
    pub export: Option<ExportRecord>,
    /// Where the organization stands against its report limit.
    pub rate: RateInfo,
}

/// Reads the report `query` asks for and, with a format, records its export. `request_id` is
/// the caller's own request id, kept with the export.
pub async fn report(
    ctx: &Context,
    acting: Acting<'_>,
    query: ReportQuery,
    request_id: Option<&str>,
) -> Result<ReportAnswer, ServiceError> {
    let ReportQuery {
        mut params,
        limit_given,
    } = query;
    let caller = acting.caller;
    let allowance = Operation::Report.limit(caller);
    let mut rate = ctx
        .limiter
        .check(
            caller,
            Operation::Report,
            cost::page(params.page.limit, allowance),
        )
        .await?;
    // Refused before the report is read; checked again when the export row is written.
    let export_caps = ExportCaps::for_tier(caller.org.tier());
    if params.format.is_some() {
        exports::usage(&ctx.db, acting.org_id())
            .await?
            .check(export_caps)?;
    }
    let flow = match params.flow_id {
        Some(flow_id) => ctx.caches.flow(&ctx.db, acting.org_id(), flow_id).await?,
        None => None,
    }
    .ok_or(ServiceError::NotFound("flow"))?;
    if params.detailed {
        // A page's module progress is bounded by the flow's modules, and costs by them.
        params.page.limit =
            cost::detailed_page_limit(params.page.limit, limit_given, flow.module_count)?;
        rate = ctx
            .limiter
            .check(
                caller,
                Operation::Report,
                cost::detailed(params.page.limit, flow.module_count, allowance),
            )
            .await?;
    }
    let parameters = params.parameters(flow.id);
    let mut read = ctx.reads.read(ReadPurpose::Report, None);
    let served = loop {
        let (snapshot, source) = read.begin().await?;
        let outcome = Report::with_page(&snapshot, &parameters, params.page).await;
        if let Some(served) = read.end(snapshot, source, outcome).await? {
            break served;
        }
    };
    let data_as_of = served.source.data_as_of;
    let (report, page) = served.value;
    let Some(format) = params.format else {
        return Ok(ReportAnswer {
            flow,
            parameters,
            report,
            page,
            data_as_of,
            export: None,
            rate,
        });
    };
    let rows = report.export_row_count(format);
    if let Some(export_cost) = cost::export(rows, allowance) {
        rate = ctx
            .limiter
            .check(caller, Operation::Report, export_cost)
            .await?;
    }
    // The export row is the request's one commit point: written, the export will be generated.
    let export = exports::create(
        &ctx.db,
        &NewExport::new(
            acting.org_id(),
            format,
            parameters.clone(),
            rows,
            request_id,
            report.generated_at,
        ),
        export_caps,
    )
    .await?;
    Ok(ReportAnswer {
        flow,
        parameters,
        report,
        page,
        data_as_of,
        export: Some(export),
        rate,
    })
}
