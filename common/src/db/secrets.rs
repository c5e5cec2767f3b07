//! Secrets generated once and shared by every replica through the database, so no operator has
//! to configure them the same everywhere.

use sqlx::PgExecutor;

/// Name of the key that signs minted assignment ids (see `ids::AssignmentIdSigner`).
pub const ASSIGNMENT_IDS: &str = "assignment_ids";

/// The 32-byte secret `name`, generated on first use. Concurrent first uses agree: the first
/// insert wins and everyone reads it back.
pub async fn get_or_create<'e, E>(executor: E, name: &str) -> Result<[u8; 32], sqlx::Error>
where
    E: PgExecutor<'e> + Copy,
{
    let candidate: [u8; 32] = rand::random();
    sqlx::query(
        "INSERT INTO service_secrets (name, secret) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(candidate.as_slice())
    .execute(executor)
    .await?;
    let stored: Vec<u8> = sqlx::query_scalar("SELECT secret FROM service_secrets WHERE name = $1")
        .bind(name)
        .fetch_one(executor)
        .await?;
    stored.try_into().map_err(|stored: Vec<u8>| {
        sqlx::Error::Decode(format!("secret {name} has {} bytes, not 32", stored.len()).into())
    })
}
