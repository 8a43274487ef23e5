//! Other servers' recovery policies in their own option names, mapped onto servery's
//! `[recovery]` fields so that servery's supervisor runs them (decision 0069).
//!
//! A policy file may carry one of `[gunicorn]`, `[uvicorn]`, `[granian]` or `[systemd]`
//! beside `[recovery]`: the section sets the recovery fields its server decides, and a
//! field set both there and in `[recovery]` is refused (one setting, one place). What
//! servery's supervisor cannot do itself is named here and either applied by the tool on
//! the supervisor's own run (systemd's fixed start-limit window, [`StartLimit`]) or
//! refused with the reason (jittered restart delays: servery's backoff has no jitter).

use servery_core::config::RawRecovery;

/// The largest restart limit the configuration accepts: "never give up".
pub const NO_LIMIT: i64 = 1_000_000;

/// gunicorn's arbiter: `max_requests` + `randint(0, max_requests_jitter)` requests a
/// worker (drawn once per worker, inclusive at both ends), `timeout` of silence before
/// the worker is killed, `graceful_timeout` to finish its requests.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Gunicorn {
    /// 0: no request recycling (gunicorn's default).
    #[serde(default)]
    pub max_requests: i64,
    #[serde(default)]
    pub max_requests_jitter: i64,
    #[serde(default = "thirty")]
    pub timeout_s: f64,
    #[serde(default = "thirty")]
    pub graceful_timeout_s: f64,
}

/// uvicorn's multiprocess supervisor (0.41+): `limit_max_requests` +
/// `randint(0, limit_max_requests_jitter)`; every 0.5 s it pings each worker and kills
/// one that does not answer within `timeout_worker_healthcheck` (SIGKILL, no grace),
/// then starts a replacement at once, forever.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Uvicorn {
    /// 0: none (uvicorn's `None`).
    #[serde(default)]
    pub limit_max_requests: i64,
    #[serde(default)]
    pub limit_max_requests_jitter: i64,
    #[serde(default = "five")]
    pub timeout_worker_healthcheck_s: f64,
}

/// uvicorn's supervisor loop: `should_exit.wait(0.5)` between health checks.
pub const UVICORN_CHECK_PERIOD_S: f64 = 0.5;

/// granian: `workers_lifetime` (seconds, at least 60; no jitter: every worker born
/// together is respawned at the same tick) and `workers_max_rss` (MiB).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Granian {
    /// 0: off (granian's `None`).
    #[serde(default)]
    pub workers_lifetime_s: f64,
    /// 0: off.
    #[serde(default)]
    pub workers_max_rss_mib: i64,
}

/// granian refuses a lifetime under a minute (`ConfigurationError('workers_lifetime')`).
pub const GRANIAN_MIN_LIFETIME_S: f64 = 60.0;

/// systemd's start limit: at most `start_limit_burst` starts in a window that opens at
/// the first start after the previous window's `start_limit_interval_s` ran out (a fixed
/// window, not a sliding one); the start past the burst is refused and the unit ends
/// `failed`. `restart_s` is `RestartSec=`, a fixed delay.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Systemd {
    #[serde(default = "ten")]
    pub start_limit_interval_s: f64,
    #[serde(default = "five_starts")]
    pub start_limit_burst: u32,
    #[serde(default = "tenth")]
    pub restart_s: f64,
}

fn thirty() -> f64 {
    30.0
}
fn five() -> f64 {
    5.0
}
fn ten() -> f64 {
    10.0
}
fn tenth() -> f64 {
    0.1
}
fn five_starts() -> u32 {
    5
}

/// The published server a policy file names, with its options.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Published {
    Gunicorn(Gunicorn),
    Uvicorn(Uvicorn),
    Granian(Granian),
    Systemd(Systemd),
}

/// servery's `(max_requests_per_worker, max_requests_jitter)` that draw a worker's
/// request limit uniformly from `max ..= max + jitter`, as gunicorn's and uvicorn's
/// `max + randint(0, jitter)` do.
///
/// servery draws `ceil(M · (1 − j·u))` with `u` uniform in [0, 1): with `M = max + jitter`
/// and `j = (jitter + 1) / M` that is `ceil(M − (jitter + 1)·u)`, each of the `jitter + 1`
/// integers in `(max − 1, M]` with probability `1 / (jitter + 1)`.
pub fn request_limit(max: i64, jitter: i64) -> (i64, f64) {
    if max <= 0 {
        return (0, 0.0);
    }
    if jitter <= 0 {
        return (max, 0.0);
    }
    let top = max + jitter;
    (top, (jitter + 1) as f64 / top as f64)
}

