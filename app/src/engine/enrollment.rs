//! Evaluating enrollment rules and assigning what they match (docs/enrollment-rules.md), for
//! the API right after a user write, and for the scheduler: the users a write left pending
//! ([`drain`]) and backfills ([`run_backfill`]).
//!
//! Each (rule, user) assigns at most once: the match is claimed in Postgres (its generation, 1 at
//! the first match and one more only at a re-match of a rule that re-assigns), the assignment id
//! is derived from (rule, user, generation), and the ledger row naming it is committed before the
//! command goes to the organization's bulk queue. Replicas, schedulers and retries therefore
//! publish the same id, which the assign-worker applies once; a command lost before it was
//! persisted is published again by the next evaluation of that user.
//!
//! Durability: every write that changes what a rule looks at queues its users in
//! `enrollment_pending`, in its own transaction (the triggers of migration 0200). An evaluation
//! deletes the rows it handled once its assignments are queued; a row that stays (the API died
//! after the commit, the broker refused) is evaluated by a scheduler after a grace period.
//!
//! Limits: every assignment a rule makes is charged to the organization's `assign` budget, the
//! shared bucket `POST /v1/flows/assign` spends ([`ASSIGN_BUDGET`]). What is over it is
//! deferred, not dropped: its users stay pending, not to be claimed before the budget has room
//! again, and a scheduler publishes them then; a backfill pauses at the first user over it.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_domain::Priority;
use flow_domain::audit::AuditAction;
use flow_domain::enrollment::{Applied, Condition, Due, DueFrom, Profile, Rule};
use flow_domain::ids::{
    AssignmentId, AutomaticCancel, BackfillId, EnrollmentRuleId, FlowId, OrgId, UserId,
};
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, AssignCommand};
use sqlx::PgPool;

use flow_common::amqp::{BatchPublisher, Lane, PublishError, QueueKind, Submission};
use flow_common::db::audit::{self, Actor};
use flow_common::db::changes;
use flow_common::db::enrollment_backfills::{self as backfills, Claimed};
use flow_common::db::enrollment_rules::{
    self as db, Evaluated, LedgerEntry, Match, Pending, RuleRecord,
};
use flow_common::db::orgs::{self, Organization};
use flow_common::db::rate_limits;

use crate::changes::{AutoCancel, AutoCancelError, cancel_automatically, unmatched_reason};

/// Most rules an organization may have.
pub const MAX_RULES: i64 = 100;

/// Users read, evaluated and assigned per round of a backfill or a preview.
pub const PAGE: i64 = 1_000;

/// Most users one evaluation takes at once; more are taken in rounds.
const CHANGED_BATCH: usize = 1_000;

/// How often a claim is tried again when concurrent evaluations of the same users deadlock.
const CLAIM_ATTEMPTS: usize = 3;

/// Times a backfill is taken up before it is marked failed (turns given back, and pauses for
/// the assign limit, do not count).
pub const BACKFILL_ATTEMPTS: i32 = 5;

/// Pages of users a backfill walks per turn: then it gives its turn back, and the next claim
/// goes to another organization's backfill waiting, if any, before this one resumes.
pub const BACKFILL_PAGES_PER_TURN: usize = 10;

/// The shared rate-limit bucket rule assignments are charged to: the organization's `assign`
/// budget, the one `POST /v1/flows/assign` spends (the API's `Operation::Assign` is named by
/// this constant, so the two cannot drift apart).
pub const ASSIGN_BUDGET: &str = "assign";

/// The window of the per-minute limits (the API's `ratelimit::WINDOW`).
pub const BUDGET_WINDOW: Duration = Duration::from_secs(60);

/// Shortest wait before deferred assignments are tried again.
const MIN_DEFERRAL: Duration = Duration::from_secs(1);

