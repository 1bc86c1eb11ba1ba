/// Asking each network's module what `list` and `stats` show.
pub mod inventory;
pub mod list;
/// The log read from its end.
pub mod log_tail;
/// `stats`' table and Prometheus text, and the call timings from the log.
pub mod metrics;
/// `stats --prometheus`.
pub mod prometheus;
pub mod stats;
/// Aligned text tables.
pub mod table;
