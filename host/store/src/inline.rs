//! Point reads on SQLite without a thread hop.
//!
//! sqlx runs each SQLite connection on a worker thread of its own: a read is a message to
//! that thread and a wake back, two context switches and a channel for a lookup that takes
//! SQLite a few microseconds. The gateway reads the journal once per governed call (is this
//! invocation a replay?), so the store runs its one-row reads by key ([`Store`]'s
//! `fetch_optional` on the readers) here instead: on the calling thread, on one of a few
//! read-only connections of its own, each behind a lock that is only contended when more
//! threads read at once than there are connections. In WAL mode a reader never waits for
//! the writer, so the call holds its thread only for the lookup itself. Reads that return
//! many rows (listings, audit queries) stay on sqlx's reader pool, off the runtime's
//! threads.
//!
//! [`Store`]: crate::db::Store

use crate::group::{
    ConnectOptions, GroupError, GroupRow, first_row, open_connection, prepare_bound,
};
use rusqlite::OpenFlags;
use rusqlite::types::Value as SqliteValue;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A few read-only connections for point reads on the calling thread.
pub(crate) struct InlineReaders {
    /// `None` once the store is closed.
    conns: Vec<Mutex<Option<rusqlite::Connection>>>,
    next: AtomicUsize,
}

impl InlineReaders {
    /// `count` (at least one) read-only connections to the store's file.
    pub(crate) fn open(options: &ConnectOptions<'_>, count: usize) -> Result<Self, GroupError> {
        let conns = (0..count.max(1))
            .map(|_| {
                let conn = open_connection(options, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
                Ok(Mutex::new(Some(conn)))
            })
            .collect::<Result<_, GroupError>>()?;
        Ok(InlineReaders {
            conns,
            next: AtomicUsize::new(0),
        })
    }

    /// The first row (if any) of a read with `params`.
    pub(crate) fn fetch_optional(
        &self,
        sql: &str,
        params: &[SqliteValue],
    ) -> Result<Option<GroupRow>, GroupError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.conns.len();
        // A free connection if there is one; otherwise wait for the one this read was
        // dealt.
        let conn = (0..n)
            .find_map(|k| self.conns[(start + k) % n].try_lock().ok())
            .unwrap_or_else(|| {
                self.conns[start % n]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            });
        let Some(conn) = conn.as_ref() else {
            return Err(GroupError::Stopped);
        };
        let mut stmt = prepare_bound(conn, sql, params)?;
        first_row(&mut stmt)
    }

    /// Close every connection; later reads fail with [`GroupError::Stopped`].
    pub(crate) fn close(&self) {
        for conn in &self.conns {
            conn.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
        }
    }
}
