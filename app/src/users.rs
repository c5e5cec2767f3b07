//! Users (assignees), for every surface: each one checked by one rule (an e-mail, and a name of
//! one line of at most 200 characters), then upserted by e-mail, one, many in one transaction
//! (all or nothing), or an imported file's worth in batches; and provisioned by an identity
//! provider (SCIM) with a profile, changed, deactivated and deleted. Every provisioning write
//! answers [`Changed`](crate::provisioning::Changed): the users whose attributes or memberships it
//! changed.
//! Every write then runs the organization's enrollment rules for the users it changed
//! ([`crate::enrollment::users_changed`]).

use flow_common::db::dashboard as queries;
use flow_common::db::erasure::PSEUDONYM_DOMAIN;
use flow_common::db::groups;
use flow_common::db::scim_filter::SqlFilter;
use flow_common::db::users::{self, NewUser, Profile, ProfileRow, User};
use flow_domain::audit::AuditAction;
use flow_domain::ids::{GroupId, UserId};
use flow_domain::{Email, Invalid, TextRule};

use crate::Context;
use crate::provisioning::{Changed, Locked, commit_audited, is_unique_violation};
use crate::{Acting, ServiceError};

/// Users written per statement of an import.
const IMPORT_BATCH: usize = 1_000;

/// Checks a user; `prefix` names where it sits in the request (`users[3].` in a bulk), so the
/// error names the field as the caller wrote it.
pub fn check(email: Option<&str>, name: Option<&str>, prefix: &str) -> Result<NewUser, Invalid> {
    let email = Email::parse(&format!("{prefix}email"), email.unwrap_or(""))?;
    unreserved(&email)?;
    let name = name
        .map(|name| TextRule::NAME.parse(&format!("{prefix}name"), name))
        .transpose()?;
    Ok(NewUser { email, name })
}

/// Creates the users, or updates the names of those that exist, in one statement (all or
/// nothing); returns them in input order, each saying whether it was created.
pub async fn upsert(
    ctx: &Context,
    acting: Acting<'_>,
    new: &[NewUser],
) -> Result<Vec<User>, ServiceError> {
    let rows = users::upsert(&ctx.db, acting.org_id(), new).await?;
    let ids: Vec<_> = rows.iter().map(|user| user.id).collect();
    // A failure here fails the request; its retry (an upsert is idempotent) evaluates again.
    crate::enrollment::users_changed(ctx, acting, &ids).await?;
    Ok(rows)
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// New users.
    pub created: usize,
    /// Users whose name was updated.
    pub updated: usize,
}

/// Upserts an imported file's users, [`IMPORT_BATCH`] per statement. A file naming one person
/// twice counts them once; the last row's name wins, as in a bulk upsert.
pub async fn import(
    ctx: &Context,
    acting: Acting<'_>,
    new: Vec<NewUser>,
) -> Result<Imported, ServiceError> {
    let mut seen = std::collections::HashMap::new();
    let mut unique: Vec<NewUser> = Vec::with_capacity(new.len());
    for user in new {
        match seen.get(&user.email.normalized()) {
            Some(&index) => unique[index] = user,
            None => {
                seen.insert(user.email.normalized(), unique.len());
                unique.push(user);
            }
        }
    }
    let mut imported = Imported::default();
    for batch in unique.chunks(IMPORT_BATCH) {
        let rows = users::upsert(&ctx.db, acting.org_id(), batch).await?;
        let ids: Vec<_> = rows.iter().map(|user| user.id).collect();
        crate::enrollment::users_changed(ctx, acting, &ids).await?;
        let created = rows.iter().filter(|user| user.created).count();
        imported.created += created;
        imported.updated += rows.len() - created;
    }
    tracing::info!(
        created = imported.created,
        updated = imported.updated,
        "users imported"
    );
    Ok(imported)
}

