//! The regression corpus: seeds that once failed, each pinned to the path it caught.
//!
//! A seed alone stops meaning anything once a builder draws differently, so an entry
//! also names the coverage labels its run must reach — the facts of the failing path
//! (a READY in flight when the parent ended a worker, a crash that hit a reload
//! candidate, …) — and keeps the plan digest the seed drew when it was pinned. The gate
//! replays every entry, holds it to the predicates on both platforms, and fails with
//! the entry's name and how to re-derive it when the run no longer reaches a pinned fact.
//!
//! The format, one field a line (`#` starts a comment line):
//!
//! ```text
//! [scenario platform seed]        or  [scenario platform seed swarm]
//! caught:   what the seed caught (text)
//! recorded: the commit that added the entry
//! plan:     the plan digest when it was pinned (a record for re-deriving; not compared)
//! reaches:  a coverage label the run must reach (one per line, at least one)
//! ```

use servery_core::supervisor::Platform;
use servery_sim::{Fault, SimCommand, SimSpec, labels};

use crate::{COVERAGE_GOALS, Mode, RunResult, Scenario, find, plan_in, platform_by_name, run_in};

/// Where the corpus lives, relative to the workspace.
pub const PATH: &str = "scenarios/regressions.txt";

/// One pinned seed.
#[derive(Debug, Clone)]
pub struct Entry {
    pub scenario: &'static Scenario,
    pub platform: Platform,
    pub seed: u64,
    pub mode: Mode,
    pub caught: String,
    pub recorded: Option<String>,
    pub plan: Option<String>,
    pub reaches: Vec<String>,
    /// Line of the header in the corpus file.
    pub line: usize,
}

impl Entry {
    /// `[scenario platform seed]`, with ` swarm` in swarm mode.
    pub fn header(&self) -> String {
        header(self.scenario.name, self.platform, self.seed, self.mode)
    }

    /// Replay the entry: the predicates must hold on both platforms, and the run on the
    /// recorded platform must reach every pinned fact.
    pub fn check(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        let pin = pin(self.scenario, self.seed, self.platform, self.mode);
        let elsewhere = run_in(
            self.scenario,
            self.seed,
            other(self.platform),
            self.mode,
            false,
        );
        for (platform, result) in [
            (self.platform, &pin.result),
            (other(self.platform), &elsewhere),
        ] {
            if let Err(reason) = &result.verdict {
                problems.push(format!(
                    "the predicates fail on {}: {reason}\n  replay: {}",
                    platform.name(),
                    crate::replay_command_in(self.scenario.name, self.seed, platform, self.mode)
                ));
            }
        }
        let missing: Vec<&String> = self
            .reaches
            .iter()
            .filter(|f| !pin.result.outcome.coverage.contains(f.as_str()))
            .collect();
        if !missing.is_empty() {
            let reached: Vec<&str> = pin.result.outcome.coverage.iter().copied().collect();
            problems.push(format!(
                "it no longer reaches the path it was pinned to: missing {missing:?}\n  \
                 pinned plan: {}\n  plan now:    {}\n  reaches now: {reached:?}\n  \
                 The seed now draws or runs differently. Re-derive the entry:\n    \
                 {}   (what the seed does now)\n    \
                 {}   (seeds that reach the path)\n  \
                 then re-pin it in {PATH} (same seed with new facts only if they are still the \
                 path it caught; otherwise a seed the search finds).",
                self.plan.as_deref().unwrap_or("(none recorded)"),
                pin.digest,
                pin_command(self, None),
                pin_command(self, Some(&missing)),
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{PATH}:{} {} drifted:\n  {}",
                self.line,
                self.header(),
                problems.join("\n  ")
            ))
        }
    }
}

fn other(p: Platform) -> Platform {
    match p {
        Platform::Posix => Platform::Windows,
        Platform::Windows => Platform::Posix,
    }
}

fn header(name: &str, platform: Platform, seed: u64, mode: Mode) -> String {
    format!(
        "[{name} {} {seed}{}]",
        platform.name(),
        if mode == Mode::Swarm { " swarm" } else { "" }
    )
}

