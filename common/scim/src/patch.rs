//! PATCH requests (RFC 7644 §3.5.2): the `PatchOp` body parsed into operations that each
//! have a path. A path-less `add`/`replace` (as Okta and Microsoft Entra ID send) is expanded
//! into one operation per attribute of its value object, including URN-keyed extension
//! objects and keys that are paths themselves (`name.givenName`,
//! `emails[type eq "work"].value`). Applying operations is the resources' job
//! ([`User::apply_patch`](crate::User::apply_patch), [`Group::apply_patch`](crate::Group::apply_patch)).

use std::fmt;

use serde_json::{Map, Value};

use crate::PATCH_OP_SCHEMA;
use crate::error::ScimError;
use crate::filter::{self, Filter};
use crate::path::PatchPath;
use crate::schema::{self, Mutability, Resolved, ResourceType, Schema, Unresolved};
use crate::value;

/// The most operations accepted in one PATCH request; more is 413, as RFC 7644 §3.7.4 answers
/// a bulk request over `maxOperations`.
pub const MAX_PATCH_OPERATIONS: usize = 1000;

/// The most values the operations of one PATCH request carry together (an operation counts
/// the values of its value arrays, at least one); more is 400 `tooMany` naming the cap. A
/// thousand operations of ten members each is the largest request; a group grows past that
/// in several.
pub const MAX_PATCH_VALUES: usize = 10_000;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchOpKind {
    /// Adds values (single-valued attributes: sets them).
    Add,
    /// Removes values.
    Remove,
    /// Replaces values.
    Replace,
}

impl PatchOpKind {
    /// Reads `op`, case-insensitively: Entra ID sends `Add`, `Replace`, `Remove`.
    pub fn parse(op: &str) -> Option<Self> {
        match op.trim().to_ascii_lowercase().as_str() {
            "add" => Some(PatchOpKind::Add),
            "remove" => Some(PatchOpKind::Remove),
            "replace" => Some(PatchOpKind::Replace),
            _ => None,
        }
    }

    /// The keyword, lower-case.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchOpKind::Add => "add",
            PatchOpKind::Remove => "remove",
            PatchOpKind::Replace => "replace",
        }
    }
}

/// One operation, with its path (path-less ones have been expanded).
#[derive(Debug, Clone, PartialEq)]
pub struct PatchOperation {
    /// The position of the operation in the request's `Operations`, for error messages.
    pub index: usize,
    /// What it does.
    pub kind: PatchOpKind,
    /// What it applies to.
    pub path: PatchPath,
    /// The value; `None` when the request had none (allowed for `remove` only).
    pub value: Option<Value>,
}

impl PatchOperation {
    /// Prefixes an error's detail with the operation it comes from.
    pub(crate) fn error(&self, error: ScimError) -> ScimError {
        error.prefixed(&format!(
            "Operations[{}] ({} {})",
            self.index,
            self.kind.as_str(),
            self.path
        ))
    }
}

impl fmt::Display for PatchOperation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {}", self.kind.as_str(), self.path)
    }
}

/// A parsed PATCH request.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchRequest {
    /// The operations, in order, path-less ones expanded.
    pub operations: Vec<PatchOperation>,
}

