//! plugin (skeleton).
