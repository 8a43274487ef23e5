//! What one run of a policy under a workload measured, from the simulation's outcome.

use servery_core::supervisor::ExitReason;
use servery_sim::{FaultKind, Injected, Outcome};

use crate::research::workload::{Draw, SERVICE_S, Workload};

/// One run's figures (times in seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics {
    pub seed: u64,
    /// The workload's drawn parameter (outage length, crash delay), if any.
    pub x: Option<f64>,
    /// Requests served over requests offered.
    pub availability: f64,
    /// Requests answered within the workload's `latency_bound_s` of their arrival, over
    /// requests offered.
    pub served_within_bound: f64,
    /// ∫ (N − ready) dt over the run.
    pub capacity_seconds_lost: f64,
    /// From each injected fault to its worker's reaping.
    pub detect_s: Vec<f64>,
    /// Each spell below N ready workers (after the first full house) that ended.
    pub recover_s: Vec<f64>,
    pub restarts: f64,
    pub recycles: f64,
    pub boots: f64,
    pub failed: bool,
    /// From the first fault to the service's failure (runs that failed).
    pub give_up_s: Option<f64>,
    pub peak_processes: f64,
    pub peak_memory_mb: f64,
    /// The most resident memory one worker reported to the supervisor at a heartbeat
    /// (MiB): what an RSS limit acts on. Only with the workload's
    /// `memory_growth_mb_per_request`; `None` otherwise (nothing is reported).
    pub peak_worker_rss_mb: Option<f64>,
    /// Work including boots over useful work.
    pub amplification: f64,
    /// Ready workers over time, for the plots: (s, ready).
    pub ready: Vec<(f64, u32)>,
    /// When each boot after the initial generation began (s): restarts and recycles.
    pub boot_times: Vec<f64>,
}

fn hung(reason: Option<ExitReason>) -> bool {
    matches!(
        reason,
        Some(ExitReason::HealthFailure | ExitReason::DrainHang)
    )
}

fn recycle(reason: Option<ExitReason>) -> bool {
    reason.is_some_and(ExitReason::is_recycle)
}

/// `refused`: when a start limit the tool applies (systemd's) refused a start, ending
/// the service `failed`; the run `o` was stopped just before it, and its clients count
/// as for a failed service from the parent's exit on.
pub fn measure(
    w: &Workload,
    draw: &Draw,
    seed: u64,
    o: &Outcome,
    refused: Option<f64>,
) -> RunMetrics {
    let end = w.duration_s;
    let n = w.workers as u32;
    let ready: Vec<(f64, u32)> = o
        .ready_changes
        .iter()
        .map(|&(ms, r)| (ms as f64 / 1000.0, r))
        .take_while(|(t, _)| *t <= end)
        .collect();
    // Capacity lost and the spells below N.
    let (mut lost, mut t0, mut cur) = (0.0, 0.0, 0u32);
    let (mut full_once, mut dip_from, mut recover_s) = (false, None::<f64>, Vec::new());
    for &(t, r) in &ready {
        lost += f64::from(n.saturating_sub(cur)) * (t - t0);
        (t0, cur) = (t, r);
        if r >= n {
            if let Some(from) = dip_from.take() {
                recover_s.push(t - from);
            }
            full_once = true;
        } else if full_once && dip_from.is_none() {
            dip_from = Some(t);
        }
    }
    lost += f64::from(n.saturating_sub(cur)) * (end - t0).max(0.0);
    let detect_s = o
        .injected
        .iter()
        .filter_map(|i| {
            let w = i.worker?;
            let exit = o.exits.iter().find(|e| e.worker == w)?;
            // A pause is detected only when its worker is ended as hung for it: one that
            // ended first was rightly let be, and its worker's exit (maybe for a later
            // pause) is another story.
            let later_pause = |j: &&Injected| {
                j.kind == FaultKind::PauseWorker
                    && j.worker == Some(w)
                    && i.at_ms < j.at_ms
                    && j.at_ms <= exit.at_ms
            };
            if i.kind == FaultKind::PauseWorker
                && (!hung(exit.reason) || o.injected.iter().any(|j| later_pause(&j)))
            {
                return None;
            }
            Some((exit.at_ms.saturating_sub(i.at_ms)) as f64 / 1000.0)
        })
        .collect();
    let recycles = o.exits.iter().filter(|e| recycle(e.reason)).count() as f64;
    let boots = o.spawns as f64;
    let restarts = (boots - f64::from(n) - recycles).max(0.0);
    let failed_at = refused.or(o
        .failure_at_ms
        .map(|ms| ms as f64 / 1000.0)
        .filter(|t| *t <= end));
    let r = &o.requests;
    // Clients keep coming after a failed service exits; the simulation stops sending
    // them then, so the rest of the run's offered load is added at the workload's rate.
    let gone_s = o.parent_gone_ms as f64 / 1000.0;
    let unsent = if failed_at.is_some() && gone_s < end {
        w.offered_between(gone_s, end)
    } else {
        0.0
    };
    let offered =
        (r.ok + r.failed_fault + r.failed_forced + r.refused + r.stranded) as f64 + unsent;
    let bound_us = (w.latency_bound_s * 1e6) as u64;
    let in_time = o
        .request_latency_us
        .iter()
        .filter(|&&us| us <= bound_us)
        .count() as f64;
    let (availability, served_within_bound) = if offered == 0.0 {
        (1.0, 1.0)
    } else {
        (r.ok as f64 / offered, in_time / offered)
    };
    let useful = r.ok as f64 * SERVICE_S;
    let amplification = if useful > 0.0 {
        (useful + boots * w.boot_cost_s) / useful
    } else {
        f64::NAN
    };
    RunMetrics {
        seed,
        x: draw.x,
        availability,
        served_within_bound,
        capacity_seconds_lost: lost,
        detect_s,
        recover_s,
        restarts,
        recycles,
        boots,
        failed: failed_at.is_some(),
        give_up_s: failed_at.map(|t| (t - draw.onset_s).max(0.0)),
        peak_processes: o.max_live_processes as f64,
        peak_memory_mb: peak_memory(w, o),
        peak_worker_rss_mb: (w.memory_growth_mb_per_request > 0.0).then(|| {
            o.memory_peaks.values().copied().max().unwrap_or(0) as f64 / (1024.0 * 1024.0)
        }),
        amplification,
        ready,
        boot_times: o
            .spawn_times_ms
            .iter()
            .skip(n as usize)
            .map(|&ms| ms as f64 / 1000.0)
            .filter(|t| *t <= end)
            .collect(),
    }
}