impl PatchRequest {
    /// Parses a `PatchOp` body. `schemas`, when present, must name the PatchOp message;
    /// member names are case-insensitive. Errors: 400 `invalidSyntax` for a body that is not a
    /// PatchOp message or an unknown `op`, `invalidPath`/`invalidFilter` for a bad path,
    /// `noTarget` for a path-less `remove`, `invalidValue` for a missing or unusable value,
    /// 413 for more than [`MAX_PATCH_OPERATIONS`] operations.
    pub fn parse(body: &Value) -> Result<Self, ScimError> {
        let object = body.as_object().ok_or_else(|| {
            ScimError::invalid_syntax(format!(
                "the body must be a PatchOp object, not {}",
                value::kind(body)
            ))
        })?;
        if let Some(schemas) = value::get(object, "schemas") {
            let names_patch_op = schemas.as_array().is_some_and(|schemas| {
                schemas.iter().any(|schema| {
                    schema
                        .as_str()
                        .is_some_and(|urn| urn.eq_ignore_ascii_case(PATCH_OP_SCHEMA))
                })
            });
            if !names_patch_op {
                return Err(ScimError::invalid_syntax(format!(
                    "schemas must be [\"{PATCH_OP_SCHEMA}\"]"
                )));
            }
        }
        let operations = value::get(object, "Operations")
            .ok_or_else(|| ScimError::invalid_syntax("Operations is required"))?
            .as_array()
            .ok_or_else(|| ScimError::invalid_syntax("Operations must be an array"))?;
        if operations.is_empty() {
            return Err(ScimError::invalid_syntax(
                "Operations must hold at least one operation",
            ));
        }
        if operations.len() > MAX_PATCH_OPERATIONS {
            return Err(ScimError::payload_too_large(format!(
                "the request has {} operations; at most {MAX_PATCH_OPERATIONS} are accepted",
                operations.len()
            )));
        }
        let carried: usize = operations
            .iter()
            .map(|operation| {
                operation
                    .as_object()
                    .and_then(|operation| value::get(operation, "value"))
                    .map_or(1, |value| weight(value).max(1))
            })
            .sum();
        if carried > MAX_PATCH_VALUES {
            return Err(ScimError::too_many(format!(
                "the request's operations carry {carried} values; at most {MAX_PATCH_VALUES} \
                 are accepted in one PATCH (send the rest in further requests)"
            )));
        }
        let mut parsed = Vec::with_capacity(operations.len());
        for (index, operation) in operations.iter().enumerate() {
            parse_operation(index, operation, &mut parsed)
                .map_err(|error| error.prefixed(&format!("Operations[{index}]")))?;
        }
        Ok(Self { operations: parsed })
    }
}

/// How many values `value` carries: the items of its arrays, wherever they are (a path-less
/// value object's `members` or `emails`), each counted once; a scalar or an object without
/// arrays is one.
fn weight(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(|item| weight(item).max(1)).sum(),
        Value::Object(object) => object
            .values()
            .filter(|inner| inner.is_array() || inner.is_object())
            .map(weight)
            .sum::<usize>()
            .max(1),
        _ => 1,
    }
}

fn parse_operation(
    index: usize,
    operation: &Value,
    parsed: &mut Vec<PatchOperation>,
) -> Result<(), ScimError> {
    let operation = operation.as_object().ok_or_else(|| {
        ScimError::invalid_syntax(format!("must be an object, not {}", value::kind(operation)))
    })?;
    let kind = match value::get(operation, "op") {
        Some(Value::String(op)) => PatchOpKind::parse(op).ok_or_else(|| {
            ScimError::invalid_syntax(format!(
                "op must be add, remove or replace, not {}",
                Value::String(op.clone())
            ))
        })?,
        Some(other) => {
            return Err(ScimError::invalid_syntax(format!(
                "op must be add, remove or replace, not {}",
                value::kind(other)
            )));
        }
        None => return Err(ScimError::invalid_syntax("op is required")),
    };
    let path = match value::get(operation, "path") {
        None | Some(Value::Null) => None,
        Some(Value::String(path)) if path.trim().is_empty() => None,
        Some(Value::String(path)) => Some(PatchPath::parse(path)?),
        Some(other) => {
            return Err(ScimError::invalid_path(format!(
                "path must be a string, not {}",
                value::kind(other)
            )));
        }
    };
    let value = value::get(operation, "value").cloned();
    match path {
        Some(path) => {
            if kind != PatchOpKind::Remove && value.is_none() {
                return Err(ScimError::invalid_value(format!(
                    "value is required for {}",
                    kind.as_str()
                )));
            }
            parsed.push(PatchOperation {
                index,
                kind,
                path,
                value,
            });
        }
        None => {
            if kind == PatchOpKind::Remove {
                return Err(ScimError::no_target("remove needs a path"));
            }
            let value = value.unwrap_or(Value::Null);
            let object = value.as_object().ok_or_else(|| {
                ScimError::invalid_value(format!(
                    "without a path, value must be an object of attributes, not {}",
                    value::kind(&value)
                ))
            })?;
            expand(index, kind, None, object, parsed)?;
        }
    }
    Ok(())
}

