//! What every bulk operation shares: the allowance its items take from the caller's rate limit
//! (each item counts as one request; items beyond what is left fail with 429 on their own, and a
//! request with nothing left is a 429 as a whole), and how each item's outcome is answered.

use flow_app::ServiceError;
use flow_app::ratelimit::{Operation, RateInfo, RateLimitError};

use crate::error::{ApiError, ErrorBody};
use crate::extract::Auth;
use crate::state::AppState;

/// The requests a bulk request's items were granted.
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    operation: Operation,
    granted: usize,
    retry_after: u64,
    /// The caller's rate state after taking them (the response's rate headers).
    pub rate: RateInfo,
}

impl Allowance {
    /// Takes up to `count` requests of `operation` for the caller; 429 when none is left.
    pub async fn take(
        state: &AppState,
        auth: &Auth,
        operation: Operation,
        count: usize,
    ) -> Result<Self, ApiError> {
        let (granted, rate, retry_after) = state
            .limiter
            .check_up_to(auth, operation, u32::try_from(count).unwrap_or(u32::MAX))
            .await?;
        let granted = usize::try_from(granted).unwrap_or(0);
        if granted == 0 {
            return Err(ApiError::RateLimited {
                operation: operation.as_str(),
                retry_after,
                info: rate,
            });
        }
        Ok(Self {
            operation,
            granted,
            retry_after,
            rate,
        })
    }

    /// Item `index`, made by `item` when it is within the allowance, else its own 429.
    pub fn item<T>(
        &self,
        index: usize,
        item: impl FnOnce() -> Result<T, ServiceError>,
    ) -> Result<T, ServiceError> {
        if index >= self.granted {
            return Err(RateLimitError::Exceeded {
                operation: self.operation,
                retry_after: self.retry_after,
                info: self.rate,
            }
            .into());
        }
        item()
    }
}

/// An item's answer: its status, and its result (by `view`) or its error body. An internal
/// error is logged, naming the operation `what` and the item.
pub fn answer<T, V>(
    index: usize,
    outcome: Result<T, ServiceError>,
    what: &str,
    view: impl FnOnce(T) -> V,
) -> (u16, Option<V>, Option<ErrorBody>) {
    match outcome {
        Ok(value) => (200, Some(view(value)), None),
        Err(error) => {
            let error = ApiError::from(error);
            if matches!(error, ApiError::Internal(_)) {
                tracing::error!(index, error = %error, "{what} item failed");
            }
            (error.status().as_u16(), None, Some(error.body()))
        }
    }
}
