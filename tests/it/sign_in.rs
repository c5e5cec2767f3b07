//! Signing in to the dashboard under attack: guesses are counted before the password is hashed
//! (concurrent ones one by one) and throttled by a growing delay per account e-mail (capped low,
//! so a stranger cannot keep the owner out) and per client address (growing further). The
//! throttle's clock is moved in Postgres rather than waited for.

use std::net::IpAddr;
use std::time::Duration;

use flow_common::db::accounts::{ACCOUNT_THROTTLE, ADDRESS_THROTTLE};
use flow_common::db::orgs::Tier;
use flow_tests::TestApp;
use flow_tests::dashboard::{DashboardClient, Page, create_account, role};

const PASSWORD: &str = "a long enough password";

/// An admin account `email` with [`PASSWORD`] set (its welcome session is dropped).
async fn account_with_password(app: &TestApp, email: &str) {
    let org = app.create_org(Tier::Standard).await;
    let link = create_account(app, org.id, email, role("admin")).await;
    DashboardClient::with_link(app, &link, PASSWORD).await;
}

fn loopback(last: u8) -> Option<IpAddr> {
    Some(IpAddr::from([127, 0, 0, last]))
}

fn retry_after(page: &Page) -> u64 {
    assert_eq!(page.status, 429, "{}", page.body);
    page.header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds")
}

/// Moves the throttle's clock for `scope` (`account` or `address`): the last
/// checked attempt of each of its subjects happened `seconds` earlier than recorded.
async fn pass_time(app: &TestApp, scope: &str, seconds: u64) {
    sqlx::query(
        "UPDATE dashboard_sign_in_throttle
         SET last_attempt_at = last_attempt_at - $2 * interval '1 second'
         WHERE scope = $1",
    )
    .bind(scope)
    .bind(i64::try_from(seconds).unwrap())
    .execute(&app.db)
    .await
    .unwrap();
}

