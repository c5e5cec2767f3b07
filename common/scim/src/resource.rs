//! What Users and Groups share: reading a POST/PUT body attribute by attribute, and applying
//! PATCH operations, both through the same per-attribute setter of each resource.

use serde_json::{Map, Value};

use crate::ScimType;
use crate::error::ScimError;
use crate::filter::{AttrPath, Filter};
use crate::patch::{self, PatchOpKind, PatchOperation, Target};
use crate::path::PatchPath;
use crate::schema::{Resolved, ResourceType, Schema};
use crate::value;

/// A resource that PATCH operations and request bodies change attribute by attribute.
pub(crate) trait Patchable: Clone {
    /// Its resource type.
    const RESOURCE: ResourceType;

    /// Applies one operation to one attribute Flow keeps (never read-only: those are refused
    /// or skipped before). `value` is `None` only for `remove`.
    fn apply_attribute(
        &mut self,
        kind: PatchOpKind,
        resolved: &Resolved,
        filter: Option<&Filter>,
        value: Option<&Value>,
    ) -> Result<(), ScimError>;

    /// Checks what no single operation can: run after all of them.
    fn validate(&self) -> Result<(), ScimError>;
}

/// Applies `operations` in order to a copy of `resource`; all or nothing.
pub(crate) fn apply_operations<R: Patchable>(
    resource: &R,
    operations: &[PatchOperation],
) -> Result<R, ScimError> {
    let mut changed = resource.clone();
    for operation in operations {
        apply_operation(&mut changed, operation).map_err(|error| operation.error(error))?;
    }
    changed.validate()?;
    Ok(changed)
}

fn apply_operation<R: Patchable>(
    resource: &mut R,
    operation: &PatchOperation,
) -> Result<(), ScimError> {
    match patch::resolve(R::RESOURCE, &operation.path)? {
        Target::Ignored => Ok(()),
        Target::Attribute { resolved, filter } => resource.apply_attribute(
            operation.kind,
            &resolved,
            filter.as_ref(),
            operation.value.as_ref(),
        ),
        Target::Schema(schema) => apply_to_schema(resource, operation, schema),
    }
}

/// A whole schema as the path: `remove` clears its attributes, `add`/`replace` apply each
/// attribute of the value object.
fn apply_to_schema<R: Patchable>(
    resource: &mut R,
    operation: &PatchOperation,
    schema: &'static Schema,
) -> Result<(), ScimError> {
    let value = operation.value.as_ref().unwrap_or(&Value::Null);
    if operation.kind == PatchOpKind::Remove || value.is_null() {
        if schema.id == R::RESOURCE.schema().id {
            return Err(ScimError::no_target(
                "the core schema holds required attributes and cannot be removed",
            ));
        }
        for attribute in schema.attributes {
            let path = PatchPath::Attribute {
                path: AttrPath {
                    urn: Some(schema.id.to_owned()),
                    name: attribute.name.to_owned(),
                    sub_attribute: None,
                },
                filter: None,
            };
            if let Target::Attribute { resolved, .. } = patch::resolve(R::RESOURCE, &path)? {
                resource.apply_attribute(PatchOpKind::Remove, &resolved, None, None)?;
            }
        }
        return Ok(());
    }
    let object = value::object(value, schema.id)?;
    for (key, value) in object {
        let path = PatchPath::parse(&format!("{}:{key}", schema.id))?;
        match patch::resolve(R::RESOURCE, &path) {
            Ok(Target::Attribute { resolved, filter }) => {
                resource.apply_attribute(operation.kind, &resolved, filter.as_ref(), Some(value))?
            }
            Ok(_) => {}
            Err(error) if error.scim_type() == Some(ScimType::Mutability) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Reads a POST/PUT body into `resource` (which starts empty): every attribute Flow keeps is
/// set as a `replace` would; attributes Flow does not keep are ignored, and so are read-only
/// ones (`id`, `meta`) and null values, as RFC 7643 §2.5 and §7 say. Extension attributes are
/// read from their URN-keyed objects, or URN-qualified at the top level. Returns the canonical
/// paths that were given.
pub(crate) fn read_body<R: Patchable>(
    resource: &mut R,
    body: &Value,
) -> Result<Vec<String>, ScimError> {
    let name = R::RESOURCE.name();
    let object = body.as_object().ok_or_else(|| {
        ScimError::invalid_syntax(format!(
            "the body must be a {name} object, not {}",
            value::kind(body)
        ))
    })?;
    if let Some(schemas) = value::get(object, "schemas") {
        let strings = schemas
            .as_array()
            .is_some_and(|schemas| schemas.iter().all(Value::is_string));
        if !strings {
            return Err(ScimError::invalid_syntax(
                "schemas must be an array of schema URNs",
            ));
        }
    }
    let mut given = Vec::new();
    for (key, value) in object {
        if value.is_null() || key.eq_ignore_ascii_case("schemas") {
            continue;
        }
        match R::RESOURCE.schema_by_urn(key) {
            Some(schema) => {
                let inner: &Map<String, Value> = value::object(value, key)?;
                for (inner_key, inner_value) in inner {
                    if !inner_value.is_null() {
                        read_attribute(
                            resource,
                            Some(schema.id),
                            inner_key,
                            inner_value,
                            &mut given,
                        )?;
                    }
                }
            }
            None => read_attribute(resource, None, key, value, &mut given)?,
        }
    }
    Ok(given)
}

fn read_attribute<R: Patchable>(
    resource: &mut R,
    urn: Option<&str>,
    key: &str,
    value: &Value,
    given: &mut Vec<String>,
) -> Result<(), ScimError> {
    let Ok(mut path) = AttrPath::from_word(key, 1) else {
        return Ok(());
    };
    if let Some(urn) = urn {
        if path.urn.is_some() {
            return Ok(());
        }
        path.urn = Some(urn.to_owned());
    }
    let path = PatchPath::Attribute { path, filter: None };
    match patch::resolve(R::RESOURCE, &path) {
        Ok(Target::Attribute { resolved, .. }) => {
            resource.apply_attribute(PatchOpKind::Replace, &resolved, None, Some(value))?;
            given.push(resolved.canonical());
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(error) if error.scim_type() == Some(ScimType::Mutability) => Ok(()),
        Err(error) => Err(error),
    }
}
