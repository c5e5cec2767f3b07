//! Moving file bytes from the synchronous format writers (on a blocking thread) to the export
//! store (async multipart upload) in bounded chunks, so a file of any size streams through a few
//! megabytes of memory. The upload only completes when the writer says the file is whole; any
//! other end aborts it, so a failed export never leaves a truncated file behind.

use std::io::{self, Write};

use bytes::{Bytes, BytesMut};
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};
use tokio::sync::mpsc;

use flow_common::export_store::ExportStore;

/// Bytes handed to the uploader at once (also the multipart part size).
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// Chunks in flight between the writer and the uploader.
const CHUNKS_IN_FLIGHT: usize = 2;
/// Parts uploaded concurrently.
const UPLOAD_CONCURRENCY: usize = 2;

/// What the writer thread sends the uploader.
#[derive(Debug)]
pub enum Chunk {
    /// File bytes, in order.
    Data(Bytes),
    /// The file is complete.
    Done,
}

/// A `Write` that buffers into chunks and hands them to the uploader, blocking when it is behind.
pub struct ChannelWriter {
    buffer: BytesMut,
    sender: mpsc::Sender<Chunk>,
}

impl ChannelWriter {
    fn send(&mut self, chunk: Chunk) -> io::Result<()> {
        self.sender
            .blocking_send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }

    /// Flushes what is buffered and tells the uploader the file is whole.
    pub fn finish(mut self) -> io::Result<()> {
        self.flush()?;
        self.send(Chunk::Done)
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = self.buffer.split().freeze();
        self.buffer.reserve(CHUNK_BYTES);
        self.send(Chunk::Data(chunk))
    }
}

/// A writer and the receiving end for [`upload`].
pub fn channel() -> (ChannelWriter, mpsc::Receiver<Chunk>) {
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    (
        ChannelWriter {
            buffer: BytesMut::with_capacity(CHUNK_BYTES),
            sender,
        },
        receiver,
    )
}

/// Uploads the chunks to `key`; completes the upload on [`Chunk::Done`] and returns the size,
/// aborts it if the channel closes first.
pub async fn upload(
    store: ExportStore,
    key: Path,
    mut chunks: mpsc::Receiver<Chunk>,
) -> anyhow::Result<u64> {
    let upload = store.store().put_multipart(&key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, CHUNK_BYTES);
    let mut size = 0u64;
    loop {
        match chunks.recv().await {
            Some(Chunk::Data(data)) => {
                size += data.len() as u64;
                if let Err(error) = writer.wait_for_capacity(UPLOAD_CONCURRENCY).await {
                    drop(writer.abort().await);
                    return Err(error.into());
                }
                writer.put(data);
            }
            Some(Chunk::Done) => {
                writer.finish().await?;
                return Ok(size);
            }
            None => {
                drop(writer.abort().await);
                anyhow::bail!("the export writer stopped before the file was complete");
            }
        }
    }
}
