pub mod answers;
pub mod conform;
pub mod inspect;
pub mod new;
pub mod oci;
pub mod precompile;
pub mod try_call;
