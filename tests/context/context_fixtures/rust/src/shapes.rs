pub mod circle;
use crate::util::{clamp, Range as R};
use super::version;

/// A square.
pub struct Square { pub side: f64 }

impl Square {
    pub fn area(&self) -> f64 { self.side * self.side }
}