/// Turns a path-less value object into one operation per attribute. Keys are paths
/// (`name.givenName`, `emails[type eq "work"].value`, URN-qualified attributes); a key that is
/// a schema URN with an object value expands into that schema's attributes. `id`, `meta` and
/// `schemas` are read-only and ignored here (Okta's group rename carries the group's `id`).
fn expand(
    index: usize,
    kind: PatchOpKind,
    schema: Option<&str>,
    object: &Map<String, Value>,
    parsed: &mut Vec<PatchOperation>,
) -> Result<(), ScimError> {
    for (key, value) in object {
        if ["id", "meta", "schemas"]
            .iter()
            .any(|read_only| key.eq_ignore_ascii_case(read_only))
        {
            continue;
        }
        let text = match schema {
            Some(urn) => format!("{urn}:{key}"),
            None => key.clone(),
        };
        let path = PatchPath::parse(&text).map_err(|error| {
            error.prefixed(&format!("value key {}", Value::String(key.clone())))
        })?;
        match (&path, value) {
            (PatchPath::Schema(urn), Value::Object(inner)) if schema.is_none() => {
                expand(index, kind, Some(urn), inner, parsed)?;
            }
            _ => parsed.push(PatchOperation {
                index,
                kind,
                path,
                value: Some(value.clone()),
            }),
        }
    }
    Ok(())
}

/// What a PATCH path designates in a resource type.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// An attribute Flow does not keep: the operation changes nothing (RFC 7643 lets a
    /// service provider ignore attributes it does not support; identity providers send
    /// standard attributes such as `phoneNumbers` whatever the service supports).
    Ignored,
    /// A whole schema (an extension object).
    Schema(&'static Schema),
    /// An attribute Flow keeps, with the checked value filter when the path has one.
    Attribute {
        /// The attribute, its sub-attribute and where they live.
        resolved: Resolved,
        /// The value filter, with canonical sub-attribute names.
        filter: Option<Filter>,
    },
}

