//! The dashboard's static files, compiled into the binary: our stylesheet, our small script
//! (copy buttons, confirmations) and htmx 2 (vendored from its release; 0BSD licence). Nothing is
//! fetched from elsewhere at build or run time.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::PageError;
use crate::state::AppState;

/// `(name, content type, bytes)` of every asset.
const ASSETS: [(&str, &str, &[u8]); 3] = [
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/dashboard/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/dashboard/app.js"),
    ),
    (
        "htmx.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/dashboard/htmx.min.js"),
    ),
];

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/assets/{name}", get(asset))
}

async fn asset(Path(name): Path<String>) -> Response {
    let Some(&(_, content_type, bytes)) = ASSETS.iter().find(|(known, _, _)| *known == name) else {
        return PageError::not_found().into_response();
    };
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Short enough that an upgrade shows within the hour.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}
