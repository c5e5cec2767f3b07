//! Assigning to a team from the dashboard (issue 40): the assign page offers the organization's
//! departments and groups with their active members and the module count beside each flow;
//! "Assign to everyone in it" assigns the flow to each active member once, through the bulk lane,
//! with a result per person; again, it assigns nobody twice. A bad or foreign team is refused
//! with the reason, and a viewer cannot assign. Several people picked with the type-ahead (or
//! pasted) are each assigned once, with a result per person.

use std::time::Duration;

use flow_tests::TestApp;
use flow_tests::dashboard::{DashboardClient, org_with_admin, role};
use flow_tests::people::{provision, provision_group};

/// The e-mails of the flow's persisted assignments, sorted.
async fn assigned(app: &TestApp, flow: &str) -> Vec<String> {
    let flow = flow_domain::ids::FlowId::parse(flow).expect("flow id");
    sqlx::query_scalar(
        "SELECT u.email FROM assignments a JOIN users u ON u.id = a.user_id
         WHERE a.flow_id = $1 ORDER BY u.email",
    )
    .bind(flow)
    .fetch_all(&app.db)
    .await
    .expect("assignments")
}

#[tokio::test]
async fn a_flow_is_assigned_to_every_active_member_of_a_department_or_group_once() {
    let app = TestApp::spawn().await;
    let (org, admin) = org_with_admin(&app).await;
    let ann = provision(&app, &org, "ann@example.com", "Ann", "Sales", None).await;
    provision(&app, &org, "bo@example.com", "Bo", "Sales", None).await;
    provision(&app, &org, "cy@example.com", "Cy", "Sales", None).await;
    let di = provision(&app, &org, "di@example.com", "Di", "Research", None).await;
    sqlx::query("UPDATE users SET active = false WHERE email = 'cy@example.com'")
        .execute(&app.db)
        .await
        .expect("deactivates");
    let group = provision_group(&app, &org, "Mentors", &[&ann, &di]).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10, 20]).await;

    let page = admin.page("/dashboard/assign").await;
    assert!(
        page.contains(r#"<option value="department:Sales">Sales (department, 2 people)</option>"#),
        "{page}"
    );
    assert!(page.contains(
        r#"<option value="department:Research">Research (department, 1 person)</option>"#
    ));
    assert!(page.contains(&format!(
        r#"<option value="group:{group}">Mentors (group, 2 people)</option>"#
    )));
    assert!(page.contains("Sales onboarding (2 modules)"));

    let done = admin
        .post_form(
            "/dashboard/assign/team",
            &[
                ("flow", &flow),
                ("team", "department:Sales"),
                ("priority", "high"),
            ],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("Results of Sales (department)"),
        "{}",
        done.body
    );
    assert!(
        done.body.contains("<strong>2</strong> assigned"),
        "{}",
        done.body
    );
    let emails = app
        .eventually(
            Duration::from_secs(20),
            "the team's assignments",
            || async {
                let emails = assigned(&app, &flow).await;
                (emails.len() == 2).then_some(emails)
            },
        )
        .await;
    assert_eq!(
        emails,
        ["ann@example.com", "bo@example.com"],
        "the inactive member is left out"
    );

    // The group: Ann already has the flow open, Di gets it.
    let again = admin
        .post_form(
            "/dashboard/assign/team",
            &[("flow", &flow), ("team", &format!("group:{group}"))],
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(
        again.body.contains("Results of Mentors (group)"),
        "{}",
        again.body
    );
    app.eventually(Duration::from_secs(20), "Di's assignment", || async {
        (assigned(&app, &flow).await.len() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        assigned(&app, &flow).await,
        ["ann@example.com", "bo@example.com", "di@example.com"],
        "nobody twice"
    );

    // Refusals name what is wrong and assign nothing.
    let other = app.create_org(flow_common::db::orgs::Tier::Standard).await;
    let theirs = provision(&app, &other, "zed@example.com", "Zed", "Sales", None).await;
    let their_group = provision_group(&app, &other, "Theirs", &[&theirs]).await;
    for (team, message) in [
        ("", "Choose a department or group."),
        ("department:", "Choose a department or group."),
        ("group:nonsense", "Choose a department or group."),
        (
            "department:Nobody",
            "That department or group has no active people.",
        ),
        (
            &format!("group:{their_group}") as &str,
            "That department or group has no active people.",
        ),
    ] {
        let refused = admin
            .post_form("/dashboard/assign/team", &[("flow", &flow), ("team", team)])
            .await;
        assert_eq!(refused.status, 400, "{team}: {}", refused.body);
        assert!(refused.body.contains(message), "{team}: {}", refused.body);
    }
    let viewer =
        DashboardClient::signed_in(&app, org.id, "viewer@example.com", role("viewer")).await;
    let forbidden = viewer
        .post_form(
            "/dashboard/assign/team",
            &[("flow", &flow), ("team", "department:Research")],
        )
        .await;
    assert_eq!(forbidden.status, 403);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(assigned(&app, &flow).await.len(), 3);
}

#[tokio::test]
async fn people_picked_by_type_ahead_or_pasted_are_each_assigned_once() {
    let app = TestApp::spawn().await;
    let (org, admin) = org_with_admin(&app).await;
    provision(&app, &org, "ann@example.com", "Ann Archer", "Sales", None).await;
    provision(&app, &org, "bo@example.com", "Bo Brown", "Sales", None).await;
    provision(&app, &org, "annika@example.com", "Annika", "Research", None).await;
    sqlx::query("UPDATE users SET active = false WHERE email = 'annika@example.com'")
        .execute(&app.db)
        .await
        .expect("deactivates");
    let other = app.create_org(flow_common::db::orgs::Tier::Standard).await;
    provision(&app, &other, "anne@example.com", "Anne", "Sales", None).await;
    let flow = app.create_flow(&org, "Sales onboarding", &[10, 20]).await;

    let page = admin.page("/dashboard/assign").await;
    assert!(page.contains(r#"id="people-search""#), "{page}");
    assert!(page.contains(r#"hx-get="/dashboard/assign/people""#));

    // The type-ahead finds the organization's people by part of a name or e-mail, never another
    // organization's, and marks the inactive ones.
    let matches = admin.page("/dashboard/assign/people?q=ANN").await;
    assert!(
        matches.contains(r#"data-pick-email="ann@example.com""#),
        "{matches}"
    );
    assert!(matches.contains("Ann Archer"));
    assert!(matches.contains(r#"data-pick-email="annika@example.com""#));
    assert!(matches.contains("inactive"));
    assert!(!matches.contains("anne@example.com"), "{matches}");
    assert!(!matches.contains("bo@example.com"));
    let by_mail = admin.page("/dashboard/assign/people?q=bo%40ex").await;
    assert!(
        by_mail.contains(r#"data-pick-email="bo@example.com""#),
        "{by_mail}"
    );
    let short = admin.page("/dashboard/assign/people?q=a").await;
    assert!(short.contains("Type at least two letters"), "{short}");
    let none = admin.page("/dashboard/assign/people?q=zz").await;
    assert!(none.contains("Nobody"), "{none}");

    // A list picked or pasted: each person once, whatever the spelling; unknown people get
    // their own reason.
    let done = admin
        .post_form(
            "/dashboard/assign/people",
            &[
                ("flow", &flow),
                (
                    "people",
                    "ann@example.com, BO@example.com\nAnn@Example.com;nobody@example.com",
                ),
                ("priority", "high"),
            ],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Results of 3 people"), "{}", done.body);
    assert!(
        done.body.contains("<strong>2</strong> assigned"),
        "{}",
        done.body
    );
    assert!(
        done.body.contains("<strong>1</strong> not assigned"),
        "{}",
        done.body
    );
    let emails = app
        .eventually(
            Duration::from_secs(20),
            "the picked assignments",
            || async {
                let emails = assigned(&app, &flow).await;
                (emails.len() == 2).then_some(emails)
            },
        )
        .await;
    assert_eq!(emails, ["ann@example.com", "bo@example.com"]);

    // Refusals name what is wrong and assign nothing; a viewer cannot assign or look people up.
    let too_many: String = (0..1_001)
        .map(|index| format!("p{index}@example.com"))
        .collect::<Vec<_>>()
        .join(",");
    for (flow_field, people, message) in [
        (
            "",
            "ann@example.com",
            "Choose the flow to assign to these people.",
        ),
        (flow.as_str(), " , ;\n", "Add at least one person"),
        (flow.as_str(), too_many.as_str(), "at most 1,000 at once"),
    ] {
        let refused = admin
            .post_form(
                "/dashboard/assign/people",
                &[("flow", flow_field), ("people", people)],
            )
            .await;
        assert_eq!(refused.status, 400, "{message}: {}", refused.body);
        assert!(
            refused.body.contains(message),
            "{message}: {}",
            refused.body
        );
    }
    let viewer =
        DashboardClient::signed_in(&app, org.id, "viewer@example.com", role("viewer")).await;
    let forbidden = viewer
        .post_form(
            "/dashboard/assign/people",
            &[("flow", &flow), ("people", "ann@example.com")],
        )
        .await;
    assert_eq!(forbidden.status, 403);
    let status = viewer.get("/dashboard/assign/people?q=ann").await.status;
    assert_eq!(status, 403);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(assigned(&app, &flow).await.len(), 2);
}
