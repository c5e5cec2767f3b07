//! Dashboard accounts change and their access ends at once: admins (on the Team page) and
//! operators (`flowctl admin`) remove, disable, enable and change the role of accounts; removing,
//! disabling, demoting and resetting with a new link end every session of the account on every
//! replica; the last admin stays; every change is in the audit trail; and the invite form says
//! nothing about other organizations' accounts.

use flow_common::db::accounts::{self, AccountChange, Role};
use flow_common::db::audit::Actor;
use flow_common::db::orgs::Tier;
use flow_domain::Email;
use flow_domain::ids::{AccountId, OrgId};
use flow_tests::dashboard::{DashboardClient, account_id, between, create_account, role};
use flow_tests::{TestApp, TestOrg};
use serde_json::json;

const PASSWORD: &str = "a long enough password";

/// An organization with a signed-in admin `admin-…` and a signed-in account `pat-…` of
/// `pat_role` whose session goes through another API replica (sessions end on every replica).
struct Team {
    org: TestOrg,
    admin: DashboardClient,
    pat: DashboardClient,
    pat_email: String,
    pat_id: String,
}

async fn team(app: &TestApp, pat_role: &str) -> Team {
    let org = app.create_org(Tier::Standard).await;
    let admin = DashboardClient::admin(app, org.id).await;
    let pat_email = format!("pat-{}@example.com", org.id);
    let link = create_account(app, org.id, &pat_email, role(pat_role)).await;
    let mut pat = DashboardClient::with_link(app, &link, PASSWORD).await;
    pat.base_url = app.start_api_replica().await;
    pat.page("/dashboard/flows").await;
    let pat_id = account_id(app, &pat_email).await;
    Team {
        org,
        admin,
        pat,
        pat_email,
        pat_id,
    }
}

/// The organization's audit trail, oldest first: (action, actor, detail).
async fn audit_trail(app: &TestApp, org: OrgId) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT action, actor, detail FROM audit_events WHERE org_id = $1 ORDER BY id")
        .bind(org)
        .fetch_all(&app.db)
        .await
        .unwrap()
}

async fn sessions_of(app: &TestApp, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM dashboard_sessions WHERE data ->> 'account' = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

/// Asserts that `client`'s session has ended: its next page request is sent to sign in.
async fn assert_signed_out(client: &DashboardClient, what: &str) {
    let page = client.get("/dashboard/flows").await;
    assert!(
        page.is_sign_in_redirect(),
        "{what}: {} {:?}",
        page.status,
        page.location()
    );
}

#[tokio::test]
async fn removing_an_account_ends_its_sessions_at_once() {
    let app = TestApp::spawn().await;
    let team = team(&app, "admin").await;
    assert_eq!(sessions_of(&app, &team.pat_id).await, 1);
    let removed = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/remove", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    let page = team.admin.page("/dashboard/settings/team").await;
    assert!(
        page.contains("is removed; their sessions have ended"),
        "{page}"
    );
    assert!(!page.contains(&format!("<td class=\"wrap\">{}", team.pat_email)));
    assert_eq!(sessions_of(&app, &team.pat_id).await, 0);
    assert_signed_out(&team.pat, "a removed account").await;
    assert_eq!(
        team.pat.sign_in(&team.pat_email, PASSWORD).await.status,
        401
    );
    let trail = audit_trail(&app, team.org.id).await;
    let admin_email = format!("admin-{}@example.com", team.org.id);
    assert_eq!(
        trail.last().unwrap(),
        &(
            "account.removed".to_owned(),
            admin_email,
            format!("{} (admin)", team.pat_email)
        )
    );
    let log = team.admin.page("/dashboard/settings/audit").await;
    assert!(log.contains("Removed a dashboard account"), "{log}");
}

#[tokio::test]
async fn a_disabled_account_is_signed_out_and_cannot_sign_in_until_enabled() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    let disabled = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/disable", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(disabled.status, 303, "{}", disabled.body);
    assert_signed_out(&team.pat, "a disabled account").await;
    let page = team.admin.page("/dashboard/settings/team").await;
    assert!(page.contains("Disabled"), "{page}");
    let refused = team.pat.sign_in(&team.pat_email, PASSWORD).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("This account is disabled"));
    assert!(team.pat.session().is_none());
    // No new link for a disabled account.
    let link = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/link", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(link.status, 409, "{}", link.body);
    assert!(
        link.body.contains("is disabled. Enable it"),
        "{}",
        link.body
    );

    let enabled = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/enable", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(enabled.status, 303);
    assert_eq!(
        team.pat.sign_in(&team.pat_email, PASSWORD).await.status,
        303
    );
    team.pat.page("/dashboard/flows").await;
    let actions: Vec<String> = audit_trail(&app, team.org.id)
        .await
        .into_iter()
        .map(|(action, _, _)| action)
        .collect();
    assert!(
        actions.ends_with(&["account.disabled".to_owned(), "account.enabled".to_owned()]),
        "{actions:?}"
    );
}

