//! HTTP answers that more than one surface sends: an export's file, streamed with its headers,
//! and the `X-Data-As-Of` header of data that may be read on a replica.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use chrono::{DateTime, Utc};
use flow_app::exports::ExportFile;

/// The `X-Data-As-Of` header: the instant the data of a report (or an export file) is current
/// to. Reports may be read on a replica a moment behind the primary; statuses are still judged
/// at `generatedAt`.
#[derive(Debug, Clone, Copy)]
pub struct DataAsOf(pub DateTime<Utc>);

/// Name of the [`DataAsOf`] header.
pub const DATA_AS_OF_HEADER: &str = "x-data-as-of";

impl IntoResponseParts for DataAsOf {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut parts: ResponseParts) -> Result<ResponseParts, Self::Error> {
        if let Ok(value) = HeaderValue::from_str(&flow_domain::format_timestamp(self.0)) {
            parts.headers_mut().insert(DATA_AS_OF_HEADER, value);
        }
        Ok(parts)
    }
}

/// The file as an attachment, streamed from the export store; never cached.
pub fn attachment(file: ExportFile) -> Response {
    let disposition = format!(
        "attachment; filename=\"{}\"",
        file.file_name.replace('"', "")
    );
    let mut response = Response::new(Body::from_stream(file.stream));
    if let Some(data_as_of) = file.data_as_of {
        response = (DataAsOf(data_as_of), response).into_response();
    }
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, file.content_type),
        (header::CONTENT_DISPOSITION, disposition),
        (header::CONTENT_LENGTH, file.size.to_string()),
        (header::CACHE_CONTROL, "private, no-store".to_owned()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}