/// Refuses an address in the domain of erased users' pseudonyms: no write may reach an erased
/// user through their pseudonym, nor give one to another user.
fn unreserved(email: &Email) -> Result<(), Invalid> {
    let reserved = email
        .normalized()
        .rsplit_once('@')
        .is_some_and(|(_, domain)| domain == PSEUDONYM_DOMAIN);
    if reserved {
        return Err(Invalid(format!(
            "{email} is an address of {PSEUDONYM_DOMAIN}, kept for the pseudonyms of erased users"
        )));
    }
    Ok(())
}

fn taken(email: &Email) -> ServiceError {
    ServiceError::Conflict(format!(
        "a user with the e-mail {email} already exists in this organization"
    ))
}

/// The stored profile of a row, as a provider's write would give it.
pub fn stored_profile(row: &ProfileRow) -> Result<Profile, ServiceError> {
    let email = Email::parse("email", &row.email).map_err(|_| {
        ServiceError::Internal(anyhow::anyhow!("user {} has no valid e-mail", row.id))
    })?;
    Ok(Profile {
        email,
        name: row.name.clone(),
        active: row.active,
        external_id: row.external_id.clone(),
        given_name: row.given_name.clone(),
        family_name: row.family_name.clone(),
        formatted_name: row.formatted_name.clone(),
        title: row.title.clone(),
        department: row.department.clone(),
        employee_number: row.employee_number.clone(),
        manager_id: row.manager_id.clone(),
        manager_name: row.manager_name.clone(),
        start_date: row.start_date,
        emails: row.emails.0.clone(),
        scim_user_name: row.scim_user_name.clone(),
    })
}

/// A user of the organization with their profile, as provisioning sees them: a user deleted
/// through SCIM or erased is [`ServiceError::NotFound`].
pub async fn profile(
    ctx: &Context,
    acting: Acting<'_>,
    id: UserId,
) -> Result<ProfileRow, ServiceError> {
    let mut connection = ctx.db.acquire().await?;
    visible_profile(&mut connection, acting, id, false).await
}

/// A person of the organization as the API and the dashboard show them: their profile (a user
/// deleted through SCIM is kept, inactive, with their history; an erased one shows their
/// pseudonym) and the groups they belong to.
pub async fn person(
    ctx: &Context,
    acting: Acting<'_>,
    id: UserId,
) -> Result<(ProfileRow, Vec<groups::GroupRef>), ServiceError> {
    let mut connection = ctx.db.acquire().await?;
    let profile = users::profile(&mut connection, acting.org_id(), id, false)
        .await?
        .ok_or(ServiceError::NotFound("user"))?;
    let groups = groups::of_user(&mut *connection, acting.org_id(), id).await?;
    Ok((profile, groups))
}

/// The user `id` read in `connection` (locked when `lock`), unless deleted through SCIM or
/// erased (an erasure marks the user deleted for SCIM too; both are checked so neither alone
/// can bring an erased user back).
async fn visible_profile(
    connection: &mut sqlx::PgConnection,
    acting: Acting<'_>,
    id: UserId,
    lock: bool,
) -> Result<ProfileRow, ServiceError> {
    users::profile(connection, acting.org_id(), id, lock)
        .await?
        .filter(|row| row.scim_deleted_at.is_none() && row.erased_at.is_none())
        .ok_or(ServiceError::NotFound("user"))
}

/// A page of the users provisioning sees, matching `filter`, from `offset`; and how many match.
pub async fn search(
    ctx: &Context,
    acting: Acting<'_>,
    filter: Option<&SqlFilter>,
    offset: u64,
    count: usize,
) -> Result<(u64, Vec<ProfileRow>), ServiceError> {
    Ok(users::search_profiles(&ctx.db, acting.org_id(), filter, offset, count).await?)
}

