//! A fair (FIFO) queue in front of the host-wide flock. flock(2) wakes its waiters in
//! no particular order, so under steady churn one call can be overtaken again and
//! again until it outlives the runtime's own timeout. Calls therefore take a ticket
//! and wait for their predecessor first (a CLH-style queue), then take the flock.
//!
//! Crash safety comes from flock itself: each waiter holds a flock on its own node
//! file (`<ticket>` in the queue directory) for as long as it is queued or holding the
//! lock, and waits by flocking its predecessor's node. A process that dies releases
//! its flocks, so a dead waiter or holder never blocks the queue. A node that
//! finished normally is unlinked before its flock is released; one found still linked
//! belonged to a process that died, so its successor goes on waiting for the ticket
//! before it. Mutual exclusion never depends on the queue: the flock on `lockFile` is
//! still taken, so any process holding it excludes every call.
//!
//! A call that finds the flock free and nobody queued takes it without a ticket
//! (`nobody_queued`): each ticket holds a shared flock on the queue directory from
//! before it is taken until it is dropped, so an exclusive try on the directory,
//! made while holding the flock on `lockFile`, tells whether any call is queued,
//! and a queued call is never overtaken. A ticket's process that dies drops its
//! shared flock with it; the dead node it leaves is passed and cleared by the next
//! call that queues.
//!
//! A missing node therefore has to mean "this ticket and every one before it are
//! done", and the queue keeps it so: a node is only ever unlinked by a call that has
//! walked all the way back — its owner once granted, or a successor clearing the dead
//! nodes it passed, which it does only when its own walk is complete, farthest first.
//! A call that dies mid-walk (a lock timeout, a kill) leaves the dead nodes it passed
//! linked, and one that dies while clearing leaves the nearer ones, for the next call
//! to pass and clear; nothing is stranded behind a gap, so the queue holds no more
//! nodes than there are live callers and dead ones not yet passed.

use crate::files;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The file holding the next ticket number; flocked briefly to take a ticket.
const TAIL: &str = "tail";
/// The counter is written fixed-width, in place: never truncated, so taking a
/// ticket is one read and one write of the same 20 bytes.
const TAIL_DIGITS: usize = 20;

/// A place in the queue: holds its node's flock until dropped.
#[derive(Debug)]
pub struct Ticket {
    node: File,
    path: PathBuf,
    dir: PathBuf,
    /// The earlier ticket to look at next; every ticket from here up to this one's
    /// has finished or died. 0 once none is left to wait for and the dead nodes
    /// passed are cleared.
    waiting_on: u64,
    /// Nodes of dead processes passed on the way back, unlinked once the walk is
    /// complete (not before: a gap before then would hide the tickets behind it).
    dead: Vec<PathBuf>,
    /// The queue directory, shared-flocked: "a call is queued" (`nobody_queued`).
    _queued: File,
}

fn node_path(dir: &Path, ticket: u64) -> PathBuf {
    dir.join(format!("{ticket:020}"))
}

/// The ticket after every node already in `dir`, for a missing or damaged counter.
fn next_ticket_from_nodes(dir: &Path) -> io::Result<u64> {
    let mut next = 0;
    for entry in fs::read_dir(dir)? {
        if let Ok(n) = entry?.file_name().to_string_lossy().parse::<u64>() {
            next = next.max(n + 1);
        }
    }
    Ok(next)
}

/// Takes `file`'s flock, waiting only when `block`; `Ok(false)` if it would block.
pub(super) fn flock(file: &File, block: bool) -> io::Result<bool> {
    if block {
        return file.lock().map(|()| true);
    }
    would_block(file.try_lock())
}