#[tokio::test]
async fn demoting_an_admin_ends_its_sessions_and_promoting_does_not() {
    let app = TestApp::spawn().await;
    let team = team(&app, "admin").await;
    let path = format!("/dashboard/settings/team/{}/role", team.pat_id);
    let demoted = team.admin.post_form(&path, &[("role", "viewer")]).await;
    assert_eq!(demoted.status, 303, "{}", demoted.body);
    assert_signed_out(&team.pat, "a demoted admin").await;
    assert_eq!(
        team.pat.sign_in(&team.pat_email, PASSWORD).await.status,
        303
    );
    let refused = team
        .pat
        .post_form("/dashboard/settings/api-keys", &[("name", "not any more")])
        .await;
    assert_eq!(refused.status, 403, "a viewer now");

    let promoted = team.admin.post_form(&path, &[("role", "admin")]).await;
    assert_eq!(promoted.status, 303);
    let created = team
        .pat
        .post_form(
            "/dashboard/settings/api-keys",
            &[("name", "an admin again")],
        )
        .await;
    assert_eq!(created.status, 200, "the session went on: {}", created.body);
    let bad = team.admin.post_form(&path, &[("role", "owner")]).await;
    assert_eq!(bad.status, 400);
    let trail = audit_trail(&app, team.org.id).await;
    let changes: Vec<&str> = trail
        .iter()
        .filter(|(action, _, _)| action == "account.role_changed")
        .map(|(_, _, detail)| detail.as_str())
        .collect();
    assert_eq!(
        changes,
        [
            format!("{}: admin → viewer", team.pat_email),
            format!("{}: viewer → admin", team.pat_email)
        ]
    );
}

#[tokio::test]
async fn a_new_sign_in_link_resets_the_password_and_ends_the_sessions() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    let issued = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/link", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(issued.status, 200, "{}", issued.body);
    let link = between(&issued.body, "<code id=\"sign-in-link\">", "</code>")
        .unwrap()
        .to_owned();
    assert_signed_out(&team.pat, "an account reset with a new link").await;
    assert_eq!(
        team.pat.sign_in(&team.pat_email, PASSWORD).await.status,
        401,
        "the old password stopped working"
    );
    let page = team.admin.page("/dashboard/settings/team").await;
    assert!(
        page.contains("Invited"),
        "no password until the link is used"
    );
    let renewed = DashboardClient::with_link(&app, &link, "a brand new password").await;
    renewed.page("/dashboard/flows").await;
    let trail = audit_trail(&app, team.org.id).await;
    let issued = trail
        .iter()
        .rfind(|(action, _, _)| action == "account.link_issued")
        .unwrap();
    assert_eq!(issued.2, format!("{} (password reset)", team.pat_email));
    assert_eq!(
        trail.last().unwrap(),
        &(
            "account.password_set".to_owned(),
            team.pat_email.clone(),
            team.pat_email.clone()
        )
    );
}

#[tokio::test]
async fn setting_a_password_ends_every_other_session_of_the_account() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    // A live link issued without a reset (as before links reset accounts): using it must still
    // end the sessions that knew the old password.
    let id = AccountId::parse(&team.pat_id).unwrap();
    let mut connection = app.db.acquire().await.unwrap();
    let (token, _) = accounts::issue_link(&mut connection, id).await.unwrap();
    drop(connection);
    let link = accounts::link_url(&app.base_url, &token);
    let renewed = DashboardClient::with_link(&app, &link, "a brand new password").await;
    assert_signed_out(&team.pat, "a session from before the password was set").await;
    renewed.page("/dashboard/flows").await;
    assert_eq!(sessions_of(&app, &team.pat_id).await, 1, "only the new one");
}