/// Provisions a user: a new one, or — when a user with that e-mail was deleted through SCIM —
/// the same one again, with their history ([`ServiceError::Conflict`] when one exists and was
/// not). An erased user is never provisioned again: their e-mail is a pseudonym, which no write
/// may use. Audited as `user.provisioned`.
pub async fn provision(
    ctx: &Context,
    acting: Acting<'_>,
    profile: Profile,
) -> Result<Changed<ProfileRow>, ServiceError> {
    unreserved(&profile.email)?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let existing =
        users::profile_by_email_for_update(&mut transaction, org_id, &profile.email).await?;
    let (row, detail) = match existing {
        Some(existing) if existing.erased_at.is_some() => return Err(taken(&profile.email)),
        Some(existing) if existing.scim_deleted_at.is_some() => (
            users::update_profile(&mut transaction, org_id, existing.id, &profile, true).await?,
            format!("{} (provisioned again)", profile.email),
        ),
        Some(_) => return Err(taken(&profile.email)),
        None => match users::insert_profile(&mut transaction, org_id, &profile).await {
            Ok(row) => (row, profile.email.to_string()),
            Err(error) if is_unique_violation(&error) => return Err(taken(&profile.email)),
            Err(error) => return Err(error.into()),
        },
    };
    commit_audited(
        transaction,
        acting,
        AuditAction::UserProvisioned,
        &row.id.to_string(),
        &detail,
    )
    .await?;
    let id = row.id;
    Changed::of(row, Some(id))
        .with_rules(ctx, acting, None)
        .await
}

/// The user `id` as provisioning sees them (not deleted through SCIM), locked in a new
/// transaction for a change.
async fn locked(
    ctx: &Context,
    acting: Acting<'_>,
    id: UserId,
) -> Result<Locked<ProfileRow>, ServiceError> {
    Locked::read(ctx, async |connection| {
        visible_profile(connection, acting, id, true).await
    })
    .await
}

/// Changes a user's profile: `edit` gets the stored user (to check a precondition such as an
/// ETag, and to apply a PUT or PATCH) and returns the new profile, or its own error. Nothing is
/// written when nothing changes. A deactivation (`active` turned false) stops new assigns to
/// the user; audited as `user.deactivated`, `user.reactivated` or `user.updated`. When the
/// organization cancels on deactivation, every write that leaves the user inactive (the
/// deactivation, and its retries) cancels their open assignments, each once
/// ([`crate::changes::cancel_for_deactivation`]).
pub async fn edit<E: From<ServiceError>>(
    ctx: &Context,
    acting: Acting<'_>,
    id: UserId,
    edit: impl FnOnce(&ProfileRow) -> Result<Profile, E>,
) -> Result<Changed<ProfileRow>, E> {
    locked(ctx, acting, id)
        .await?
        .change(
            stored_profile,
            edit,
            async |current| {
                // A retry of a deactivation finds the user inactive already: the cancellations
                // its first try may not have queued are queued now (the same change ids).
                if !current.active {
                    crate::changes::cancel_for_deactivation(ctx, acting, id).await?;
                }
                Changed::of(current, None)
                    .with_rules(ctx, acting, Some(id))
                    .await
            },
            async |locked, before, after| write_profile(ctx, acting, locked, &before, &after).await,
        )
        .await
}

/// Writes the profile `after` of the locked user (whose profile was `before`), with its audit
/// row, then runs the rules for them.
async fn write_profile(
    ctx: &Context,
    acting: Acting<'_>,
    locked: Locked<ProfileRow>,
    before: &Profile,
    after: &Profile,
) -> Result<Changed<ProfileRow>, ServiceError> {
    let Locked {
        mut transaction,
        current,
    } = locked;
    let (org_id, id) = (acting.org_id(), current.id);
    if after.email.normalized() != before.email.normalized() {
        unreserved(&after.email)?;
    }
    let row = match users::update_profile(&mut transaction, org_id, id, after, false).await {
        Ok(row) => row,
        Err(error) if is_unique_violation(&error) => return Err(taken(&after.email)),
        Err(error) => return Err(error.into()),
    };
    let action = match (before.active, after.active) {
        (true, false) => AuditAction::UserDeactivated,
        (false, true) => AuditAction::UserReactivated,
        _ => AuditAction::UserUpdated,
    };
    commit_audited(
        transaction,
        acting,
        action,
        &id.to_string(),
        after.email.as_str(),
    )
    .await?;
    if before.active != after.active {
        tracing::info!(user_id = %id, active = after.active, "user (de)activated");
    }
    if !after.active {
        crate::changes::cancel_for_deactivation(ctx, acting, id).await?;
    }
    Changed::of(row, Some(id))
        .with_rules(ctx, acting, None)
        .await
}

