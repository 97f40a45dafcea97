pub mod shapes;
mod util;

pub fn version() -> u32 { 1 }