#[tokio::test]
async fn the_last_admin_cannot_be_removed_disabled_or_demoted() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    let admin_email = format!("admin-{}@example.com", team.org.id);
    let admin_id = account_id(&app, &admin_email).await;
    for (action, form) in [
        ("remove", vec![]),
        ("disable", vec![]),
        ("role", vec![("role", "viewer")]),
    ] {
        let refused = team
            .admin
            .post_form(
                &format!("/dashboard/settings/team/{admin_id}/{action}"),
                &form,
            )
            .await;
        assert_eq!(refused.status, 409, "{action}: {}", refused.body);
        assert!(
            refused
                .body
                .contains("is the last admin of this organization"),
            "{action}: {}",
            refused.body
        );
    }
    let refused = flowctl::accounts::change(&app.api, &admin_email, AccountChange::Disable)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("is the last admin"),
        "{refused}"
    );
    team.admin.page("/dashboard/flows").await;
    let changes: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE action IN ('account.removed',
         'account.disabled', 'account.role_changed')",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(changes, 0, "nothing written");

    // With a second admin, the first may step down (and is signed out), and the second is then
    // the last one.
    let promoted = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{}/role", team.pat_id),
            &[("role", "admin")],
        )
        .await;
    assert_eq!(promoted.status, 303);
    let stepped_down = team
        .admin
        .post_form(
            &format!("/dashboard/settings/team/{admin_id}/role"),
            &[("role", "viewer")],
        )
        .await;
    assert_eq!(stepped_down.status, 303);
    assert_signed_out(&team.admin, "an admin who stepped down").await;
    let refused = team
        .pat
        .post_form(
            &format!("/dashboard/settings/team/{}/remove", team.pat_id),
            &[],
        )
        .await;
    assert_eq!(refused.status, 409);
}

#[tokio::test]
async fn two_admins_demoting_each_other_at_once_leave_one_admin() {
    let app = TestApp::spawn().await;
    let org = app.create_org(Tier::Standard).await;
    create_account(&app, org.id, "one@example.com", role("admin")).await;
    create_account(&app, org.id, "two@example.com", role("admin")).await;
    let one = AccountId::parse(&account_id(&app, "one@example.com").await).unwrap();
    let two = AccountId::parse(&account_id(&app, "two@example.com").await).unwrap();
    let demote = AccountChange::SetRole(Role::Viewer);
    let organization = flow_common::db::orgs::get(&app.db, org.id)
        .await
        .unwrap()
        .expect("the organization");
    let caller = flow_app::Caller::without_key(organization);
    let acting = |email| flow_app::Acting {
        caller: &caller,
        actor: Actor::Account(email),
    };
    let (first, second) = tokio::join!(
        flow_app::team::change(&app.api, acting("one@example.com"), two, demote),
        flow_app::team::change(&app.api, acting("two@example.com"), one, demote),
    );
    let refused = [&first, &second]
        .iter()
        .filter(|result| {
            matches!(result, Err(flow_app::ServiceError::Conflict(message)) if message.contains("is the last admin"))
        })
        .count();
    assert_eq!(refused, 1, "{first:?} {second:?}");
    let admins: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dashboard_accounts WHERE org_id = $1 AND role = 'admin'",
    )
    .bind(org.id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(admins, 1);
}

#[tokio::test]
async fn only_admins_of_the_organization_change_accounts() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    let admin_id = account_id(&app, &format!("admin-{}@example.com", team.org.id)).await;
    for action in ["remove", "disable", "enable", "link"] {
        let refused = team
            .pat
            .post_form(
                &format!("/dashboard/settings/team/{admin_id}/{action}"),
                &[],
            )
            .await;
        assert_eq!(refused.status, 403, "a viewer cannot {action}");
    }
    let other = app.create_org(Tier::Standard).await;
    let stranger =
        DashboardClient::signed_in(&app, other.id, "other@example.com", role("admin")).await;
    for action in ["remove", "disable", "enable", "link"] {
        let refused = stranger
            .post_form(
                &format!("/dashboard/settings/team/{admin_id}/{action}"),
                &[],
            )
            .await;
        assert_eq!(
            refused.status, 404,
            "another organization's admin cannot {action}"
        );
    }
    team.admin.page("/dashboard/flows").await;
    team.pat.page("/dashboard/flows").await;
}

/// Runs a `flowctl` command line as the binary would.
async fn flowctl(app: &TestApp, args: &[&str]) -> anyhow::Result<flowctl::output::Outcome> {
    let mut line = vec!["flowctl"];
    line.extend_from_slice(args);
    line.extend_from_slice(&["--database-url", &app.core.database_url, "--json"]);
    let cli = <flowctl::Cli as clap::Parser>::try_parse_from(line)?;
    flowctl::run(cli).await
}

