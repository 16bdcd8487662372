//! The gRPC face's statuses: the mapping itself lives beside the error type (Rust's orphan rule),
//! in `tapedeck_core::error`; the face names it here.
#[cfg(test)]
pub(crate) use tapedeck_core::error::code;
pub use tapedeck_core::error::{REASON_METADATA, REDIRECT_METADATA};
