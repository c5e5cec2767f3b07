//! Enrollment rules (issue 29, docs/enrollment-rules.md): CRUD and bad input, rules assigning on
//! user writes through `/v1/users` and the dashboard's CSV import, exactly one assignment per
//! (rule, user) under concurrent changes to two API replicas with the assign-worker killed
//! midway, re-matches, the rule's id on the assignment and in `flow.assigned`, preview, a
//! backfill of 10,000 users as a background job, users whose write's evaluation never ran
//! assigned once by the scheduler (two of them at once), inactive users skipped. Erasure is in
//! `erasure.rs`.

use std::time::Duration;

use flow_common::db::orgs::Tier;
use flow_domain::ids::EnrollmentRuleId;
use flow_tests::dashboard::{DashboardClient, role};
use flow_tests::enrollment::{assigned_by, create_rule};
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg};
use serde_json::{Value, json};

/// Waits until the rule has assigned `count` users; returns their e-mails.
async fn wait_assigned(app: &TestApp, rule: &str, count: usize) -> Vec<String> {
    app.eventually(
        Duration::from_secs(30),
        &format!("{count} assignments of {rule}"),
        || async {
            let emails = assigned_by(app, rule).await;
            (emails.len() >= count).then_some(emails)
        },
    )
    .await
}

/// Sets profile attributes the API does not write (an identity provider does).
async fn set_profile(app: &TestApp, org: &TestOrg, email: &str, department: &str, active: bool) {
    let updated = sqlx::query(
        "UPDATE users SET department = $3, active = $4 WHERE org_id = $1 AND email_normalized = $2",
    )
    .bind(org.id)
    .bind(email.to_lowercase())
    .bind(department)
    .bind(active)
    .execute(&app.db)
    .await
    .expect("profile");
    assert_eq!(updated.rows_affected(), 1);
}