/// One field a section sets, by its `[recovery]` name.
type Set = (&'static str, fn(&mut RawRecovery, f64));

impl Published {
    pub fn server(&self) -> &'static str {
        match self {
            Published::Gunicorn(_) => "gunicorn",
            Published::Uvicorn(_) => "uvicorn",
            Published::Granian(_) => "granian",
            Published::Systemd(_) => "systemd",
        }
    }

    /// The section's own rules (servery's are checked after the mapping): a field and
    /// what is wrong with it.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad =
            |field: &str, rule: &str| Err((format!("{}.{field}", self.server()), rule.into()));
        let requests = |max: i64, jitter: i64, names: (&str, &str)| {
            if max < 0 || jitter < 0 {
                return bad(names.0, "must be >= 0 (0: off)");
            }
            if jitter > 0 && max < 2 {
                return bad(
                    names.1,
                    "needs the limit at 2 or more: servery cannot draw a limit as low as 1 with jitter",
                );
            }
            Ok(())
        };
        match self {
            Published::Gunicorn(g) => requests(
                g.max_requests,
                g.max_requests_jitter,
                ("max_requests", "max_requests_jitter"),
            ),
            Published::Uvicorn(u) => {
                requests(
                    u.limit_max_requests,
                    u.limit_max_requests_jitter,
                    ("limit_max_requests", "limit_max_requests_jitter"),
                )?;
                if u.timeout_worker_healthcheck_s.is_nan()
                    || u.timeout_worker_healthcheck_s <= UVICORN_CHECK_PERIOD_S
                {
                    return bad(
                        "timeout_worker_healthcheck_s",
                        "must be > 0.5 s, the supervisor's check period",
                    );
                }
                Ok(())
            }
            Published::Granian(g) => {
                let off = g.workers_lifetime_s == 0.0;
                if !off
                    && (g.workers_lifetime_s.is_nan()
                        || g.workers_lifetime_s < GRANIAN_MIN_LIFETIME_S)
                {
                    return bad(
                        "workers_lifetime_s",
                        "must be 0 (off) or at least 60 s, as granian requires",
                    );
                }
                if g.workers_max_rss_mib < 0 {
                    return bad("workers_max_rss_mib", "must be >= 0 (0: off)");
                }
                Ok(())
            }
            Published::Systemd(s) => {
                if !(s.start_limit_interval_s > 0.0 && s.start_limit_interval_s.is_finite()) {
                    return bad(
                        "start_limit_interval_s",
                        "must be > 0 (systemd's 0 turns the limit off: use a policy without it)",
                    );
                }
                if s.start_limit_burst == 0 {
                    return bad("start_limit_burst", "must be >= 1");
                }
                Ok(())
            }
        }
    }

    /// The `[recovery]` fields this server decides, and their values.
    fn sets(&self) -> Vec<(Set, f64)> {
        let max_requests: Set = ("max_requests_per_worker", |r, v| {
            r.max_requests_per_worker = v as i64;
        });
        let requests_jitter: Set = ("max_requests_jitter", |r, v| r.max_requests_jitter = v);
        let heartbeat_interval: Set = ("heartbeat_interval", |r, v| r.heartbeat_interval = v);
        let heartbeat_timeout: Set = ("heartbeat_timeout", |r, v| r.heartbeat_timeout = v);
        let backoff_initial: Set = ("restart_backoff_initial", |r, v| {
            r.restart_backoff_initial = v;
        });
        let backoff_max: Set = ("restart_backoff_max", |r, v| r.restart_backoff_max = v);
        let limit: Set = ("worker_restart_limit", |r, v| {
            r.worker_restart_limit = v as i64;
        });
        match self {
            Published::Gunicorn(g) => {
                let (max, jitter) = request_limit(g.max_requests, g.max_requests_jitter);
                vec![
                    (max_requests, max as f64),
                    (requests_jitter, jitter),
                    (heartbeat_timeout, g.timeout_s),
                    (
                        ("drain_timeout", |r, v| r.drain_timeout = v),
                        g.graceful_timeout_s,
                    ),
                ]
            }
            Published::Uvicorn(u) => {
                let (max, jitter) =
                    request_limit(u.limit_max_requests, u.limit_max_requests_jitter);
                vec![
                    (max_requests, max as f64),
                    (requests_jitter, jitter),
                    (heartbeat_interval, UVICORN_CHECK_PERIOD_S),
                    (heartbeat_timeout, u.timeout_worker_healthcheck_s),
                    // SIGKILL, no grace.
                    (("force_timeout", |r, v| r.force_timeout = v), 0.0),
                    // A dead worker is replaced at the next check, forever.
                    (backoff_initial, 0.01),
                    (backoff_max, 0.01),
                    (limit, NO_LIMIT as f64),
                ]
            }
            Published::Granian(g) => vec![
                (
                    ("worker_max_age", |r, v| r.worker_max_age = v),
                    g.workers_lifetime_s,
                ),
                (
                    ("worker_max_age_jitter", |r, v| r.worker_max_age_jitter = v),
                    0.0,
                ),
                (
                    ("worker_max_rss", |r, v| r.worker_max_rss = v as i64),
                    (g.workers_max_rss_mib * 1024 * 1024) as f64,
                ),
            ],
            Published::Systemd(s) => vec![
                (backoff_initial, s.restart_s),
                (backoff_max, s.restart_s),
                // servery's own sliding limit is off: the fixed window is applied to the
                // run by the tool ([`StartLimit`]).
                (limit, NO_LIMIT as f64),
            ],
        }
    }

    /// Apply the section to `recovery`. `given` names the fields `[recovery]` set
    /// itself; one of them set here too is an error naming it.
    pub fn apply(&self, recovery: &mut RawRecovery, given: &[String]) -> Result<(), String> {
        for ((field, set), value) in self.sets() {
            if given.iter().any(|g| g == field) {
                return Err(format!(
                    "recovery.{field}: set by [{}] too; give it in one place",
                    self.server()
                ));
            }
            set(recovery, value);
        }
        Ok(())
    }

    /// The start limit the tool applies to the supervisor's run, if any.
    pub fn start_limit(&self) -> Option<StartLimit> {
        match self {
            Published::Systemd(s) => Some(StartLimit {
                interval_s: s.start_limit_interval_s,
                burst: s.start_limit_burst,
            }),
            _ => None,
        }
    }
}

