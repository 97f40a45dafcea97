use super::Square;

pub struct Circle { pub r: f64 }
