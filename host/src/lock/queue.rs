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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file holding the next ticket number; flocked briefly to take a ticket.
const TAIL: &str = "tail";

/// A place in the queue: holds its node's flock until dropped.
#[derive(Debug)]
pub struct Ticket {
    node: File,
    path: PathBuf,
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

impl Ticket {
    /// Joins the queue in `dir`: takes the next ticket and locks its node.
    pub fn take(dir: &Path) -> io::Result<Ticket> {
        fs::create_dir_all(dir)?;
        let mut tail = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(TAIL))?;
        tail.lock()?;
        let mut text = String::new();
        tail.read_to_string(&mut text)?;
        let ticket = match text.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => next_ticket_from_nodes(dir)?,
        };
        tail.seek(SeekFrom::Start(0))?;
        tail.set_len(0)?;
        tail.write_all((ticket + 1).to_string().as_bytes())?;
        let path = node_path(dir, ticket);
        let node = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // A new file: nobody else can hold its lock yet, so this does not block.
        node.lock()?;
        drop(tail);
        let me = Ticket { node, path };
        me.wait_for_predecessors(dir, ticket)?;
        Ok(me)
    }

    /// Blocks until every earlier ticket has finished (or its process died).
    fn wait_for_predecessors(&self, dir: &Path, ticket: u64) -> io::Result<()> {
        let mut earlier = ticket;
        while earlier > 0 {
            earlier -= 1;
            let path = node_path(dir, earlier);
            let node = match File::open(&path) {
                Ok(node) => node,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            node.lock()?;
            if node.metadata()?.nlink() == 0 {
                return Ok(()); // it finished and unlinked itself
            }
            // Its process died while queued or holding the lock: clear it away and
            // keep the order by waiting for the ticket before it.
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Drop for Ticket {
    /// Unlinks the node before its flock is released (when `node` closes), which tells
    /// the successor this ticket finished rather than died.
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = self.node.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

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
        dead.node.unlock().unwrap();
        std::mem::forget(dead);
        let next = Ticket::take(dir.path()).unwrap();
        assert!(!dead_path.exists(), "the dead node was cleared away");
        drop(next);
    }
}