/// Why an evaluation did not finish.
#[derive(Debug, thiserror::Error)]
pub enum EnrollmentError {
    /// Postgres failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// Some assignments were not confirmed by the broker; the matches are recorded, so the next
    /// evaluation of these users publishes the same ids again.
    #[error("{failed} rule assignments could not be queued durably ({error}); retry shortly")]
    Unavailable {
        /// Commands not confirmed.
        failed: usize,
        /// The first failure.
        error: PublishError,
    },
    /// A stored rule does not read back (written by hand, or by a newer build).
    #[error("enrollment rule {rule} has an unreadable {field}")]
    Corrupt {
        /// The rule.
        rule: EnrollmentRuleId,
        /// Which of its columns.
        field: &'static str,
    },
    /// An assign command did not encode.
    #[error("encoding an assign command: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Reads a stored rule.
pub fn rule(record: &RuleRecord) -> Result<Rule, EnrollmentError> {
    let corrupt = |field| EnrollmentError::Corrupt {
        rule: record.id,
        field,
    };
    Ok(Rule {
        id: record.id,
        name: record.name.clone(),
        condition: Condition::parse("condition", &record.condition)
            .map_err(|_| corrupt("condition"))?,
        flow_id: record.flow_id,
        flow_name: record.flow_name.clone(),
        due: match record.due_days {
            Some(days) => Some(Due {
                days,
                from: DueFrom::parse(&record.due_from).ok_or_else(|| corrupt("due_from"))?,
            }),
            None => None,
        },
        priority: Priority::parse_field("priority", &record.priority)
            .map_err(|_| corrupt("priority"))?,
        notes: record.notes.clone(),
        reassign: record.reassign,
        cancel_on_unmatch: record.cancel_on_unmatch,
    })
}

/// The organization's rules, read from Postgres.
pub async fn rules(pool: &PgPool, org_id: OrgId) -> Result<Vec<Rule>, EnrollmentError> {
    db::list(pool, org_id, None, MAX_RULES)
        .await?
        .iter()
        .map(rule)
        .collect()
}

/// Evaluates rules of one organization and assigns what they match: where the commands go and
/// whom the audit rows name.
#[derive(Clone, Copy)]
pub struct Assigner<'a> {
    /// The database.
    pub pool: &'a PgPool,
    /// Publishes the assign commands (to the organization's bulk queue).
    pub publisher: &'a BatchPublisher,
    /// The organization.
    pub org: &'a Organization,
    /// Who the audit rows of the assignments name.
    pub actor: Actor<'a>,
}

