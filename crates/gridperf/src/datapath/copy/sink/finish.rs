//! A file's end at the writing end: into place when whole and still this
//! copy's, else kept partial with its journal for a resume.

use super::*;

impl SinkFile {
    /// Moves the file into place once every block is verified (and the
    /// source did not change), if it is still this copy's: its data made
    /// durable, its time set to the source's, the partial renamed to the
    /// final name (never over a file that appeared meanwhile, unless
    /// --force), the journal removed. Returns the outcome either way (a file
    /// not finished stays partial, with its journal, for a resume).
    pub fn finish(&self, file: u32, source_changed: bool) -> gridperf_core::wire::CopyOutcome {
        let mut out = {
            let s = lock(&self.state);
            gridperf_core::wire::CopyOutcome {
                file,
                blake3: None,
                moved: s.moved,
                resent: s.resent,
                kept: s.kept,
                error: s.error.clone(),
                checksum: None,
            }
        };
        if self.ident.is_none() || self.settled.load(Ordering::SeqCst) {
            // kept from an earlier run (with the hash it recorded), or refused
            out.blake3 = self.known_hash.clone();
            return out;
        }
        let h = match self.handle() {
            Ok(h) => h,
            Err(e) => {
                out.error.get_or_insert(format!("{}: {e}", self.name));
                return out;
            }
        };
        if self.joined {
            // the first destination renames: what this one wrote is made durable first
            if let Err(e) = h.partial.sync_data() {
                out.error = Some(format!("{}: {e}", self.name));
            }
            return out;
        }
        if self.adopt && !self.complete() {
            if let Err(e) = self.adopt_joined(&h) {
                out.error.get_or_insert(format!("reading the journal others wrote: {e}; kept partial"));
            }
        }
        if out.error.is_none() && source_changed {
            out.error =
                Some("the source changed during the copy (its size or time): not renamed; copy it again".into());
        }
        if out.error.is_none() && !self.complete() {
            out.error = Some("not every block arrived: kept partial for --resume".into());
        }
        if out.error.is_some() {
            return out;
        }
        let hash = {
            let s = lock(&self.state);
            let cvs: Vec<[u8; 32]> = s.cvs.iter().flatten().copied().collect();
            file_hash(&cvs, self.info.size, self.block, s.single)
        };
        // the checksum's rest (a resumed file's kept blocks), then its value, before the rename
        let summed = match self.feed(&h, None) {
            Ok(()) => lock(&self.summer).take().map(|(s, _, _)| s.hex()),
            Err(e) => {
                out.error = Some(format!("reading {} back for its checksum: {e}; kept partial", self.name));
                return out;
            }
        };
        let (pname, jname) = (partial_name(&self.name), journal_name(&self.name));
        let done = (|| -> io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            h.partial.sync_all()?;
            let when = std::time::UNIX_EPOCH + Duration::from_nanos(self.info.mtime_ns.max(0) as u64);
            h.partial.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when))?;
            h.partial.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            // which source this is, and its hash, kept with it (a resume's quick check; where the
            // filesystem keeps no attributes, nothing is lost but that)
            if let Some(o) = &self.info.origin {
                let _ = gridperf_sys::set_xattr(&h.partial, XATTR_ORIGIN, o.as_bytes());
            }
            if let Some(hx) = &hash {
                let _ = gridperf_sys::set_xattr(&h.partial, XATTR_BLAKE3, hx.to_hex().as_bytes());
            }
            if self.force {
                gridperf_sys::rename_in(&h.dir, &pname, &self.name)?;
            } else {
                gridperf_sys::rename_in_noreplace(&h.dir, &pname, &self.name).map_err(|e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        io::Error::new(
                            e.kind(),
                            "a file of its name appeared while the copy ran: not replaced (give --force); kept partial",
                        )
                    } else {
                        e
                    }
                })?;
            }
            self.settled.store(true, Ordering::SeqCst);
            gridperf_sys::unlink_in(&h.dir, &jname)?;
            File::from(h.dir.try_clone()?).sync_all()
        })();
        drop(h);
        SINKS.forget(self.id, &self.slot);
        match done {
            Ok(()) => {
                out.blake3 = hash.map(|h| h.to_hex().to_string());
                out.checksum = summed;
            }
            Err(e) => out.error = Some(format!("moving {} into place: {e}", self.name)),
        }
        out
    }
}