fn pin_command(e: &Entry, search: Option<&[&String]>) -> String {
    let mut cmd = format!(
        "cargo run --release -p servery-scenarios -- pin {} --platform {}",
        e.scenario.name,
        e.platform.name()
    );
    if e.mode == Mode::Swarm {
        cmd.push_str(" --swarm");
    }
    match search {
        None => cmd.push_str(&format!(" --seed {}", e.seed)),
        Some(facts) => {
            cmd.push_str(" --search 0..5000");
            for f in facts {
                cmd.push_str(&format!(" --reaches {f:?}"));
            }
        }
    }
    cmd
}

/// A label a pin may name: one the simulator records or a scenario's coverage goal.
pub fn known_label(label: &str) -> bool {
    labels::ALL.contains(&label) || COVERAGE_GOALS.contains(&label)
}

/// Parse the corpus. Every entry needs `caught` and at least one known `reaches` label.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(inner) = line.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| format!("line {n}: a header ends with ']'"))?;
            let parts: Vec<&str> = inner.split_whitespace().collect();
            let (name, platform, seed, mode) = match parts[..] {
                [name, platform, seed] => (name, platform, seed, Mode::Full),
                [name, platform, seed, "swarm"] => (name, platform, seed, Mode::Swarm),
                _ => {
                    return Err(format!(
                        "line {n}: expected [scenario platform seed (swarm)]"
                    ));
                }
            };
            entries.push(Entry {
                scenario: find(name).ok_or_else(|| format!("line {n}: unknown scenario {name}"))?,
                platform: platform_by_name(platform)
                    .ok_or_else(|| format!("line {n}: unknown platform {platform}"))?,
                seed: seed
                    .parse()
                    .map_err(|e| format!("line {n}: seed {seed}: {e}"))?,
                mode,
                caught: String::new(),
                recorded: None,
                plan: None,
                reaches: Vec::new(),
                line: n,
            });
            continue;
        }
        let entry = entries
            .last_mut()
            .ok_or_else(|| format!("line {n}: a field before the first [header]"))?;
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| format!("line {n}: expected `field: value`"))?;
        let value = value.trim().to_owned();
        match key.trim() {
            "caught" => entry.caught = value,
            "recorded" => entry.recorded = Some(value),
            "plan" => entry.plan = Some(value),
            "reaches" if known_label(&value) => entry.reaches.push(value),
            "reaches" => {
                return Err(format!(
                    "line {n}: {value:?} is no coverage label the simulator or a scenario \
                     records (see io-sim/src/labels.rs and COVERAGE_GOALS)"
                ));
            }
            other => return Err(format!("line {n}: unknown field {other:?}")),
        }
    }
    for e in &entries {
        if e.caught.is_empty() {
            return Err(format!("{} (line {}): no `caught:`", e.header(), e.line));
        }
        if e.reaches.is_empty() {
            return Err(format!(
                "{} (line {}): no `reaches:` — a seed without a pinned path pins nothing",
                e.header(),
                e.line
            ));
        }
    }
    Ok(entries)
}

/// What one seed exercises: its run, and its plan digest.
#[derive(Debug)]
pub struct Pin {
    pub result: RunResult,
    pub digest: String,
}

/// Run `scenario` for `seed` and describe what it exercised.
pub fn pin(scenario: &Scenario, seed: u64, platform: Platform, mode: Mode) -> Pin {
    let plan = plan_in(scenario, seed, platform, mode);
    let digest = plan_digest(&plan.spec);
    let result = run_in(scenario, seed, platform, mode, false);
    let digest = with_misbehaving(digest, &result.outcome.misbehaving);
    Pin { result, digest }
}

/// The corpus entry for a pin, every label it reached offered as `reaches:`; keep those
/// of the path the entry guards.
pub fn entry_text(scenario: &Scenario, seed: u64, platform: Platform, mode: Mode) -> String {
    let p = pin(scenario, seed, platform, mode);
    let mut out = format!(
        "{}\ncaught:   <what it caught>\nrecorded: <the commit that adds it>\nplan:     {}\n",
        header(scenario.name, platform, seed, mode),
        p.digest
    );
    if let Err(reason) = &p.result.verdict {
        out.push_str(&format!("# FAILS: {reason}\n"));
    }
    out.push_str("# every label the run reached; keep the facts of the path it caught:\n");
    for label in &p.result.outcome.coverage {
        out.push_str(&format!("reaches:  {label}\n"));
    }
    out
}

