//! Erasure of a person on request (docs/privacy.md): no trace of the e-mail in any text, JSON,
//! array or byte column of any table while the counts stay; only the organization's rows and only
//! the person's exact addresses are rewritten (a stored value that is no address rewrites
//! nothing, and another organization's sessions, rows and dead-lettered events stay as they
//! were); the audit trail's actor is kept; an erased user is gone for SCIM and no profile write
//! reaches them again; `flowctl users erase`.

use std::time::Duration;

use flow_common::db::audit::{self, Actor};
use flow_common::db::dead_letters::{self, NewDeadLetter};
use flow_common::db::orgs::Tier;
use flow_domain::audit::AuditAction;
use flow_domain::ids::{AssignmentId, UserId};
use flow_domain::messages::AssignCommand;
use flow_tests::dashboard::{DashboardClient, account_id, create_account, role};
use flow_tests::enrollment::create_rule;
use flow_tests::receiver::Receiver;
use flow_tests::{TestApp, TestOptions, TestOrg, TestResponse};
use serde_json::{Value, json};

const PATCH_OP: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
const USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";

/// A SCIM request as providers send it: `application/scim+json`, the org's key.
async fn scim(
    app: &TestApp,
    org: &TestOrg,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> TestResponse {
    app.scim_request(&org.key, method, path, body.as_ref(), &[])
        .await
}

/// A user as an identity provider creates it.
fn scim_user(email: &str, given: &str, family: &str) -> Value {
    json!({
        "schemas": [USER_SCHEMA],
        "userName": email,
        "name": { "givenName": given, "familyName": family },
        "emails": [{ "primary": true, "value": email, "type": "work" }],
        "displayName": format!("{given} {family}"),
        "externalId": format!("00u{given}"),
        "active": true
    })
}

/// Erases a user through the API; returns the answer's body.
async fn erase(app: &TestApp, org: &TestOrg, user: &str) -> Value {
    let erased = app
        .post(org, &format!("/v1/users/{user}/erase"), &json!({}))
        .await;
    assert_eq!(erased.status, 200, "{:?}", erased.body);
    erased.body
}

/// The id of the user of `org` with this e-mail (case-insensitive).
async fn user_id(app: &TestApp, org: &TestOrg, email: &str) -> UserId {
    sqlx::query_scalar("SELECT id FROM users WHERE org_id = $1 AND email_normalized = $2")
        .bind(org.id)
        .bind(email.to_lowercase())
        .fetch_one(&app.db)
        .await
        .expect("user")
}

/// Assigns `flow` to carol@example.com with notes naming her, from the dashboard form of
/// `admin`, without opening the next page (the notice stays in the session); returns the
/// assignment once persisted.
async fn assign_from_dashboard(
    app: &TestApp,
    admin: &DashboardClient,
    org: &TestOrg,
    flow: &str,
) -> String {
    let fields = [
        ("flow", flow),
        ("email", "carol@example.com"),
        ("priority", "high"),
        ("notes", "For carol@example.com"),
    ];
    let assigned = admin.post_form("/dashboard/assign", &fields).await;
    assert_eq!(assigned.status, 303, "{}", assigned.body);
    let carol = user_id(app, org, "carol@example.com").await;
    let id: AssignmentId = app
        .eventually(
            Duration::from_secs(15),
            "the assignment persisted",
            || async {
                sqlx::query_scalar("SELECT id FROM assignments WHERE user_id = $1")
                    .bind(carol)
                    .fetch_optional(&app.db)
                    .await
                    .expect("assignment")
            },
        )
        .await;
    id.to_string()
}

/// Records a dead letter as the recorder does (with the assign commands it carries).
async fn dead_letter(app: &TestApp, queue: &str, kind: &str, payload: &[u8]) -> i64 {
    let commands = if kind.starts_with("assign") {
        flow_domain::messages::decode_assign_message(Some(kind), payload).expect("commands")
    } else {
        Vec::new()
    };
    let mut connection = app.db.acquire().await.expect("connection");
    dead_letters::record(
        &mut connection,
        &NewDeadLetter {
            origin_queue: Some(queue),
            message_id: Some(&format!("test-{}", AssignmentId::new())),
            kind: Some(kind),
            reason: "rejected by a test",
            payload,
        },
        &commands,
    )
    .await
    .expect("dead letter")
}

/// The stored body of a dead letter, as JSON.
async fn dead_letter_body(app: &TestApp, id: i64) -> Value {
    let payload: Vec<u8> = sqlx::query_scalar("SELECT payload FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("dead letter");
    serde_json::from_slice(&payload).expect("JSON")
}

/// The `flow.assigned` event of an assignment, as the outbox holds it.
async fn assigned_event(app: &TestApp, assignment: &str) -> Value {
    sqlx::query_scalar(
        "SELECT payload FROM outbox WHERE assignment_id = $1 AND event_type = 'flow.assigned'",
    )
    .bind(AssignmentId::parse(assignment).expect("id"))
    .fetch_one(&app.db)
    .await
    .expect("event")
}

/// Every text, character, JSON, array and byte column of every table holding `needle`
/// (case-insensitive; bytes read as text, other bytes escaped): `table.column` for each, with
/// the count.
async fn traces(app: &TestApp, needle: &str) -> Vec<String> {
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
         WHERE table_schema = 'public'
           AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'ARRAY',
                             'bytea')
           AND table_name IN (SELECT table_name FROM information_schema.tables
                              WHERE table_schema = 'public' AND table_type = 'BASE TABLE')",
    )
    .fetch_all(&app.db)
    .await
    .expect("columns");
    assert!(columns.len() > 40, "{columns:?}");
    let mut found = Vec::new();
    assert!(
        columns
            .iter()
            .any(|(table, column, _)| table == "dead_letters" && column == "payload"),
        "{columns:?}"
    );
    for (table, column, kind) in columns {
        let text = if kind == "bytea" {
            format!("encode(\"{column}\", 'escape')")
        } else {
            format!("\"{column}\"::text")
        };
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM \"{table}\" WHERE {text} ILIKE $1"
        )))
        .bind(format!("%{needle}%"))
        .fetch_one(&app.db)
        .await
        .expect("search");
        if count > 0 {
            found.push(format!("{table}.{column} ({count})"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_user_leaves_no_trace_of_the_email_in_any_column_and_counts_stay() {
    let app = TestApp::spawn_with(TestOptions {
        webhooks: true,
        ..TestOptions::default()
    })
    .await;
    let receiver = Receiver::start().await.expect("receiver");
    let org = app.create_org(Tier::Standard).await;
    app.create_webhook(&org, &json!({ "url": receiver.url("erase") }))
        .await;
    let flow = app.create_flow(&org, "Welcome", &[10, 10]).await;
    let manual = app.create_flow(&org, "Manual", &[10]).await;
    create_rule(
        &app,
        &org,
        json!({"name": "All", "condition": {"startDatePresent": false}, "flowId": flow}),
    )
    .await;
    // Written in mixed case, as callers do; found whatever the case.
    let created = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": "Harriet.Vane+hr@Example.com", "name": "Harriet Vane"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let user = created.body["userId"].as_str().expect("userId").to_owned();
    sqlx::query(
        "UPDATE users SET given_name = 'Harriet', family_name = 'Vane', formatted_name = 'Harriet Vane',
                scim_user_name = 'HarrietV-sso',
                emails = '[{\"value\": \"harriet.vane+hr@example.com\", \"primary\": true}]'
         WHERE id = $1",
    )
    .bind(UserId::parse(&user).expect("id"))
    .execute(&app.db)
    .await
    .expect("profile");
    app.create_users(&org, &["other@example.com"]).await;
    let assignment = app
        .assign_persisted(
            &org,
            &manual,
            "harriet.vane+hr@example.com",
            json!({"notes": "For harriet.vane+hr@example.com", "priority": "high"}),
        )
        .await;
    let modules = app.module_ids(&org, &manual).await;
    let progress = app
        .post(
            &org,
            &format!("/v1/assignments/{assignment}/progress"),
            &json!({ "moduleId": modules[0], "status": "completed" }),
        )
        .await;
    assert_eq!(progress.status, 202, "{:?}", progress.body);
    // A change and a cancellation that name them: the notes' history, the reason, the events and
    // the audit trail hold the address.
    let welcome = app
        .eventually(Duration::from_secs(10), "the rule's assignment", || async {
            let page = app
                .get(
                    &org,
                    &format!(
                        "/v1/assignments?flowId={flow}&userEmail=harriet.vane%2Bhr@example.com"
                    ),
                )
                .await;
            page.body["data"][0]["assignmentId"]
                .as_str()
                .map(str::to_owned)
        })
        .await;
    let changed = app
        .request(
            reqwest::Method::PATCH,
            &format!("/v1/assignments/{welcome}"),
            Some(&org.key),
            Some(&json!({"notes": "Ask harriet.vane+hr@example.com first"})),
            &[],
        )
        .await;
    assert_eq!(changed.status, 200, "{:?}", changed.body);
    app.eventually(Duration::from_secs(10), "the change", || async {
        let body = app
            .get(&org, &format!("/v1/assignments/{welcome}"))
            .await
            .body;
        (body["notes"] == json!("Ask harriet.vane+hr@example.com first")).then_some(())
    })
    .await;
    let cancelled = app
        .post(
            &org,
            &format!("/v1/assignments/{welcome}/cancel"),
            &json!({"reason": "harriet.vane+hr@example.com left the team"}),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    app.wait_for_status(&org, &welcome, "cancelled").await;
    // Every event written so far is delivered (an event in flight during the erasure would be
    // logged after it: see docs/privacy.md).
    app.eventually(Duration::from_secs(30), "every event delivered", || async {
        let (events, delivered): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM outbox WHERE org_id = $1),
                    (SELECT count(*) FROM webhook_deliveries
                     WHERE org_id = $1 AND status = 'succeeded')",
        )
        .bind(org.id)
        .fetch_one(&app.db)
        .await
        .expect("counts");
        (events >= 4 && delivered == events).then_some(())
    })
    .await;
    // Messages about them that died: their event (on its way to the webhooks), and a command of
    // theirs with their address in its notes.
    let event = dead_letter(
        &app,
        "flow.webhooks.interactive",
        "event",
        assigned_event(&app, &assignment)
            .await
            .to_string()
            .as_bytes(),
    )
    .await;
    let command = json!({
        "version": 1, "assignmentId": AssignmentId::new(), "orgId": org.id,
        "flowId": manual, "flowName": "Manual", "userId": user,
        "assigneeEmail": "Harriet.Vane+hr@Example.com", "priority": "low",
        "notes": "Again for harriet.vane+hr@example.com.", "assignedAt": "2026-11-27T10:00:00Z"
    });
    let command = dead_letter(
        &app,
        "flow.assign",
        "assign",
        command.to_string().as_bytes(),
    )
    .await;
    let needle = "harriet.vane+hr@example.com";
    let found = traces(&app, needle).await;
    assert!(
        found.contains(&"dead_letters.payload (2)".to_owned()),
        "the setup stores the e-mail, in bytes too: {found:?}"
    );
    let before = app
        .post(&org, "/v1/flows/report", &json!({ "flowId": manual }))
        .await;
    assert_eq!(before.status, 200, "{:?}", before.body);

    let erased = app
        .post(&org, &format!("/v1/users/{user}/erase"), &json!({}))
        .await;
    assert_eq!(erased.status, 200, "{:?}", erased.body);
    let pseudonym = erased.body["email"].as_str().expect("pseudonym").to_owned();
    assert!(pseudonym.starts_with("erased-") && pseudonym.ends_with("@erased.invalid"));
    assert_eq!(traces(&app, needle).await, Vec::<String>::new());
    assert_eq!(traces(&app, "Harriet").await, Vec::<String>::new());
    // The dead letters are rewritten in place and stay what they were: an event, a command.
    let event = dead_letter_body(&app, event).await;
    assert_eq!(event["data"]["assigneeEmail"], json!(pseudonym));
    assert_eq!(event["data"]["assignmentId"], json!(assignment));
    let command = dead_letter_body(&app, command).await;
    let command: AssignCommand = serde_json::from_value(command).expect("a command still");
    assert_eq!(command.assignee_email, pseudonym);
    assert_eq!(command.notes, Some(format!("Again for {pseudonym}.")));
    // The record stays, under the pseudonym: assignments, progress, counts.
    assert_eq!(app.assignment_count().await, 3);
    let view = app
        .get(&org, &format!("/v1/assignments/{assignment}"))
        .await;
    assert_eq!(view.status, 200);
    assert_eq!(view.body["assigneeEmail"], json!(pseudonym));
    assert_eq!(view.body["status"], "completed");
    let after = app
        .post(&org, "/v1/flows/report", &json!({ "flowId": manual }))
        .await;
    assert_eq!(after.status, 200, "{:?}", after.body);
    assert_eq!(after.body["metrics"], before.body["metrics"]);
    assert_eq!(after.body["metrics"]["totalAssignments"], 1);
    assert_eq!(after.body["metrics"]["completedAssignments"], 1);
    let (active, erased_at): (bool, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT active, erased_at FROM users WHERE id = $1")
            .bind(UserId::parse(&user).expect("id"))
            .fetch_one(&app.db)
            .await
            .expect("user");
    assert!(!active);
    assert!(erased_at.is_some());
    // Erasing again changes nothing and answers the same; an unknown user is a 404.
    let again = app
        .post(&org, &format!("/v1/users/{user}/erase"), &json!({}))
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["email"], json!(pseudonym));
    assert_eq!(again.body["erasedAt"], erased.body["erasedAt"]);
    let other = app.create_org(Tier::Standard).await;
    let foreign = app
        .post(&other, &format!("/v1/users/{user}/erase"), &json!({}))
        .await;
    assert_eq!(foreign.status, 404);
    // The other person is untouched.
    assert!(!traces(&app, "other@example.com").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flowctl_users_erase_erases_by_email_and_audits_as_flowctl() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    let flow = app.create_flow(&org, "Welcome", &[10]).await;
    app.create_users(&org, &["Ivy.Quinn@example.com", "jay@example.com"])
        .await;
    app.assign_persisted(&org, &flow, "ivy.quinn@example.com", json!({}))
        .await;
    let outcome = flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Erase {
            org: org.id.to_string(),
            email: "ivy.quinn@EXAMPLE.com".to_owned(),
        },
    )
    .await
    .expect("erased");
    let printed = outcome.render(true);
    assert!(printed.contains("@erased.invalid"), "{printed}");
    assert_eq!(
        traces(&app, "ivy.quinn@example.com").await,
        Vec::<String>::new()
    );
    assert_eq!(app.assignment_count().await, 1);
    let (actor, action): (String, String) = sqlx::query_as(
        "SELECT actor, action FROM audit_events WHERE org_id = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        (actor.as_str(), action.as_str()),
        ("flowctl", "user.erased")
    );
    // An e-mail the organization does not have is an error naming it.
    let error = flowctl::admin::users(
        &app.core,
        flowctl::admin::UsersCommand::Erase {
            org: org.id.to_string(),
            email: "nobody@example.com".to_owned(),
        },
    )
    .await
    .expect_err("unknown");
    assert!(
        error.to_string().contains("no user nobody@example.com"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_rewrites_only_the_organizations_rows_that_name_the_person() {
    let app = TestApp::spawn().await;
    let mine = app.create_org(Tier::Standard).await;
    let theirs = app.create_org(Tier::Standard).await;
    let my_admin = DashboardClient::admin(&app, mine.id).await;
    let their_admin = DashboardClient::admin(&app, theirs.id).await;
    let my_flow = app.create_flow(&mine, "Welcome", &[10]).await;
    let their_flow = app.create_flow(&theirs, "Welcome", &[10]).await;
    // The same address in both organizations (the same person, or two), and a colleague.
    app.create_users(&mine, &["carol@example.com", "dave@example.com"])
        .await;
    app.create_users(&theirs, &["carol@example.com"]).await;
    let carol = user_id(&app, &mine, "carol@example.com").await;
    // Values an identity provider stored before they were checked: no address, a domain,
    // another user's address. None of them names Carol.
    sqlx::query(
        "UPDATE users SET emails = '[{\"value\": \"carol@example.com\", \"primary\": true},
                                     {\"value\": \"account\"}, {\"value\": \"example.com\"},
                                     {\"value\": \"dave@example.com\"}, {\"value\": \"a\"}]'
         WHERE id = $1",
    )
    .bind(carol)
    .execute(&app.db)
    .await
    .expect("emails");
    // Each organization's admin assigns its Carol a flow from the dashboard: the notice naming
    // her waits in the admin's session for the next page.
    let mine_assigned = assign_from_dashboard(&app, &my_admin, &mine, &my_flow).await;
    let their_assigned = assign_from_dashboard(&app, &their_admin, &theirs, &their_flow).await;
    app.assign_persisted(
        &mine,
        &my_flow,
        "dave@example.com",
        json!({"notes": "Buddy of dave@example.com at example.com"}),
    )
    .await;
    // One dead-lettered batch of events of both organizations, naming the same address.
    let batch = json!({"version": 1, "events": [
        {"orgId": mine.id, "event": assigned_event(&app, &mine_assigned).await},
        {"orgId": theirs.id, "event": assigned_event(&app, &their_assigned).await},
    ]});
    let batch = dead_letter(
        &app,
        "flow.webhooks.bulk.0",
        "event.batch",
        batch.to_string().as_bytes(),
    )
    .await;
    let their_account = account_id(&app, &format!("admin-{}@example.com", theirs.id)).await;
    let snapshot = || async {
        let sessions: Vec<Value> = sqlx::query_scalar(
            "SELECT data FROM dashboard_sessions WHERE data ->> 'account' = $1 ORDER BY id",
        )
        .bind(&their_account)
        .fetch_all(&app.db)
        .await
        .expect("sessions");
        let theirs_rows: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT u.email, a.notes FROM users u LEFT JOIN assignments a ON a.user_id = u.id
             WHERE u.org_id = $1 OR u.email = 'dave@example.com' ORDER BY u.email",
        )
        .bind(theirs.id)
        .fetch_all(&app.db)
        .await
        .expect("rows");
        let events: Vec<Value> = sqlx::query_scalar(
            "SELECT payload FROM outbox WHERE org_id = $1 OR assignment_id IN
                 (SELECT id FROM assignments WHERE user_id IN
                     (SELECT id FROM users WHERE email = 'dave@example.com'))
             ORDER BY seq",
        )
        .bind(theirs.id)
        .fetch_all(&app.db)
        .await
        .expect("events");
        (sessions, theirs_rows, events)
    };
    let before = snapshot().await;

    let erased = erase(&app, &mine, &carol.to_string()).await;
    let pseudonym = erased["email"].as_str().expect("pseudonym").to_owned();
    assert_eq!(snapshot().await, before, "nothing else was rewritten");
    // Both admins are still signed in; each sees the notice of their own organization, this
    // one's naming the pseudonym.
    let notice = my_admin.page("/dashboard/assign").await;
    assert!(
        notice.contains(&format!("assigned to {pseudonym}")) && !notice.contains("carol@"),
        "{notice}"
    );
    let notice = their_admin.page("/dashboard/assign").await;
    assert!(notice.contains("assigned to carol@example.com"), "{notice}");
    // Carol's assignment's notes, its `flow.assigned` event, the admin's session, Carol's half
    // of the batch: rows of this organization only.
    assert_eq!(erased["rowsRewritten"], json!(4), "{erased}");
    let batch = dead_letter_body(&app, batch).await;
    assert_eq!(
        batch["events"][0]["event"]["data"]["assigneeEmail"],
        json!(pseudonym)
    );
    assert_eq!(
        batch["events"][1]["event"]["data"]["assigneeEmail"],
        json!("carol@example.com")
    );
    let mine_view = app
        .get(&mine, &format!("/v1/assignments/{mine_assigned}"))
        .await;
    assert_eq!(mine_view.body["notes"], json!(format!("For {pseudonym}")));
    let their_view = app
        .get(&theirs, &format!("/v1/assignments/{their_assigned}"))
        .await;
    assert_eq!(their_view.body["assigneeEmail"], json!("carol@example.com"));
    assert_eq!(their_view.body["notes"], json!("For carol@example.com"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_keeps_who_acted_in_the_audit_trail() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    // Erin is an assignee and signs in to the dashboard; a second address of hers, as her
    // provider sent it, is the address of another admin.
    create_account(&app, org.id, "erin@example.com", role("admin")).await;
    create_account(&app, org.id, "boss@example.com", role("admin")).await;
    app.create_users(&org, &["erin@example.com"]).await;
    let erin = user_id(&app, &org, "erin@example.com").await;
    sqlx::query(
        "UPDATE users SET emails = '[{\"value\": \"erin@example.com\"}, {\"value\": \"boss@example.com\"}]'
         WHERE id = $1",
    )
    .bind(erin)
    .execute(&app.db)
    .await
    .expect("emails");
    for (actor, detail) in [
        ("erin@example.com", "invited boss@example.com"),
        ("boss@example.com", "changed erin@example.com"),
    ] {
        audit::record(
            &app.db,
            org.id,
            Actor::Account(actor),
            AuditAction::AccountRoleChanged,
            "erin@example.com",
            detail,
        )
        .await
        .expect("audit");
    }

    let erased = erase(&app, &org, &erin.to_string()).await;
    let pseudonym = erased["email"].as_str().expect("pseudonym").to_owned();
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor, target, detail FROM audit_events
         WHERE org_id = $1 AND action = 'account.role_changed' ORDER BY id",
    )
    .bind(org.id)
    .fetch_all(&app.db)
    .await
    .expect("audit");
    assert_eq!(
        rows,
        [
            (
                "erin@example.com".to_owned(),
                pseudonym.clone(),
                "invited boss@example.com".to_owned()
            ),
            (
                "boss@example.com".to_owned(),
                pseudonym.clone(),
                format!("changed {pseudonym}")
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_user_is_gone_for_scim_and_the_same_user_name_makes_a_new_user() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let created = scim(
        &app,
        &org,
        reqwest::Method::POST,
        "/Users",
        Some(scim_user("fay@example.com", "Fay", "Ames")),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().expect("id").to_owned();
    let group = scim(
        &app,
        &org,
        reqwest::Method::POST,
        "/Groups",
        Some(json!({"displayName": "Sales", "members": [{"value": id}]})),
    )
    .await;
    assert_eq!(group.status, 201, "{:?}", group.body);
    let group = group.body["id"].as_str().expect("id").to_owned();
    let pseudonym = erase(&app, &org, &id).await["email"]
        .as_str()
        .expect("pseudonym")
        .to_owned();

    let path = format!("/Users/{id}");
    let replace = json!([{"op": "replace", "path": "name.givenName", "value": "Fay"}]);
    for (method, body) in [
        (reqwest::Method::GET, None),
        (
            reqwest::Method::PUT,
            Some(scim_user("fay@example.com", "Fay", "Ames")),
        ),
        (
            reqwest::Method::PATCH,
            Some(json!({"schemas": [PATCH_OP], "Operations": replace})),
        ),
        (reqwest::Method::DELETE, None),
    ] {
        let answer = scim(&app, &org, method.clone(), &path, body).await;
        assert_eq!(answer.status, 404, "{method}: {:?}", answer.body);
    }
    for filter in ["", "?filter=userName%20eq%20%22fay%40example.com%22"] {
        let list = scim(
            &app,
            &org,
            reqwest::Method::GET,
            &format!("/Users{filter}"),
            None,
        )
        .await;
        assert_eq!(list.status, 200, "{:?}", list.body);
        assert_eq!(list.body["totalResults"], json!(0), "{:?}", list.body);
    }
    let by_pseudonym = format!(
        "/Users?filter=userName%20eq%20%22{}%22",
        pseudonym.replace('@', "%40")
    );
    let list = scim(&app, &org, reqwest::Method::GET, &by_pseudonym, None).await;
    assert_eq!(list.body["totalResults"], json!(0), "{:?}", list.body);
    let read = scim(
        &app,
        &org,
        reqwest::Method::GET,
        &format!("/Groups/{group}"),
        None,
    )
    .await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    assert!(
        read.body["members"].as_array().is_none_or(Vec::is_empty),
        "{:?}",
        read.body
    );
    // The provider's next sync creates a new user, linked to nothing of the erased one's; the
    // pseudonym cannot be provisioned.
    let again = scim(
        &app,
        &org,
        reqwest::Method::POST,
        "/Users",
        Some(scim_user("fay@example.com", "Fay", "Ames")),
    )
    .await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_ne!(again.body["id"], json!(id));
    let taken = scim(
        &app,
        &org,
        reqwest::Method::POST,
        "/Users",
        Some(scim_user(&pseudonym, "Fay", "Ames")),
    )
    .await;
    assert_eq!(
        taken.status, 400,
        "the pseudonym is refused: {:?}",
        taken.body
    );
    let erased: (String, Option<String>, Option<String>, bool) =
        sqlx::query_as("SELECT email, name, external_id, active FROM users WHERE id = $1")
            .bind(UserId::parse(&id).expect("id"))
            .fetch_one(&app.db)
            .await
            .expect("erased user");
    assert_eq!(erased, (pseudonym, None, None, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_writes_never_reach_an_erased_user() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    let created = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": "gil@example.com", "name": "Gil Lamb"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["userId"].as_str().expect("userId").to_owned();
    let pseudonym = erase(&app, &org, &id).await["email"]
        .as_str()
        .expect("pseudonym")
        .to_owned();
    // The former address is nobody's now: writing it makes a new user.
    let anew = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": "gil@example.com", "name": "Gil Lamb"}),
        )
        .await;
    assert_eq!(anew.status, 201, "{:?}", anew.body);
    assert_ne!(anew.body["userId"], json!(id));
    // The pseudonym is refused, alone, in a bulk or in the dashboard's import.
    let single = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": pseudonym, "name": "Gil Lamb"}),
        )
        .await;
    assert_eq!(single.status, 400, "{:?}", single.body);
    let bulk = app
        .post(
            &org,
            "/v1/users/bulk",
            &json!({"users": [{"email": "hal@example.com"}, {"email": pseudonym.to_uppercase(), "name": "Gil"}]}),
        )
        .await;
    assert_eq!(bulk.status, 400, "{:?}", bulk.body);
    let admin = DashboardClient::admin(&app, org.id).await;
    let imported = admin
        .post_file(
            "/dashboard/users",
            &[],
            "people.csv",
            format!("email,name\n{pseudonym},Gil Lamb\n").as_bytes(),
        )
        .await;
    assert_eq!(imported.status, 200, "{}", imported.body);
    assert!(imported.body.contains("Not imported"), "{}", imported.body);
    let erased: (String, Option<String>, bool) =
        sqlx::query_as("SELECT email, name, active FROM users WHERE id = $1")
            .bind(UserId::parse(&id).expect("id"))
            .fetch_one(&app.db)
            .await
            .expect("erased user");
    assert_eq!(erased, (pseudonym, None, false));
}

/// The columns of `users` that erasure clears or replaces with the pseudonym (docs/privacy.md):
/// they hold, or may hold, something about the person.
const ERASED_USER_COLUMNS: &[&str] = &[
    "email",
    "email_normalized",
    "name",
    "given_name",
    "family_name",
    "formatted_name",
    "title",
    "employee_number",
    "external_id",
    "manager_id",
    "manager_name",
    "start_date",
    "emails",
    "scim_user_name",
];

/// The columns of `users` that erasure keeps as they are or sets to a state, each with why it
/// is kept. A column in neither list fails
/// `every_users_column_is_erased_or_kept_for_a_stated_reason`: whoever adds it decides.
const KEPT_USER_COLUMNS: &[(&str, &str)] = &[
    ("id", "an opaque id the history hangs on; it names no one"),
    ("org_id", "whose user it is, not who"),
    (
        "created_at",
        "when the row was made: history, not the person",
    ),
    ("updated_at", "set to the erasure's time"),
    ("active", "set false: a state"),
    ("deactivated_at", "set when not yet: a state"),
    ("scim_deleted_at", "set when not yet: a state"),
    ("erased_at", "set when not yet: marks the erasure"),
    (
        "department",
        "the organization's structure, not the person; reports by department stay right",
    ),
];

/// A value of SQL type `data_type` that fills column `column` with something erasure must clear.
fn filled(column: &str, data_type: &str) -> String {
    match data_type {
        "text" | "character varying" => format!("'Filled {column}'"),
        "date" => "DATE '2021-03-04'".to_owned(),
        "jsonb" | "json" => format!(
            "'[{{\"value\": \"filled.{column}@example.com\", \"type\": \"work\"}}]'::{data_type}"
        ),
        other => panic!("users.{column}: no test value for type {other}, add one here"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_users_column_is_erased_or_kept_for_a_stated_reason() {
    let app = TestApp::spawn_with(TestOptions {
        assign_worker: false,
        ..TestOptions::default()
    })
    .await;
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'users'
         ORDER BY column_name",
    )
    .fetch_all(&app.db)
    .await
    .expect("the columns of users");
    let kept: Vec<&str> = KEPT_USER_COLUMNS
        .iter()
        .map(|(column, _)| *column)
        .collect();
    let unclassified: Vec<&str> = columns
        .iter()
        .map(|(column, _)| column.as_str())
        .filter(|column| !ERASED_USER_COLUMNS.contains(column) && !kept.contains(column))
        .collect();
    assert!(
        unclassified.is_empty(),
        "users has columns neither erased nor kept for a reason: {unclassified:?}; clear them in \
         flow_common::db::erasure::erase_user (and docs/privacy.md) and list them in \
         ERASED_USER_COLUMNS, or list them in KEPT_USER_COLUMNS with why"
    );
    for column in ERASED_USER_COLUMNS.iter().chain(&kept) {
        assert!(
            columns.iter().any(|(name, _)| name == column),
            "users.{column} is listed here but no longer exists"
        );
        assert!(
            !(ERASED_USER_COLUMNS.contains(column) && kept.contains(column)),
            "users.{column} is listed both erased and kept"
        );
    }

    // A user with every column erasure clears filled (the e-mail as created), and a department.
    let org = app.create_org(Tier::Standard).await;
    let created = app
        .post(
            &org,
            "/v1/users",
            &json!({"email": "ivo.ames@example.com", "name": "Ivo Ames"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let user = created.body["userId"].as_str().expect("userId").to_owned();
    let id = UserId::parse(&user).expect("user id");
    let fills: Vec<String> = columns
        .iter()
        .filter(|(column, _)| {
            ERASED_USER_COLUMNS.contains(&column.as_str())
                && !["email", "email_normalized"].contains(&column.as_str())
        })
        .map(|(column, data_type)| format!("{column} = {}", filled(column, data_type)))
        .collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE users SET {}, department = 'Filled department' WHERE id = $1",
        fills.join(", ")
    )))
    .bind(id)
    .execute(&app.db)
    .await
    .expect("every column filled");
    for column in ERASED_USER_COLUMNS {
        let empty: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {column} IS NULL OR {column}::text IN ('', '[]') FROM users WHERE id = $1"
        )))
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("a column");
        assert!(!empty, "users.{column} is filled before the erasure");
    }

    let pseudonym = erase(&app, &org, &user).await["email"]
        .as_str()
        .expect("pseudonym")
        .to_owned();
    let mut left = Vec::new();
    for column in ERASED_USER_COLUMNS {
        let value: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {column}::text FROM users WHERE id = $1"
        )))
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("a column");
        let cleared = match value.as_deref() {
            None | Some("[]") => true,
            Some(value) => value == pseudonym,
        };
        if !cleared {
            left.push(format!("{column} = {value:?}"));
        }
    }
    assert!(left.is_empty(), "erasure left these as they were: {left:?}");
    let department: Option<String> =
        sqlx::query_scalar("SELECT department FROM users WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .expect("department");
    assert_eq!(department.as_deref(), Some("Filled department"), "kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_command_waiting_for_the_broker_and_xapi_statements_are_erased_too() {
    let proxy = flow_tests::proxy::Proxy::start("127.0.0.1:5672".parse().expect("address")).await;
    let app = TestApp::spawn_with(TestOptions {
        api_amqp_url: Some(format!("amqp://guest:guest@{}/%2f", proxy.address)),
        ..TestOptions::default()
    })
    .await;
    let org = app.create_org(Tier::Standard).await;
    app.create_users(&org, &["harriet@example.com", "other@example.com"])
        .await;
    let user = user_id(&app, &org, "harriet@example.com").await;
    let flow = app.create_flow(&org, "Onboarding", &[30]).await;
    let trigger = app
        .post(
            &org,
            "/v1/event-triggers",
            &json!({
                "name": "New hires", "match": {"type": "hr.hired"},
                "userEmailPointer": "/data/email", "action": "assign", "flowId": flow,
            }),
        )
        .await;
    assert_eq!(trigger.status, 201, "{:?}", trigger.body);
    // What her content sent: her address as the learner, and her name; another learner's
    // statement that mentions her in a response.
    let statements = json!([
        {"actor": {"objectType": "Agent", "name": "Harriet Vane", "mbox": "mailto:harriet@example.com"},
         "verb": {"id": "http://adlnet.gov/expapi/verbs/experienced", "display": {"en-US": "experienced"}},
         "object": {"objectType": "Activity", "id": "https://lms.example.com/courses/1"}},
        {"actor": {"objectType": "Agent", "name": "Other", "mbox": "mailto:other@example.com"},
         "verb": {"id": "http://adlnet.gov/expapi/verbs/answered", "display": {"en-US": "answered"}},
         "object": {"objectType": "Activity", "id": "https://lms.example.com/courses/1/q1"},
         "result": {"response": "ask harriet@example.com"}}
    ]);
    let stored = app
        .request(
            reqwest::Method::POST,
            "/xapi/statements",
            Some(&org.key),
            Some(&statements),
            &[("x-experience-api-version", "1.0.3")],
        )
        .await;
    assert_eq!(stored.status, 200, "{:?}", stored.body);
    // An event whose assign command the broker did not take: kept, with her address, for the
    // retry.
    proxy.disable().await;
    let event = json!({"specversion": "1.0", "id": "hire-1", "source": "hr", "type": "hr.hired",
                       "data": {"email": "harriet@example.com"}});
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base_url))
        .bearer_auth(&org.key)
        .header("content-type", "application/cloudevents+json")
        .body(event.to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(sent.status(), 503);
    let needle = "harriet@example.com";
    let found = traces(&app, needle).await;
    assert!(
        found
            .iter()
            .any(|place| place.starts_with("inbound_event_actions.command"))
            && found
                .iter()
                .any(|place| place.starts_with("xapi_statements.statement")),
        "the setup stores the e-mail in both: {found:?}"
    );
    let erased = app
        .post(&org, &format!("/v1/users/{user}/erase"), &json!({}))
        .await;
    assert_eq!(erased.status, 200, "{:?}", erased.body);
    let pseudonym = erased.body["email"].as_str().expect("pseudonym").to_owned();
    assert_eq!(traces(&app, needle).await, Vec::<String>::new());
    assert_eq!(traces(&app, "Harriet").await, Vec::<String>::new());
    let command: Value = sqlx::query_scalar("SELECT command FROM inbound_event_actions")
        .fetch_one(&app.db)
        .await
        .expect("command");
    let command: AssignCommand = serde_json::from_value(command).expect("a command still");
    assert_eq!(command.assignee_email, pseudonym);
    let actors: Vec<Value> =
        sqlx::query_scalar("SELECT statement -> 'actor' FROM xapi_statements ORDER BY stored_at")
            .fetch_all(&app.db)
            .await
            .expect("statements");
    assert!(
        actors.contains(&json!({"objectType": "Agent", "name": pseudonym,
                                "mbox": format!("mailto:{pseudonym}")})),
        "{actors:?}"
    );
    assert!(
        actors.contains(
            &json!({"objectType": "Agent", "name": "Other", "mbox": "mailto:other@example.com"})
        ),
        "another learner keeps their name: {actors:?}"
    );
    proxy.enable();
}
