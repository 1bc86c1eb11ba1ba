//! `cni:ipam@0.1.0`'s imports, forwarded to 0.2.0's implementations (the interfaces
//! did not change but for the store's new `read-only` refusal, which 0.1.0 cannot
//! name: a 0.1.0 module is never called read-only, and would see `too-large` if it were).

use super::{GuestLog, GuestStore};
use crate::lock::deadline::Deadline;
use crate::module::bindings::store::StoreError;
use crate::module::bindings::v0_1::{deadline, log, store};
use crate::module::bindings::{deadline as current_deadline, log as current_log};

fn store_error(e: StoreError) -> store::StoreError {
    match e {
        StoreError::TooLarge(why) | StoreError::ReadOnly(why) => store::StoreError::TooLarge(why),
    }
}

impl store::Host for GuestStore {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        <Self as crate::module::bindings::store::Host>::get(self, key)
    }
    fn put(
        &mut self,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), store::StoreError>> {
        Ok(
            <Self as crate::module::bindings::store::Host>::put(self, key, value)?
                .map_err(store_error),
        )
    }
    fn delete(&mut self, key: String) -> wasmtime::Result<Result<bool, store::StoreError>> {
        Ok(<Self as crate::module::bindings::store::Host>::delete(self, key)?.map_err(store_error))
    }
    fn list_prefix(&mut self, prefix: String) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        <Self as crate::module::bindings::store::Host>::list_prefix(self, prefix)
    }
}

impl deadline::Host for Deadline {
    fn budget(&mut self) -> wasmtime::Result<u64> {
        current_deadline::Host::budget(self)
    }
    fn remaining(&mut self) -> wasmtime::Result<u64> {
        current_deadline::Host::remaining(self)
    }
    fn expired(&mut self) -> wasmtime::Result<bool> {
        current_deadline::Host::expired(self)
    }
}

impl log::Host for GuestLog {
    fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            log::Level::Trace => current_log::Level::Trace,
            log::Level::Debug => current_log::Level::Debug,
            log::Level::Info => current_log::Level::Info,
            log::Level::Warn => current_log::Level::Warn,
            log::Level::Error => current_log::Level::Error,
        };
        current_log::Host::log(self, level, message)
    }
}
