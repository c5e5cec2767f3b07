//! Reading the organization's audit trail (its rows are written by the operations that change
//! things, in their transactions).

use flow_common::db::audit::{self, AuditEvent};

use crate::{Acting, Context, ServiceError};

/// Up to `limit` of the organization's audit rows before the row `before`, newest first.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEvent>, ServiceError> {
    Ok(audit::list(&ctx.db, acting.org_id(), before, limit).await?)
}
