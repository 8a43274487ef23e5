//! Lifecycle-policy research on the simulator: reproductions of published models
//! ([`huang`], [`age`]) that show the simulation's numbers can be trusted, and the
//! policy comparison (`compare`) that runs recovery policies from files against
//! workloads from files over paired seeds.

pub mod age;
pub mod clock;
pub mod huang;
pub mod reproduce;
pub mod stats;
