//! What a FIFO lock would have given the same calls: a single server that serves the
//! measured arrivals in arrival order, each for its measured hold time. flock(2) wakes
//! waiters in no particular order, so comparing its worst wait with this one shows how
//! much of the tail is the lock's unfairness rather than the load itself.

use crate::stats::Samples;

/// One call as the simulation sees it, in ms on a common clock.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub arrival_ms: f64,
    pub hold_ms: f64,
}

/// The wait of each job (in arrival order) under a FIFO server that is never idle
/// while a job waits and hands over with no gap.
pub fn waits(jobs: &[Job]) -> Samples {
    let mut jobs = jobs.to_vec();
    jobs.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
    let mut free_at = f64::NEG_INFINITY;
    jobs.iter()
        .map(|job| {
            let start = free_at.max(job.arrival_ms);
            free_at = start + job.hold_ms;
            start - job.arrival_ms
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_builds_and_drains_in_order() {
        let job = |arrival_ms, hold_ms| Job {
            arrival_ms,
            hold_ms,
        };
        // Three arrive together, each holds 10: waits 0, 10, 20; a late one waits 0.
        let w = waits(&[
            job(0.0, 10.0),
            job(0.0, 10.0),
            job(0.0, 10.0),
            job(100.0, 5.0),
        ]);
        assert_eq!(w.max(), 20.0);
        assert_eq!(w.percentile(0.25), 0.0);
        assert_eq!(w.len(), 4);
    }
}
