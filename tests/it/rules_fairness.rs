//! Enrollment rules among tenants: what a rule assigns is charged to the organization's assign
//! limit (and deferred past it), the dashboard's users import is charged like a bulk write,
//! backfills are claimed in turns per organization and capped, the scheduler drains pending
//! evaluations on a loop of its own, a preview costs by the users it walks, and a rule change
//! drops only its organization's cached rules (docs/enrollment-rules.md).

use std::time::Duration;

use flow_common::db::enrollment_backfills as backfills;
use flow_common::db::orgs::Tier;
use flow_domain::ids::{EnrollmentRuleId, OrgId};
use flow_tests::dashboard::{DashboardClient, role};
use flow_tests::enrollment::{assigned_by, create_rule};
use flow_tests::{TestApp, TestOrg};
use serde_json::{Value, json};

/// A rule every user made through the API matches.
fn everyone(flow: &str) -> Value {
    json!({"name": "Everyone", "condition": {"startDatePresent": false}, "flowId": flow})
}

/// Inserts `count` users `{prefix}{i}@example.com` in SQL (no API write, no evaluation).
async fn insert_users(app: &TestApp, org: &TestOrg, prefix: &str, count: i32) {
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized)
         SELECT gen_random_uuid(), $1, $2 || i || '@example.com', $2 || i || '@example.com'
         FROM generate_series(1, $3) AS i",
    )
    .bind(org.id)
    .bind(prefix)
    .bind(count)
    .execute(&app.db)
    .await
    .expect("users");
}

/// A count over the organization (`$1`).
async fn count(app: &TestApp, org: OrgId, statement: &'static str) -> i64 {
    sqlx::query_scalar(statement)
        .bind(org)
        .fetch_one(&app.db)
        .await
        .expect("count")
}

