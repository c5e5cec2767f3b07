//! The export store: where report-workers write export files and the API reads them back.
//! A local directory by default (shared by the API and the workers on one host, or a shared volume
//! in docker-compose); any S3-compatible bucket for several hosts.

use std::path::PathBuf;
use std::sync::Arc;

use flow_domain::ids::ExportId;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// Where export files are kept.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportStoreConfig {
    /// A directory (path or `file:///dir`), or `s3://bucket/prefix` for an S3-compatible store
    /// configured by the usual `AWS_*` variables (`AWS_ENDPOINT`, `AWS_REGION`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`). The API and every
    /// report-worker must point at the same store.
    #[arg(long, env = "EXPORT_STORE_URL", default_value_t = default_export_dir())]
    pub export_store_url: String,
}

/// `flow-exports` under the system temporary directory: works out of the box on one host.
pub fn default_export_dir() -> String {
    std::env::temp_dir()
        .join("flow-exports")
        .to_string_lossy()
        .into_owned()
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The setting names no supported store.
    #[error("EXPORT_STORE_URL {0:?} is not a directory, file:// or s3:// URL")]
    Unsupported(String),
    /// The directory could not be created.
    #[error("cannot create the export directory {path}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The store rejected its configuration.
    #[error(transparent)]
    Store(#[from] object_store::Error),
}

/// The opened store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ExportStore {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl ExportStore {
    /// Opens the store `config` names (creating a local directory if needed).
    pub fn open(config: &ExportStoreConfig) -> Result<Self, StoreError> {
        let url = config.export_store_url.trim();
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Unsupported(url.to_owned()));
            }
            let store = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()?;
            return Ok(Self {
                store: Arc::new(store),
                prefix: Path::from(prefix.trim_matches('/')),
            });
        }
        let directory = match url.strip_prefix("file://") {
            Some(path) => PathBuf::from(path),
            None if !url.is_empty() && !url.contains("://") => PathBuf::from(url),
            None => return Err(StoreError::Unsupported(url.to_owned())),
        };
        std::fs::create_dir_all(&directory).map_err(|source| StoreError::Directory {
            path: directory.clone(),
            source,
        })?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(&directory)?
            .with_automatic_cleanup(true);
        Ok(Self {
            store: Arc::new(store),
            prefix: Path::default(),
        })
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Where every file of one export lives.
    pub fn export_prefix(&self, export_id: ExportId) -> Path {
        self.prefix
            .clone()
            .join("exports")
            .join(export_id.to_string())
    }

    /// The key of one attempt's file: attempts never overwrite each other, so a worker that lost
    /// its lease cannot clobber the file of the one that took over.
    pub fn object_key(&self, export_id: ExportId, attempt: i32, file_name: &str) -> Path {
        self.export_prefix(export_id)
            .join(attempt.to_string())
            .join(file_name)
    }

    /// Deletes every file of an export; returns how many were deleted.
    pub async fn delete_export(&self, export_id: ExportId) -> Result<usize, object_store::Error> {
        let prefix = self.export_prefix(export_id);
        let locations: Vec<Path> = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        let mut deleted = 0;
        for location in locations {
            match self.store.delete(&location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }

    /// Opens a file for streaming.
    pub async fn get(&self, key: &str) -> Result<object_store::GetResult, object_store::Error> {
        self.store.get(&Path::from(key)).await
    }

    /// Whether the store answers (readiness probes, start-up checks).
    pub async fn check(&self) -> Result<(), object_store::Error> {
        let mut listing = self.store.list(Some(&self.prefix));
        match listing.next().await {
            Some(Err(error)) => Err(error),
            _ => Ok(()),
        }
    }
}
