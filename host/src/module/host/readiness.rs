//! `cni:ipam/readiness` (0.2.5): what the module says makes some ADDs fail while the
//! node stays ready. Kept until the call ends, when the pipeline records it for CNI
//! STATUS ([`crate::health`]); each report replaces the one before it in the call.

use crate::health::Condition;
use crate::limits::{MAX_DEGRADED_CONDITIONS, MAX_ERROR_MSG_BYTES, truncated};
use crate::module::answer::module_error;
use crate::module::bindings::readiness::Host;
use crate::module::bindings::types;

#[derive(Default)]
pub struct GuestReadiness {
    reported: Option<Vec<Condition>>,
}

impl GuestReadiness {
    /// What the module reported last in this instance, if it reported.
    pub fn take(&mut self) -> Option<Vec<Condition>> {
        self.reported.take()
    }
}

impl Host for GuestReadiness {
    /// Codes a module may not use become 107, as in its errors; text is cut to an
    /// error's bounds, and the list to [`MAX_DEGRADED_CONDITIONS`], the rest counted.
    fn degraded(&mut self, conditions: Vec<types::Error>) -> wasmtime::Result<()> {
        let total = conditions.len();
        let mut kept: Vec<Condition> = conditions
            .into_iter()
            .take(MAX_DEGRADED_CONDITIONS)
            .map(|e| Condition::of(&module_error(e)))
            .collect();
        if total > MAX_DEGRADED_CONDITIONS {
            let more = total - MAX_DEGRADED_CONDITIONS;
            if let Some(last) = kept.last_mut() {
                let msg = format!("{} (and {more} more condition(s))", last.msg);
                last.msg = truncated(&msg, MAX_ERROR_MSG_BYTES).into_owned();
            }
        }
        self.reported = Some(kept);
        Ok(())
    }
}
