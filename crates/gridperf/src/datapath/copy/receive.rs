//! The writing end's connections: blocks in, verified and written, acknowledgments out.

use super::*;
use gridperf_core::copy::seal::TAG_LEN;
use gridperf_core::copy::{block_count, block_cv, block_len};
use gridperf_core::wire::block::{Ack, AckStatus, BlockHeader, ACK_LEN, END_OF_BLOCKS, FRAME_HEADER};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Receives blocks on one connection until the end frame: each checked
/// against the sender's chaining value, written if it holds (and
/// acknowledged either way). `moved` counts verified bytes.
///
/// What the connection did is its result even when it ends cut or broken
/// (the set cuts what still runs once the sending end says every block is
/// acknowledged): only one that carried what was not sent (InvalidData)
/// is an error. CI once lost the one stream that carried a whole copy
/// from the agent's report so, cut before it read the end frame.
pub fn receive_stream(
    index: u32,
    files: &[Option<SinkFile>],
    block: u64,
    link: Link,
    moved: &AtomicU64,
) -> io::Result<StreamWork> {
    let mut work = StreamWork { index, ..Default::default() };
    match receive_blocks(&mut work, files, block, link, moved) {
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(e),
        // cut, reset or timed out: its verified blocks stand (the sending
        // end sends the rest again on another), and so does its work
        Ok(()) | Err(_) => Ok(work),
    }
}

fn receive_blocks(
    work: &mut StreamWork,
    files: &[Option<SinkFile>],
    block: u64,
    link: Link,
    moved: &AtomicU64,
) -> io::Result<()> {
    let Link { mut sock, idle, crypt, .. } = link;
    let (mut sealer, mut opener) = Crypt::split(crypt);
    sock.set_read_timeout(Some(idle))?;
    sock.set_write_timeout(Some(idle))?;
    let mut buf = vec![0u8; block as usize + TAG_LEN];
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    loop {
        let mut h = [0u8; FRAME_HEADER + TAG_LEN];
        let t = Instant::now();
        read_frame(&mut sock, opener.as_mut(), &mut h, FRAME_HEADER)?;
        let head = BlockHeader::decode(h[..FRAME_HEADER].try_into().expect("a header's length")).map_err(bad)?;
        if head.file == END_OF_BLOCKS {
            break;
        }
        let f = files
            .get(head.file as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(format!("a block of file {}, not one this end takes", head.file)))?;
        let want = block_len(f.info.size, block, head.index);
        if head.index >= block_count(f.info.size, block) || u64::from(head.len) != want {
            return Err(bad(format!(
                "block {} of {} with {} bytes: not a block of this file",
                head.index, f.name, head.len
            )));
        }
        let framed = want as usize + if opener.is_some() { TAG_LEN } else { 0 };
        sock.read_exact(&mut buf[..framed])?;
        work.net_ns += t.elapsed().as_nanos() as u64;
        if let Some(o) = opener.as_mut() {
            let t = Instant::now();
            o.open(&mut buf[..framed]).map_err(sealing)?;
            work.crypt_ns += t.elapsed().as_nanos() as u64;
        }
        let data = &mut buf[..want as usize];
        let n = RECEIVED.fetch_add(1, Ordering::SeqCst) + 1;
        if FLIP_BLOCK.load(Ordering::SeqCst) == n {
            data[data.len() / 2] ^= 0x20;
        }
        // a file that cannot be written here (a full disk): its blocks are
        // answered as such, and the sender sends no more of it
        let status = if f.failed() {
            AckStatus::Failed
        } else {
            let t = Instant::now();
            let cv = block_cv(data, head.index * block);
            work.hash_ns += t.elapsed().as_nanos() as u64;
            if cv != head.cv {
                f.damaged();
                AckStatus::Damaged
            } else {
                match f.put(head.index, data, cv) {
                    Ok(ns) => {
                        work.disk_ns += ns;
                        moved.fetch_add(want, Ordering::Relaxed);
                        work.bytes += want;
                        work.blocks += 1;
                        AckStatus::Ok
                    }
                    Err(e) => {
                        f.fail(match e.raw_os_error() {
                            Some(libc::ENOSPC) => format!(
                                "the destination's disk is full: kept partial ({} of its bytes verified); free room \
                                 and copy again with --resume",
                                f.verified_bytes()
                            ),
                            _ => format!("writing {}: {e}: kept partial", f.name),
                        });
                        AckStatus::Failed
                    }
                }
            }
        };
        let mut a = [0u8; ACK_LEN + TAG_LEN];
        a[..ACK_LEN].copy_from_slice(&Ack { file: head.file, index: head.index, status }.encode());
        let n = seal(sealer.as_mut(), &mut a, ACK_LEN)?;
        sock.write_all(&a[..n])?;
    }
    // the sender's end frame: say so by closing our side
    let _ = sock.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// The writing end's data connections of a copy, in a thread scope: each
/// started as it comes (the first ones, then a restart's or -P auto's),
/// ended in any order. One that breaks or is reset is no error by itself
/// (the sending end sends its blocks again on another; a file is whole when
/// every block is verified); one that carried what was not sent (altered
/// on the way, not a block) ends the copy.
pub struct ReceiveSet<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    files: &'env [Option<SinkFile>],
    block: u64,
    idle: Duration,
    window: Option<u64>,
    keys: Option<&'env gridperf_core::copy::seal::CopyKeys>,
    /// Bytes verified, by connection number.
    moved: &'env [AtomicU64],
    running: Vec<std::thread::ScopedJoinHandle<'scope, io::Result<StreamWork>>>,
    open: Vec<TcpStream>,
    works: Vec<io::Result<StreamWork>>,
}