impl Assigner<'_> {
    /// Evaluates `rules` for these users after a change to them and assigns what they now
    /// match; then deletes the pending rows their change left, unless queued again meanwhile.
    /// The pending rows are read before the users, so a change committed after that read stays
    /// pending (a scheduler evaluates it).
    pub async fn users_changed(
        &self,
        rules: &[Rule],
        user_ids: &[UserId],
    ) -> Result<Applied, EnrollmentError> {
        let pending = db::pending(self.pool, self.org.id, user_ids).await?;
        self.evaluate(rules, user_ids, &pending).await
    }

    /// Evaluates `rules` for the users, assigns, and deletes the `handled` pending rows, but for
    /// those of users with assignments over the organization's assign limit: these stay pending
    /// (with a fresh version) and are not claimed before the limit has room again.
    async fn evaluate(
        &self,
        rules: &[Rule],
        user_ids: &[UserId],
        handled: &[Pending],
    ) -> Result<Applied, EnrollmentError> {
        let mut total = Applied::default();
        let mut deferred = Deferred::default();
        if !rules.is_empty() {
            for chunk in user_ids.chunks(CHANGED_BATCH) {
                if !deferred.users.is_empty() {
                    // The limit is used up: the rest waits too, unevaluated.
                    deferred.users.extend_from_slice(chunk);
                    continue;
                }
                let profiles = db::profiles(self.pool, self.org.id, chunk).await?;
                let (applied, left) = self.apply(rules, &profiles, Utc::now()).await?;
                total += applied;
                if !left.users.is_empty() {
                    deferred = left;
                }
            }
        }
        if !deferred.users.is_empty() {
            deferred.users.sort_unstable();
            deferred.users.dedup();
            db::defer_pending(self.pool, self.org.id, &deferred.users, deferred.delay).await?;
            tracing::info!(
                org_id = %self.org.id,
                users = deferred.users.len(),
                assignments = deferred.assignments,
                delay_ms = deferred.delay.as_millis() as u64,
                "rule assignments over the assign limit deferred"
            );
        }
        let handled: Vec<Pending> = handled
            .iter()
            .filter(|row| deferred.users.binary_search(&row.user_id).is_err())
            .copied()
            .collect();
        db::delete_pending(self.pool, &handled).await?;
        Ok(total)
    }

    /// Evaluates `rules` for `profiles` (inactive users are left out: never assigned, their
    /// matches left as they stand), records the matches, and publishes the assignments not
    /// persisted yet, as many as the organization's assign limit has room for, in user order;
    /// answers what was left for later.
    pub async fn apply(
        &self,
        rules: &[Rule],
        profiles: &[Profile],
        now: DateTime<Utc>,
    ) -> Result<(Applied, Deferred), EnrollmentError> {
        self.cancel_unmatched(rules, profiles).await?;
        // A rule whose flow is archived assigns nothing (its matches are not recorded either:
        // once the flow is brought back, the users' next change or a backfill assigns them).
        let flows: Vec<FlowId> = rules.iter().map(|rule| rule.flow_id).collect();
        let archived = db::archived_flows(self.pool, self.org.id, &flows).await?;
        let live: Vec<Rule>;
        let rules = if archived.is_empty() {
            rules
        } else {
            tracing::info!(
                org_id = %self.org.id,
                rules = ?rules
                    .iter()
                    .filter(|rule| archived.contains(&rule.flow_id))
                    .map(|rule| rule.id)
                    .collect::<Vec<_>>(),
                "enrollment rules of archived flows skipped: an archived flow takes no new \
                 assignments"
            );
            live = rules
                .iter()
                .filter(|rule| !archived.contains(&rule.flow_id))
                .cloned()
                .collect();
            &live[..]
        };
        let mut evaluated: Vec<Evaluated> = Vec::new();
        for rule in rules {
            for profile in profiles.iter().filter(|profile| profile.active) {
                evaluated.push(Evaluated {
                    rule_id: rule.id,
                    user_id: profile.id,
                    matching: rule.condition.matches(profile),
                });
            }
        }
        if evaluated.is_empty() {
            return Ok((Applied::default(), Deferred::default()));
        }
        // Rows are claimed in one order, so concurrent evaluations wait for each other rather
        // than deadlock (mostly: a deadlock is retried).
        evaluated.sort_by_key(|pair| (pair.rule_id, pair.user_id));
        let matching = evaluated.iter().filter(|pair| pair.matching).count() as u64;
        let mut attempt = 0;
        let mut pending = loop {
            attempt += 1;
            match self.claim(rules, profiles, &evaluated, now).await {
                Err(error) if attempt < CLAIM_ATTEMPTS && flow_common::db::is_transient(&error) => {
                    tracing::debug!(%error, "enrollment claim retried");
                }
                other => break other?,
            }
        };
        // In user order, so what the limit leaves for later is a tail of users (a backfill
        // resumes after the last user done).
        pending.sort_by_key(|found| (found.user_id, found.rule_id));
        let rules: HashMap<EnrollmentRuleId, &Rule> =
            rules.iter().map(|rule| (rule.id, rule)).collect();
        let profiles: HashMap<UserId, &Profile> = profiles
            .iter()
            .map(|profile| (profile.id, profile))
            .collect();
        let zone = self.org.zone();
        let traceparent = flow_common::telemetry::current_traceparent();
        let mut submissions = Vec::with_capacity(pending.len());
        let mut users = Vec::with_capacity(pending.len());
        for found in &pending {
            let (Some(rule), Some(profile)) =
                (rules.get(&found.rule_id), profiles.get(&found.user_id))
            else {
                continue;
            };
            let command = AssignCommand {
                version: ASSIGN_COMMAND_VERSION,
                assignment_id: AssignmentId::for_enrollment(rule.id, profile.id, found.generation),
                existing_assignment_id: None,
                org_id: self.org.id,
                flow_id: rule.flow_id,
                flow_name: rule.flow_name.clone(),
                user_id: profile.id,
                assignee_email: profile.email.clone(),
                priority: rule.priority,
                notes: rule.notes.clone(),
                due_at: rule.due_at(profile, found.matched_at, zone),
                assigned_at: found.matched_at,
                request_id: None,
                schedule_id: None,
                traceparent: traceparent.clone(),
            };
            submissions.push(submission(&command)?);
            users.push(profile.id);
        }
        if submissions.is_empty() {
            return Ok((
                Applied {
                    matching,
                    queued: 0,
                },
                Deferred::default(),
            ));
        }
        let (granted, delay) = self.charge(submissions.len()).await?;
        let left = submissions.split_off(granted);
        let mut deferred = Deferred {
            users: users.split_off(granted),
            assignments: left.len() as u64,
            delay,
        };
        deferred.users.dedup();
        if !left.is_empty() {
            metrics::counter!("flow_enrollment_deferred_total").increment(left.len() as u64);
        }
        if submissions.is_empty() {
            return Ok((
                Applied {
                    matching,
                    queued: 0,
                },
                deferred,
            ));
        }
        metrics::counter!("flow_assign_commands_total", "lane" => Lane::Bulk.as_str())
            .increment(submissions.len() as u64);
        let queue = QueueKind::assign_for(Lane::Bulk, self.org.bulk_lane).suffix();
        let published = self
            .publisher
            .publish_all(Some(queue.as_str()), &submissions)
            .await;
        let failed = published.iter().filter(|outcome| outcome.is_err()).count();
        if let Some(Err(error)) = published.into_iter().find(Result::is_err) {
            // The matches are recorded: the next evaluation of these users (the pending rows
            // stay, a retry, a backfill) publishes the same ids again.
            tracing::warn!(%error, failed, "enrollment assignments not queued");
            return Err(EnrollmentError::Unavailable { failed, error });
        }
        Ok((
            Applied {
                matching,
                queued: submissions.len() as u64,
            },
            deferred,
        ))
    }

    /// Cancels, for each rule that cancels on unmatch, the open assignments it made for the
    /// (active) users of `profiles` it does not match now, through the change queue: each with
    /// a change id derived from the rule and the assignment, so however often the user is
    /// evaluated it applies once, with one `flow.cancelled` naming the rule. Assignments made by
    /// hand or by another rule are not touched.
    async fn cancel_unmatched(
        &self,
        rules: &[Rule],
        profiles: &[Profile],
    ) -> Result<(), EnrollmentError> {
        let mut pairs: (Vec<EnrollmentRuleId>, Vec<UserId>) = (Vec::new(), Vec::new());
        for rule in rules.iter().filter(|rule| rule.cancel_on_unmatch) {
            for profile in profiles
                .iter()
                .filter(|profile| profile.active && !rule.condition.matches(profile))
            {
                pairs.0.push(rule.id);
                pairs.1.push(profile.id);
            }
        }
        if pairs.0.is_empty() {
            return Ok(());
        }
        let open = changes::open_made_by_rules(self.pool, self.org.id, &pairs.0, &pairs.1).await?;
        if open.is_empty() {
            return Ok(());
        }
        let names: HashMap<EnrollmentRuleId, &str> = rules
            .iter()
            .map(|rule| (rule.id, rule.name.as_str()))
            .collect();
        let targets: Vec<AutoCancel> = open
            .into_iter()
            .map(|(rule_id, assignment_id)| AutoCancel {
                assignment_id,
                cause: AutomaticCancel::Unmatched(rule_id),
                reason: unmatched_reason(names.get(&rule_id).copied().unwrap_or("")),
            })
            .collect();
        let failed = targets.len();
        cancel_automatically(
            self.pool,
            self.publisher.publisher(),
            self.org.id,
            self.actor,
            &targets,
        )
        .await
        .map_err(|error| match error {
            AutoCancelError::Database(error) => EnrollmentError::Database(error),
            AutoCancelError::Unavailable(error) => EnrollmentError::Unavailable { failed, error },
            AutoCancelError::Encode(error) => EnrollmentError::Encode(error),
        })?;
        Ok(())
    }

    /// Charges up to `wanted` assignments to the organization's assign budget; answers how many
    /// it had room for and, when not all, how long until it should have room for the rest.
    async fn charge(&self, wanted: usize) -> Result<(usize, Duration), sqlx::Error> {
        let limit = self.org.assign_limit().max(1);
        let lease = rate_limits::take(
            self.pool,
            self.org.id,
            ASSIGN_BUDGET,
            limit,
            BUDGET_WINDOW.as_millis() as u64,
            u32::try_from(wanted).unwrap_or(u32::MAX),
            1,
        )
        .await?;
        let granted = usize::try_from(lease.granted.max(0))
            .unwrap_or(0)
            .min(wanted);
        let left = wanted - granted;
        if left == 0 {
            return Ok((granted, Duration::ZERO));
        }
        // The bucket refills smoothly, one assignment per window / limit.
        let refill = (BUDGET_WINDOW / limit)
            .saturating_mul(u32::try_from(left).unwrap_or(u32::MAX).min(limit));
        let wait = Duration::from_millis(u64::try_from(lease.wait_ms.max(0)).unwrap_or(0));
        Ok((granted, refill.max(wait).clamp(MIN_DEFERRAL, BUDGET_WINDOW)))
    }

    /// Records the evaluation in one transaction: the matches, the ledger rows of the
    /// generations not persisted yet, and an audit row for each generation claimed now. Answers
    /// the matches whose assignment is still to be published.
    async fn claim(
        &self,
        rules: &[Rule],
        profiles: &[Profile],
        evaluated: &[Evaluated],
        now: DateTime<Utc>,
    ) -> Result<Vec<Match>, sqlx::Error> {
        let org_id = self.org.id;
        let mut transaction = self.pool.begin().await?;
        let matches = db::record_matches(&mut transaction, org_id, evaluated, now).await?;
        let pending: Vec<Match> = matches
            .into_iter()
            .filter(|found| !found.persisted)
            .collect();
        let entries: Vec<LedgerEntry> = pending
            .iter()
            .map(|found| LedgerEntry {
                assignment_id: AssignmentId::for_enrollment(
                    found.rule_id,
                    found.user_id,
                    found.generation,
                ),
                rule_id: found.rule_id,
                user_id: found.user_id,
                generation: found.generation,
            })
            .collect();
        let claimed = db::record_ledger(&mut transaction, org_id, &entries).await?;
        if !claimed.is_empty() {
            let names: HashMap<EnrollmentRuleId, &str> = rules
                .iter()
                .map(|rule| (rule.id, rule.name.as_str()))
                .collect();
            let emails: HashMap<UserId, &str> = profiles
                .iter()
                .map(|profile| (profile.id, profile.email.as_str()))
                .collect();
            let (targets, details): (Vec<String>, Vec<String>) = entries
                .iter()
                .filter(|entry| claimed.contains(&entry.assignment_id))
                .map(|entry| {
                    (
                        entry.assignment_id.to_string(),
                        format!(
                            "rule \"{}\" ({}) assigned {}",
                            names.get(&entry.rule_id).copied().unwrap_or(""),
                            entry.rule_id,
                            emails.get(&entry.user_id).copied().unwrap_or(""),
                        ),
                    )
                })
                .unzip();
            audit::record_many(
                &mut *transaction,
                org_id,
                self.actor,
                AuditAction::EnrollmentRuleAssigned,
                &targets,
                &details,
            )
            .await?;
        }
        transaction.commit().await?;
        Ok(pending)
    }
}