#[tokio::test]
async fn flowctl_admin_lists_disables_enables_demotes_resets_and_removes_accounts() {
    let app = TestApp::spawn().await;
    let team = team(&app, "admin").await;
    let org = team.org.id.to_string();
    let email = team.pat_email.as_str();

    let listed = flowctl(&app, &["admin", "list", "--org", &org])
        .await
        .unwrap();
    assert_eq!(listed.json[1]["email"], json!(email), "{}", listed.json);
    assert_eq!(listed.json[1]["state"], json!("active"));

    let disabled = flowctl(&app, &["admin", "disable", "--email", email])
        .await
        .unwrap();
    assert_eq!(
        disabled.json["state"],
        json!("disabled"),
        "{}",
        disabled.json
    );
    assert_eq!(disabled.json["changed"], json!(true));
    assert_signed_out(&team.pat, "disabled by flowctl").await;
    assert_eq!(team.pat.sign_in(email, PASSWORD).await.status, 403);
    let again = flowctl(&app, &["admin", "disable", "--email", email])
        .await
        .unwrap();
    assert_eq!(again.json["changed"], json!(false));
    let enabled = flowctl(&app, &["admin", "enable", "--email", email])
        .await
        .unwrap();
    assert_eq!(enabled.json["state"], json!("active"));
    assert_eq!(team.pat.sign_in(email, PASSWORD).await.status, 303);

    let demoted = flowctl(
        &app,
        &["admin", "role", "--email", email, "--role", "viewer"],
    )
    .await
    .unwrap();
    assert_eq!(demoted.json["role"], json!("viewer"));
    assert_signed_out(&team.pat, "demoted by flowctl").await;
    assert_eq!(team.pat.sign_in(email, PASSWORD).await.status, 303);

    let reset = flowctl(&app, &["admin", "link", "--email", email])
        .await
        .unwrap();
    assert!(
        reset.json["link"]
            .as_str()
            .unwrap()
            .contains("/dashboard/welcome/")
    );
    assert_signed_out(&team.pat, "reset by flowctl").await;
    assert_eq!(team.pat.sign_in(email, PASSWORD).await.status, 401);

    let removed = flowctl(&app, &["admin", "remove", "--email", email])
        .await
        .unwrap();
    assert_eq!(removed.json["state"], json!("removed"));
    let gone = flowctl(&app, &["admin", "remove", "--email", email])
        .await
        .unwrap_err();
    assert!(gone.to_string().contains("no dashboard account"), "{gone}");
    let trail: Vec<(String, String)> = audit_trail(&app, team.org.id)
        .await
        .into_iter()
        .filter(|(_, actor, _)| actor == "flowctl")
        .map(|(action, actor, _)| (action, actor))
        .collect();
    let actions: Vec<&str> = trail.iter().map(|(action, _)| action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "account.invited",
            "account.invited",
            "account.disabled",
            "account.enabled",
            "account.role_changed",
            "account.link_issued",
            "account.removed"
        ]
    );
}

#[tokio::test]
async fn inviting_an_address_of_another_organization_says_nothing_about_it() {
    let app = TestApp::spawn().await;
    let team = team(&app, "viewer").await;
    let other = app.create_org(Tier::Standard).await;
    // Accounts of another organization: active, invited (no password yet), disabled.
    let active = "active@elsewhere.example";
    let link = create_account(&app, other.id, active, role("admin")).await;
    DashboardClient::with_link(&app, &link, PASSWORD).await;
    let invited = "invited@elsewhere.example";
    create_account(&app, other.id, invited, role("viewer")).await;
    let disabled = "disabled@elsewhere.example";
    create_account(&app, other.id, disabled, role("viewer")).await;
    flowctl::accounts::change(&app.api, disabled, AccountChange::Disable)
        .await
        .unwrap();
    for email in [active, invited, disabled] {
        let refused = team
            .admin
            .post_form(
                "/dashboard/settings/team",
                &[("email", email), ("role", "viewer")],
            )
            .await;
        assert_eq!(refused.status, 409, "{}", refused.body);
        let said = between(&refused.body, "<span class=\"field-error\">", "</span>")
            .expect("a message beside the field");
        let expected =
            flow_api::dashboard::team::cannot_invite(&Email::parse("email", email).unwrap());
        assert_eq!(said, expected, "the same answer for {email}");
        for revealing in ["already", "account", "organization"] {
            assert!(!said.contains(revealing), "{said:?} says {revealing:?}");
        }
    }
    // An account of this organization may be named.
    let ours = team
        .admin
        .post_form(
            "/dashboard/settings/team",
            &[("email", &team.pat_email), ("role", "admin")],
        )
        .await;
    assert_eq!(ours.status, 409);
    assert!(
        ours.body
            .contains(&format!("{} is already on this team", team.pat_email)),
        "{}",
        ours.body
    );
    let accounts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM dashboard_accounts WHERE org_id = $1")
            .bind(team.org.id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(accounts, 2, "nothing invited");
}
