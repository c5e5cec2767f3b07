//! Enrollment rules helpers: creating a rule, and what its evaluations recorded and assigned.

use flow_domain::ids::EnrollmentRuleId;
use serde_json::Value;

use crate::{TestApp, TestOrg};

/// Creates a rule through `/v1/enrollment-rules` (insisting on a 201); returns its id.
pub async fn create_rule(app: &TestApp, org: &TestOrg, body: Value) -> String {
    let response = app.post(org, "/v1/enrollment-rules", &body).await;
    assert_eq!(response.status, 201, "{:?}", response.body);
    response.body["ruleId"].as_str().expect("ruleId").to_owned()
}

/// The e-mails of the users the rule has assigned (one per persisted assignment), sorted.
pub async fn assigned_by(app: &TestApp, rule: &str) -> Vec<String> {
    emails_of(app, rule, ASSIGNED).await
}

/// The e-mails of the users the rule's evaluations have found matching (its recorded matches),
/// sorted.
pub async fn matched_by(app: &TestApp, rule: &str) -> Vec<String> {
    emails_of(app, rule, MATCHED).await
}

const ASSIGNED: &str = "SELECT u.email FROM assignments a JOIN users u ON u.id = a.user_id
    WHERE a.enrollment_rule_id = $1 ORDER BY u.email";

const MATCHED: &str = "SELECT u.email FROM enrollment_matches m JOIN users u ON u.id = m.user_id
    WHERE m.rule_id = $1 ORDER BY u.email";

/// The e-mails `statement` selects for the rule (`$1`).
async fn emails_of(app: &TestApp, rule: &str, statement: &'static str) -> Vec<String> {
    let rule = EnrollmentRuleId::parse(rule).expect("rule id");
    sqlx::query_scalar(statement)
        .bind(rule)
        .fetch_all(&app.db)
        .await
        .expect("e-mails")
}