async fn failures(app: &TestApp, scope: &str, subject: &str) -> i32 {
    sqlx::query_scalar(
        "SELECT COALESCE((SELECT failures FROM dashboard_sign_in_throttle
                          WHERE scope = $1 AND subject = $2), 0)",
    )
    .bind(scope)
    .bind(subject)
    .fetch_one(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn concurrent_wrong_guesses_each_count_and_only_the_free_ones_are_checked() {
    let app = TestApp::spawn().await;
    account_with_password(&app, "lee@example.com").await;
    let client = DashboardClient::new(&app);
    let guesses = 10;
    let pages = futures::future::join_all((0..guesses).map(|guess| {
        let client = &client;
        async move {
            client
                .sign_in("lee@example.com", &format!("guess number {guess}"))
                .await
        }
    }))
    .await;
    let checked = pages.iter().filter(|page| page.status == 401).count();
    let throttled = pages.iter().filter(|page| page.status == 429).count();
    assert_eq!(
        (checked, throttled),
        (
            ACCOUNT_THROTTLE.free as usize,
            guesses - ACCOUNT_THROTTLE.free as usize
        ),
        "{:?}",
        pages.iter().map(|page| page.status).collect::<Vec<_>>()
    );
    assert_eq!(
        failures(&app, "account", "lee@example.com").await,
        i32::try_from(ACCOUNT_THROTTLE.free).unwrap(),
        "each checked guess counted"
    );
    // Even the right password waits now.
    let next = client.sign_in("lee@example.com", PASSWORD).await;
    assert!(retry_after(&next) >= 1);
    assert!(
        next.body
            .contains("Too many failed sign-ins for this e-mail address"),
        "{}",
        next.body
    );
    assert!(client.session().is_none());
}

#[tokio::test]
async fn the_wait_doubles_with_each_failure_up_to_a_minute_and_the_right_password_then_works() {
    let app = TestApp::spawn().await;
    account_with_password(&app, "kai@example.com").await;
    let client = DashboardClient::new(&app);
    for guess in 0..ACCOUNT_THROTTLE.free {
        let wrong = client
            .sign_in("kai@example.com", &format!("guess {guess}"))
            .await;
        assert_eq!(wrong.status, 401, "guess {guess} is checked at once");
    }
    let mut previous = 0;
    for failures in ACCOUNT_THROTTLE.free..ACCOUNT_THROTTLE.free + 3 {
        let delay = ACCOUNT_THROTTLE.delay(failures).as_secs();
        let wait = retry_after(&client.sign_in("kai@example.com", "another guess").await);
        assert!(
            wait > previous && wait <= delay,
            "after {failures} failures: wait {wait} s, previous {previous} s, rule {delay} s"
        );
        previous = delay;
        // Once the wait has passed, the next guess is checked (and fails).
        pass_time(&app, "account", delay).await;
        let wrong = client.sign_in("kai@example.com", "another guess").await;
        assert_eq!(wrong.status, 401, "{}", wrong.body);
    }
    // However many failures, an account never waits more than a minute.
    sqlx::query("UPDATE dashboard_sign_in_throttle SET failures = 500 WHERE scope = 'account'")
        .execute(&app.db)
        .await
        .unwrap();
    let wait = retry_after(&client.sign_in("kai@example.com", PASSWORD).await);
    assert!(wait <= 60, "{wait}");
    assert_eq!(ACCOUNT_THROTTLE.max_delay, Duration::from_secs(60));
    pass_time(&app, "account", 60).await;
    let signed_in = client.sign_in("KAI@example.com", PASSWORD).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert!(client.session().is_some());
    assert_eq!(
        failures(&app, "account", "kai@example.com").await,
        0,
        "signing in forgets the account's streak"
    );
}

#[tokio::test]
async fn a_stranger_who_knows_the_email_cannot_keep_its_owner_out() {
    let app = TestApp::spawn().await;
    account_with_password(&app, "boss@example.com").await;
    let stranger = DashboardClient::from_address(&app, loopback(2));
    let owner = DashboardClient::from_address(&app, loopback(3));
    for guess in 0..ACCOUNT_THROTTLE.free {
        let wrong = stranger
            .sign_in("boss@example.com", &format!("guess {guess}"))
            .await;
        assert_eq!(wrong.status, 401);
    }
    // The owner waits only the account's short delay...
    let wait = retry_after(&owner.sign_in("boss@example.com", PASSWORD).await);
    assert!(wait <= ACCOUNT_THROTTLE.delay(ACCOUNT_THROTTLE.free).as_secs());
    // ...while the stranger, who spends their address's budget on other guesses, soon cannot
    // touch the account at all: a refused attempt counts for nothing.
    for guess in 0..ADDRESS_THROTTLE.free - ACCOUNT_THROTTLE.free {
        let wrong = stranger
            .sign_in(&format!("someone{guess}@example.com"), "a guess")
            .await;
        assert_eq!(wrong.status, 401, "guess {guess}");
    }
    pass_time(&app, "account", ACCOUNT_THROTTLE.max_delay.as_secs()).await;
    let shut_out = stranger.sign_in("boss@example.com", "one more guess").await;
    assert!(retry_after(&shut_out) >= 1);
    assert!(
        shut_out.body.contains("from your network address"),
        "{}",
        shut_out.body
    );
    assert_eq!(
        failures(&app, "account", "boss@example.com").await,
        i32::try_from(ACCOUNT_THROTTLE.free).unwrap(),
        "the refused attempt did not count against the account"
    );
    let signed_in = owner.sign_in("boss@example.com", PASSWORD).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
}

#[tokio::test]
async fn each_address_is_throttled_on_its_own() {
    let app = TestApp::spawn().await;
    account_with_password(&app, "ash@example.com").await;
    let guesser = DashboardClient::from_address(&app, loopback(4));
    // Guessing across many e-mails from one address, below each e-mail's own budget.
    for guess in 0..ADDRESS_THROTTLE.free {
        let wrong = guesser
            .sign_in(&format!("guess{guess}@example.com"), "wrong password")
            .await;
        assert_eq!(wrong.status, 401, "guess {guess}");
    }
    let throttled = guesser.sign_in("ash@example.com", PASSWORD).await;
    assert!(retry_after(&throttled) <= ADDRESS_THROTTLE.first_delay.as_secs());
    assert!(guesser.session().is_none());
    // Past the cap the address waits 15 minutes; the account's owner elsewhere signs in.
    sqlx::query("UPDATE dashboard_sign_in_throttle SET failures = 500 WHERE scope = 'address'")
        .execute(&app.db)
        .await
        .unwrap();
    let wait = retry_after(&guesser.sign_in("ash@example.com", PASSWORD).await);
    assert!(wait > 60 && wait <= 15 * 60, "{wait}");
    let owner = DashboardClient::from_address(&app, loopback(5));
    assert_eq!(owner.sign_in("ash@example.com", PASSWORD).await.status, 303);
}
