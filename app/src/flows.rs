//! Flows, for every surface: create one with its ordered modules (checked by one rule: a name of
//! one line, a description, 1 to [`MAX_MODULES`] modules each with a name and an estimate), and
//! read one with its modules.

use flow_common::db::flows::{self, Flow, Module, NewModule};
use flow_domain::ids::FlowId;
use flow_domain::{Invalid, TextRule};

use crate::Context;
use crate::{Acting, ServiceError};

/// Most modules in a flow.
pub const MAX_MODULES: usize = 500;

/// Largest estimate of a module, in minutes.
pub const MAX_ESTIMATED_MINUTES: i32 = 100_000;

/// A flow as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct FlowFields {
    /// Name (required).
    pub name: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Modules in order (1 to [`MAX_MODULES`]).
    pub modules: Vec<ModuleFields>,
}

/// A module as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct ModuleFields {
    /// Name (required).
    pub name: Option<String>,
    /// Estimated minutes, 0 to [`MAX_ESTIMATED_MINUTES`] (default 0).
    pub estimated_minutes: Option<i32>,
}

/// A flow that passed the rules.
#[derive(Debug, Clone)]
pub struct NewFlow {
    /// Name.
    pub name: String,
    /// Description, when not empty.
    pub description: Option<String>,
    /// Modules in order.
    pub modules: Vec<NewModule>,
}

/// Checks a flow's fields; the error names the field as the API spells it
/// (`modules[2].estimatedMinutes`).
pub fn check(fields: FlowFields) -> Result<NewFlow, Invalid> {
    let name = TextRule::NAME.parse("name", fields.name.as_deref().unwrap_or(""))?;
    if name.is_empty() {
        return Err(Invalid::new("name is required"));
    }
    let description = fields
        .description
        .map(|text| TextRule::DESCRIPTION.parse("description", &text))
        .transpose()?
        .filter(|text| !text.is_empty());
    if fields.modules.is_empty() || fields.modules.len() > MAX_MODULES {
        return Err(Invalid(format!(
            "modules must contain between 1 and {MAX_MODULES} items"
        )));
    }
    let modules = fields
        .modules
        .into_iter()
        .enumerate()
        .map(|(index, module)| {
            let field = format!("modules[{index}].name");
            let name = TextRule::NAME.parse(&field, module.name.as_deref().unwrap_or(""))?;
            if name.is_empty() {
                return Err(Invalid(format!("{field} is required")));
            }
            let minutes = module.estimated_minutes.unwrap_or(0);
            if !(0..=MAX_ESTIMATED_MINUTES).contains(&minutes) {
                return Err(Invalid(format!(
                    "modules[{index}].estimatedMinutes must be between 0 and {MAX_ESTIMATED_MINUTES}"
                )));
            }
            Ok(NewModule {
                name,
                estimated_minutes: minutes,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NewFlow {
        name,
        description,
        modules,
    })
}

/// Creates a flow with its modules in one transaction.
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    flow: &NewFlow,
) -> Result<(Flow, Vec<Module>), ServiceError> {
    let created = flows::create(
        &ctx.db,
        acting.org_id(),
        &flow.name,
        flow.description.as_deref(),
        &flow.modules,
    )
    .await?;
    tracing::info!(flow_id = %created.0.id, modules = created.1.len(), "flow created");
    Ok(created)
}

/// One flow of the organization with its modules in order.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: FlowId,
) -> Result<(Flow, Vec<Module>), ServiceError> {
    let flow = flows::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))?;
    let modules = flows::modules(&ctx.db, id).await?;
    Ok((flow, modules))
}
