//! Groups of users an identity provider pushes (SCIM): created, renamed, their members added
//! and removed, deleted. Members are users of the organization; names are unique in it
//! case-insensitively. Every write owns its transaction and audit row and answers [`Changed`]:
//! the users whose memberships it changed, for enrollment rules.

use std::collections::BTreeSet;

use flow_common::db::audit;
use flow_common::db::groups::{self, GroupRow, MemberRow};
use flow_common::db::scim_filter::SqlFilter;
use flow_common::db::users;
use flow_domain::Invalid;
use flow_domain::ids::{GroupId, UserId};

use super::users::{Changed, is_unique_violation};
use super::{Acting, ServiceError};
use crate::state::AppState;

/// What a group is to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInput {
    /// Its name, unique in the organization case-insensitively.
    pub display_name: String,
    /// The provider's id of it.
    pub external_id: Option<String>,
    /// Its members.
    pub members: BTreeSet<UserId>,
}

/// A stored group, with its members when they were asked for.
#[derive(Debug, Clone)]
pub struct StoredGroup {
    /// The group.
    pub row: GroupRow,
    /// Its members, by user id (empty when not loaded).
    pub members: Vec<MemberRow>,
}

impl StoredGroup {
    fn input(&self) -> GroupInput {
        GroupInput {
            display_name: self.row.display_name.clone(),
            external_id: self.row.external_id.clone(),
            members: self.members.iter().map(|member| member.user_id).collect(),
        }
    }
}

fn name_taken(name: &str) -> ServiceError {
    ServiceError::Conflict(format!(
        "a group named \"{name}\" already exists in this organization"
    ))
}

/// Refuses members that are not users of the organization (or were deleted through SCIM).
async fn check_members(
    connection: &mut sqlx::PgConnection,
    acting: Acting<'_>,
    members: &BTreeSet<UserId>,
) -> Result<(), ServiceError> {
    if members.is_empty() {
        return Ok(());
    }
    let wanted: Vec<UserId> = members.iter().copied().collect();
    let found: BTreeSet<UserId> = users::existing_ids(connection, acting.org_id(), &wanted)
        .await?
        .into_iter()
        .collect();
    if let Some(missing) = wanted.iter().find(|id| !found.contains(id)) {
        return Err(ServiceError::Invalid(Invalid(format!(
            "members: no user {missing} in this organization"
        ))));
    }
    Ok(())
}

/// A group of the organization, with its members when `with_members`.
pub async fn get(
    state: &AppState,
    acting: Acting<'_>,
    id: GroupId,
    with_members: bool,
) -> Result<StoredGroup, ServiceError> {
    let mut connection = state.db.acquire().await?;
    let row = groups::get(&mut connection, acting.org_id(), id, false)
        .await?
        .ok_or(ServiceError::NotFound("group"))?;
    let members = if with_members {
        groups::members(&mut *connection, acting.org_id(), &[id]).await?
    } else {
        Vec::new()
    };
    Ok(StoredGroup { row, members })
}

/// A page of the organization's groups matching `filter`, from `offset`, with their members when
/// `with_members`; and how many match.
pub async fn search(
    state: &AppState,
    acting: Acting<'_>,
    filter: Option<&SqlFilter>,
    offset: u64,
    count: usize,
    with_members: bool,
) -> Result<(u64, Vec<StoredGroup>), ServiceError> {
    let offset = i64::try_from(offset).unwrap_or(i64::MAX);
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let (total, rows) = groups::search(&state.db, acting.org_id(), filter, offset, count).await?;
    let mut members = if with_members && !rows.is_empty() {
        let ids: Vec<GroupId> = rows.iter().map(|row| row.id).collect();
        groups::members(&state.db, acting.org_id(), &ids).await?
    } else {
        Vec::new()
    };
    let found = rows
        .into_iter()
        .map(|row| {
            let (mine, rest): (Vec<MemberRow>, Vec<MemberRow>) = members
                .drain(..)
                .partition(|member| member.group_id == row.id);
            members = rest;
            StoredGroup { row, members: mine }
        })
        .collect();
    Ok((total.unsigned_abs(), found))
}

