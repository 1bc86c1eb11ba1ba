//! What CNI STATUS reports of the node's network (`cni:ipam/readiness`, 0.2.5). The
//! host answers STATUS itself, without the lock and without the store, from what the
//! node's last calls recorded: a module says there what makes some ADDs fail while the
//! node stays ready (a pool exhausted, a pool past its warning threshold), and clears
//! it once it no longer holds. STATUS never fails for it unless the network opts in to
//! `strictStatus`; it is logged and exported by `wasm-ipam stats --prometheus`.
//!
//! ```
//! use wasm_ipam_guest::{Error, readiness};
//!
//! readiness::degraded(&[Error::new(140, "range set 0 (10.1.0.0/30) has no address left")]);
//! assert_eq!(readiness::last_reported().unwrap()[0].code, 140);
//! readiness::degraded(&[]); // cleared
//! assert!(readiness::last_reported().unwrap().is_empty());
//! ```

use crate::Error;

/// Replaces what this node's network reports as degraded, once the call ends
/// (whatever its outcome); an empty list clears it. A call that does not call it
/// leaves the last report as it was.
pub fn degraded(conditions: &[Error]) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::cni::ipam::readiness::degraded(conditions);
    #[cfg(not(target_arch = "wasm32"))]
    REPORTED.with(|r| *r.borrow_mut() = Some(conditions.to_vec()));
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static REPORTED: std::cell::RefCell<Option<Vec<Error>>> = const { std::cell::RefCell::new(None) };
}

/// In a native test: what the last [`degraded`] on this thread reported, if any; and
/// forgets it, so the next check sees only what comes after.
#[cfg(not(target_arch = "wasm32"))]
pub fn last_reported() -> Option<Vec<Error>> {
    REPORTED.with(|r| r.borrow_mut().take())
}
