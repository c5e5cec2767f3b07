//! SCIM filters as SQL: the AST `flow_scim::filter::parse_for` returns (canonical, filterable
//! attributes only) becomes a `WHERE` term over an organization's users (alias `u`) or groups
//! (alias `g`). Every value is a bound parameter; the SQL text holds only column expressions
//! chosen here. String comparisons are case-insensitive (`lower(…)` on both sides) unless the
//! attribute is case-exact (`id`, `externalId`, `members.value`); terms are two-valued (a
//! missing attribute compares false, so `not` of it is true), as RFC 7644 §3.4.2.2 reads.

use chrono::{DateTime, Utc};
use flow_domain::ids::OrgId;
use flow_scim::filter::{AttrPath, Filter, FilterValue, Operator};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgPool, Postgres, QueryBuilder};

/// A filter this module cannot express (an operator or value the attribute's type does not
/// take). `parse_for` lets few through; those are the caller's 400 `invalidFilter`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnsupportedFilter(pub String);

/// What a filter is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    User,
    Group,
}

/// A filter checked to translate to SQL over one resource type.
#[derive(Debug, Clone)]
pub struct SqlFilter {
    filter: Filter,
    resource: Resource,
}

impl SqlFilter {
    /// A filter over users (`u`), checked by translating it once.
    pub fn users(filter: Filter) -> Result<Self, UnsupportedFilter> {
        Self::checked(filter, Resource::User)
    }

    /// A filter over groups (`g`), checked by translating it once.
    pub fn groups(filter: Filter) -> Result<Self, UnsupportedFilter> {
        Self::checked(filter, Resource::Group)
    }

    fn checked(filter: Filter, resource: Resource) -> Result<Self, UnsupportedFilter> {
        let checked = Self { filter, resource };
        checked.push(&mut QueryBuilder::new(""))?;
        Ok(checked)
    }

    /// Appends the filter as one parenthesised boolean term.
    pub fn push(&self, builder: &mut QueryBuilder<Postgres>) -> Result<(), UnsupportedFilter> {
        let resolve = match self.resource {
            Resource::User => user_target,
            Resource::Group => group_target,
        };
        push_filter(builder, &self.filter, resolve)
    }
}

/// What a SCIM list reads: an organization's rows of one table.
pub(crate) struct Listing {
    /// The table and its alias, the one the filter's resource uses (`users u`).
    pub table: &'static str,
    /// The alias, whose `id` orders the pages.
    pub alias: &'static str,
    /// The columns of a row.
    pub columns: &'static str,
    /// What every listed row must also be (`u.scim_deleted_at IS NULL`), if anything.
    pub condition: Option<&'static str>,
}

/// A page of `listing`'s rows of the organization matching `filter`, in id order from `offset`,
/// and how many match in all. The count is read first; the page is not read when it would be
/// empty.
pub(crate) async fn search_page<T>(
    pool: &PgPool,
    listing: &Listing,
    org_id: OrgId,
    filter: Option<&SqlFilter>,
    offset: u64,
    limit: usize,
) -> Result<(u64, Vec<T>), sqlx::Error>
where
    T: for<'r> FromRow<'r, PgRow> + Send + Unpin,
{
    let offset = i64::try_from(offset).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let push_where = |builder: &mut QueryBuilder<Postgres>| {
        builder.push(format_args!(
            " FROM {} WHERE {}.org_id = ",
            listing.table, listing.alias
        ));
        builder.push_bind(org_id);
        if let Some(condition) = listing.condition {
            builder.push(format_args!(" AND {condition}"));
        }
        if let Some(filter) = filter {
            builder.push(" AND ");
            filter
                .push(builder)
                .map_err(|error| sqlx::Error::Protocol(format!("filter: {error}")))?;
        }
        Ok::<_, sqlx::Error>(())
    };
    let mut count = QueryBuilder::new("SELECT count(*)");
    push_where(&mut count)?;
    let total: i64 = count.build_query_scalar().fetch_one(pool).await?;
    if limit == 0 || offset >= total {
        return Ok((total.unsigned_abs(), Vec::new()));
    }
    let mut page = QueryBuilder::new(format!("SELECT {}", listing.columns));
    push_where(&mut page)?;
    page.push(format_args!(" ORDER BY {}.id OFFSET ", listing.alias));
    page.push_bind(offset);
    page.push(" LIMIT ");
    page.push_bind(limit);
    let rows = page.build_query_as().fetch_all(pool).await?;
    Ok((total.unsigned_abs(), rows))
}

