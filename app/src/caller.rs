//! Who a request acts for: the organization behind an API key (or a dashboard session), as the
//! caches resolve it, the rate limiter counts it and the operations scope every query by it.

use flow_common::db::orgs::Organization;
use flow_domain::ids::{KeyId, OrgId};

/// Who is calling.
#[derive(Debug)]
pub struct Caller {
    /// The key used.
    pub key_id: KeyId,
    /// Its organization.
    pub org: Organization,
    /// The organization's time zone.
    pub zone: chrono_tz::Tz,
    /// The key is restricted to SCIM (`/scim/v2`); `/v1` refuses it with 403.
    pub scim_only: bool,
}

impl Caller {
    /// The organization acting without an API key (a dashboard session, `flowctl`).
    pub fn without_key(org: Organization) -> Self {
        Self {
            key_id: KeyId(uuid::Uuid::nil()),
            zone: org.zone(),
            org,
            scim_only: false,
        }
    }

    /// The organization's id.
    pub fn org_id(&self) -> OrgId {
        self.org.id
    }
}