const PENDING: &str = "SELECT count(*) FROM enrollment_pending WHERE org_id = $1";
const ASSIGNMENTS: &str = "SELECT count(*) FROM assignments WHERE org_id = $1";
const LEDGER: &str = "SELECT count(*) FROM enrollment_assignments WHERE org_id = $1";
const AUDITED: &str = "SELECT count(*) FROM audit_events
    WHERE org_id = $1 AND action = 'enrollment_rule.assigned'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_assignments_past_the_assign_limit_are_deferred_and_the_scheduler_makes_them_later() {
    let mut app = TestApp::spawn().await;
    // 600 assigns a minute: a full bucket holds 600, and it refills one every 100 ms.
    let org = app.create_org_with(Tier::Standard, Some(600)).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    let rule = create_rule(&app, &org, everyone(&flow)).await;
    let users: Vec<Value> = (0..650)
        .map(|i| json!({ "email": format!("u{i}@example.com") }))
        .collect();
    let written = app
        .post(&org, "/v1/users/bulk", &json!({ "users": users }))
        .await;
    // The write itself succeeds whatever its rules assign.
    assert_eq!(written.status, 200, "{:?}", written.body);
    assert_eq!(written.body["created"], 650);
    // Every match is claimed (and audited) at once, but only what the limit has room for is
    // published; the rest stays pending, not to be claimed before the limit has room again.
    assert_eq!(count(&app, org.id, LEDGER).await, 650);
    let deferred = count(&app, org.id, PENDING).await;
    assert!(
        (40..=60).contains(&deferred),
        "about 50 users over the limit stay pending, not {deferred}"
    );
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM enrollment_pending WHERE org_id = $1 AND claimed_until > now()",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("deferred rows");
    assert_eq!(waiting, deferred);
    let published = app
        .eventually(
            Duration::from_secs(30),
            "the assignments within the limit",
            || async {
                let made = count(&app, org.id, ASSIGNMENTS).await;
                (made + deferred >= 650).then_some(made)
            },
        )
        .await;
    assert!(
        published <= 610,
        "{published} assignments in the first seconds"
    );

    // A scheduler makes the rest once the limit has room again, each once.
    app.scheduler = Some(app.start_scheduler_with(|config| config.enrollment_grace_ms = 0));
    app.eventually(Duration::from_secs(60), "every user assigned", || async {
        (assigned_by(&app, &rule).await.len() == 650).then_some(())
    })
    .await;
    app.eventually(Duration::from_secs(30), "no evaluation pending", || async {
        (count(&app, org.id, PENDING).await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count(&app, org.id, ASSIGNMENTS).await, 650);
    assert_eq!(count(&app, org.id, AUDITED).await, 650);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_users_import_is_charged_like_a_bulk_write() {
    let app = TestApp::spawn().await;
    // An assign limit of 1 a minute: 10 writes a minute, an import of 1,000 users costs 10.
    let org = app.create_org_with(Tier::Standard, Some(1)).await;
    let client = DashboardClient::admin(&app, org.id).await;
    let file = |count: usize, prefix: &str| {
        let mut csv = String::from("email\n");
        for i in 0..count {
            csv.push_str(&format!("{prefix}{i}@example.com\n"));
        }
        csv.into_bytes()
    };
    let refused = client
        .post_file("/dashboard/users", &[], "big.csv", &file(1_001, "big"))
        .await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("Nothing was imported") && refused.body.contains("11 write requests"),
        "{}",
        refused.body
    );
    assert_eq!(
        count(&app, org.id, "SELECT count(*) FROM users WHERE org_id = $1").await,
        0
    );
    let imported = client
        .post_file("/dashboard/users", &[], "small.csv", &file(900, "small"))
        .await;
    assert_eq!(imported.status, 200, "{}", imported.body);
    assert_eq!(
        count(&app, org.id, "SELECT count(*) FROM users WHERE org_id = $1").await,
        900
    );
    // The 9 writes it cost leave 1: the next import of more than 100 users waits.
    let again = client
        .post_file("/dashboard/users", &[], "more.csv", &file(101, "more"))
        .await;
    assert_eq!(again.status, 429, "{}", again.body);
}

/// Requests a backfill of the rule; its answer.
async fn request_backfill(app: &TestApp, org: &TestOrg, rule: &str) -> flow_tests::TestResponse {
    app.post(
        org,
        &format!("/v1/enrollment-rules/{rule}/backfill"),
        &json!({}),
    )
    .await
}

/// The organization that owns a claimed backfill, and its rule.
fn owner(claimed: &Option<backfills::Claimed>) -> Option<(OrgId, EnrollmentRuleId)> {
    claimed
        .as_ref()
        .map(|claimed| (claimed.backfill.org_id, claimed.backfill.rule_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfills_are_claimed_in_turns_per_organization_capped_and_run_once_by_two_schedulers() {
    let app = TestApp::spawn().await;
    let busy = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let other = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    // Users first, rules after: nothing is pending, the backfills do all the assigning.
    insert_users(&app, &busy, "busy", 25).await;
    insert_users(&app, &other, "other", 10).await;
    let mut rules = Vec::new();
    for index in 0..21 {
        let flow = app
            .create_flow(&busy, &format!("Course {index}"), &[10])
            .await;
        rules.push(create_rule(&app, &busy, everyone(&flow)).await);
    }
    // Twenty backfills of the busy organization wait; the twenty-first is refused.
    for rule in &rules[..20] {
        let queued = request_backfill(&app, &busy, rule).await;
        assert_eq!(queued.status, 202, "{:?}", queued.body);
    }
    let refused = request_backfill(&app, &busy, &rules[20]).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.body["error"], "conflict");
    assert_eq!(
        refused.body["message"],
        "an organization has at most 20 backfills queued or running; wait for one to finish"
    );
    // Asking again for a rule whose backfill waits still answers that one.
    let again = request_backfill(&app, &busy, &rules[0]).await;
    assert_eq!(again.status, 202, "{:?}", again.body);

    let other_flow = app.create_flow(&other, "Welcome", &[10]).await;
    let other_rule = create_rule(&app, &other, everyone(&other_flow)).await;
    let queued = request_backfill(&app, &other, &other_rule).await;
    assert_eq!(queued.status, 202, "{:?}", queued.body);

    // Claims take turns: the busy organization's oldest, then the other's, though twenty of the
    // busy one's are older; then none, as each organization runs one at most.
    let lease = Duration::from_millis(1_500);
    let first = backfills::claim(&app.db, lease).await.expect("claim");
    let rule_id = |text: &str| EnrollmentRuleId::parse(text).expect("rule id");
    assert_eq!(owner(&first), Some((busy.id, rule_id(&rules[0]))));
    let second = backfills::claim(&app.db, lease).await.expect("claim");
    assert_eq!(owner(&second), Some((other.id, rule_id(&other_rule))));
    let third = backfills::claim(&app.db, lease).await.expect("claim");
    assert_eq!(owner(&third), None);

    // Two schedulers take over the claims when they run out and run everything, each once.
    let first_scheduler = app.start_scheduler();
    let second_scheduler = app.start_scheduler();
    app.eventually(Duration::from_secs(120), "every backfill done", || async {
        let unfinished: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM enrollment_backfills WHERE status <> 'succeeded'",
        )
        .fetch_one(&app.db)
        .await
        .expect("backfills");
        (unfinished == 0).then_some(())
    })
    .await;
    let counts: Vec<(i64, i64)> =
        sqlx::query_as("SELECT matching, queued FROM enrollment_backfills ORDER BY created_at")
            .fetch_all(&app.db)
            .await
            .expect("counts");
    assert_eq!(counts.len(), 21);
    assert!(
        counts[..20].iter().all(|&counts| counts == (25, 25)),
        "{counts:?}"
    );
    assert_eq!(counts[20], (10, 10));
    app.eventually(Duration::from_secs(60), "every assignment made", || async {
        (count(&app, busy.id, ASSIGNMENTS).await == 500
            && count(&app, other.id, ASSIGNMENTS).await == 10)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (org, made) in [(&busy, 500), (&other, 10)] {
        assert_eq!(count(&app, org.id, ASSIGNMENTS).await, made);
        assert_eq!(count(&app, org.id, LEDGER).await, made);
        assert_eq!(count(&app, org.id, AUDITED).await, made);
    }
    drop((first_scheduler, second_scheduler));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_evaluations_are_drained_while_a_backfill_is_stuck() {
    let mut app = TestApp::spawn().await;
    let busy = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let other = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    insert_users(&app, &busy, "busy", 3).await;
    let busy_flow = app.create_flow(&busy, "Compliance", &[10]).await;
    let busy_rule = create_rule(&app, &busy, everyone(&busy_flow)).await;
    let other_flow = app.create_flow(&other, "Welcome", &[10]).await;
    let other_rule = create_rule(&app, &other, everyone(&other_flow)).await;
    // The backfill will wait on a match row this test holds locked.
    sqlx::query(
        "INSERT INTO enrollment_matches (rule_id, user_id, org_id, matching, generation,
                                         matched_at)
         SELECT $2, id, $1, false, 1, now() FROM users WHERE org_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(busy.id)
    .bind(EnrollmentRuleId::parse(&busy_rule).expect("rule id"))
    .execute(&app.db)
    .await
    .expect("match");
    let mut lock = app.db.begin().await.expect("transaction");
    sqlx::query("SELECT 1 FROM enrollment_matches WHERE org_id = $1 FOR UPDATE")
        .bind(busy.id)
        .execute(&mut *lock)
        .await
        .expect("lock");
    let queued = request_backfill(&app, &busy, &busy_rule).await;
    assert_eq!(queued.status, 202, "{:?}", queued.body);
    app.scheduler = Some(app.start_scheduler_with(|config| config.enrollment_grace_ms = 0));
    app.eventually(Duration::from_secs(30), "the backfill running", || async {
        let running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM enrollment_backfills WHERE status = 'running'",
        )
        .fetch_one(&app.db)
        .await
        .expect("running");
        (running == 1).then_some(())
    })
    .await;
    // Written while the backfill is stuck, as a process that died after its commit leaves it.
    insert_users(&app, &other, "other", 1).await;
    assert_eq!(count(&app, other.id, PENDING).await, 1);
    app.eventually(
        Duration::from_secs(30),
        "the pending user assigned meanwhile",
        || async { (assigned_by(&app, &other_rule).await.len() == 1).then_some(()) },
    )
    .await;
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM enrollment_backfills WHERE status = 'running'
           AND after_user_id IS NULL",
    )
    .fetch_one(&app.db)
    .await
    .expect("running");
    assert_eq!(running, 1, "the backfill is still stuck on its first page");
    lock.rollback().await.expect("unlock");
    app.eventually(Duration::from_secs(30), "the backfill's users", || async {
        (assigned_by(&app, &busy_rule).await.len() == 3).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_costs_a_read_per_thousand_users_walked_on_the_api_and_the_dashboard() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    // A report limit of 1 a minute: 20 reads a minute.
    sqlx::query("UPDATE organizations SET report_limit_per_minute = 1 WHERE id = $1")
        .bind(org.id)
        .execute(&app.db)
        .await
        .expect("limit");
    insert_users(&app, &org, "p", 4_500).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    let body = everyone(&flow);
    // 4,500 users: 5 reads a preview, so four use the 20 up (a read comes back every 3 s).
    let first = app.post(&org, "/v1/enrollment-rules/preview", &body).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.body["matching"], 4_500);
    assert_eq!(first.header("ratelimit-remaining"), Some("15"));
    for _ in 0..3 {
        let next = app.post(&org, "/v1/enrollment-rules/preview", &body).await;
        assert_eq!(next.status, 200, "{:?}", next.body);
    }
    let refused = app.post(&org, "/v1/enrollment-rules/preview", &body).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    assert_eq!(refused.body["error"], "rate_limit_exceeded");

    // The dashboard's preview spends the same limit, and is an admin's.
    let form = [
        ("name", "Everyone"),
        ("condition", r#"{"startDatePresent": false}"#),
        ("flow_id", flow.as_str()),
        ("due_days", ""),
        ("due_from", "matched"),
        ("priority", "medium"),
        ("notes", ""),
        ("intent", "preview"),
    ];
    let admin = DashboardClient::signed_in(&app, org.id, "ada@example.com", role("admin")).await;
    let limited = admin.post_form("/dashboard/rules", &form).await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    let viewer = DashboardClient::signed_in(&app, org.id, "vic@example.com", role("viewer")).await;
    let forbidden = viewer.post_form("/dashboard/rules", &form).await;
    assert_eq!(forbidden.status, 403, "{}", forbidden.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_change_drops_only_its_organizations_cached_rules_on_every_replica() {
    let app = TestApp::spawn().await;
    let (replica_url, replica) = app.start_api_replica_on(&flow_tests::amqp_url()).await;
    let changed = app.create_org(Tier::Standard).await;
    let untouched = app.create_org(Tier::Standard).await;
    for org in [&changed, &untouched] {
        let flow = app.create_flow(org, "Compliance", &[10]).await;
        create_rule(&app, org, everyone(&flow)).await;
    }
    let another = app.create_flow(&changed, "Another", &[10]).await;
    // A user write reads the organization's rules into the replica's cache, and this one's
    // (twice, in case the replica's listener started after the first and dropped everything).
    for (base, state) in [
        (&app.base_url, &app.api),
        (&replica_url, &replica),
        (&app.base_url, &app.api),
        (&replica_url, &replica),
    ] {
        for org in [&changed, &untouched] {
            let written = app
                .request_at(
                    base,
                    reqwest::Method::POST,
                    "/v1/users",
                    Some(&org.key),
                    Some(&json!({ "email": format!("{}@example.com", uuid::Uuid::new_v4()) })),
                    &[],
                )
                .await;
            assert_eq!(written.status, 201, "{:?}", written.body);
            assert!(state.caches.rules_cached(org.id));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    create_rule(&app, &changed, everyone(&another)).await;
    // This replica dropped the changed organization's rules at once, the other when it heard.
    assert!(!app.api.caches.rules_cached(changed.id));
    app.eventually(
        Duration::from_secs(4),
        "the notice heard by the replica",
        || async { (!replica.caches.rules_cached(changed.id)).then_some(()) },
    )
    .await;
    // The other organization's rules stay cached on both.
    assert!(app.api.caches.rules_cached(untouched.id));
    assert!(replica.caches.rules_cached(untouched.id));
}
