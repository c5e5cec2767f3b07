//! The end of `flowctl bench schedulers`: for each kind of work, expected against done, lost,
//! twice and unexpected, read from the outbox, `assignment_reminders`, the assignments and the
//! bench's record of the claims.

use std::collections::HashSet;

use flow_domain::events::EventType;
use sqlx::PgPool;

use super::seed::Seeded;

/// One line of the check.
struct Compared {
    expected: usize,
    done: usize,
    lost: usize,
    twice: usize,
    unexpected: usize,
}

/// Compares the keys `expected` with the keys `emitted` (one per row written).
fn compare(expected: &HashSet<String>, emitted: &[String]) -> Compared {
    let distinct: HashSet<&String> = emitted.iter().collect();
    let done = expected.iter().filter(|key| distinct.contains(key)).count();
    Compared {
        expected: expected.len(),
        done,
        lost: expected.len() - done,
        twice: emitted.len() - distinct.len(),
        unexpected: distinct
            .iter()
            .filter(|key| !expected.contains(key.as_str()))
            .count(),
    }
}

/// Prints expected, done, lost, twice and unexpected for each kind of work; returns how many
/// pieces were wrong in all.
pub(super) async fn check(pool: &PgPool, seeded: &Seeded) -> anyhow::Result<usize> {
    let keys = |sql: &'static str| async move {
        anyhow::Ok(sqlx::query_scalar::<_, String>(sql).fetch_all(pool).await?)
    };
    let events = |event_type: EventType| async move {
        anyhow::Ok(
            sqlx::query_scalar::<_, String>(
                "SELECT assignment_id::text FROM outbox WHERE event_type = $1",
            )
            .bind(event_type.as_str())
            .fetch_all(pool)
            .await?,
        )
    };
    let claims = |kind: &'static str| async move {
        anyhow::Ok(
            sqlx::query_scalar::<_, String>("SELECT key FROM bench_claims WHERE kind = $1")
                .bind(kind)
                .fetch_all(pool)
                .await?,
        )
    };
    let expected = &seeded.expected;
    let rows = [
        (
            "flow.overdue events",
            compare(&expected.overdue, &events(EventType::Overdue).await?),
        ),
        (
            "overdue_at writes committed",
            compare(&expected.overdue, &claims("overdue").await?),
        ),
        (
            "assignment_reminders rows",
            compare(
                &expected.reminders,
                &keys(
                    "SELECT assignment_id::text || ' ' || kind || ' ' || offset_days
                     FROM assignment_reminders",
                )
                .await?,
            ),
        ),
        (
            "flow.reminder events",
            compare(
                &expected.reminders,
                &keys(
                    "SELECT assignment_id::text || ' ' || (payload -> 'data' -> 'reminder' ->> 'kind')
                            || ' ' || (payload -> 'data' -> 'reminder' ->> 'offsetDays')
                     FROM outbox WHERE event_type = 'flow.reminder'",
                )
                .await?,
            ),
        ),
        (
            "flow.expiring events",
            compare(&expected.renewed, &events(EventType::Expiring).await?),
        ),
        (
            "renewal_id writes committed",
            compare(&expected.renewed, &claims("renewal").await?),
        ),
        (
            "renewal assignments",
            compare(
                &expected.renewal_pairs,
                &sqlx::query_scalar::<_, String>(
                    "SELECT user_id::text || ' ' || flow_id::text FROM assignments
                     WHERE assigned_at >= $1",
                )
                .bind(seeded.start)
                .fetch_all(pool)
                .await?,
            ),
        ),
        (
            "flow.assigned of the renewals",
            compare(&expected.renewal_ids, &events(EventType::Assigned).await?),
        ),
        (
            "flow.expired events",
            compare(&expected.expired, &events(EventType::Expired).await?),
        ),
        (
            "expiry_settled_at writes committed",
            compare(&expected.expired, &claims("expiry").await?),
        ),
    ];
    println!(
        "  {:<36} {:>8} {:>8} {:>6} {:>6} {:>10}",
        "work", "expected", "done", "lost", "twice", "unexpected"
    );
    let mut wrong = 0;
    for (label, compared) in &rows {
        println!(
            "  {label:<36} {:>8} {:>8} {:>6} {:>6} {:>10}",
            compared.expected, compared.done, compared.lost, compared.twice, compared.unexpected
        );
        wrong += compared.lost + compared.twice + compared.unexpected;
    }
    Ok(wrong)
}
