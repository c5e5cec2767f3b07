//! SCIM 2.0 (placeholder doc, rewritten at the end).

pub mod discovery;
pub mod error;
pub mod filter;
mod group;
pub mod list;
pub mod meta;
mod multi;
pub mod patch;
pub mod path;
pub mod projection;
mod resource;
pub mod schema;
mod user;
mod value;

pub use error::{ScimError, ScimType};
pub use group::{Group, Member, MembershipChanges};
pub use list::{ListResponse, Page};
pub use meta::ResourceMeta;
pub use patch::{PatchOpKind, PatchOperation, PatchRequest};
pub use path::PatchPath;
pub use projection::Projection;
pub use schema::ResourceType;
pub use user::{Email, Manager, Name, StartDate, User};
pub use value::MAX_STRING_LENGTH;

/// The core User schema URN.
pub const CORE_USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
/// The core Group schema URN.
pub const CORE_GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
/// The enterprise User extension URN.
pub const ENTERPRISE_USER_SCHEMA: &str =
    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";
/// Flow's User extension URN, which holds the start date.
pub const FLOW_USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:extension:flow:2.0:User";
/// The error message URN.
pub const ERROR_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:Error";
/// The PATCH request message URN.
pub const PATCH_OP_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
/// The list response message URN.
pub const LIST_RESPONSE_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:ListResponse";
