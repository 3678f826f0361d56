//! A file made ready at the writing end: its partial file locked and
//! reserved, its journal checked against this very source, the blocks a
//! resume keeps hashed again; or a second destination joining the first's.

use super::*;

impl SinkFile {
    pub fn prepare(
        root: &Arc<OwnedFd>,
        rel: &str,
        info: CopyFile,
        block: u64,
        rules: SinkRules,
    ) -> Result<(SinkFile, CopyNeed), String> {
        let (dir, name) = dir_beneath(&**root, rel, true).map_err(|e| format!("{rel}: {e}"))?;
        if info.size > MAX_FILE {
            return Err(format!("{name}: {} bytes: a copy takes files of up to 1 PiB", info.size));
        }
        let n = block_count(info.size, block) as usize;
        let mut file = SinkFile {
            name: name.clone(),
            info: info.clone(),
            block,
            root: root.clone(),
            rel: rel.to_string(),
            owner: new_owner(),
            ident: None,
            id: super::open::new_id(),
            slot: Slot::default(),
            summer: Mutex::new(rules.checksum.map(|c| (c.summer(), 0, Vec::new()))),
            state: Mutex::new(SinkState::default()),
            joined: rules.join,
            adopt: rules.adopt,
            adopt_from: 0,
            created: false,
            settled: AtomicBool::new(false),
            force: rules.force,
            known_hash: None,
        };
        if rules.join {
            return file.join(dir, n);
        }
        let none = |kept| CopyNeed { file: 0, ranges: Vec::new(), kept, refused: None };
        if let Some(done) = file.finished(&dir, &rules)? {
            return Ok((file, done));
        }
        let (pname, jname) = (partial_name(&name), journal_name(&name));
        // the partial file there, or a new one (another copy may make it between the two: then it is that one's)
        let mut tries = 0;
        let (partial, created) = loop {
            tries += 1;
            match open_own(&dir, &pname, false) {
                Ok(p) => break (p, false),
                Err(e) if e.kind() == io::ErrorKind::NotFound => match open_own(&dir, &pname, true) {
                    Ok(p) => break (p, true),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => continue,
                    Err(e) => return Err(format!("creating {pname}: {e}")),
                },
                Err(e) => return Err(format!("{pname}: {e}")),
            }
        };
        file.created = created;
        // from here on, a refusal removes what this copy made
        let undo = |file: &SinkFile, why: String| -> String {
            if file.created {
                let _ = gridperf_sys::unlink_in(&dir, &pname);
                let _ = gridperf_sys::unlink_in(&dir, &jname);
            }
            why
        };
        match gridperf_sys::try_lock_exclusive(&partial) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "{name} is being written by another copy right now (its partial file is locked): not touched; \
                     copy it again when that one is done"
                ))
            }
            Err(e) => return Err(undo(&file, format!("locking {pname}: {e}"))),
        }
        // locked: still the file that name holds (not replaced between the open and the lock)
        let m = partial.metadata().map_err(|e| undo(&file, format!("{pname}: {e}")))?;
        let ident = (m.dev(), m.ino());
        match gridperf_sys::stat_in(&dir, &pname) {
            Ok((d, i, _)) if (d, i) == ident => {}
            _ => return Err(format!("{name}: its partial file was replaced as it was opened: not touched")),
        }
        file.ident = Some(ident);
        // the journal: kept blocks of this very source, hashed again; a new head either way
        let journal = match open_own(&dir, &jname, false) {
            Ok(j) => Some(j),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(undo(&file, format!("{jname}: {e}"))),
        };
        let mut kept: Vec<(u64, [u8; 32])> = Vec::new();
        if let (Some(mut j), false) = (journal.as_ref(), created) {
            if m.len() == info.size {
                // the space is there (the partial holds it): the blocks' values may be kept
                lock(&file.state).cvs = vec![None; n];
                let mut all = Vec::new();
                j.read_to_end(&mut all).map_err(|e| format!("{jname}: {e}"))?;
                kept = file.rehash(&partial, &all);
            }
        }
        let journal = match journal {
            Some(j) => j,
            None => open_own(&dir, &jname, true).map_err(|e| undo(&file, format!("creating {jname}: {e}")))?,
        };
        let rewrite = (|| -> io::Result<()> {
            journal.set_len(0)?;
            let mut out = head(&info, block, &file.owner).into_bytes();
            out.push(b'\n');
            for (idx, cv) in &kept {
                out.extend_from_slice(&idx.to_be_bytes());
                out.extend_from_slice(cv);
            }
            journal.write_all_at(&out, 0)?;
            Ok(())
        })();
        rewrite.map_err(|e| undo(&file, format!("{jname}: {e}")))?;
        if kept.is_empty() {
            partial.set_len(0).map_err(|e| undo(&file, format!("{pname}: {e}")))?;
            gridperf_sys::preallocate(&partial, info.size).map_err(|e| {
                undo(
                    &file,
                    match e.raw_os_error() {
                        Some(libc::ENOSPC) => {
                            format!("{name}: the destination's disk has no room for its {} bytes", info.size)
                        }
                        _ => format!("{name}: reserving {} bytes: {e}", info.size),
                    },
                )
            })?;
            // the blocks' values are kept once the file's space is known to be there
            lock(&file.state).cvs = vec![None; n];
        }
        file.adopt_from = journal.metadata().map_or(u64::MAX, |m| m.len());
        // journal records are appended from here on (other destination agents' too)
        let journal = reopen_append(&dir, &jname, journal).map_err(|e| undo(&file, format!("{jname}: {e}")))?;
        SINKS.put(file.id, &file.slot, Handle { dir, partial, journal });
        let need: Vec<u64> = {
            let s = lock(&file.state);
            (0..n as u64).filter(|&i| s.cvs[i as usize].is_none()).collect()
        };
        let kept_bytes = lock(&file.state).kept;
        Ok((file, CopyNeed { ranges: gridperf_core::copy::ranges(need), ..none(kept_bytes) }))
    }

    /// A destination already there: this very source finished by an
    /// earlier run (its attributes say so, or, with --resume, its size and
    /// time), kept and needing nothing; else refused unless --force
    /// replaces it. None when nothing is there, or --force.
    fn finished(&mut self, dir: &OwnedFd, rules: &SinkRules) -> Result<Option<CopyNeed>, String> {
        let (name, info) = (self.name.clone(), self.info.clone());
        let Ok(existing) = gridperf_sys::open_beneath(dir, &name, libc::O_PATH | libc::O_NOFOLLOW, 0) else {
            return Ok(None);
        };
        let m = File::from(existing).metadata().map_err(|e| format!("{name}: {e}"))?;
        if !m.file_type().is_file() {
            return Err(format!("{name} exists and is not a regular file: not replaced"));
        }
        // a copy that put it in place said which source it was, and its hash
        let said = gridperf_sys::open_beneath(dir, &name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)
            .ok()
            .map(|f| (gridperf_sys::get_xattr(&f, XATTR_ORIGIN), gridperf_sys::get_xattr(&f, XATTR_BLAKE3)));
        let (origin, hash) = said.unwrap_or((None, None));
        let same_source = match (&origin, &info.origin) {
            (Some(o), Some(want)) => o.as_slice() == want.as_bytes(),
            // put there by another tool (or where no attribute is kept): size and time, as rsync's quick check
            (None, _) => true,
            (Some(_), None) => false,
        };
        let same_file = m.len() == info.size && mtime_ns(&m) == info.mtime_ns && same_source;
        // this very source in place already (its attributes say so): nothing to do, resume or not;
        // one another tool put there is kept by its size and time only with --resume
        if !rules.force && same_file && (rules.resume || origin.is_some()) {
            lock(&self.state).kept = info.size;
            self.settled.store(true, Ordering::SeqCst);
            self.known_hash = hash.and_then(|h| String::from_utf8(h).ok());
            let why = if origin.is_some() {
                "finished by an earlier run (this very source: its size, time and origin)"
            } else {
                "finished by an earlier run (its size and time are the source's; not hashed again)"
            };
            return Ok(Some(CopyNeed { file: 0, ranges: Vec::new(), kept: info.size, refused: Some(why.into()) }));
        }
        if !rules.force {
            return Err(format!(
                "{name} exists: give --force to replace it (or --resume to keep what an earlier run finished)"
            ));
        }
        Ok(None)
    }

    /// A second destination's side of a file: the partial file and journal
    /// the first destination prepared, opened where this agent sees them
    /// (refused when they are not there: not the same storage). It needs
    /// nothing of its own: the client's leases say what comes here.
    fn join(mut self, dir: OwnedFd, n: usize) -> Result<(SinkFile, CopyNeed), String> {
        let name = self.name.clone();
        let (pname, jname) = (partial_name(&name), journal_name(&name));
        let not_shared = |what: &str| {
            format!(
                "{name}: {what}: this destination does not share the first one's storage (give \
                 --same-destination, or destinations on one shared filesystem)"
            )
        };
        let partial =
            open_own(&dir, &pname, false).map_err(|e| not_shared(&format!("the first destination's {pname}: {e}")))?;
        let pm = partial.metadata().map_err(|e| format!("{pname}: {e}"))?;
        if pm.len() != self.info.size {
            return Err(not_shared(&format!("{pname} is not of the source's size")));
        }
        let j =
            open_own(&dir, &jname, false).map_err(|e| not_shared(&format!("the first destination's {jname}: {e}")))?;
        let mut all = Vec::new();
        (&j).read_to_end(&mut all).map_err(|e| format!("{jname}: {e}"))?;
        let head = read_head(&all).map(|(h, _)| h).unwrap_or_default();
        if head["size"] != self.info.size || head["mtime_ns"] != self.info.mtime_ns || head["block"] != self.block {
            return Err(not_shared(&format!("{jname} belongs to another copy")));
        }
        // the first destination's hold: this one writes under it, and checks it again when it reopens
        self.owner = head["owner"].as_str().unwrap_or_default().to_string();
        self.ident = Some((pm.dev(), pm.ino()));
        let journal = reopen_append(&dir, &jname, j).map_err(|e| format!("{jname}: {e}"))?;
        SINKS.put(self.id, &self.slot, Handle { dir, partial, journal });
        lock(&self.state).cvs = vec![None; n];
        Ok((self, CopyNeed { file: 0, ranges: Vec::new(), kept: 0, refused: None }))
    }

    /// Hashes again each block the journal (its bytes: `all`) says arrived
    /// verified, if the journal belongs to this very source; the blocks
    /// that still hold, with their values.
    fn rehash(&mut self, partial: &File, all: &[u8]) -> Vec<(u64, [u8; 32])> {
        let Some((head, body)) = read_head(all) else { return Vec::new() };
        let same = head["version"] == JOURNAL_VERSION
            && head["size"] == self.info.size
            && head["mtime_ns"] == self.info.mtime_ns
            && head["block"] == self.block
            && self.info.origin.is_some()
            && head["origin"] == serde_json::json!(self.info.origin);
        if !same {
            return Vec::new();
        }
        let mut kept = Vec::new();
        let mut buf = vec![0u8; self.block as usize];
        let n = block_count(self.info.size, self.block);
        for rec in all[body..].chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes"));
            let Some(want) = unhex32(&hex(&rec[8..40])) else { continue };
            if idx >= n {
                continue;
            }
            let len = block_len(self.info.size, self.block, idx) as usize;
            if partial.read_exact_at(&mut buf[..len], idx * self.block).is_err() {
                continue;
            }
            if block_cv(&buf[..len], idx * self.block) == want {
                let mut s = lock(&self.state);
                if s.cvs[idx as usize].is_none() {
                    s.cvs[idx as usize] = Some(want);
                    s.kept += len as u64;
                    if n == 1 {
                        s.single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
                    }
                    kept.push((idx, want));
                }
            }
        }
        kept
    }
}

/// The same journal, opened again to append (O_APPEND: every writer's
/// 40-byte records land whole after the others', whatever their offsets).
pub(super) fn reopen_append(dir: &OwnedFd, jname: &str, was: File) -> io::Result<File> {
    let f = File::from(gridperf_sys::open_beneath(dir, jname, libc::O_RDWR | libc::O_APPEND | libc::O_NOFOLLOW, 0)?);
    let (a, b) = (was.metadata()?, f.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) || b.nlink() > 1 {
        return Err(io::Error::other("the journal was replaced as it was opened"));
    }
    Ok(f)
}