/// Upserts users through `/v1/users/bulk` (a change to them: rules run).
async fn touch(app: &TestApp, base: &str, org: &TestOrg, emails: &[&str]) -> u16 {
    let users: Vec<Value> = emails
        .iter()
        .map(|email| json!({ "email": email }))
        .collect();
    app.request_at(
        base,
        reqwest::Method::POST,
        "/v1/users/bulk",
        Some(&org.key),
        Some(&json!({ "users": users })),
        &[],
    )
    .await
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_are_created_read_listed_replaced_and_deleted_and_bad_input_names_the_field() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[30]).await;
    let body = json!({
        "name": "Sales onboarding",
        "condition": {"all": [{"departmentEquals": "Sales"}, {"not": {"titleContains": "Intern"}}]},
        "flowId": flow,
        "due": {"days": 14, "from": "start_date"},
        "priority": "high",
        "notes": "Welcome",
    });
    let id = create_rule(&app, &org, body.clone()).await;
    let got = app.get(&org, &format!("/v1/enrollment-rules/{id}")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["condition"], body["condition"]);
    assert_eq!(got.body["due"], json!({"days": 14, "from": "start_date"}));
    assert_eq!(got.body["priority"], "high");
    assert_eq!(got.body["flowName"], "Sales onboarding");
    assert_eq!(got.body["reassignOnRematch"], false);
    let list = app.get(&org, "/v1/enrollment-rules").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["data"].as_array().map(Vec::len), Some(1));

    let mut replaced = body.clone();
    replaced["name"] = json!("Sales, renamed");
    replaced["reassignOnRematch"] = json!(true);
    replaced["due"] = Value::Null;
    let put = app
        .request(
            reqwest::Method::PUT,
            &format!("/v1/enrollment-rules/{id}"),
            Some(&org.key),
            Some(&replaced),
            &[],
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(put.body["name"], "Sales, renamed");
    assert_eq!(put.body["reassignOnRematch"], true);
    assert_eq!(put.body["due"], Value::Null);

    // Another organization sees none of it.
    let other = app.create_org(Tier::Standard).await;
    let foreign = app.get(&other, &format!("/v1/enrollment-rules/{id}")).await;
    assert_eq!(foreign.status, 404);

    let bad = [
        (
            json!({"condition": body["condition"], "flowId": flow}),
            "name is required",
        ),
        (
            json!({"name": "x", "flowId": flow}),
            "condition is required",
        ),
        (
            json!({"name": "x", "condition": {"all": [{"department": "Sales"}]}, "flowId": flow}),
            "condition.all[0].department is not a known term",
        ),
        (
            json!({"name": "x", "condition": {"any": [{"titleContains": 7}]}, "flowId": flow}),
            "condition.any[0].titleContains must be a string",
        ),
        (
            json!({"name": "x", "condition": {"not": {"not": {"not": {"not": {"not": {"startDatePresent": true}}}}}}, "flowId": flow}),
            "nested too deep",
        ),
        (
            json!({"name": "x", "condition": {"memberOf": "g".repeat(201)}, "flowId": flow}),
            "condition.memberOf must be at most 200 characters",
        ),
        (
            json!({"name": "n".repeat(201), "condition": {"startDatePresent": true}, "flowId": flow}),
            "name must be at most 200 characters",
        ),
        (
            json!({"name": "x", "condition": {"startDatePresent": true}, "flowId": flow, "due": {"days": 0}}),
            "due.days must be between 1 and 3650",
        ),
        (
            json!({"name": "x", "condition": {"startDatePresent": true}, "flowId": flow, "due": {"days": 3, "from": "hire"}}),
            "due.from must be one of: start_date, matched",
        ),
        (
            json!({"name": "x", "condition": {"startDatePresent": true}, "flowId": flow, "due": {"from": "matched"}}),
            "due.days is required",
        ),
        (
            json!({"name": "x", "condition": {"startDatePresent": true}, "flowId": flow, "priority": "urgent"}),
            "priority must be one of",
        ),
    ];
    for (input, message) in bad {
        let response = app.post(&org, "/v1/enrollment-rules", &input).await;
        assert_eq!(response.status, 400, "{input}: {:?}", response.body);
        assert_eq!(response.body["error"], "invalid_request");
        let text = response.body["message"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{input}: {text}");
    }
    let unknown_flow = app
        .post(
            &org,
            "/v1/enrollment-rules",
            &json!({"name": "x", "condition": {"startDatePresent": true}, "flowId": "flow_00000000000000000000000000000000"}),
        )
        .await;
    assert_eq!(unknown_flow.status, 404, "{:?}", unknown_flow.body);

    let deleted = app
        .request(
            reqwest::Method::DELETE,
            &format!("/v1/enrollment-rules/{id}"),
            Some(&org.key),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 204);
    let gone = app.get(&org, &format!("/v1/enrollment-rules/{id}")).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body["error"], "not_found");
    let malformed = app.get(&org, "/v1/enrollment-rules/nope").await;
    assert_eq!(malformed.status, 404);
    // Each change is audited.
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE org_id = $1 AND action LIKE 'enrollment_rule.%'
         ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        actions,
        [
            "enrollment_rule.created",
            "enrollment_rule.updated",
            "enrollment_rule.deleted"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_assigns_users_created_through_the_api_and_the_csv_import_once_each() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Welcome", &[10]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Everyone new", "condition": {"startDatePresent": false}, "flowId": flow,
               "due": {"days": 14, "from": "start_date"}}),
    )
    .await;
    let created = app
        .post(&org, "/v1/users", &json!({"email": "alice@example.com"}))
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(wait_assigned(&app, &rule, 1).await, ["alice@example.com"]);

    // The dashboard's CSV import runs the rules too.
    let client = DashboardClient::admin(&app, org.id).await;
    let page = client
        .post_file(
            "/dashboard/users",
            &[],
            "people.csv",
            b"email,name\nbob@example.com,Bob\ncarol@example.com,Carol\n",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        wait_assigned(&app, &rule, 3).await,
        ["alice@example.com", "bob@example.com", "carol@example.com"]
    );

    // Writing the same users again assigns nobody twice.
    for _ in 0..3 {
        assert_eq!(
            touch(
                &app,
                &app.base_url,
                &org,
                &["alice@example.com", "bob@example.com"]
            )
            .await,
            200
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(assigned_by(&app, &rule).await.len(), 3);
    assert_eq!(app.assignment_count().await, 3);

    // The assignment names its rule, and its due date counts from the match (no start date).
    let id: String = {
        let row: (flow_domain::ids::AssignmentId,) = sqlx::query_as(
            "SELECT a.id FROM assignments a JOIN users u ON u.id = a.user_id
             WHERE u.email = 'alice@example.com'",
        )
        .fetch_one(&app.db)
        .await
        .expect("assignment");
        row.0.to_string()
    };
    let view = app.get(&org, &format!("/v1/assignments/{id}")).await;
    assert_eq!(view.status, 200);
    assert_eq!(view.body["source"], json!({"enrollmentRuleId": rule}));
    let assigned_at =
        chrono::DateTime::parse_from_rfc3339(view.body["assignedAt"].as_str().unwrap()).unwrap();
    let due = chrono::DateTime::parse_from_rfc3339(view.body["dueDate"].as_str().unwrap()).unwrap();
    assert_eq!((due - assigned_at).num_days(), 14);
    // One audit row per rule-made assignment.
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'enrollment_rule.assigned'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_stops_matching_and_matches_again_is_assigned_once_unless_the_rule_says_so() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales", &[10]).await;
    let other_flow = app.create_flow(&org, "Sales refresher", &[10]).await;
    app.create_users(&org, &["dana@example.com", "eve@example.com"])
        .await;
    let once = create_rule(
        &app,
        &org,
        json!({"name": "Sales", "condition": {"departmentEquals": "sales"}, "flowId": flow}),
    )
    .await;
    let again = create_rule(
        &app,
        &org,
        json!({"name": "Sales again", "condition": {"departmentEquals": "Sales"},
               "flowId": other_flow, "reassignOnRematch": true}),
    )
    .await;
    // Inactive users are never assigned.
    set_profile(&app, &org, "eve@example.com", "Sales", false).await;
    for department in ["Sales", "Support", "Sales"] {
        set_profile(&app, &org, "dana@example.com", department, true).await;
        assert_eq!(
            touch(
                &app,
                &app.base_url,
                &org,
                &["dana@example.com", "eve@example.com"]
            )
            .await,
            200
        );
    }
    assert_eq!(wait_assigned(&app, &once, 1).await, ["dana@example.com"]);
    wait_assigned(&app, &again, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(assigned_by(&app, &once).await, ["dana@example.com"]);
    // The re-assigning rule claimed a second generation; its assignment resolves to the active
    // one of the same flow (a user has one active assignment of a flow), so nothing doubles.
    let generations: Vec<(String, i32)> = sqlx::query_as(
        "SELECT r.name, max(e.generation) FROM enrollment_assignments e
         JOIN enrollment_rules r ON r.id = e.rule_id GROUP BY r.name ORDER BY r.name",
    )
    .fetch_all(&app.db)
    .await
    .expect("ledger");
    assert_eq!(
        generations,
        [("Sales".to_owned(), 1), ("Sales again".to_owned(), 2)]
    );
    assert_eq!(app.assignment_count().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_id_is_in_the_flow_assigned_webhook() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("receiver");
    let org = app.create_org(Tier::Standard).await;
    app.create_webhook(
        &org,
        &json!({ "url": receiver.url("rules"), "events": ["flow.assigned"] }),
    )
    .await;
    let flow = app.create_flow(&org, "Welcome", &[10]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "All", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    app.create_users(&org, &["frank@example.com"]).await;
    let received = receiver
        .wait_for_deliveries("rules", 1, Duration::from_secs(20))
        .await;
    let event = received[0].event();
    assert_eq!(event["type"], "flow.assigned");
    assert_eq!(event["data"]["assigneeEmail"], "frank@example.com");
    assert_eq!(event["data"]["source"], json!({"enrollmentRuleId": rule}));
    // A direct assign carries no source.
    app.create_users(&org, &["gina@example.com"]).await;
    let manual_flow = app.create_flow(&org, "Manual", &[10]).await;
    app.assign_persisted(&org, &manual_flow, "gina@example.com", json!({}))
        .await;
    let received = receiver
        .wait_for_deliveries("rules", 3, Duration::from_secs(20))
        .await;
    let manual = received
        .iter()
        .map(|request| request.event())
        .find(|event| event["data"]["flowName"] == "Manual")
        .expect("manual event");
    assert!(manual["data"].get("source").is_none(), "{manual}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_counts_the_active_users_a_rule_would_assign_and_lists_the_first() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales", &[10]).await;
    let emails: Vec<String> = (0..30).map(|i| format!("p{i:02}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    app.create_users(&org, &refs).await;
    for (index, email) in emails.iter().enumerate() {
        let department = if index % 3 == 0 { "Support" } else { "Sales" };
        set_profile(&app, &org, email, department, index != 1).await;
    }
    let preview = app
        .post(
            &org,
            "/v1/enrollment-rules/preview",
            &json!({"name": "Sales", "condition": {"departmentEquals": "Sales"}, "flowId": flow}),
        )
        .await;
    assert_eq!(preview.status, 200, "{:?}", preview.body);
    // 20 in Sales, one of them inactive.
    assert_eq!(preview.body["matching"], 19);
    let listed = preview.body["users"].as_array().expect("users");
    assert_eq!(listed.len(), 19);
    assert!(listed.iter().all(|user| user["email"] != "p01@example.com"));
    // Nothing was saved or assigned.
    let rules = app.get(&org, "/v1/enrollment-rules").await;
    assert_eq!(rules.body["data"], json!([]));
    let bad = app
        .post(
            &org,
            "/v1/enrollment-rules/preview",
            &json!({"name": "Sales", "condition": {"any": []}, "flowId": flow}),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap()
            .starts_with("condition.any")
    );
}

/// Starts a backfill of the rule; answers the job as the 202 shows it, after checking its
/// `Location`.
async fn start_backfill(app: &TestApp, org: &TestOrg, rule: &str) -> Value {
    let response = app
        .post(
            org,
            &format!("/v1/enrollment-rules/{rule}/backfill"),
            &json!({}),
        )
        .await;
    assert_eq!(response.status, 202, "{:?}", response.body);
    let id = response.body["backfillId"].as_str().expect("backfillId");
    assert!(id.starts_with("bkf_"), "{id}");
    assert_eq!(response.body["ruleId"], rule);
    assert_eq!(
        response.header("location"),
        Some(format!("/v1/enrollment-rules/{rule}/backfills/{id}").as_str())
    );
    response.body
}

/// Polls the backfill until it has succeeded; answers it.
async fn wait_backfill(app: &TestApp, org: &TestOrg, rule: &str, backfill: &Value) -> Value {
    let path = format!(
        "/v1/enrollment-rules/{rule}/backfills/{}",
        backfill["backfillId"].as_str().expect("backfillId")
    );
    app.eventually(
        Duration::from_secs(120),
        &format!("backfill {path} to succeed"),
        || async {
            let response = app.get(org, &path).await;
            assert_eq!(response.status, 200, "{:?}", response.body);
            assert_ne!(response.body["status"], "failed", "{:?}", response.body);
            (response.body["status"] == "succeeded").then_some(response.body)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_assigns_ten_thousand_matching_users_once_through_the_bulk_lane() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    // Setup in SQL for speed: 10,000 in Finance, 100 elsewhere, 50 inactive in Finance.
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized, department, active)
         SELECT gen_random_uuid(), $1, 'bf' || i || '@example.com', 'bf' || i || '@example.com',
                CASE WHEN i <= 10000 OR i > 10100 THEN 'Finance' ELSE 'Legal' END, i <= 10100
         FROM generate_series(1, 10150) AS i",
    )
    .bind(org.id)
    .execute(&app.db)
    .await
    .expect("users");
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Finance", "condition": {"departmentEquals": "Finance"}, "flowId": flow}),
    )
    .await;
    let started = start_backfill(&app, &org, &rule).await;
    let done = wait_backfill(&app, &org, &rule, &started).await;
    assert_eq!(done["matching"], 10_000, "{done:?}");
    assert_eq!(done["queued"], 10_000, "{done:?}");
    assert!(done["finishedAt"].is_string(), "{done:?}");
    app.eventually(
        Duration::from_secs(120),
        "10,000 backfilled assignments",
        || async { (app.assignment_count().await >= 10_000).then_some(()) },
    )
    .await;
    // A second backfill, once the first is over, finds everyone assigned already.
    let again = start_backfill(&app, &org, &rule).await;
    assert_ne!(again["backfillId"], started["backfillId"]);
    let again = wait_backfill(&app, &org, &rule, &again).await;
    assert_eq!(again["matching"], 10_000);
    assert_eq!(again["queued"], 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 10_000);
    assert_eq!(assigned_by(&app, &rule).await.len(), 10_000);
    // Each went through the outbox as any assignment: one flow.assigned each.
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE org_id = $1 AND event_type = 'flow.assigned'
           AND payload->'data'->'source'->>'enrollmentRuleId' = $2",
    )
    .bind(org.id)
    .bind(&rule)
    .fetch_one(&app.db)
    .await
    .expect("events");
    assert_eq!(events, 10_000);
    let unknown = app
        .post(
            &org,
            "/v1/enrollment-rules/enr_00000000000000000000000000000000/backfill",
            &json!({}),
        )
        .await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_backfill_request_answers_the_one_waiting_and_another_organization_gets_404() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    app.create_users(&org, &["ann@example.com", "bob@example.com"])
        .await;
    set_profile(&app, &org, "ann@example.com", "Finance", true).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Finance", "condition": {"departmentEquals": "Finance"}, "flowId": flow}),
    )
    .await;
    // No scheduler yet: the job waits, and asking again answers it rather than a second one.
    let first = start_backfill(&app, &org, &rule).await;
    assert_eq!(first["status"], "queued", "{first:?}");
    assert_eq!(first["matching"], 0);
    let second = start_backfill(&app, &org, &rule).await;
    assert_eq!(second["backfillId"], first["backfillId"]);
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM enrollment_backfills")
        .fetch_one(&app.db)
        .await
        .expect("jobs");
    assert_eq!(jobs, 1);
    let path = format!(
        "/v1/enrollment-rules/{rule}/backfills/{}",
        first["backfillId"].as_str().unwrap()
    );
    let other = app.create_org(Tier::Standard).await;
    let foreign = app.get(&other, &path).await;
    assert_eq!(foreign.status, 404, "{:?}", foreign.body);
    assert_eq!(foreign.body["error"], "not_found");
    let garbled = app
        .get(
            &org,
            &format!("/v1/enrollment-rules/{rule}/backfills/bkf_nope"),
        )
        .await;
    assert_eq!(garbled.status, 404);

    app.scheduler = Some(app.start_scheduler());
    let done = wait_backfill(&app, &org, &rule, &first).await;
    assert_eq!(done["matching"], 1);
    assert_eq!(done["queued"], 1);
    assert!(
        done["startedAt"].is_string() && done["error"].is_null(),
        "{done:?}"
    );
    assert_eq!(wait_assigned(&app, &rule, 1).await, ["ann@example.com"]);
    // The assignment is audited as the requester's, and the request itself too.
    let actors: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, actor_kind FROM audit_events
         WHERE org_id = $1 AND action LIKE 'enrollment_rule.%' ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        actors,
        [
            ("enrollment_rule.created".to_owned(), "api_key".to_owned()),
            (
                "enrollment_rule.backfill_requested".to_owned(),
                "api_key".to_owned()
            ),
            ("enrollment_rule.assigned".to_owned(), "api_key".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_whose_scheduler_died_is_resumed_by_another_after_the_last_user_done() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    let emails = ["a@example.com", "b@example.com", "c@example.com"];
    app.create_users(&org, &emails).await;
    for email in emails {
        set_profile(&app, &org, email, "Finance", true).await;
    }
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Finance", "condition": {"departmentEquals": "Finance"}, "flowId": flow}),
    )
    .await;
    // As a scheduler killed after its first page leaves a job: running, its lease run out,
    // the first user (in id order) done and counted.
    let rule_id = EnrollmentRuleId::parse(&rule).expect("rule id");
    let (backfill, first): (String, String) = sqlx::query_as(
        "WITH first AS (SELECT id, email FROM users WHERE org_id = $1 ORDER BY id LIMIT 1)
         INSERT INTO enrollment_backfills (id, org_id, rule_id, status, actor_kind, matching,
                                           queued, after_user_id, lease_token, lease_until,
                                           attempts, started_at)
         SELECT gen_random_uuid(), $1, $2, 'running', 'flowctl', 1, 1, first.id,
                gen_random_uuid(), now() - interval '1 second', 1, now()
         FROM first
         RETURNING 'bkf_' || replace(id::text, '-', ''),
                   (SELECT email FROM first)",
    )
    .bind(org.id)
    .bind(rule_id)
    .fetch_one(&app.db)
    .await
    .expect("backfill");
    // Asking again answers the job under way.
    let again = start_backfill(&app, &org, &rule).await;
    assert_eq!(again["backfillId"], backfill);
    assert_eq!(again["status"], "running");

    app.scheduler = Some(app.start_scheduler());
    let done = wait_backfill(&app, &org, &rule, &json!({ "backfillId": backfill })).await;
    assert_eq!(done["matching"], 3, "{done:?}");
    assert_eq!(done["queued"], 3, "{done:?}");
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM enrollment_backfills")
        .fetch_one(&app.db)
        .await
        .expect("attempts");
    assert_eq!(attempts, 2);
    // It went on after the user done, not from the start.
    let expected: Vec<&str> = emails.into_iter().filter(|email| *email != first).collect();
    assert_eq!(wait_assigned(&app, &rule, 2).await, expected);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 2);
}

/// Pending evaluations of the organization's users.
async fn pending_count(app: &TestApp, org: &TestOrg) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM enrollment_pending WHERE org_id = $1")
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("pending")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_written_without_their_evaluation_are_assigned_once_by_the_scheduler() {
    let mut app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    app.create_users(&org, &["old@example.com"]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Finance", "condition": {"departmentEquals": "Finance"}, "flowId": flow}),
    )
    .await;
    // Through the API, the write's own evaluation runs and clears what the write queued.
    assert_eq!(
        touch(&app, &app.base_url, &org, &["api@example.com"]).await,
        200
    );
    assert_eq!(pending_count(&app, &org).await, 0);

    // As an API that died right after its commit leaves them: users written and queued (by the
    // write's own transaction), never evaluated.
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized, department)
         SELECT gen_random_uuid(), $1, 'new' || i || '@example.com', 'new' || i || '@example.com',
                'Finance'
         FROM generate_series(1, 3) AS i",
    )
    .bind(org.id)
    .execute(&app.db)
    .await
    .expect("users");
    set_profile(&app, &org, "old@example.com", "Finance", true).await;
    assert_eq!(pending_count(&app, &org).await, 4);
    // Nothing assigns them until a scheduler drains what is pending.
    assert!(assigned_by(&app, &rule).await.is_empty());
    app.scheduler = Some(app.start_scheduler_with(|config| config.enrollment_grace_ms = 0));
    let assigned = wait_assigned(&app, &rule, 4).await;
    assert_eq!(
        assigned,
        [
            "new1@example.com",
            "new2@example.com",
            "new3@example.com",
            "old@example.com"
        ]
    );
    app.eventually(Duration::from_secs(30), "pending rows deleted", || async {
        (pending_count(&app, &org).await == 0).then_some(())
    })
    .await;
    let scheduled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events
         WHERE org_id = $1 AND action = 'enrollment_rule.assigned' AND actor_kind = 'scheduler'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(scheduled, 4);
    // A later change queues them again; evaluated again, they are not assigned twice.
    sqlx::query("UPDATE users SET title = 'Analyst' WHERE org_id = $1")
        .bind(org.id)
        .execute(&app.db)
        .await
        .expect("titles");
    app.eventually(Duration::from_secs(30), "pending rows drained", || async {
        (pending_count(&app, &org).await == 0).then_some(())
    })
    .await;
    assert_eq!(assigned_by(&app, &rule).await.len(), 4);
    assert_eq!(app.assignment_count().await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_rule_assignments_could_not_be_queued_is_assigned_by_the_scheduler() {
    // The API's broker is unreachable: its user writes commit, their evaluations cannot publish.
    let mut app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some("amqp://guest:guest@127.0.0.1:1/%2f".to_owned()),
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Everyone", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    assert_eq!(
        touch(&app, &app.base_url, &org, &["ann@example.com"]).await,
        503
    );
    // The write committed, and so did its queueing; the failed evaluation left it there.
    assert_eq!(pending_count(&app, &org).await, 1);
    app.scheduler = Some(app.start_scheduler_with(|config| config.enrollment_grace_ms = 0));
    assert_eq!(wait_assigned(&app, &rule, 1).await, ["ann@example.com"]);
    app.eventually(Duration::from_secs(30), "pending row deleted", || async {
        (pending_count(&app, &org).await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.assignment_count().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_draining_the_same_pending_users_assign_each_once() {
    let app = TestApp::spawn().await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Compliance", &[10]).await;
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "Everyone", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    sqlx::query(
        "INSERT INTO users (id, org_id, email, email_normalized)
         SELECT gen_random_uuid(), $1, 'p' || i || '@example.com', 'p' || i || '@example.com'
         FROM generate_series(1, 2000) AS i",
    )
    .bind(org.id)
    .execute(&app.db)
    .await
    .expect("users");
    assert_eq!(pending_count(&app, &org).await, 2_000);
    // Two schedulers, small batches, and claims that run out at once: each claims what the
    // other holds as soon as it can, so they overlap.
    let tune = |config: &mut flow_workers::scheduler::SchedulerConfig| {
        config.enrollment_grace_ms = 0;
        config.enrollment_drain_batch = 50;
        config.enrollment_lease_ms = 1_000;
    };
    let first = app.start_scheduler_with(tune);
    let second = app.start_scheduler_with(tune);
    app.eventually(Duration::from_secs(120), "pending rows drained", || async {
        (pending_count(&app, &org).await == 0).then_some(())
    })
    .await;
    assert_eq!(wait_assigned(&app, &rule, 2_000).await.len(), 2_000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.assignment_count().await, 2_000);
    let ledger: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM enrollment_assignments WHERE org_id = $1 AND generation = 1",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("ledger");
    assert_eq!(ledger, 2_000);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'enrollment_rule.assigned'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 2_000);
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_on_two_replicas_with_the_worker_killed_assign_each_user_once() {
    let mut app = TestApp::spawn().await;
    let replica = app.start_api_replica().await;
    let org = app.create_org_with(Tier::Enterprise, Some(1_000_000)).await;
    let flow = app.create_flow(&org, "Onboarding", &[10]).await;
    let emails: Vec<String> = (0..200).map(|i| format!("c{i:03}@example.com")).collect();
    let refs: Vec<&str> = emails.iter().map(String::as_str).collect();
    let rule = create_rule(
        &app,
        &org,
        json!({"name": "New hires", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    let bases = [app.base_url.clone(), replica];
    // Rounds of the same users written to both replicas at once; the worker dies after the
    // first round and comes back after the third.
    for round in 0..5 {
        let writes = bases
            .iter()
            .flat_map(|base| refs.chunks(50).map(move |chunk| (base, chunk)))
            .map(|(base, chunk)| touch(&app, base, &org, chunk));
        let statuses = futures::future::join_all(writes).await;
        assert!(
            statuses.iter().all(|status| *status == 200),
            "round {round}: {statuses:?}"
        );
        if round == 0 {
            app.assign_worker.take().expect("worker").kill();
        }
        if round == 2 {
            app.assign_worker = Some(app.start_assign_worker());
        }
    }
    let assigned = wait_assigned(&app, &rule, 200).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(assigned_by(&app, &rule).await, assigned);
    assert_eq!(assigned.len(), 200);
    assert_eq!(app.assignment_count().await, 200);
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE org_id = $1 AND event_type = 'flow.assigned'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("events");
    assert_eq!(events, 200);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND action = 'enrollment_rule.assigned'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_creates_previews_edits_backfills_and_deletes_rules() {
    let app = TestApp::spawn_with(TestOptions {
        scheduler: true,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10]).await;
    app.create_users(
        &org,
        &["sam@example.com", "sue@example.com", "sid@example.com"],
    )
    .await;
    set_profile(&app, &org, "sam@example.com", "Sales", true).await;
    set_profile(&app, &org, "sue@example.com", "Sales", true).await;
    let admin = DashboardClient::signed_in(&app, org.id, "ada@example.com", role("admin")).await;
    let empty = admin.page("/dashboard/rules").await;
    assert!(empty.contains("No rules"), "{empty}");
    let form = admin.page("/dashboard/rules/new").await;
    assert!(
        form.contains("Sales onboarding"),
        "the flow is offered: {form}"
    );

    let fields = |intent: &'static str, condition: &'static str| {
        vec![
            ("name", "Sales"),
            ("condition", condition),
            ("flow_id", flow.as_str()),
            ("due_days", "14"),
            ("due_from", "start_date"),
            ("priority", "high"),
            ("notes", ""),
            ("intent", intent),
        ]
    };
    let preview = admin
        .post_form(
            "/dashboard/rules",
            &fields("preview", r#"{"departmentEquals": "sales"}"#),
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview
            .body
            .contains("<strong>2</strong> active users match"),
        "{}",
        preview.body
    );
    assert!(preview.body.contains("sam@example.com") && !preview.body.contains("sid@example.com"));
    let bad = admin
        .post_form("/dashboard/rules", &fields("save", r#"{"all": []}"#))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("condition.all must be a non-empty list"),
        "{}",
        bad.body
    );
    let not_json = admin
        .post_form("/dashboard/rules", &fields("save", "{departmentEquals"))
        .await;
    assert_eq!(not_json.status, 400);
    assert!(not_json.body.contains("condition is not valid JSON"));

    let viewer = DashboardClient::signed_in(&app, org.id, "vic@example.com", role("viewer")).await;
    let refused = viewer
        .post_form(
            "/dashboard/rules",
            &fields("save", r#"{"departmentEquals": "Sales"}"#),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);

    let saved = admin
        .post_form(
            "/dashboard/rules",
            &fields("save", r#"{"departmentEquals": "Sales"}"#),
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let list = admin.page("/dashboard/rules").await;
    assert!(list.contains("14 days after start date"), "{list}");
    let rule: String = sqlx::query_scalar(
        "SELECT 'enr_' || replace(id::text, '-', '') FROM enrollment_rules WHERE org_id = $1",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("rule");
    let edit = admin.page(&format!("/dashboard/rules/{rule}")).await;
    assert!(edit.contains("departmentEquals"), "{edit}");
    let mut renamed = fields("save", r#"{"departmentEquals": "Sales"}"#);
    renamed[0] = ("name", "Sales team");
    let updated = admin
        .post_form(&format!("/dashboard/rules/{rule}"), &renamed)
        .await;
    assert_eq!(updated.status, 303, "{}", updated.body);
    assert!(admin.page("/dashboard/rules").await.contains("Sales team"));

    let backfilled = admin
        .post_form(&format!("/dashboard/rules/{rule}/backfill"), &[])
        .await;
    assert_eq!(backfilled.status, 303, "{}", backfilled.body);
    assert!(
        admin
            .page("/dashboard/rules")
            .await
            .contains("The backfill has started")
    );
    app.eventually(
        Duration::from_secs(60),
        "the backfill shown as succeeded",
        || async {
            admin
                .page("/dashboard/rules")
                .await
                .contains("Succeeded: 2 users match; 2 assignments queued")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        wait_assigned(&app, &rule, 2).await,
        ["sam@example.com", "sue@example.com"]
    );
    let deleted = admin
        .post_form(&format!("/dashboard/rules/{rule}/delete"), &[])
        .await;
    assert_eq!(deleted.status, 303);
    assert!(admin.page("/dashboard/rules").await.contains("No rules"));
    assert_eq!(app.assignment_count().await, 2, "its assignments stay");
}

#[tokio::test]
async fn the_dashboard_builds_conditions_with_pickers_and_keeps_deeper_ones_as_json() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10]).await;
    app.create_users(&org, &["sam@example.com", "sid@example.com"])
        .await;
    set_profile(&app, &org, "sam@example.com", "Sales", true).await;
    set_profile(&app, &org, "sid@example.com", "Research", true).await;
    let admin = DashboardClient::signed_in(&app, org.id, "ada@example.com", role("admin")).await;

    // A new rule starts in the pickers, with the organization's departments offered as values.
    let form = admin.page("/dashboard/rules/new").await;
    assert!(
        form.contains(r#"<input type="radio" name="mode" value="pickers" checked>"#),
        "{form}"
    );
    assert!(
        form.contains(r#"<option value="department_is" selected>Department is</option>"#),
        "{form}"
    );
    assert!(form.contains(r#"<option value="Sales">"#), "{form}");

    let fields = |intent: &'static str, rows: &[(&'static str, &'static str)]| {
        let mut fields = vec![
            ("name", "Sales but not interns"),
            ("mode", "pickers"),
            ("combine", "all"),
            ("condition", ""),
            ("flow_id", flow.as_str()),
            ("priority", "medium"),
            ("intent", intent),
        ];
        for (kind, value) in rows {
            fields.push(("term_kind", kind));
            fields.push(("term_value", value));
        }
        fields
    };
    let rows = [
        ("department_is", "sales"),
        ("", ""),
        ("title_lacks", "Intern"),
    ];
    let preview = admin
        .post_form("/dashboard/rules", &fields("preview", &rows))
        .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview
            .body
            .contains("<strong>1</strong> active users match"),
        "{}",
        preview.body
    );
    assert!(preview.body.contains("sam@example.com") && !preview.body.contains("sid@example.com"));
    let missing = admin
        .post_form(
            "/dashboard/rules",
            &fields("save", &[("department_is", "Sales"), ("member_of", " ")]),
        )
        .await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(
        missing
            .body
            .contains("Condition row 2 (Member of group) needs a value."),
        "{}",
        missing.body
    );
    let saved = admin
        .post_form("/dashboard/rules", &fields("save", &rows))
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let (rule, condition): (EnrollmentRuleId, Value) =
        sqlx::query_as("SELECT id, condition FROM enrollment_rules WHERE org_id = $1")
            .bind(org.id)
            .fetch_one(&app.db)
            .await
            .expect("rule");
    assert_eq!(
        condition,
        json!({"all": [{"departmentEquals": "sales"}, {"not": {"titleContains": "Intern"}}]})
    );

    // Editing shows the rows again; a condition the rows cannot show stays JSON.
    let edit = admin.page(&format!("/dashboard/rules/{rule}")).await;
    assert!(
        edit.contains(r#"<input type="radio" name="mode" value="pickers" checked>"#),
        "{edit}"
    );
    assert!(
        edit.contains(r#"<option value="title_lacks" selected>"#),
        "{edit}"
    );
    assert!(edit.contains(r#"value="Intern""#), "{edit}");
    let nested = json!({"any": [{"all": [{"departmentEquals": "Sales"}, {"memberOf": "EMEA"}]}, {"startDatePresent": true}]});
    sqlx::query("UPDATE enrollment_rules SET condition = $1 WHERE id = $2")
        .bind(&nested)
        .bind(rule)
        .execute(&app.db)
        .await
        .expect("nests the condition");
    let edit = admin.page(&format!("/dashboard/rules/{rule}")).await;
    assert!(
        edit.contains(r#"<input type="radio" name="mode" value="json" checked>"#),
        "{edit}"
    );
    assert!(edit.contains("memberOf"), "{edit}");
}
