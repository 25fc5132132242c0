//! task-graph (skeleton).