/// Seeds in `seeds` whose runs hold and reach every one of `facts`, up to `limit`.
pub fn search(
    scenario: &Scenario,
    platform: Platform,
    mode: Mode,
    seeds: core::ops::Range<u64>,
    facts: &[String],
    limit: usize,
) -> Vec<(u64, String)> {
    let mut found = Vec::new();
    for seed in seeds {
        let result = run_in(scenario, seed, platform, mode, false);
        if result.verdict.is_ok()
            && facts
                .iter()
                .all(|f| result.outcome.coverage.contains(f.as_str()))
        {
            found.push((seed, pin(scenario, seed, platform, mode).digest));
            if found.len() >= limit {
                break;
            }
        }
    }
    found
}

fn ms(d: core::time::Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// A compact, stable description of a plan: workers, load, faults and commands with
/// their times. Behaviours are closures; [`with_misbehaving`] adds the ones a run drew.
pub fn plan_digest(spec: &SimSpec) -> String {
    let mut out = format!("workers={}", spec.config.workers);
    let w = &spec.workload;
    if w.request_rate > 0.0 {
        out.push_str(&format!(" requests={}/s", w.request_rate));
    }
    if w.upload_rate > 0.0 {
        out.push_str(&format!(" uploads={}/s", w.upload_rate));
    }
    if let Some(d) = &w.dav {
        out.push_str(&format!(" dav=clients:{}", d.clients.len()));
        if let Some((rate, until)) = d.client_burst {
            out.push_str(&format!(",burst:{rate}/s-until-{}", ms(until)));
        }
        if d.client_rate > 0.0 {
            out.push_str(&format!(",drawn:{}/s", d.client_rate));
        }
        if d.write_rate > 0.0 {
            out.push_str(&format!(",writes:{}/s", d.write_rate));
        }
        let max_locks = spec.config.broker.max_dav_locks;
        out.push_str(&format!(",max_locks:{max_locks}"));
    }
    if let Some(c) = &w.certs {
        out.push_str(&format!(
            " certs=life:{},outages:{},renew:{}",
            ms(c.lifetime),
            c.outages.len(),
            c.renew_now.len()
        ));
    }
    if !spec.faults.is_empty() {
        let faults: Vec<String> = spec
            .faults
            .iter()
            .map(|(t, f)| match f {
                Fault::StallParent(d)
                | Fault::ShortWrites(d)
                | Fault::ClockJump(d)
                | Fault::DiskFull(d)
                | Fault::RenameFails(d)
                | Fault::FsyncFails(d)
                | Fault::DirSyncFails(d)
                | Fault::AcceptFails { duration: d, .. } => {
                    format!("{}({})@{}", f.kind().name(), ms(*d), ms(*t))
                }
                _ => format!("{}@{}", f.kind().name(), ms(*t)),
            })
            .collect();
        out.push_str(&format!(" faults={}", faults.join(",")));
    }
    if !spec.commands.is_empty() {
        let commands: Vec<String> = spec
            .commands
            .iter()
            .map(|(t, c)| match c {
                SimCommand::Stop => format!("stop@{}", ms(*t)),
                SimCommand::CtlStop => format!("ctl-stop@{}", ms(*t)),
                SimCommand::Recycle => format!("recycle@{}", ms(*t)),
                SimCommand::Status => format!("status@{}", ms(*t)),
                SimCommand::Resize(by) => format!("resize({by:+})@{}", ms(*t)),
                SimCommand::Reload(next) => {
                    format!("reload(workers={})@{}", next.workers, ms(*t))
                }
            })
            .collect();
        out.push_str(&format!(" commands={}", commands.join(",")));
    }
    out
}

/// `digest` with the processes that misbehaved by design: `#spawn-index:kind`.
pub fn with_misbehaving(
    mut digest: String,
    misbehaving: &[(u64, servery_sim::FaultKind)],
) -> String {
    if !misbehaving.is_empty() {
        let list: Vec<String> = misbehaving
            .iter()
            .map(|(i, k)| format!("#{i}:{}", k.name()))
            .collect();
        digest.push_str(&format!(" misbehaving={}", list.join(",")));
    }
    digest
}
