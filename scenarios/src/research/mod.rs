//! Lifecycle-policy research on the simulator: reproductions of published models
//! ([`huang`], [`age`]) that show the simulation's numbers can be trusted, and the
//! policy comparison (`compare`) that runs recovery policies from files against
//! workloads from files over paired seeds.

pub mod age;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod cycles;
pub mod dohi;
pub mod error;
pub mod findings;
pub mod findings_tables;
pub mod garg;
pub mod heatmap;
pub mod huang;
pub mod jitter;
pub mod memory;
pub mod metrics;
pub mod output;
pub mod pdf;
pub mod plots;
pub mod policy;
pub mod provenance;
pub mod published;
pub mod ranking;
pub mod report;
pub mod reproduce;
pub mod reproduce_rejuvenation;
pub mod stats;
pub mod sweep;
pub mod ttt_plot;
pub mod verdict;
pub mod verdict_report;
pub mod workload;
