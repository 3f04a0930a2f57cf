//! The JSON-lines sink: one event per line, in files of bounded size that are only ever
//! appended to, each batch fsynced before it counts as delivered.

use crate::sink::{Delivered, ExportSink, SinkError};
use capgate_store::{ExportedCheckpoint, ExportedEvent};
use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One exported line: `{"chain":…,"seq":…,"hash":…,"event":{…}}` and a newline. `chain`,
/// `seq` and `hash` are left out for rows written before chains existed.
pub fn jsonl_line(e: &ExportedEvent) -> Vec<u8> {
    let mut m = Map::new();
    if let Some(c) = &e.chain {
        m.insert("chain".into(), Value::String(c.clone()));
    }
    if let Some(s) = e.seq {
        m.insert("seq".into(), Value::from(s));
    }
    if let Some(h) = &e.hash {
        m.insert("hash".into(), Value::String(h.clone()));
    }
    m.insert("event".into(), e.event.clone());
    let mut line = Value::Object(m).to_string().into_bytes();
    line.push(b'\n');
    line
}

/// One exported checkpoint line: `{"checkpoint":{…}}` and a newline, the record as
/// [`ExportedCheckpoint`] serializes (what `capgate audit verify --checkpoints` reads).
pub fn jsonl_checkpoint_line(c: &ExportedCheckpoint) -> Vec<u8> {
    let mut m = Map::new();
    m.insert(
        "checkpoint".into(),
        serde_json::to_value(c).unwrap_or(Value::Null),
    );
    let mut line = Value::Object(m).to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Rotated JSON-lines files in one directory: `audit-<UTC time>.jsonl`, a new one when the
/// current reaches the rotation size, and a new one after every failed write (a failed
/// write may have left part of a line; no file is ever written after one).
pub struct JsonlSink {
    dir: PathBuf,
    rotate_bytes: u64,
    current: Option<Current>,
}

struct Current {
    path: PathBuf,
    file: File,
    size: u64,
}

impl JsonlSink {
    /// A sink writing into `dir` (created if missing), rotating at `rotate_bytes`.
    pub fn new(dir: impl Into<PathBuf>, rotate_bytes: u64) -> Result<JsonlSink, SinkError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| SinkError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(JsonlSink {
            dir,
            rotate_bytes: rotate_bytes.max(1),
            current: None,
        })
    }

    /// The file being written, if any.
    pub fn current_file(&self) -> Option<&Path> {
        self.current.as_ref().map(|c| c.path.as_path())
    }
}

/// A new file in `dir`, named for now; never one that exists.
fn open_new(dir: &Path) -> Result<Current, SinkError> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ").to_string();
    for n in 0..1000u32 {
        let name = if n == 0 {
            format!("audit-{stamp}.jsonl")
        } else {
            format!("audit-{stamp}-{n}.jsonl")
        };
        let path = dir.join(name);
        let mut open = OpenOptions::new();
        open.append(true).create_new(true);
        // The trail is the operator's: readable and writable by capgate's user only.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        match open.open(&path) {
            Ok(file) => {
                return Ok(Current {
                    path,
                    file,
                    size: 0,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(SinkError::Io { path, source }),
        }
    }
    Err(SinkError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other("no free file name"),
    })
}

/// Append `bytes` to the current file (a new one first when there is none or it is full)
/// and sync it to disk.
fn append(
    dir: &Path,
    rotate_bytes: u64,
    current: Option<Current>,
    bytes: &[u8],
) -> Result<Current, SinkError> {
    let mut c = match current {
        Some(c) if c.size < rotate_bytes => c,
        _ => open_new(dir)?,
    };
    let io = |c: &Current, source| SinkError::Io {
        path: c.path.clone(),
        source,
    };
    c.file.write_all(bytes).map_err(|e| io(&c, e))?;
    c.file.sync_data().map_err(|e| io(&c, e))?;
    c.size += bytes.len() as u64;
    Ok(c)
}

#[async_trait::async_trait]
impl ExportSink for JsonlSink {
    fn kind(&self) -> &'static str {
        "jsonl"
    }

    async fn deliver(&mut self, events: &[ExportedEvent]) -> Result<Delivered, SinkError> {
        let bytes: Vec<u8> = events.iter().flat_map(jsonl_line).collect();
        self.append(bytes).await
    }

    /// Checkpoints go into the same files, as `{"checkpoint":{…}}` lines.
    async fn deliver_checkpoints(
        &mut self,
        records: &[ExportedCheckpoint],
    ) -> Result<Delivered, SinkError> {
        let bytes: Vec<u8> = records.iter().flat_map(jsonl_checkpoint_line).collect();
        self.append(bytes).await
    }
}

impl JsonlSink {
    /// Append `bytes` to the current file off the async threads, fsynced.
    async fn append(&mut self, bytes: Vec<u8>) -> Result<Delivered, SinkError> {
        let (dir, rotate, current) = (self.dir.clone(), self.rotate_bytes, self.current.take());
        let written = tokio::task::spawn_blocking(move || append(&dir, rotate, current, &bytes))
            .await
            .map_err(|e| SinkError::Io {
                path: self.dir.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        // On an error `current` stays empty: the next attempt starts a new file.
        self.current = Some(written?);
        Ok(Delivered::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;

    fn event(seq: i64) -> ExportedEvent {
        ExportedEvent {
            id: seq,
            at: Utc::now(),
            chain: Some("c1".into()),
            seq: Some(seq),
            hash: Some(format!("h{seq}")),
            event: json!({"type": "capability.started", "data": {"attempt": 1}}),
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn exported_files_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = JsonlSink::new(dir.path().join("out"), 1 << 20).expect("sink");
        sink.deliver(&[event(1)]).await.expect("deliver");
        let file = sink.current_file().expect("a file").to_path_buf();
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    #[tokio::test]
    async fn batches_are_appended_as_lines_and_files_rotate_at_their_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let line = jsonl_line(&event(1)).len() as u64;
        // Room for two batches of two lines per file.
        let mut sink = JsonlSink::new(dir.path().join("out"), 3 * line).expect("sink");
        for seq in (1..=8).step_by(2) {
            sink.deliver(&[event(seq), event(seq + 1)])
                .await
                .expect("deliver");
        }
        let mut files: Vec<_> = std::fs::read_dir(dir.path().join("out"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 2, "{files:?}");
        let mut seqs = Vec::new();
        for f in &files {
            for l in std::fs::read_to_string(f).expect("read").lines() {
                let v: Value = serde_json::from_str(l).expect("a JSON line");
                assert_eq!(v["chain"], "c1");
                assert_eq!(v["event"]["type"], "capability.started");
                seqs.push(v["seq"].as_i64().expect("seq"));
            }
        }
        assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_missing_directory_fails_the_delivery_until_it_is_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        // Every batch fills a file, so every delivery opens a new one.
        let mut sink = JsonlSink::new(&out, 1).expect("sink");
        sink.deliver(&[event(1)]).await.expect("deliver");
        std::fs::remove_dir_all(&out).expect("rm");
        match sink.deliver(&[event(2)]).await {
            Err(SinkError::Io { path, .. }) => assert!(path.starts_with(&out), "{path:?}"),
            other => panic!("expected an I/O error, got {other:?}"),
        }
        assert!(sink.current_file().is_none());
        std::fs::create_dir(&out).expect("mkdir");
        sink.deliver(&[event(2)]).await.expect("deliver after");
        let files = std::fs::read_dir(&out).expect("dir").count();
        assert_eq!(files, 1);
    }
}
