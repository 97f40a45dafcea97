/// Clamps a value.
pub fn clamp(x: f64, lo: f64, hi: f64) -> f64 { x.max(lo).min(hi) }

pub struct Range { pub lo: f64, pub hi: f64 }