/// An assign command as the batch publisher takes it.
fn submission(command: &AssignCommand) -> Result<Submission, EnrollmentError> {
    Ok(Submission {
        json: serde_json::to_vec(command)?,
        message_id: command.assignment_id.to_string(),
        request_id: None,
        traceparent: command.traceparent.clone(),
    })
}

/// What an evaluation left for later: assignments over the organization's assign limit, not
/// published (their matches and ledger rows are recorded, so the next evaluation of these users
/// publishes the same ids).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deferred {
    /// The users with an assignment left for later, in id order.
    pub users: Vec<UserId>,
    /// Assignments left for later.
    pub assignments: u64,
    /// How long until the limit should have room for them.
    pub delay: Duration,
}

/// How a scheduler drains the pending evaluations.
#[derive(Debug, Clone, Copy)]
pub struct DrainSettings {
    /// How long after its queueing a row is left to the write's own evaluation.
    pub grace: Duration,
    /// How long a claimed row is left to the scheduler that claimed it.
    pub lease: Duration,
    /// Most rows claimed at once.
    pub batch: i64,
}

/// Evaluates the users whose evaluation is still pending a grace period after their write
/// (the API died after the commit, or its publish failed), a batch at a time, with the
/// organization's rules as Postgres has them: claims the rows, evaluates, claims the matches,
/// publishes, and deletes the rows. Safe with any number of schedulers. Answers how many users
/// were evaluated; an organization that fails is logged and left for the next round (its rows'
/// claims run out).
pub async fn drain(
    pool: &PgPool,
    publisher: &BatchPublisher,
    settings: DrainSettings,
) -> Result<u64, EnrollmentError> {
    let mut total = 0;
    loop {
        let claimed =
            db::claim_pending(pool, settings.grace, settings.lease, settings.batch).await?;
        let mut by_org: HashMap<OrgId, Vec<Pending>> = HashMap::new();
        for row in &claimed {
            by_org.entry(row.org_id).or_default().push(*row);
        }
        for (org_id, rows) in by_org {
            let Some(org) = orgs::get(pool, org_id).await? else {
                // The organization was deleted.
                db::delete_pending(pool, &rows).await?;
                continue;
            };
            let users: Vec<UserId> = rows.iter().map(|row| row.user_id).collect();
            let outcome = async {
                let rules = rules(pool, org_id).await?;
                let assigner = Assigner {
                    pool,
                    publisher,
                    org: &org,
                    actor: Actor::Scheduler,
                };
                assigner.evaluate(&rules, &users, &rows).await
            }
            .await;
            match outcome {
                Ok(applied) => {
                    total += users.len() as u64;
                    tracing::info!(
                        org_id = %org_id,
                        users = users.len(),
                        matching = applied.matching,
                        queued = applied.queued,
                        "pending enrollment evaluations done"
                    );
                }
                Err(error) => tracing::warn!(
                    org_id = %org_id,
                    users = users.len(),
                    %error,
                    "pending enrollment evaluations failed; retried when their claim ends"
                ),
            }
        }
        if (claimed.len() as i64) < settings.batch {
            return Ok(total);
        }
    }
}

