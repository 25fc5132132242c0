//! Helpers for the cross-crate integration tests.
