//! scheduler (skeleton).