/// What a scheduler did with a backfill it took up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillRun {
    /// It finished (succeeded or failed for good).
    Finished(BackfillId),
    /// It stopped on a failure that may pass; it is resumed later from where it stopped.
    Released(BackfillId),
    /// It gave its turn back after [`BACKFILL_PAGES_PER_TURN`] pages, or paused until the
    /// organization's assign limit has room again; it is resumed from where it stopped.
    Paused(BackfillId),
    /// Another scheduler took it over, or it was deleted with its rule.
    Lost(BackfillId),
}

/// How a turn of a backfill ended.
enum Walked {
    /// Every user is done.
    Done(Applied),
    /// [`BACKFILL_PAGES_PER_TURN`] pages are done; others may have a turn.
    TurnOver,
    /// The organization's assign limit is used up; it should have room after this long.
    Deferred(Duration),
    /// The lease was lost.
    Lost,
}

/// Takes up a backfill (in turns per organization, see [`backfills::claim`]; or one left by a
/// scheduler that died) and runs a turn of it: the organization's users in id order, a page at a
/// time, from after the last user done; each page's evaluation is recorded with the job's
/// progress and a fresh `lease`. The job ends when every user is done; it gives its turn back
/// after [`BACKFILL_PAGES_PER_TURN`] pages, and pauses at the first user over the organization's
/// assign limit. `None` when there was none to run.
pub async fn run_backfill(
    pool: &PgPool,
    publisher: &BatchPublisher,
    lease: Duration,
) -> Result<Option<BackfillRun>, EnrollmentError> {
    let Some(claimed) = backfills::claim(pool, lease).await? else {
        return Ok(None);
    };
    let job = &claimed.backfill;
    tracing::info!(
        backfill_id = %job.id,
        org_id = %job.org_id,
        rule_id = %job.rule_id,
        attempt = job.attempts,
        after = ?job.after_user_id,
        "backfill started"
    );
    match walk(pool, publisher, &claimed, lease).await {
        Ok(Walked::Lost) => Ok(Some(BackfillRun::Lost(job.id))),
        Ok(Walked::TurnOver) => Ok(Some(pause(pool, &claimed, Duration::ZERO, None).await?)),
        Ok(Walked::Deferred(delay)) => {
            tracing::info!(
                backfill_id = %job.id,
                org_id = %job.org_id,
                delay_ms = delay.as_millis() as u64,
                "backfill paused: the organization's assign limit is used up"
            );
            Ok(Some(
                pause(pool, &claimed, delay, Some(PAUSED_FOR_LIMIT)).await?,
            ))
        }
        Ok(Walked::Done(total)) => {
            let finished = backfills::finish(pool, &claimed, None).await?;
            tracing::info!(
                backfill_id = %job.id,
                rule_id = %job.rule_id,
                matching = total.matching,
                queued = total.queued,
                "backfill succeeded"
            );
            Ok(Some(match finished {
                true => BackfillRun::Finished(job.id),
                false => BackfillRun::Lost(job.id),
            }))
        }
        Err(error) => {
            let permanent = matches!(
                error,
                EnrollmentError::Corrupt { .. } | EnrollmentError::Encode(_)
            );
            let message = error.to_string();
            if permanent || job.attempts >= BACKFILL_ATTEMPTS {
                tracing::error!(backfill_id = %job.id, rule_id = %job.rule_id, %error, "backfill failed");
                backfills::finish(pool, &claimed, Some(&message)).await?;
                Ok(Some(BackfillRun::Finished(job.id)))
            } else {
                tracing::warn!(backfill_id = %job.id, rule_id = %job.rule_id, %error, "backfill interrupted; resumed shortly");
                backfills::release(pool, &claimed, &message, Duration::from_secs(5)).await?;
                Ok(Some(BackfillRun::Released(job.id)))
            }
        }
    }
}