/// Resolves a PATCH path against a resource type. A read-only attribute (`id`, `meta`) is
/// 400 `mutability`; a sub-attribute of a simple attribute or a filter on a single-valued one
/// is `invalidPath`; a filter naming unknown sub-attributes is `invalidFilter`.
pub(crate) fn resolve(resource: ResourceType, path: &PatchPath) -> Result<Target, ScimError> {
    let (path, filter) = match path {
        PatchPath::Schema(urn) => {
            return Ok(resource
                .schema_by_urn(urn)
                .map_or(Target::Ignored, Target::Schema));
        }
        PatchPath::Attribute { path, filter } => (path, filter),
    };
    let resolved = match schema::resolve(
        resource,
        path.urn.as_deref(),
        &path.name,
        path.sub_attribute.as_deref(),
    ) {
        Ok(resolved) => resolved,
        Err(Unresolved::Unknown | Unresolved::UnknownSubAttribute(_)) => {
            return Ok(Target::Ignored);
        }
        Err(Unresolved::NotComplex(why)) => return Err(ScimError::invalid_path(why)),
    };
    if resolved.attribute.mutability == Mutability::ReadOnly
        || resolved.leaf().mutability == Mutability::ReadOnly
    {
        return Err(ScimError::mutability(format!(
            "'{}' is read-only",
            resolved.canonical()
        )));
    }
    let filter = match filter {
        None => None,
        Some(filter) => {
            let attribute = resolved.attribute;
            if !(attribute.multi_valued && attribute.is_complex()) {
                return Err(ScimError::invalid_path(format!(
                    "'{}' is not multi-valued, so it takes no [value filter]",
                    attribute.name
                )));
            }
            Some(
                filter::check_value_filter(filter, attribute, false)
                    .map_err(ScimError::invalid_filter)?,
            )
        }
    };
    Ok(Target::Attribute { resolved, filter })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ScimType;
    use crate::filter::AttrPath;

    fn paths(request: &PatchRequest) -> Vec<String> {
        request
            .operations
            .iter()
            .map(|operation| operation.to_string())
            .collect()
    }

    #[test]
    fn okta_deactivation_has_no_path_and_expands() {
        // Okta: PATCH /Users/{id} to deactivate (it never DELETEs users).
        let request = PatchRequest::parse(&json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "value": {"active": false}}]
        }))
        .unwrap();
        assert_eq!(
            request.operations,
            vec![PatchOperation {
                index: 0,
                kind: PatchOpKind::Replace,
                path: PatchPath::Attribute {
                    path: AttrPath::new("active", None),
                    filter: None
                },
                value: Some(json!(false)),
            }]
        );
    }

    #[test]
    fn entra_capitalised_ops_and_filtered_paths() {
        let request = PatchRequest::parse(&json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [
                {"op": "Replace", "path": "emails[type eq \"work\"].value", "value": "updatedEmail@microsoft.com"},
                {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"},
                {"op": "Add", "path": "externalId", "value": "0a21f0f2"},
                {"op": "Remove", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager"}
            ]
        }))
        .unwrap();
        assert_eq!(
            paths(&request),
            vec![
                r#"replace emails[type eq "work"].value"#,
                "replace name.familyName",
                "add externalId",
                "remove urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager",
            ]
        );
    }

    #[test]
    fn entra_value_object_with_dotted_filtered_and_urn_keys_expands() {
        let request = PatchRequest::parse(&json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{
                "op": "replace",
                "value": {
                    "displayName": "Henry Doe",
                    "emails[type eq \"work\"].value": "henry@contoso.com",
                    "name.givenName": "Henry",
                    "name.familyName": "Doe",
                    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department": "Sales",
                    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {
                        "employeeNumber": "701984",
                        "manager": {"value": "usr_boss"}
                    },
                    "active": "False"
                }
            }]
        }))
        .unwrap();
        let mut expanded = paths(&request);
        expanded.sort();
        assert_eq!(
            expanded,
            vec![
                "replace active",
                "replace displayName",
                r#"replace emails[type eq "work"].value"#,
                "replace name.familyName",
                "replace name.givenName",
                "replace urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department",
                "replace urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber",
                "replace urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager",
            ]
        );
    }

    #[test]
    fn okta_group_rename_ignores_the_id_in_the_value() {
        let request = PatchRequest::parse(&json!({
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{
                "op": "replace",
                "value": {"id": "abf4dd94-a4c0-4f67-89c9-76b03340cb9b", "displayName": "Test SCIMv2"}
            }]
        }))
        .unwrap();
        assert_eq!(paths(&request), vec!["replace displayName"]);
    }

    #[test]
    fn member_names_are_case_insensitive_and_schemas_is_optional() {
        let request = PatchRequest::parse(&json!({
            "operations": [{"OP": "REMOVE", "Path": "members[value eq \"usr_1\"]"}]
        }))
        .unwrap();
        assert_eq!(paths(&request), vec![r#"remove members[value eq "usr_1"]"#]);
    }

    #[test]
    fn malformed_requests_have_the_right_scim_type() {
        let patch =
            |operations: Value| json!({"schemas": [PATCH_OP_SCHEMA], "Operations": operations});
        let cases = [
            (
                json!([]),
                ScimType::InvalidSyntax,
                "the body must be a PatchOp object, not an array",
            ),
            (
                json!({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "Operations": [{"op": "add", "path": "title", "value": "x"}]}),
                ScimType::InvalidSyntax,
                "schemas must be",
            ),
            (
                json!({"schemas": [PATCH_OP_SCHEMA]}),
                ScimType::InvalidSyntax,
                "Operations is required",
            ),
            (
                json!({"Operations": {"op": "add"}}),
                ScimType::InvalidSyntax,
                "Operations must be an array",
            ),
            (
                patch(json!([])),
                ScimType::InvalidSyntax,
                "at least one operation",
            ),
            (
                patch(json!(["add"])),
                ScimType::InvalidSyntax,
                "Operations[0]: must be an object, not the string \"add\"",
            ),
            (
                patch(json!([{"path": "title", "value": "x"}])),
                ScimType::InvalidSyntax,
                "Operations[0]: op is required",
            ),
            (
                patch(json!([{"op": "move", "path": "title"}])),
                ScimType::InvalidSyntax,
                "Operations[0]: op must be add, remove or replace, not \"move\"",
            ),
            (
                patch(json!([{"op": "add", "path": "title"}])),
                ScimType::InvalidValue,
                "Operations[0]: value is required for add",
            ),
            (
                patch(json!([{"op": "replace", "value": "x"}])),
                ScimType::InvalidValue,
                "without a path, value must be an object",
            ),
            (
                patch(json!([{"op": "remove"}])),
                ScimType::NoTarget,
                "Operations[0]: remove needs a path",
            ),
            (
                patch(json!([{"op": "add", "path": 3, "value": "x"}])),
                ScimType::InvalidPath,
                "path must be a string",
            ),
            (
                patch(json!([{"op": "add", "path": "name..x", "value": "x"}])),
                ScimType::InvalidPath,
                "invalid path 'name..x'",
            ),
            (
                patch(json!([{"op": "remove", "path": "members[value eq]"}])),
                ScimType::InvalidFilter,
                "invalid path 'members[value eq]'",
            ),
            (
                patch(json!([{"op": "add", "value": {"bad key!": 1}}])),
                ScimType::InvalidPath,
                "Operations[0]: value key \"bad key!\"",
            ),
        ];
        for (body, scim_type, expected) in cases {
            let error = PatchRequest::parse(&body).unwrap_err();
            assert_eq!(error.scim_type(), Some(scim_type), "{body}: {error}");
            assert!(
                error.detail().contains(expected),
                "{body}: {}",
                error.detail()
            );
        }
    }

    #[test]
    fn operations_over_the_limit_are_413() {
        let operation = json!({"op": "add", "path": "title", "value": "x"});
        let body = json!({"Operations": vec![operation.clone(); MAX_PATCH_OPERATIONS]});
        assert_eq!(
            PatchRequest::parse(&body).unwrap().operations.len(),
            MAX_PATCH_OPERATIONS
        );
        let body = json!({"Operations": vec![operation; MAX_PATCH_OPERATIONS + 1]});
        let error = PatchRequest::parse(&body).unwrap_err();
        assert_eq!(error.status(), 413);
        assert_eq!(error.scim_type(), None);
        assert!(error.detail().contains("at most 1000"));
    }

    #[test]
    fn targets_resolve_read_only_unknown_and_misplaced_filters() {
        let target = |path: &str, resource| resolve(resource, &PatchPath::parse(path).unwrap());
        assert!(matches!(
            target("nickName", ResourceType::User),
            Ok(Target::Ignored)
        ));
        assert!(matches!(
            target("name.middleName", ResourceType::User),
            Ok(Target::Ignored)
        ));
        assert!(matches!(
            target(
                "urn:ietf:params:scim:schemas:extension:custom:2.0:User:costCode",
                ResourceType::User
            ),
            Ok(Target::Ignored)
        ));
        assert!(matches!(
            target(
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User",
                ResourceType::User
            ),
            Ok(Target::Schema(_))
        ));
        for path in [
            "id",
            "meta",
            "meta.lastModified",
            "urn:ietf:params:scim:schemas:core:2.0:User:id",
        ] {
            let error = target(path, ResourceType::User).unwrap_err();
            assert_eq!(error.scim_type(), Some(ScimType::Mutability), "{path}");
            assert!(error.detail().ends_with("is read-only"), "{path}: {error}");
        }
        let error = target("userName.value", ResourceType::User).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidPath));
        let error = target(r#"userName[value eq "x"]"#, ResourceType::User).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidPath));
        assert!(error.detail().contains("not multi-valued"));
        let error = target(r#"emails[kind eq "x"].value"#, ResourceType::User).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidFilter));
        match target(r#"EMAILS[TYPE eq "work"].VALUE"#, ResourceType::User).unwrap() {
            Target::Attribute { resolved, filter } => {
                assert_eq!(resolved.canonical(), "emails.value");
                assert_eq!(filter.unwrap().to_string(), r#"type eq "work""#);
            }
            other => panic!("{other:?}"),
        }
    }
}
