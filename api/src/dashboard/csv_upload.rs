//! What the dashboard's CSV uploads (assign, users import) share: parsing on the blocking pool so
//! that a large file never holds a thread that serves requests. The line a record starts on is
//! `flow_app::csv_lines::record_line`.

use axum::body::Bytes;

use super::PageError;

/// Runs `parse` over `file` on the blocking pool and returns what it gives.
pub async fn parse_off_runtime<T: Send + 'static>(
    file: Bytes,
    parse: fn(&[u8]) -> T,
) -> Result<T, PageError> {
    tokio::task::spawn_blocking(move || parse(&file))
        .await
        .map_err(|error| PageError::internal(format!("parsing an upload: {error}")))
}
