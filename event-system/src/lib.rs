//! event-system (skeleton).