fn would_block(tried: Result<(), TryLockError>) -> io::Result<bool> {
    match tried {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Whether no ticket is held in the queue at `dir`. Asked while holding the flock on
/// `lockFile`: a call that joins later queues behind that holder, so the answer
/// cannot go stale in a way that lets the holder overtake anyone.
pub(super) fn nobody_queued(dir: &Path) -> io::Result<bool> {
    match files::open_dir(dir) {
        // No call has ever queued here.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        // Closing it at once releases the exclusive flock, if taken.
        dir => would_block(dir?.try_lock()),
    }
}

impl Ticket {
    /// Joins the queue in `dir` and waits until every earlier ticket has finished.
    pub fn take(dir: &Path) -> io::Result<Ticket> {
        let mut ticket = Ticket::join(dir, true)?.expect("a blocking join joins");
        ticket.wait(true)?;
        Ok(ticket)
    }

    /// Takes the next ticket and locks its node. Without `block`, `None` when
    /// another call holds the counter at this instant.
    pub fn join(dir: &Path, block: bool) -> io::Result<Option<Ticket>> {
        files::private_dir(dir)?;
        // Shared, so queued calls do not exclude each other; only an uncontended
        // call's try, which must fail while any call is queued, is exclusive.
        let queued = files::open_dir(dir)?;
        if block {
            queued.lock_shared()?;
        } else if !would_block(queued.try_lock_shared())? {
            return Ok(None);
        }
        let tail = files::open(
            &dir.join(TAIL),
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )?;
        if !flock(&tail, block)? {
            return Ok(None);
        }
        let mut text = [0u8; TAIL_DIGITS];
        let len = tail.read_at(&mut text, 0)?;
        let ticket = match std::str::from_utf8(&text[..len])
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            Some(n) => n,
            None => next_ticket_from_nodes(dir)?,
        };
        // The node first, then the counter: a call killed in between leaves a node
        // whose number the next call takes over, never a number with no node.
        let path = node_path(dir, ticket);
        let create = || {
            files::open(
                &path,
                OpenOptions::new().read(true).write(true).create_new(true),
            )
        };
        let node = match create() {
            // Made by a call that died before moving the counter on (we hold it).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(&path)?;
                create()?
            }
            other => other?,
        };
        // A new file: nobody else can hold its lock yet, so this does not block.
        node.lock()?;
        tail.write_all_at(format!("{:0TAIL_DIGITS$}", ticket + 1).as_bytes(), 0)?;
        drop(tail);
        Ok(Some(Ticket {
            node,
            path,
            dir: dir.to_path_buf(),
            waiting_on: ticket,
            dead: Vec::new(),
            _queued: queued,
        }))
    }

    /// Walks back over earlier tickets until every one has finished (or its process
    /// died). Without `block`, stops at the first one still queued or holding the
    /// lock and says `false`; a later call goes on from there.
    pub fn wait(&mut self, block: bool) -> io::Result<bool> {
        while self.waiting_on > 0 {
            let path = node_path(&self.dir, self.waiting_on - 1);
            let node = match files::open(&path, OpenOptions::new().read(true)) {
                Ok(node) => node,
                // It finished, and so had every ticket before it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            if !flock(&node, block)? {
                return Ok(false);
            }
            if node.metadata()?.nlink() == 0 {
                break; // it finished and unlinked itself
            }
            // Its process died while queued or holding the lock: keep the order by
            // waiting for the ticket before it, and clear it once the walk is done.
            self.dead.push(path);
            self.waiting_on -= 1;
        }
        // Farthest first: a call stopped partway (killed, or its lock timeout ending
        // the process) leaves the dead nodes it has not cleared next to its own, so
        // the next walk passes them all instead of stopping at a gap before them.
        while let Some(path) = self.dead.pop() {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.waiting_on = 0;
        Ok(true)
    }
}

impl Drop for Ticket {
    /// Unlinks the node before its flock is released (when `node` closes), which tells
    /// the successor this ticket finished rather than died; but only once its walk
    /// was complete. A ticket given up midway (an error) is left as a dead one, for
    /// its successor to pass: unlinked, it would hide the tickets still before it.
    fn drop(&mut self) {
        if self.waiting_on == 0 {
            let _ = fs::remove_file(&self.path);
        }
        let _ = self.node.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A process dying: its flocks go, its node stays linked.
    fn die(ticket: Ticket) {
        ticket.node.unlock().unwrap();
        ticket._queued.unlock().unwrap();
        std::mem::forget(ticket);
    }

    #[test]
    fn tickets_are_served_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let first = Ticket::take(dir.path()).unwrap();
        let (tx, rx) = mpsc::channel();
        let mut waiters = Vec::new();
        for i in 0..5 {
            let queue = dir.path().to_path_buf();
            let tx = tx.clone();
            waiters.push(std::thread::spawn(move || {
                let ticket = Ticket::take(&queue).unwrap();
                tx.send(i).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                drop(ticket);
            }));
            // Each waiter has its ticket before the next one asks for one.
            while fs::read_dir(dir.path()).unwrap().count() < i + 3 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(first);
        for w in waiters {
            w.join().unwrap();
        }
        let order: Vec<usize> = rx.try_iter().collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            [std::ffi::OsString::from(TAIL)],
            "finished nodes are removed"
        );
    }

    #[test]
    fn a_dead_predecessor_does_not_block_and_order_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        // Ticket 0 finishes; ticket 1's process "dies": its node stays linked when its
        // flock goes away, as after a crash.
        drop(Ticket::take(dir.path()).unwrap());
        let dead = Ticket::take(dir.path()).unwrap();
        let dead_path = dead.path.clone();
        die(dead);
        let next = Ticket::take(dir.path()).unwrap();
        assert!(!dead_path.exists(), "the dead node was cleared away");
        drop(next);
    }

    #[test]
    fn a_non_blocking_pass_resumes_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let holder = Ticket::take(dir.path()).unwrap(); // ticket 0, live
        let dead = Ticket::join(dir.path(), true).unwrap().unwrap(); // ticket 1
        let dead_path = dead.path.clone();
        die(dead);
        let mut me = Ticket::join(dir.path(), false).unwrap().unwrap(); // ticket 2
        assert!(!me.wait(false).unwrap(), "ticket 0 is still live");
        assert!(
            dead_path.exists(),
            "the dead ticket 1 is cleared only once the walk is complete"
        );
        // The blocking wait goes on from ticket 0: it must not take ticket 1's
        // missing node for "everything before has finished".
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            me.wait(true).unwrap();
            tx.send(()).unwrap();
            me
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "granted while ticket 0 was held"
        );
        drop(holder);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("granted once ticket 0 finished");
        assert!(!dead_path.exists(), "the dead ticket 1 was cleared");
        drop(waiter.join().unwrap());
    }

    /// Queue nodes left in `dir`, by ticket.
    fn nodes(dir: &Path) -> Vec<u64> {
        let mut nodes: Vec<u64> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_string_lossy().parse().ok())
            .collect();
        nodes.sort();
        nodes
    }

    #[test]
    fn a_waiter_that_dies_midway_strands_nothing() {
        // A burst of calls timing out on the lock, in an order that strands a node
        // unless each dead waiter's place is repaired: 1 waits on the lock, 2 dies
        // queued, 3 passes 2 and dies waiting on 1, then 1 dies too.
        let dir = tempfile::tempdir().unwrap();
        drop(Ticket::take(dir.path()).unwrap()); // 0, finished
        let one = Ticket::take(dir.path()).unwrap();
        die(Ticket::join(dir.path(), true).unwrap().unwrap()); // 2
        let mut three = Ticket::join(dir.path(), true).unwrap().unwrap();
        assert!(!three.wait(false).unwrap(), "1 is live");
        die(three);
        die(one);
        assert_eq!(nodes(dir.path()), [1, 2, 3]);
        // Had 3 unlinked 2 on its way, the next walk would stop at that gap and
        // leave 1 behind it for good.
        let four = Ticket::take(dir.path()).unwrap();
        assert_eq!(nodes(dir.path()), [4]);
        drop(four);
        assert!(nodes(dir.path()).is_empty());
    }

    #[test]
    fn nobody_is_queued_but_while_a_live_ticket_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("queue");
        assert!(nobody_queued(&queue).unwrap(), "no queue yet");
        let ticket = Ticket::take(&queue).unwrap();
        assert!(!nobody_queued(&queue).unwrap(), "a ticket is held");
        drop(ticket);
        assert!(nobody_queued(&queue).unwrap(), "the ticket was dropped");
        die(Ticket::take(&queue).unwrap());
        assert!(nobody_queued(&queue).unwrap(), "its process died");
        // The dead node is passed and cleared by the next call that queues.
        drop(Ticket::take(&queue).unwrap());
        assert!(nodes(&queue).is_empty());
    }

    #[test]
    fn a_call_killed_between_its_node_and_the_counter_leaves_no_gap() {
        let dir = tempfile::tempdir().unwrap();
        drop(Ticket::take(dir.path()).unwrap()); // counter now 1
        // Killed after creating node 1, before moving the counter on.
        fs::write(node_path(dir.path(), 1), "").unwrap();
        let next = Ticket::take(dir.path()).unwrap();
        assert!(
            next.path.ends_with("00000000000000000001"),
            "{:?}",
            next.path
        );
        drop(next);
        assert!(nodes(dir.path()).is_empty());
        assert_eq!(
            fs::read_to_string(dir.path().join(TAIL)).unwrap(),
            "00000000000000000002"
        );
    }

    #[test]
    fn the_counter_is_rewritten_in_place_and_reads_older_forms() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(TAIL), "13").unwrap(); // as v0.1 wrote it
        let ticket = Ticket::take(dir.path()).unwrap();
        assert!(ticket.path.ends_with("00000000000000000013"));
        drop(ticket);
        let tail = fs::read_to_string(dir.path().join(TAIL)).unwrap();
        assert_eq!(tail, "00000000000000000014");
        // Damaged: the next ticket comes after the nodes still queued.
        let _queued = Ticket::take(dir.path()).unwrap(); // 14
        fs::write(dir.path().join(TAIL), "garbage").unwrap();
        let next = Ticket::join(dir.path(), true).unwrap().unwrap();
        assert!(
            next.path.ends_with("00000000000000000015"),
            "{:?}",
            next.path
        );
    }
}
