//! What the dashboard's CSV uploads (assign, users import) share: reading the form (its file and
//! its other fields) and parsing on the blocking pool so that a large file never holds a thread
//! that serves requests. The line a record starts on is `flow_app::csv_lines::record_line`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::Multipart;

use super::PageError;

/// An upload form as read: the file of its `file` field, and its other fields as text.
pub struct Upload {
    /// The file's name (`default_name` when the browser sent none) and its bytes; `None` when the
    /// form had no file, or an empty one.
    pub file: Option<(String, Bytes)>,
    /// The other fields, by name.
    pub fields: HashMap<String, String>,
}

/// Reads an upload form to its end; a body cut short is a bad request.
pub async fn read_upload(
    mut multipart: Multipart,
    default_name: &str,
) -> Result<Upload, PageError> {
    let cut_short = |error: axum::extract::multipart::MultipartError| {
        PageError::bad_request(format!("The upload was cut short: {error}"))
    };
    let mut upload = Upload {
        file: None,
        fields: HashMap::new(),
    };
    while let Some(field) = multipart.next_field().await.map_err(cut_short)? {
        match field.name().map(str::to_owned) {
            Some(name) if name == "file" => {
                let file_name = field.file_name().unwrap_or(default_name).to_owned();
                let bytes = field.bytes().await.map_err(cut_short)?;
                upload.file = Some((file_name, bytes)).filter(|(_, bytes)| !bytes.is_empty());
            }
            Some(name) => {
                upload
                    .fields
                    .insert(name, field.text().await.unwrap_or_default());
            }
            None => {}
        }
    }
    Ok(upload)
}

/// Runs `parse` over `file` on the blocking pool and returns what it gives.
pub async fn parse_off_runtime<T: Send + 'static>(
    file: Bytes,
    parse: fn(&[u8]) -> T,
) -> Result<T, PageError> {
    tokio::task::spawn_blocking(move || parse(&file))
        .await
        .map_err(|error| PageError::internal(format!("parsing an upload: {error}")))
}