/// systemd's start rate limit (`ratelimit_below()` in systemd's `src/basic/ratelimit.c`):
/// a window opens at a start when none is open or more than `interval_s` has passed since
/// the open one began, and counts that start as its first; a later start in the window is
/// allowed while fewer than `burst` were counted. The window is fixed: it never slides
/// forward with the starts inside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartLimit {
    pub interval_s: f64,
    pub burst: u32,
}

impl StartLimit {
    /// The first refused start of `starts` (seconds, in order), if any.
    pub fn first_refused(&self, starts: &[f64]) -> Option<f64> {
        let mut begin: Option<f64> = None;
        let mut counted = 0u32;
        for &t in starts {
            match begin {
                Some(b) if t - b <= self.interval_s => {
                    if counted >= self.burst {
                        return Some(t);
                    }
                    counted += 1;
                }
                _ => {
                    begin = Some(t);
                    counted = 1;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// servery's draw of a worker's request limit (`Parent::became_ready`, core's
    /// `supervisor/events.rs`), for `u` in [0, 1).
    fn servery_draw(max: i64, jitter: f64, u: f64) -> i64 {
        ((max as f64 * (1.0 - jitter * u)).ceil() as i64).max(1)
    }

    fn draws(max: i64, jitter: i64) -> std::collections::BTreeMap<i64, u32> {
        let (m, j) = request_limit(max, jitter);
        let mut seen = std::collections::BTreeMap::new();
        let steps = 102_000;
        for k in 0..steps {
            *seen
                .entry(servery_draw(m, j, k as f64 / steps as f64))
                .or_insert(0) += 1;
        }
        seen
    }

    /// gunicorn `workers/base.py`: `self.max_requests = cfg.max_requests +
    /// randint(0, cfg.max_requests_jitter)`; `randint` includes both ends. So 1000 with
    /// jitter 50 recycles after 1000 to 1050 requests, each equally likely — never fewer
    /// than 1000 (the old mapping's 950–1000 had the direction wrong).
    #[test]
    fn gunicorn_jitter_adds_zero_to_jitter_requests_each_equally_likely() {
        let seen = draws(1000, 50);
        let values: Vec<i64> = seen.keys().copied().collect();
        assert_eq!(values, (1000..=1050).collect::<Vec<_>>());
        let (lo, hi) = (seen.values().min(), seen.values().max());
        assert!(
            hi.zip(lo).is_some_and(|(h, l)| h - l <= 2),
            "uniform over 51 values: {seen:?}"
        );
        assert_eq!(draws(1000, 0).keys().copied().collect::<Vec<_>>(), [1000]);
        assert_eq!(request_limit(0, 50), (0, 0.0), "0 is off, jitter or not");
    }

    #[test]
    fn a_gunicorn_section_sets_its_fields_and_refuses_a_second_setting() {
        let g = Published::Gunicorn(Gunicorn {
            max_requests: 1000,
            max_requests_jitter: 50,
            timeout_s: 30.0,
            graceful_timeout_s: 20.0,
        });
        let mut r = RawRecovery::default();
        assert_eq!(g.apply(&mut r, &[]), Ok(()));
        assert_eq!(r.max_requests_per_worker, 1050);
        assert!((r.max_requests_jitter - 51.0 / 1050.0).abs() < 1e-12);
        assert_eq!((r.heartbeat_timeout, r.drain_timeout), (30.0, 20.0));
        let twice = g.apply(&mut r, &["max_requests_jitter".into()]);
        assert!(
            twice
                .as_ref()
                .is_err_and(|e| e.contains("recovery.max_requests_jitter")),
            "{twice:?}"
        );
    }

    /// uvicorn 0.41+: the limit is `limit_max_requests + randint(0, jitter)` like
    /// gunicorn's; the supervisor checks every 0.5 s, kills a worker that did not answer
    /// its ping within `timeout_worker_healthcheck` (default 5 s) with SIGKILL, and starts
    /// its replacement at once, never giving up.
    #[test]
    fn uvicorn_maps_its_health_check_to_a_half_second_beat_and_an_immediate_kill() {
        let u = Published::Uvicorn(Uvicorn {
            limit_max_requests: 500,
            limit_max_requests_jitter: 20,
            timeout_worker_healthcheck_s: 5.0,
        });
        let mut r = RawRecovery::default();
        assert_eq!(u.apply(&mut r, &[]), Ok(()));
        assert_eq!(
            (r.heartbeat_interval, r.heartbeat_timeout, r.force_timeout),
            (0.5, 5.0, 0.0)
        );
        assert_eq!(r.worker_restart_limit, NO_LIMIT);
        assert_eq!(
            draws(500, 20).keys().copied().collect::<Vec<_>>(),
            (500..=520).collect::<Vec<_>>()
        );
        let slow = Published::Uvicorn(Uvicorn {
            limit_max_requests: 0,
            limit_max_requests_jitter: 0,
            timeout_worker_healthcheck_s: 0.5,
        });
        assert!(slow.check().is_err(), "a timeout within one check period");
    }

    /// granian: `workers_lifetime` must be at least 60 s, has no jitter, and
    /// `workers_max_rss` is in MiB.
    #[test]
    fn granian_lifetime_is_an_age_without_jitter_and_rss_is_in_mib() {
        let g = Published::Granian(Granian {
            workers_lifetime_s: 3600.0,
            workers_max_rss_mib: 512,
        });
        let mut r = RawRecovery::default();
        assert_eq!(g.apply(&mut r, &[]), Ok(()));
        assert_eq!((r.worker_max_age, r.worker_max_age_jitter), (3600.0, 0.0));
        assert_eq!(r.worker_max_rss, 512 * 1024 * 1024);
        let short = Published::Granian(Granian {
            workers_lifetime_s: 59.0,
            workers_max_rss_mib: 0,
        });
        assert!(
            short
                .check()
                .is_err_and(|(f, _)| f == "granian.workers_lifetime_s")
        );
    }

    /// systemd's fixed window: with burst 5 in 10 s, five starts at 0..4 s are allowed
    /// and a sixth at 9 s is refused; but starts at 0, 9, 9.5, 9.8, 9.9 then 10.5 s are
    /// all allowed, because the window that began at 0 s ran out at 10 s and 10.5 s opens
    /// a new one — where a sliding window (any 10 s) would have refused it.
    #[test]
    fn systemd_start_limit_window_is_fixed_from_its_first_start() {
        let l = StartLimit {
            interval_s: 10.0,
            burst: 5,
        };
        assert_eq!(l.first_refused(&[0.0, 1.0, 2.0, 3.0, 4.0, 9.0]), Some(9.0));
        assert_eq!(l.first_refused(&[0.0, 1.0, 2.0, 3.0, 4.0]), None);
        let across = [0.0, 9.0, 9.5, 9.8, 9.9, 10.5, 11.0, 12.0, 13.0];
        assert_eq!(l.first_refused(&across), None);
        assert_eq!(
            l.first_refused(&[0.0, 9.0, 9.5, 9.8, 9.9, 10.5, 11.0, 12.0, 13.0, 14.0, 15.0]),
            Some(15.0),
            "the window opened at 10.5 s holds five starts"
        );
        // `usec_sub_unsigned(ts, begin) > interval`: a start exactly one interval after
        // the window began still counts in it.
        assert_eq!(
            l.first_refused(&[0.0, 1.0, 2.0, 3.0, 4.0, 10.0]),
            Some(10.0)
        );
    }
}
