//! The dashboard's session store: tower-sessions records kept in Postgres (`dashboard_sessions`),
//! so every API replica sees the same sessions and a signed-out session is gone everywhere. Only
//! `create` inserts a record; `save` updates an existing one, so a request that loaded a session
//! before it was signed out cannot write it back.

use chrono::{DateTime, Utc};
use flow_common::db::sessions;
use sqlx::PgPool;
use tower_sessions::Session;
use tower_sessions::cookie::time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

/// Session key of the notice shown once on the next page.
const FLASH_KEY: &str = "flash";

/// A notice shown once at the top of the next page (after a redirect), kept in the session
/// until that page takes it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Flash {
    /// `success`, `error` or `info` (a CSS class).
    pub kind: String,
    /// What happened.
    pub text: String,
}

/// Stores a notice for the next page.
pub async fn flash(session: &Session, kind: &str, text: impl Into<String>) {
    let notice = Flash {
        kind: kind.to_owned(),
        text: text.into(),
    };
    if let Err(error) = session.insert(FLASH_KEY, notice).await {
        tracing::warn!(%error, "could not store a dashboard notice");
    }
}

/// Takes the pending notice, if any: it is shown once.
pub async fn take_flash(session: &Session) -> Option<Flash> {
    session.remove::<Flash>(FLASH_KEY).await.ok().flatten()
}

/// Sessions in Postgres.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// A store on `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn backend(error: sqlx::Error) -> session_store::Error {
    session_store::Error::Backend(error.to_string())
}

fn to_chrono(at: OffsetDateTime) -> DateTime<Utc> {
    DateTime::from_timestamp(at.unix_timestamp(), at.nanosecond()).unwrap_or_else(Utc::now)
}

fn from_chrono(at: DateTime<Utc>) -> Result<OffsetDateTime, session_store::Error> {
    OffsetDateTime::from_unix_timestamp(at.timestamp())
        .map_err(|error| session_store::Error::Decode(error.to_string()))
}

fn encode(record: &Record) -> Result<serde_json::Value, session_store::Error> {
    serde_json::to_value(&record.data)
        .map_err(|error| session_store::Error::Encode(error.to_string()))
}

#[async_trait::async_trait]
impl SessionStore for PostgresStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        // A collision of 128 random bits is all but impossible; draw again rather than overwrite.
        while !sessions::insert(
            &self.pool,
            &record.id.to_string(),
            &data,
            to_chrono(record.expiry_date),
        )
        .await
        .map_err(backend)?
        {
            record.id = Id::default();
        }
        Ok(())
    }

    /// Updates the session if it still exists. A session deleted meanwhile (signed out, ended
    /// for its account) stays deleted: the request that saves it loaded it before, and its cookie
    /// now names nothing.
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let saved = sessions::save(
            &self.pool,
            &record.id.to_string(),
            &encode(record)?,
            to_chrono(record.expiry_date),
        )
        .await
        .map_err(backend)?;
        if !saved {
            tracing::debug!("a session ended during the request was not saved back");
        }
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let Some((data, expires_at)) = sessions::load(&self.pool, &id.to_string())
            .await
            .map_err(backend)?
        else {
            return Ok(None);
        };
        Ok(Some(Record {
            id: *id,
            data: serde_json::from_value(data)
                .map_err(|error| session_store::Error::Decode(error.to_string()))?,
            expiry_date: from_chrono(expires_at)?,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sessions::delete(&self.pool, &id.to_string())
            .await
            .map_err(backend)
    }
}
