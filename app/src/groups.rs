//! Groups of users an identity provider pushes (SCIM): created, renamed, their members added
//! and removed, deleted. Members are users of the organization; names are unique in it
//! case-insensitively. Every write owns its transaction and audit row and answers
//! [`Changed`](crate::provisioning::Changed): the users whose memberships it changed, for
//! enrollment rules (none for a write that leaves the group as it was).

use std::collections::BTreeSet;

use flow_common::db::groups::{self, GroupRow, MemberRow};
use flow_common::db::scim_filter::SqlFilter;
use flow_common::db::users;
use flow_domain::Invalid;
use flow_domain::audit::AuditAction;
use flow_domain::ids::{GroupId, UserId};

use crate::Context;
use crate::provisioning::{Changed, Locked, commit_audited, is_unique_violation};
use crate::{Acting, ServiceError};

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
    ctx: &Context,
    acting: Acting<'_>,
    id: GroupId,
    with_members: bool,
) -> Result<StoredGroup, ServiceError> {
    let mut connection = ctx.db.acquire().await?;
    stored(&mut connection, acting, id, false, with_members).await
}

/// The group `id` read in `connection`, locked when `lock`, with its members when
/// `with_members`.
async fn stored(
    connection: &mut sqlx::PgConnection,
    acting: Acting<'_>,
    id: GroupId,
    lock: bool,
    with_members: bool,
) -> Result<StoredGroup, ServiceError> {
    let row = groups::get(&mut *connection, acting.org_id(), id, lock)
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
    ctx: &Context,
    acting: Acting<'_>,
    filter: Option<&SqlFilter>,
    offset: u64,
    count: usize,
    with_members: bool,
) -> Result<(u64, Vec<StoredGroup>), ServiceError> {
    let (total, rows) = groups::search(&ctx.db, acting.org_id(), filter, offset, count).await?;
    let mut found: Vec<StoredGroup> = rows
        .into_iter()
        .map(|row| StoredGroup {
            row,
            members: Vec::new(),
        })
        .collect();
    if with_members {
        load_members(ctx, acting, &mut found).await?;
    }
    Ok((total, found))
}

/// How many members the groups have together, counted up to `up_to` (a read bounded before
/// members are loaded: a SCIM response carries a bounded number of them, and costs by it).
pub async fn member_count(
    ctx: &Context,
    acting: Acting<'_>,
    ids: &[GroupId],
    up_to: u64,
) -> Result<u64, ServiceError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
    let count = groups::member_count(&ctx.db, acting.org_id(), ids, up_to).await?;
    Ok(u64::try_from(count).unwrap_or_default())
}

/// Loads the members of `found` (read without them), each group's in one pass.
pub async fn load_members(
    ctx: &Context,
    acting: Acting<'_>,
    found: &mut [StoredGroup],
) -> Result<(), ServiceError> {
    if found.is_empty() {
        return Ok(());
    }
    let ids: Vec<GroupId> = found.iter().map(|group| group.row.id).collect();
    let members = groups::members(&ctx.db, acting.org_id(), &ids).await?;
    let mut by_group: std::collections::HashMap<GroupId, Vec<MemberRow>> =
        std::collections::HashMap::with_capacity(found.len());
    for member in members {
        by_group.entry(member.group_id).or_default().push(member);
    }
    for group in found {
        group.members = by_group.remove(&group.row.id).unwrap_or_default();
    }
    Ok(())
}

/// Creates a group with its members. Audited as `group.created`.
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    input: GroupInput,
) -> Result<Changed<StoredGroup>, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
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
    let members = groups::members(&mut *transaction, org_id, &[row.id]).await?;
    commit_audited(
        transaction,
        acting,
        AuditAction::GroupCreated,
        &row.id.to_string(),
        &row.display_name,
    )
    .await?;
    Changed {
        value: StoredGroup { row, members },
        users: added,
    }
    .with_rules(ctx, acting, None)
    .await
}

/// The group `id`, with its members when `with_members`, locked in a new transaction for a
/// change.
async fn locked(
    ctx: &Context,
    acting: Acting<'_>,
    id: GroupId,
    with_members: bool,
) -> Result<Locked<StoredGroup>, ServiceError> {
    Locked::read(ctx, async |connection| {
        stored(connection, acting, id, true, with_members).await
    })
    .await
}

/// Changes a group: `edit` gets the stored group with its members (to check a precondition and
/// apply a PUT or PATCH) and returns what the group is to be, or its own error. Only the
/// difference in members is written. A write that leaves the group as it was (name, external
/// id and members) writes nothing and changes no user, so it runs no enrollment rule for its
/// members. Audited as `group.updated`.
pub async fn edit<E: From<ServiceError>>(
    ctx: &Context,
    acting: Acting<'_>,
    id: GroupId,
    edit: impl FnOnce(&StoredGroup) -> Result<GroupInput, E>,
) -> Result<Changed<StoredGroup>, E> {
    locked(ctx, acting, id, true)
        .await?
        .change(
            |group| Ok(group.input()),
            edit,
            async |current| Ok(Changed::of(current, None)),
            async |locked, before, after| write(ctx, acting, locked, &before, &after).await,
        )
        .await
}

/// Writes what the locked group is to be (`after`, from `before`): its name and external id,
/// and the difference in members, with its audit row; then runs the rules for the users who
/// joined or left, or for every member when the group was renamed.
async fn write(
    ctx: &Context,
    acting: Acting<'_>,
    locked: Locked<StoredGroup>,
    before: &GroupInput,
    after: &GroupInput,
) -> Result<Changed<StoredGroup>, ServiceError> {
    let mut transaction = locked.transaction;
    let (org_id, id) = (acting.org_id(), locked.current.row.id);
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
            return Err(name_taken(&after.display_name));
        }
        Err(error) => return Err(error.into()),
    };
    let mut changed = groups::add_members(&mut transaction, org_id, id, &added).await?;
    changed.extend(groups::remove_members(&mut transaction, org_id, id, &removed).await?);
    let members = groups::members(&mut *transaction, org_id, &[id]).await?;
    commit_audited(
        transaction,
        acting,
        AuditAction::GroupUpdated,
        &id.to_string(),
        &format!(
            "{} (+{} −{} members)",
            row.display_name,
            added.len(),
            removed.len()
        ),
    )
    .await?;
    // A rule may name the group by its display name (`memberOf`): a rename changes what every
    // member, staying or leaving, matches.
    let users = if after.display_name == before.display_name {
        changed
    } else {
        before.members.union(&after.members).copied().collect()
    };
    Changed {
        value: StoredGroup { row, members },
        users,
    }
    .with_rules(ctx, acting, None)
    .await
}

/// Deletes a group (its members stay users). `check` sees the stored group first (a
/// precondition). Audited as `group.deleted`.
pub async fn delete<E: From<ServiceError>>(
    ctx: &Context,
    acting: Acting<'_>,
    id: GroupId,
    check: impl FnOnce(&GroupRow) -> Result<(), E>,
) -> Result<Changed<()>, E> {
    let Locked {
        mut transaction,
        current,
    } = locked(ctx, acting, id, false).await?;
    check(&current.row)?;
    let org_id = acting.org_id();
    let former = async move {
        let former = groups::delete(&mut transaction, org_id, id).await?;
        commit_audited(
            transaction,
            acting,
            AuditAction::GroupDeleted,
            &id.to_string(),
            &current.row.display_name,
        )
        .await?;
        Ok::<_, sqlx::Error>(former)
    }
    .await
    .map_err(ServiceError::from)?;
    Changed {
        value: (),
        users: former,
    }
    .with_rules(ctx, acting, None)
    .await
}
