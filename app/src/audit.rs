//! Reading the organization's audit trail (its rows are written by the operations that change
//! things, in their transactions): the dashboard's Settings → Audit log and
//! `GET /v1/audit-events` read the same rows.

use flow_common::db::audit::{self, AuditEvent, AuditFilter};

use crate::{Acting, Context, ServiceError};

/// Up to `limit` of the organization's audit rows that `filter` lets through, before the row
/// `before`, newest first.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    filter: AuditFilter<'_>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEvent>, ServiceError> {
    Ok(audit::list(&ctx.db, acting.org_id(), filter, before, limit).await?)
}