/// What a backfill paused for the assign limit says in its `error` until it resumes.
pub const PAUSED_FOR_LIMIT: &str = "paused: the organization's assign limit per minute is used \
    up; the backfill resumes where it stopped when the limit has room again";

/// Gives a backfill's turn back for `until` (see [`backfills::pause`]).
async fn pause(
    pool: &PgPool,
    claimed: &Claimed,
    until: Duration,
    reason: Option<&str>,
) -> Result<BackfillRun, sqlx::Error> {
    Ok(
        match backfills::pause(pool, claimed, until, reason).await? {
            true => BackfillRun::Paused(claimed.backfill.id),
            false => BackfillRun::Lost(claimed.backfill.id),
        },
    )
}

/// Walks the job's users from where it stopped, for a turn.
async fn walk(
    pool: &PgPool,
    publisher: &BatchPublisher,
    claimed: &Claimed,
    lease: Duration,
) -> Result<Walked, EnrollmentError> {
    let job = &claimed.backfill;
    let (Some(record), Some(org)) = (
        db::get(pool, job.org_id, job.rule_id).await?,
        orgs::get(pool, job.org_id).await?,
    ) else {
        // Deleted: the job went with it.
        return Ok(Walked::Lost);
    };
    let rules = [rule(&record)?];
    let assigner = Assigner {
        pool,
        publisher,
        org: &org,
        actor: job.actor().unwrap_or(Actor::Scheduler),
    };
    let mut total = Applied {
        matching: u64::try_from(job.matching).unwrap_or(0),
        queued: u64::try_from(job.queued).unwrap_or(0),
    };
    let mut after = job.after_user_id;
    for _ in 0..BACKFILL_PAGES_PER_TURN {
        let page = db::profiles_page(pool, job.org_id, after, PAGE).await?;
        let Some(last) = page.last() else {
            return Ok(Walked::Done(total));
        };
        let full = page.len() as i64 == PAGE;
        let (applied, deferred) = assigner.apply(&rules, &page, Utc::now()).await?;
        if let Some(first) = deferred.users.first() {
            // The users before the first one left for later are done (the page is in id order,
            // and what is left for later is a tail of it): record them, and pause.
            let done: Vec<&Profile> = page.iter().take_while(|user| user.id < *first).collect();
            if let Some(cut) = done.last() {
                let matching = done
                    .iter()
                    .filter(|user| user.active && rules[0].condition.matches(user))
                    .count() as u64;
                if !backfills::advance(pool, claimed, cut.id, matching, applied.queued, lease)
                    .await?
                {
                    return Ok(Walked::Lost);
                }
            }
            return Ok(Walked::Deferred(deferred.delay));
        }
        if !backfills::advance(
            pool,
            claimed,
            last.id,
            applied.matching,
            applied.queued,
            lease,
        )
        .await?
        {
            return Ok(Walked::Lost);
        }
        total += applied;
        after = Some(last.id);
        if !full {
            return Ok(Walked::Done(total));
        }
    }
    Ok(Walked::TurnOver)
}