/// Where an attribute lives in SQL.
#[derive(Debug, Clone, Copy)]
enum Target {
    Text {
        sql: &'static str,
        case_exact: bool,
    },
    Boolean(&'static str),
    Time(&'static str),
    /// A multi-valued attribute: `exists` opens an `EXISTS (SELECT 1 … AND (` over its values,
    /// whose sub-attributes `inner` resolves; `sub` is the sub-attribute a plain path names.
    Values {
        exists: &'static str,
        inner: Resolve,
        sub: Option<&'static str>,
    },
}

type Resolve = fn(&AttrPath) -> Option<Target>;

/// A user's e-mails as rows `em(value, type)`: those a provider sent, else the address the
/// service knows the person by, as their work e-mail (what the SCIM rendering shows).
const USER_EMAILS: &str = "EXISTS (SELECT 1 FROM (
        SELECT e->>'value' AS value, e->>'type' AS type FROM jsonb_array_elements(u.emails) e
        UNION ALL SELECT u.email, 'work' WHERE jsonb_array_length(u.emails) = 0) em WHERE (";

/// The userName, lower-cased: the SCIM userName when the user has one that is not their
/// address, else the e-mail as stored for look-ups (`Email::normalized`); the expression of the
/// organization's unique index `users_org_user_name_idx`.
const LOWERED_USER_NAME: &str = "COALESCE(lower(u.scim_user_name), u.email_normalized)";

const GROUP_MEMBERS: &str =
    "EXISTS (SELECT 1 FROM user_group_members m WHERE m.group_id = g.id AND (";

fn user_target(path: &AttrPath) -> Option<Target> {
    let text = |sql| {
        Some(Target::Text {
            sql,
            case_exact: false,
        })
    };
    let emails = |sub| {
        Some(Target::Values {
            exists: USER_EMAILS,
            inner: email_target,
            sub,
        })
    };
    if path.is("id", None) {
        return Some(Target::Text {
            sql: "('usr_' || replace(u.id::text, '-', ''))",
            case_exact: true,
        });
    }
    if path.is("externalId", None) {
        return Some(Target::Text {
            sql: "u.external_id",
            case_exact: true,
        });
    }
    if path.is("userName", None) {
        // Lower-cased and indexed with the organization: Okta's look-up before every create
        // is an index probe.
        return text(LOWERED_USER_NAME);
    }
    if path.is("name", Some("familyName")) {
        return text("u.family_name");
    }
    if path.is("name", Some("givenName")) {
        return text("u.given_name");
    }
    if path.is("name", Some("formatted")) {
        return text("u.formatted_name");
    }
    if path.is("displayName", None) {
        return text("u.name");
    }
    if path.is("title", None) {
        return text("u.title");
    }
    if path.is("active", None) {
        return Some(Target::Boolean("u.active"));
    }
    if path.is("meta", Some("lastModified")) {
        return Some(Target::Time("u.updated_at"));
    }
    if path.is("meta", Some("created")) {
        return Some(Target::Time("u.created_at"));
    }
    if path.is("emails", None) {
        return emails(None);
    }
    if path.is("emails", Some("value")) {
        return emails(Some("value"));
    }
    if path.is("emails", Some("type")) {
        return emails(Some("type"));
    }
    None
}

fn email_target(path: &AttrPath) -> Option<Target> {
    if path.is("value", None) {
        return Some(Target::Text {
            sql: "em.value",
            case_exact: false,
        });
    }
    if path.is("type", None) {
        return Some(Target::Text {
            sql: "em.type",
            case_exact: false,
        });
    }
    None
}

fn group_target(path: &AttrPath) -> Option<Target> {
    if path.is("id", None) {
        return Some(Target::Text {
            sql: "('grp_' || replace(g.id::text, '-', ''))",
            case_exact: true,
        });
    }
    if path.is("externalId", None) {
        return Some(Target::Text {
            sql: "g.external_id",
            case_exact: true,
        });
    }
    if path.is("displayName", None) {
        return Some(Target::Text {
            sql: "g.display_name",
            case_exact: false,
        });
    }
    if path.is("meta", Some("lastModified")) {
        return Some(Target::Time("g.updated_at"));
    }
    if path.is("meta", Some("created")) {
        return Some(Target::Time("g.created_at"));
    }
    if path.is("members", None) {
        return Some(Target::Values {
            exists: GROUP_MEMBERS,
            inner: member_target,
            sub: None,
        });
    }
    if path.is("members", Some("value")) {
        return Some(Target::Values {
            exists: GROUP_MEMBERS,
            inner: member_target,
            sub: Some("value"),
        });
    }
    None
}

fn member_target(path: &AttrPath) -> Option<Target> {
    path.is("value", None).then_some(Target::Text {
        sql: "('usr_' || replace(m.user_id::text, '-', ''))",
        case_exact: true,
    })
}

fn unknown(path: &AttrPath) -> UnsupportedFilter {
    UnsupportedFilter(format!("filtering on '{path}' is not supported"))
}

fn push_filter(
    builder: &mut QueryBuilder<Postgres>,
    filter: &Filter,
    resolve: Resolve,
) -> Result<(), UnsupportedFilter> {
    match filter {
        Filter::Compare {
            path,
            operator,
            value,
        } => {
            let target = resolve(path).ok_or_else(|| unknown(path))?;
            push_compare(builder, path, target, *operator, value)
        }
        Filter::Present(path) => {
            let target = resolve(path).ok_or_else(|| unknown(path))?;
            push_present(builder, path, target)
        }
        Filter::ValuePath { path, filter } => match resolve(path).ok_or_else(|| unknown(path))? {
            Target::Values { exists, inner, .. } => {
                builder.push(exists);
                push_filter(builder, filter, inner)?;
                builder.push("))");
                Ok(())
            }
            _ => Err(UnsupportedFilter(format!(
                "'{path}' is not multi-valued: it takes no [filter]"
            ))),
        },
        Filter::Not(inner) => {
            builder.push("(NOT ");
            push_filter(builder, inner, resolve)?;
            builder.push(")");
            Ok(())
        }
        Filter::And(terms) => push_terms(builder, terms, " AND ", resolve),
        Filter::Or(terms) => push_terms(builder, terms, " OR ", resolve),
    }
}

fn push_terms(
    builder: &mut QueryBuilder<Postgres>,
    terms: &[Filter],
    joiner: &str,
    resolve: Resolve,
) -> Result<(), UnsupportedFilter> {
    builder.push("(");
    for (index, term) in terms.iter().enumerate() {
        if index > 0 {
            builder.push(joiner);
        }
        push_filter(builder, term, resolve)?;
    }
    builder.push(")");
    Ok(())
}

fn push_present(
    builder: &mut QueryBuilder<Postgres>,
    path: &AttrPath,
    target: Target,
) -> Result<(), UnsupportedFilter> {
    match target {
        Target::Text { sql, .. } => {
            builder.push(format!("COALESCE({sql} <> '', false)"));
        }
        Target::Boolean(sql) | Target::Time(sql) => {
            builder.push(format!("({sql} IS NOT NULL)"));
        }
        Target::Values { exists, inner, sub } => {
            builder.push(exists);
            match sub {
                Some(sub) => {
                    let sub_path = AttrPath::new(sub, None);
                    let target = inner(&sub_path).ok_or_else(|| unknown(path))?;
                    push_present(builder, &sub_path, target)?;
                }
                None => {
                    builder.push("true");
                }
            }
            builder.push("))");
        }
    }
    Ok(())
}

fn push_compare(
    builder: &mut QueryBuilder<Postgres>,
    path: &AttrPath,
    target: Target,
    operator: Operator,
    value: &FilterValue,
) -> Result<(), UnsupportedFilter> {
    let refuse = || {
        UnsupportedFilter(format!(
            "'{path} {} {value}' compares values of different types",
            operator.keyword()
        ))
    };
    if let FilterValue::Null = value {
        let sql = match target {
            Target::Text { sql, .. } | Target::Boolean(sql) | Target::Time(sql) => sql,
            Target::Values { .. } => return Err(refuse()),
        };
        match operator {
            Operator::Equal => builder.push(format!("({sql} IS NULL)")),
            Operator::NotEqual => builder.push(format!("({sql} IS NOT NULL)")),
            _ => return Err(refuse()),
        };
        return Ok(());
    }
    match target {
        Target::Values { exists, inner, sub } => {
            let sub_path = AttrPath::new(sub.unwrap_or("value"), None);
            let target = inner(&sub_path).ok_or_else(|| unknown(path))?;
            builder.push(exists);
            push_compare(builder, &sub_path, target, operator, value)?;
            builder.push("))");
        }
        Target::Boolean(sql) => {
            let FilterValue::Boolean(flag) = value else {
                return Err(refuse());
            };
            let symbol = match operator {
                Operator::Equal => "=",
                Operator::NotEqual => "<>",
                _ => return Err(refuse()),
            };
            builder.push(format!("COALESCE({sql} {symbol} "));
            builder.push_bind(*flag);
            builder.push(", false)");
        }
        Target::Time(sql) => {
            let FilterValue::String(text) = value else {
                return Err(refuse());
            };
            let at = DateTime::parse_from_rfc3339(text)
                .map_err(|_| {
                    UnsupportedFilter(format!(
                        "'{path}' compares with RFC 3339 timestamps, not \"{text}\""
                    ))
                })?
                .with_timezone(&Utc);
            let symbol = ordering_symbol(operator).ok_or_else(refuse)?;
            builder.push(format!("COALESCE({sql} {symbol} "));
            builder.push_bind(at);
            builder.push(", false)");
        }
        Target::Text { sql, case_exact } => {
            let text = match value {
                FilterValue::String(text) => text.clone(),
                _ => return Err(refuse()),
            };
            let column = if case_exact || sql == LOWERED_USER_NAME {
                sql.to_owned()
            } else {
                format!("lower({sql})")
            };
            let push_value = |builder: &mut QueryBuilder<Postgres>| {
                if case_exact {
                    builder.push("(");
                } else {
                    builder.push("lower(");
                }
                builder.push_bind(text.clone());
                builder.push("::text)");
            };
            builder.push("COALESCE(");
            match operator {
                Operator::Contains => {
                    builder.push(format!("strpos({column}, "));
                    push_value(builder);
                    builder.push(") > 0");
                }
                Operator::StartsWith => {
                    builder.push(format!("starts_with({column}, "));
                    push_value(builder);
                    builder.push(")");
                }
                Operator::EndsWith => {
                    builder.push(format!("right({column}, char_length("));
                    push_value(builder);
                    builder.push(")) = ");
                    push_value(builder);
                }
                Operator::NotEqual => {
                    // A missing value is not equal to anything.
                    builder.push(format!("{column} IS NULL OR {column} <> "));
                    push_value(builder);
                }
                other => {
                    let symbol = ordering_symbol(other).ok_or_else(refuse)?;
                    builder.push(format!("{column} {symbol} "));
                    push_value(builder);
                }
            }
            builder.push(", false)");
        }
    }
    Ok(())
}

/// The SQL operator of `eq`, `ne` and the orderings.
fn ordering_symbol(operator: Operator) -> Option<&'static str> {
    Some(match operator {
        Operator::Equal => "=",
        Operator::NotEqual => "<>",
        Operator::GreaterThan => ">",
        Operator::GreaterOrEqual => ">=",
        Operator::LessThan => "<",
        Operator::LessOrEqual => "<=",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use flow_scim::ResourceType;
    use flow_scim::filter::parse_for;

    use super::*;

    fn users_sql(filter: &str) -> String {
        let parsed = parse_for(filter, ResourceType::User).expect("valid filter");
        let filter = SqlFilter::users(parsed).expect("translates");
        let mut builder = QueryBuilder::new("");
        filter.push(&mut builder).expect("pushes");
        builder.into_string()
    }

    #[test]
    fn values_are_bound_never_spliced() {
        let sql = users_sql(r#"userName eq "x'; DROP TABLE users; --""#);
        assert!(!sql.contains("DROP"), "{sql}");
        assert!(
            sql.contains("COALESCE(lower(u.scim_user_name), u.email_normalized) = lower($1::text)"),
            "{sql}"
        );
    }

    #[test]
    fn value_paths_and_logic_become_exists_and_parentheses() {
        let sql = users_sql(r#"emails[type eq "work" and value co "@x"] or not (active eq true)"#);
        assert!(sql.contains("jsonb_array_elements(u.emails)"), "{sql}");
        assert!(sql.contains(" OR (NOT "), "{sql}");
        assert!(sql.contains("$3"), "{sql}");
    }

    #[test]
    fn an_ordering_on_a_boolean_is_unsupported() {
        let parsed = Filter::Compare {
            path: AttrPath::new("active", None),
            operator: Operator::GreaterThan,
            value: FilterValue::Boolean(true),
        };
        assert!(SqlFilter::users(parsed).is_err());
    }
}