/// The most modelled memory live at once. Worker ids are handed out in spawn order from
/// 1, so a worker's spawn time is `spawn_times_ms[id - 1]`; memory only grows between
/// exits, so the peak is just before an exit or at the end.
fn peak_memory(w: &Workload, o: &Outcome) -> f64 {
    let end_ms = (w.duration_s * 1000.0) as u64;
    let exit_of = |id: u64| o.exits.iter().find(|e| e.worker == id).map(|e| e.at_ms);
    let lives: Vec<(u64, u64)> = o
        .spawn_times_ms
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, exit_of(i as u64 + 1).unwrap_or(end_ms).min(end_ms)))
        .filter(|(s, _)| *s <= end_ms)
        .collect();
    let at = |t: u64| -> f64 {
        lives
            .iter()
            .filter(|(s, e)| *s <= t && t <= *e)
            .map(|(s, _)| w.memory_base_mb + w.memory_growth_mb_per_s * (t - s) as f64 / 1000.0)
            .sum()
    };
    lives
        .iter()
        .map(|(_, e)| *e)
        .chain([end_ms])
        .map(at)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_sim::WorkerExit;

    #[test]
    fn capacity_lost_and_recovery_spells_follow_the_ready_count() {
        let text = "name = \"w\"\nfault_class = \"transient\"\nworkers = 4\nduration_s = 60.0\nmemory_growth_mb_per_s = 1.0\n[faults]\nkind = \"steady\"\n";
        let w = crate::research::workload::from_text(std::path::Path::new("w"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let draw = w.draw(0);
        let o = Outcome {
            // Four ready at 0.1 s; one lost at 30 s for 0.5 s; two lost at 40 s, one back
            // at 41 s, the other never.
            ready_changes: vec![(100, 4), (30_000, 3), (30_500, 4), (40_000, 2), (41_000, 3)],
            spawns: 7,
            spawn_times_ms: vec![0, 0, 0, 0, 30_200, 40_500, 40_600],
            exits: vec![WorkerExit {
                worker: 1,
                reason: Some(ExitReason::UnexpectedExit),
                at_ms: 30_000,
            }],
            ..Outcome::default()
        };
        let m = measure(&w, &draw, 0, &o, None);
        let lost = 4.0 * 0.1 + 0.5 + 2.0 * 1.0 + 1.0 * 19.0;
        assert!(
            (m.capacity_seconds_lost - lost).abs() < 1e-9,
            "{}",
            m.capacity_seconds_lost
        );
        assert_eq!(m.recover_s, vec![0.5], "the open spell is not a recovery");
        assert_eq!((m.boots, m.restarts, m.recycles), (7.0, 3.0, 0.0));
        assert!(!m.failed);
        // Worker 1 lived 30 s (80 MB at its end); the other three grow to 110 MB at 60 s,
        // with the three later spawns: 3 x 110 + 79.8 + 69.5 + 69.4.
        let peak = 3.0 * 110.0 + 79.8 + 69.5 + 69.4;
        assert!(
            (m.peak_memory_mb - peak).abs() < 1e-6,
            "{}",
            m.peak_memory_mb
        );
    }

    #[test]
    fn served_within_bound_counts_answers_no_slower_than_the_bound_over_all_offered() {
        let text = "name = \"w\"\nfault_class = \"none\"\nduration_s = 60.0\nlatency_bound_s = 0.5\n[faults]\nkind = \"steady\"\n";
        let w = crate::research::workload::from_text(std::path::Path::new("w"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let o = Outcome {
            requests: servery_sim::RequestStats {
                ok: 4,
                failed_fault: 1,
                ..Default::default()
            },
            // Two answered within 0.5 s (the bound itself counts), two late.
            request_latency_us: vec![3_000, 500_000, 500_001, 30_000_000],
            ..Outcome::default()
        };
        let m = measure(&w, &w.draw(0), 0, &o, None);
        assert!((m.availability - 0.8).abs() < 1e-12, "{}", m.availability);
        assert!(
            (m.served_within_bound - 0.4).abs() < 1e-12,
            "{}",
            m.served_within_bound
        );
    }
}
