//! The enrollment rule triggers (migration 0200) see every change a rule's condition can look
//! at: each term of the condition language (read from the parser's own refusal, so a new term
//! fails here until it is listed) names the `users` column or the membership it reads, and a
//! change of each, written straight to the table, queues the user for evaluation.

use flow_common::db::orgs::Tier;
use flow_domain::enrollment::Condition;
use flow_domain::ids::UserId;
use flow_tests::enrollment::create_rule;
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::json;

/// What each term of a condition reads: a column of `users`, or `None` for group membership
/// (`user_group_members`, and `user_groups` renames). A term added to the condition language
/// fails `every_term_a_rule_can_name_queues_the_user_when_what_it_reads_changes` until it is
/// listed here and the trigger `enrollment_users_updated` (or a trigger of its own) watches
/// what it reads.
const TERMS: &[(&str, Option<&str>)] = &[
    ("departmentEquals", Some("department")),
    ("titleContains", Some("title")),
    ("startDatePresent", Some("start_date")),
    ("memberOf", None),
];

/// The combinators, which read nothing of their own.
const COMBINATORS: &[&str] = &["all", "any", "not"];

/// The terms the condition parser knows, from the message that refuses an empty condition.
fn parser_terms() -> Vec<String> {
    let refusal = Condition::parse("condition", &json!({})).expect_err("an empty condition");
    let (_, names) = refusal
        .0
        .split_once("one of: ")
        .unwrap_or_else(|| panic!("the refusal lists the terms: {}", refusal.0));
    names.split(", ").map(str::to_owned).collect()
}

/// Whether `user` waits in `enrollment_pending`.
async fn pending(app: &TestApp, user: UserId) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM enrollment_pending WHERE user_id = $1)")
        .bind(user)
        .fetch_one(&app.db)
        .await
        .expect("enrollment_pending")
}

/// Empties `enrollment_pending` of the organization.
async fn drain(app: &TestApp, org: &TestOrg) {
    sqlx::query("DELETE FROM enrollment_pending WHERE org_id = $1")
        .bind(org.id)
        .execute(&app.db)
        .await
        .expect("drained");
}

/// Runs `statement` (binding `$1` to the user) after draining, and says whether it queued them.
async fn queues(app: &TestApp, org: &TestOrg, user: UserId, statement: &str) -> bool {
    drain(app, org).await;
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .bind(user)
        .execute(&app.db)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
    pending(app, user).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_term_a_rule_can_name_queues_the_user_when_what_it_reads_changes() {
    let mut listed: Vec<&str> = TERMS
        .iter()
        .map(|(term, _)| *term)
        .chain(COMBINATORS.iter().copied())
        .collect();
    listed.sort_unstable();
    let mut known = parser_terms();
    known.sort();
    assert_eq!(
        known, listed,
        "the condition language's terms: list each in TERMS with what it reads"
    );

    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Welcome", &[10]).await;
    create_rule(
        &app,
        &org,
        json!({"name": "Sales", "condition": {"departmentEquals": "Sales"}, "flowId": flow}),
    )
    .await;
    let user = UserId::new();
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized)
         VALUES ($1, $2, 'joan.ash@example.com', 'joan.ash@example.com')",
    )
    .bind(user)
    .bind(org.id)
    .execute(&app.db)
    .await
    .expect("user");
    assert!(pending(&app, user).await, "a user created active is queued");

    let mut missed = Vec::new();
    for (term, column) in TERMS {
        match column {
            Some(column) => {
                let value = match *column {
                    "start_date" => "DATE '2024-05-06'",
                    _ => "'Changed'",
                };
                let changed = format!("UPDATE users SET {column} = {value} WHERE id = $1");
                if !queues(&app, &org, user, &changed).await {
                    missed.push(format!("{term}: users.{column} set"));
                }
                let cleared = format!("UPDATE users SET {column} = NULL WHERE id = $1");
                if !queues(&app, &org, user, &cleared).await {
                    missed.push(format!("{term}: users.{column} cleared"));
                }
            }
            None => {
                let group = uuid::Uuid::new_v4();
                sqlx::query(
                    "INSERT INTO user_groups (id, org_id, display_name, display_name_normalized)
                     VALUES ($1, $2, 'EMEA', 'emea')",
                )
                .bind(group)
                .bind(org.id)
                .execute(&app.db)
                .await
                .expect("group");
                let added = format!(
                    "INSERT INTO user_group_members (group_id, user_id, org_id)
                     SELECT '{group}', $1, org_id FROM users WHERE id = $1"
                );
                if !queues(&app, &org, user, &added).await {
                    missed.push(format!("{term}: member added"));
                }
                let removed = format!(
                    "DELETE FROM user_group_members WHERE group_id = '{group}' AND user_id = $1"
                );
                if !queues(&app, &org, user, &removed).await {
                    missed.push(format!("{term}: member removed"));
                }
            }
        }
    }
    // A rule never assigns an inactive user: reactivation is a change it looks at too.
    drain(&app, &org).await;
    let deactivate = "UPDATE users SET active = false WHERE id = $1";
    assert!(
        !queues(&app, &org, user, deactivate).await,
        "an inactive user is not queued"
    );
    if !queues(
        &app,
        &org,
        user,
        "UPDATE users SET active = true WHERE id = $1",
    )
    .await
    {
        missed.push("reactivation".to_owned());
    }
    assert!(
        missed.is_empty(),
        "changes the enrollment triggers do not queue: {missed:?}"
    );
}
