//! ckpt-veloc (skeleton).
