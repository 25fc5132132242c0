//! ft-detector (skeleton).