/// Deletes a user for provisioning: they are deactivated and leave their groups, and SCIM
/// answers 404 for them from then on; their record and assignments stay (a later provisioning
/// of the same e-mail revives them). `check` sees the stored user first (a precondition).
/// Audited as `user.deleted`.
pub async fn delete<E: From<ServiceError>>(
    ctx: &Context,
    acting: Acting<'_>,
    id: UserId,
    check: impl FnOnce(&ProfileRow) -> Result<(), E>,
) -> Result<Changed<()>, E> {
    let Locked {
        mut transaction,
        current,
    } = locked(ctx, acting, id).await?;
    check(&current)?;
    let org_id = acting.org_id();
    async move {
        users::mark_scim_deleted(&mut transaction, org_id, id).await?;
        groups::leave_all(&mut transaction, org_id, id).await?;
        commit_audited(
            transaction,
            acting,
            AuditAction::UserDeleted,
            &id.to_string(),
            &current.email,
        )
        .await
    }
    .await
    .map_err(ServiceError::from)?;
    tracing::info!(user_id = %id, "user deleted through SCIM (kept, deactivated)");
    crate::changes::cancel_for_deactivation(ctx, acting, id).await?;
    Ok(Changed::of((), Some(id)))
}

/// The organization's user with the e-mail `email`, if there is one.
pub async fn by_email(
    ctx: &Context,
    acting: Acting<'_>,
    email: &Email,
) -> Result<Option<User>, ServiceError> {
    Ok(users::find_by_email(&ctx.db, acting.org_id(), email).await?)
}

/// Up to `limit` of the organization's users after `after`, in id order (a page of the API).
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<User>, ServiceError> {
    Ok(users::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// Up to `limit` of the organization's users after `after`, in id order, whose e-mail or name
/// contains `text` (every user without it): the dashboard's users page.
pub async fn list_matching(
    ctx: &Context,
    acting: Acting<'_>,
    text: Option<&str>,
    after: Option<UserId>,
    limit: i64,
) -> Result<Vec<User>, ServiceError> {
    Ok(queries::search_users(&ctx.db, acting.org_id(), text, after, limit).await?)
}

/// A team to assign a flow to at once: a department or a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Team {
    /// Active users whose department is this.
    Department(String),
    /// Active members of this group.
    Group(GroupId),
}

impl Team {
    /// `department:<name>` or `group:<id>`, as a form sends it.
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':')? {
            ("department", name) if !name.trim().is_empty() => {
                Some(Self::Department(name.to_owned()))
            }
            ("group", id) => GroupId::parse(id).map(Self::Group),
            _ => None,
        }
    }

    /// The form's value of the team.
    pub fn value(&self) -> String {
        match self {
            Self::Department(name) => format!("department:{name}"),
            Self::Group(id) => format!("group:{id}"),
        }
    }
}

/// The organization's departments and groups with their active members, to pick a team from.
pub async fn team_choices(
    ctx: &Context,
    acting: Acting<'_>,
) -> Result<Vec<queries::TeamChoice>, ServiceError> {
    Ok(queries::team_choices(&ctx.db, acting.org_id()).await?)
}

/// The e-mails of up to `limit` active members of `team`, by e-mail.
pub async fn team_emails(
    ctx: &Context,
    acting: Acting<'_>,
    team: &Team,
    limit: i64,
) -> Result<Vec<String>, ServiceError> {
    Ok(match team {
        Team::Department(name) => {
            queries::department_emails(&ctx.db, acting.org_id(), name, limit).await?
        }
        Team::Group(id) => queries::group_emails(&ctx.db, acting.org_id(), *id, limit).await?,
    })
}