/// Creates a group with its members. Audited as `group.created`.
pub async fn create(
    state: &AppState,
    acting: Acting<'_>,
    input: GroupInput,
) -> Result<Changed<StoredGroup>, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await?;
    check_members(&mut transaction, acting, &input.members).await?;
    let row = match groups::insert(
        &mut transaction,
        org_id,
        &input.display_name,
        input.external_id.as_deref(),
    )
    .await
    {
        Ok(row) => row,
        Err(error) if is_unique_violation(&error) => {
            return Err(name_taken(&input.display_name));
        }
        Err(error) => return Err(error.into()),
    };
    let wanted: Vec<UserId> = input.members.iter().copied().collect();
    let added = groups::add_members(&mut transaction, org_id, row.id, &wanted).await?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "group.created",
        &row.id.to_string(),
        &row.display_name,
    )
    .await?;
    let members = groups::members(&mut *transaction, org_id, &[row.id]).await?;
    transaction.commit().await?;
    Changed {
        value: StoredGroup { row, members },
        users: added,
    }
    .with_rules(state, acting, None)
    .await
}

/// Changes a group: `edit` gets the stored group with its members (to check a precondition and
/// apply a PUT or PATCH) and returns what the group is to be, or its own error. Only the
/// difference in members is written; nothing is when nothing changes. Audited as
/// `group.updated`.
pub async fn edit<E: From<ServiceError>>(
    state: &AppState,
    acting: Acting<'_>,
    id: GroupId,
    edit: impl FnOnce(&StoredGroup) -> Result<GroupInput, E>,
) -> Result<Changed<StoredGroup>, E> {
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await.map_err(ServiceError::from)?;
    let row = groups::get(&mut transaction, org_id, id, true)
        .await
        .map_err(ServiceError::from)?
        .ok_or(ServiceError::NotFound("group"))?;
    let members = groups::members(&mut *transaction, org_id, &[id])
        .await
        .map_err(ServiceError::from)?;
    let current = StoredGroup { row, members };
    let before = current.input();
    let after = edit(&current)?;
    if after == before {
        return Ok(Changed {
            value: current,
            users: Vec::new(),
        });
    }
    let added: Vec<UserId> = after.members.difference(&before.members).copied().collect();
    let removed: Vec<UserId> = before.members.difference(&after.members).copied().collect();
    let added_set: BTreeSet<UserId> = added.iter().copied().collect();
    check_members(&mut transaction, acting, &added_set).await?;
    let row = match groups::update(
        &mut transaction,
        org_id,
        id,
        &after.display_name,
        after.external_id.as_deref(),
    )
    .await
    {
        Ok(row) => row,
        Err(error) if is_unique_violation(&error) => {
            return Err(name_taken(&after.display_name).into());
        }
        Err(error) => return Err(ServiceError::from(error).into()),
    };
    let mut changed = groups::add_members(&mut transaction, org_id, id, &added)
        .await
        .map_err(ServiceError::from)?;
    changed.extend(
        groups::remove_members(&mut transaction, org_id, id, &removed)
            .await
            .map_err(ServiceError::from)?,
    );
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "group.updated",
        &id.to_string(),
        &format!(
            "{} (+{} −{} members)",
            row.display_name,
            added.len(),
            removed.len()
        ),
    )
    .await
    .map_err(ServiceError::from)?;
    let members = groups::members(&mut *transaction, org_id, &[id])
        .await
        .map_err(ServiceError::from)?;
    transaction.commit().await.map_err(ServiceError::from)?;
    Changed {
        value: StoredGroup { row, members },
        users: changed,
    }
    .with_rules(state, acting, None)
    .await
}

/// Deletes a group (its members stay users). `check` sees the stored group first (a
/// precondition). Audited as `group.deleted`.
pub async fn delete<E: From<ServiceError>>(
    state: &AppState,
    acting: Acting<'_>,
    id: GroupId,
    check: impl FnOnce(&GroupRow) -> Result<(), E>,
) -> Result<Changed<()>, E> {
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await.map_err(ServiceError::from)?;
    let row = groups::get(&mut transaction, org_id, id, true)
        .await
        .map_err(ServiceError::from)?
        .ok_or(ServiceError::NotFound("group"))?;
    check(&row)?;
    let former = groups::delete(&mut transaction, org_id, id)
        .await
        .map_err(ServiceError::from)?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "group.deleted",
        &id.to_string(),
        &row.display_name,
    )
    .await
    .map_err(ServiceError::from)?;
    transaction.commit().await.map_err(ServiceError::from)?;
    Changed {
        value: (),
        users: former,
    }
    .with_rules(state, acting, None)
    .await
}