impl<'scope, 'env> ReceiveSet<'scope, 'env> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        files: &'env [Option<SinkFile>],
        block: u64,
        idle: Duration,
        window: Option<u64>,
        keys: Option<&'env gridperf_core::copy::seal::CopyKeys>,
        moved: &'env [AtomicU64],
    ) -> Self {
        ReceiveSet {
            scope,
            files,
            block,
            idle,
            window,
            keys,
            moved,
            running: Vec::new(),
            open: Vec::new(),
            works: Vec::new(),
        }
    }

    /// Starts receiving on connection `k`.
    pub fn start(&mut self, k: u32, sock: TcpStream) {
        if let Ok(c) = sock.try_clone() {
            self.open.push(c);
        }
        let (files, block, idle, window) = (self.files, self.block, self.idle, self.window);
        let Some(moved) = self.moved.get(k as usize).or(self.moved.last()) else { return };
        let crypt = Crypt::of(self.keys, k, false);
        self.running
            .push(self.scope.spawn(move || receive_stream(k, files, block, Link { sock, idle, crypt, window }, moved)));
    }

    /// Collects the connections that ended; why the copy must stop, if one
    /// carried what was not sent.
    pub fn reap(&mut self) -> Option<String> {
        let mut k = 0;
        while k < self.running.len() {
            if self.running[k].is_finished() {
                let h = self.running.swap_remove(k);
                self.works.push(h.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked"))));
            } else {
                k += 1;
            }
        }
        self.works
            .iter()
            .find_map(|w| w.as_ref().err().filter(|e| e.kind() == io::ErrorKind::InvalidData))
            .map(|e| e.to_string())
    }

    /// Connections still receiving.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Cuts every connection (their threads end at once).
    pub fn shut(&self) {
        for s in &self.open {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Cuts what still runs (nothing it carries is needed once the sending
    /// end says every block is acknowledged; a reset whose RST was lost
    /// would otherwise hold it for the idle deadline) and collects them all.
    pub fn finish(mut self) -> Vec<io::Result<StreamWork>> {
        self.shut();
        for h in self.running.drain(..) {
            self.works.push(h.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked"))));
        }
        self.works
    }
}
