//! What the exactly-once and fault tests check at the end of a run: every id answered with a 200
//! resolves to one persisted assignment, each assignment has one event per transition, and no
//! event is left unpublished.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flow_domain::ids::AssignmentId;

use crate::{TestApp, TestOrg};

/// Counts over the whole test database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// Assignments persisted.
    pub assignments: i64,
    /// (assignment, event type) pairs written to the outbox more than once.
    pub duplicate_events: i64,
    /// Assignments without exactly one `flow.assigned` event.
    pub assignments_without_one_assigned_event: i64,
    /// Events not published yet.
    pub unpublished: i64,
    /// Active assignments sharing a flow and assignee (the one-active rule broken).
    pub duplicate_active: i64,
}

impl TestApp {
    /// The counts of [`Audit`] now.
    pub async fn audit(&self) -> Audit {
        let (assignments, duplicate_events, without_one, unpublished, duplicate_active): (
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM assignments),
                    (SELECT count(*) FROM (SELECT 1 FROM outbox GROUP BY assignment_id, event_type
                                           HAVING count(*) > 1) d),
                    (SELECT count(*) FROM assignments a
                     WHERE (SELECT count(*) FROM outbox o
                            WHERE o.assignment_id = a.id AND o.event_type = 'flow.assigned') <> 1),
                    (SELECT count(*) FROM outbox_unpublished),
                    (SELECT count(*) FROM (SELECT 1 FROM assignments
                                           WHERE status IN ('pending', 'in_progress', 'overdue')
                                           GROUP BY flow_id, user_id HAVING count(*) > 1) d)",
        )
        .fetch_one(&self.db)
        .await
        .expect("audit");
        Audit {
            assignments,
            duplicate_events,
            assignments_without_one_assigned_event: without_one,
            unpublished,
            duplicate_active,
        }
    }

    /// Waits until every id resolves to a persisted assignment (an id that reads `failed` fails
    /// the test) and returns, per id, the assignment it resolves to.
    pub async fn resolve_all(
        &self,
        org: &TestOrg,
        ids: &[String],
        timeout: Duration,
    ) -> HashMap<String, String> {
        let unique: HashSet<&String> = ids.iter().collect();
        let parsed: Vec<AssignmentId> = unique
            .iter()
            .map(|id| AssignmentId::parse(id).expect("an assignment id"))
            .collect();
        let resolved: Vec<(AssignmentId, AssignmentId)> = self
            .eventually(timeout, "every accepted id to resolve", || async {
                let rows: Vec<(AssignmentId, AssignmentId)> = sqlx::query_as(
                    "SELECT t.id, COALESCE(a.id, x.assignment_id)
                     FROM UNNEST($1::uuid[]) AS t(id)
                     LEFT JOIN assignments a ON a.id = t.id AND a.org_id = $2
                     LEFT JOIN assignment_aliases x ON x.alias_id = t.id AND x.org_id = $2
                     WHERE a.id IS NOT NULL OR x.assignment_id IS NOT NULL",
                )
                .bind(&parsed)
                .bind(org.id)
                .fetch_all(&self.db)
                .await
                .expect("resolve");
                (rows.len() == parsed.len()).then_some(rows)
            })
            .await;
        resolved
            .into_iter()
            .map(|(id, target)| (id.to_string(), target.to_string()))
            .collect()
    }

    /// Waits until the outbox relay has published every event.
    pub async fn wait_all_published(&self, timeout: Duration) {
        self.eventually(timeout, "every event to be published", || async {
            (self.audit().await.unpublished == 0).then_some(())
        })
        .await;
    }
}
