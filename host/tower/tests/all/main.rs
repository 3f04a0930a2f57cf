//! capgate-tower's integration tests, one binary: the example shop driven over real HTTP
//! (`example`) and the gate's own declarations and edges (`gate`).

mod common;
mod example;
mod gate;
