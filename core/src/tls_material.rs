//! The parent's TLS material: the identity every worker serves (certificate chain and
//! key) and the session-ticket keys every worker seals and opens tickets with, as one
//! machine (time in, actions out; decision 0025).
//!
//! - **Identity.** Each accepted new identity bumps the identity generation. Whoever
//!   produced it (the operator's files on a reload, a certificate manager) validated it;
//!   this machine only refuses one that the control channel could not carry, and ignores
//!   one identical to the current (a reload of unchanged files changes nothing).
//! - **Ticket keys.** A new key every [`TicketPolicy::rotate_every`]; the newest seals,
//!   every kept key opens. A key is kept until the last ticket it sealed has outlived
//!   [`TicketPolicy::ticket_lifetime`] (its retirement plus the lifetime), so with the
//!   default policy (both six hours) two keys are live: the current and the previous one.
//!   Nothing else retires a key: a reload, a recycle or a worker's crash leaves the keys
//!   as they are, so a client resumes on whichever worker of whichever generation accepts
//!   it, as long as its ticket is inside its lifetime.
//! - **Stateless-reset key.** One key for the life of the parent, from randomness the
//!   driver supplies at startup, handed to every worker with the rest: a worker that gets
//!   a QUIC packet for a connection it does not know (its slot's previous worker died)
//!   answers with a stateless reset the client can verify, so the client learns at once
//!   that the connection is gone (RFC 9000 §10.3; decision 0027). It never rotates: a
//!   reset token is bound to a connection ID for that connection's life, and a worker
//!   with a different key would send resets nobody accepts.
//! - **Randomness** comes from the driver: the machine asks for it with
//!   [`TlsAction::MintTicketKey`] and takes it back as [`TlsInput::TicketEntropy`]; the
//!   old key keeps sealing meanwhile, so a late answer costs nothing.
//! - **Distribution.** [`TlsState::material`] is the whole of what a worker needs, sent
//!   whole (never as a delta): a worker started later gets it as its first message, and
//!   every worker gets it again whenever it changes ([`TlsState::take_changed`]). No
//!   driver keeps any of it.

use core::fmt;
use core::time::Duration;

use crate::time::{Instant, earliest};

/// Bytes of a ticket key's name, which starts every ticket it sealed.
pub const TICKET_KEY_NAME_LEN: usize = 16;
/// Bytes of a ticket key's secret (a 256-bit AEAD key).
pub const TICKET_SECRET_LEN: usize = 32;
/// What one [`TlsInput::TicketEntropy`] carries: a name and a secret.
pub const TICKET_ENTROPY_LEN: usize = TICKET_KEY_NAME_LEN + TICKET_SECRET_LEN;
/// Bytes of the QUIC stateless-reset key (an HMAC-SHA256 key).
pub const STATELESS_RESET_KEY_LEN: usize = 32;
/// The most keys a material message may hold. The default policy keeps two; a policy
/// whose lifetime spans more rotations than this keeps the newest ones.
pub const MAX_TICKET_KEYS: usize = 4;
/// How long an unanswered [`TlsAction::MintTicketKey`] waits before it is asked again.
pub const MINT_RETRY: Duration = Duration::from_secs(60);

/// How ticket keys are rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketPolicy {
    /// How long one key seals new tickets.
    pub rotate_every: Duration,
    /// How long a ticket may be used (the lifetime clients are told).
    pub ticket_lifetime: Duration,
}

impl Default for TicketPolicy {
    /// A new key every six hours; tickets live six hours, so a key lives twelve.
    fn default() -> Self {
        TicketPolicy {
            rotate_every: Duration::from_secs(6 * 3600),
            ticket_lifetime: Duration::from_secs(6 * 3600),
        }
    }
}

/// One session-ticket key.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketKey {
    /// Counts keys minted by this parent, from 1.
    pub generation: u64,
    /// Random, so a ticket from another servery (or an earlier run) names no key here.
    pub name: [u8; TICKET_KEY_NAME_LEN],
    pub secret: [u8; TICKET_SECRET_LEN],
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKey")
            .field("generation", &self.generation)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The key every worker derives QUIC stateless-reset tokens from.
#[derive(Clone, PartialEq, Eq)]
pub struct StatelessResetKey(pub [u8; STATELESS_RESET_KEY_LEN]);

impl fmt::Debug for StatelessResetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StatelessResetKey(<redacted>)")
    }
}

/// A certificate chain (leaf first) and its private key as PEM, with the generation it
/// was accepted as.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityPem {
    pub generation: u64,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for IdentityPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityPem")
            .field("generation", &self.generation)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Everything a worker serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    pub identity: IdentityPem,
    /// Newest first: the first seals, every one opens.
    pub ticket_keys: Vec<TicketKey>,
    /// The ticket lifetime clients are told, in seconds.
    pub ticket_lifetime_secs: u32,
    /// The same for the life of the parent.
    pub stateless_reset_key: StatelessResetKey,
}

/// What the status shows of an identity (the driver parses certificates; the core does
/// not).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertSummary {
    /// The leaf's subject, as text.
    pub subject: String,
    /// The leaf's notAfter, seconds since the Unix epoch.
    pub not_after_unix: i64,
    /// The leaf's notBefore, seconds since the Unix epoch.
    pub not_before_unix: i64,
}

/// The renewal window: a certificate served this close to its notAfter is one whose
/// renewal is late (certbot and Caddy renew 90-day certificates 30 days before they end).
pub const RENEWAL_WINDOW_SECS: i64 = 30 * 86_400;

/// How a served certificate stands against the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertExpiry {
    /// Not parsed (no notAfter known).
    Unknown,
    Valid,
    /// Inside its renewal window: warned about.
    Expiring,
    /// Past its notAfter: clients refuse it.
    Expired,
}

impl CertExpiry {
    pub fn name(self) -> &'static str {
        match self {
            CertExpiry::Unknown => "unknown",
            CertExpiry::Valid => "valid",
            CertExpiry::Expiring => "expiring",
            CertExpiry::Expired => "expired",
        }
    }
}

impl CertSummary {
    /// Where the renewal window opens: [`RENEWAL_WINDOW_SECS`] before the notAfter, or
    /// the last third of the lifetime for a certificate that lives less than 90 days (a
    /// short-lived certificate would otherwise be "expiring" all its life).
    pub fn renewal_window_from_unix(&self) -> i64 {
        let lifetime = self
            .not_after_unix
            .saturating_sub(self.not_before_unix)
            .max(0);
        self.not_after_unix - RENEWAL_WINDOW_SECS.min(lifetime / 3)
    }

    /// The certificate at wall-clock time `now_unix` (seconds since the epoch).
    pub fn expiry(&self, now_unix: i64) -> CertExpiry {
        if self.not_after_unix == 0 {
            CertExpiry::Unknown
        } else if now_unix >= self.not_after_unix {
            CertExpiry::Expired
        } else if now_unix >= self.renewal_window_from_unix() {
            CertExpiry::Expiring
        } else {
            CertExpiry::Valid
        }
    }
}

/// What the driver tells the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsInput {
    /// A validated identity to serve from now on.
    Identity {
        cert_pem: String,
        key_pem: String,
        summary: CertSummary,
    },
    /// The answer to [`TlsAction::MintTicketKey`]: fresh OS randomness.
    TicketEntropy(Box<[u8; TICKET_ENTROPY_LEN]>),
    /// A new identity was offered and found wanting (a bad certificate file on reload):
    /// the current one stays, and the status says why until a new one is taken.
    Refused { reason: String },
}

/// What the machine asks of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsAction {
    /// Answer with [`TlsInput::TicketEntropy`].
    MintTicketKey,
}

/// Why an identity was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsRefusal {
    #[error(
        "the certificate chain and key take {len} bytes on the control channel; at most {max} can be handed to workers"
    )]
    TooLarge { len: usize, max: usize },
}

/// What `ctl status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsStatus {
    pub identity_generation: u64,
    pub summary: CertSummary,
    pub ticket_key_generation: u64,
    pub ticket_keys: usize,
    pub next_rotation: Option<Instant>,
    pub last_refusal: Option<String>,
}

#[derive(Debug, Clone)]
struct KeptKey {
    key: TicketKey,
    /// When a newer key took over sealing; `None` for the current key.
    retired: Option<Instant>,
    minted: Instant,
}

/// The machine.
#[derive(Debug, Clone)]
pub struct TlsState {
    policy: TicketPolicy,
    identity: IdentityPem,
    summary: CertSummary,
    /// Newest first.
    keys: Vec<KeptKey>,
    key_generation: u64,
    reset_key: StatelessResetKey,
    /// When the outstanding mint request was made.
    mint_asked: Option<Instant>,
    changed: bool,
    actions: Vec<TlsAction>,
    last_refusal: Option<String>,
    /// When the machine last stepped: what its invariants are judged at.
    stepped: Instant,
}

impl TlsState {
    /// The material at startup: the first identity, the first ticket key's randomness and
    /// the stateless-reset key's, all in hand before any worker starts, so the first
    /// worker already has them.
    pub fn new(
        now: Instant,
        policy: TicketPolicy,
        cert_pem: String,
        key_pem: String,
        summary: CertSummary,
        entropy: [u8; TICKET_ENTROPY_LEN],
        reset_key_entropy: [u8; STATELESS_RESET_KEY_LEN],
    ) -> Result<Self, TlsRefusal> {
        let mut state = TlsState {
            policy,
            identity: IdentityPem {
                generation: 1,
                cert_pem,
                key_pem,
            },
            summary,
            keys: Vec::new(),
            key_generation: 0,
            reset_key: StatelessResetKey(reset_key_entropy),
            mint_asked: None,
            changed: true,
            actions: Vec::new(),
            last_refusal: None,
            stepped: now,
        };
        check_identity_fits(&state.identity.cert_pem, &state.identity.key_pem)?;
        state.install_key(now, &entropy);
        Ok(state)
    }

    pub fn policy(&self) -> TicketPolicy {
        self.policy
    }

    pub fn handle(&mut self, now: Instant, input: TlsInput) {
        self.stepped = now;
        match input {
            TlsInput::Identity {
                cert_pem,
                key_pem,
                summary,
            } => {
                if cert_pem == self.identity.cert_pem && key_pem == self.identity.key_pem {
                    return;
                }
                match check_identity_fits(&cert_pem, &key_pem) {
                    Ok(()) => {
                        self.identity = IdentityPem {
                            generation: self.identity.generation + 1,
                            cert_pem,
                            key_pem,
                        };
                        self.summary = summary;
                        self.last_refusal = None;
                        self.changed = true;
                    }
                    Err(e) => self.last_refusal = Some(e.to_string()),
                }
            }
            TlsInput::Refused { reason } => self.last_refusal = Some(reason),
            // Only an answer to a request: randomness nobody asked for mints nothing.
            TlsInput::TicketEntropy(bytes) => {
                if self.mint_asked.take().is_some() {
                    self.install_key(now, &bytes);
                }
            }
        }
        self.drop_expired(now);
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.stepped = now;
        self.drop_expired(now);
        let due = self.rotation_due();
        let ask = match self.mint_asked {
            Some(asked) => now >= asked + MINT_RETRY,
            None => now >= due,
        };
        if ask {
            self.mint_asked = Some(now);
            self.actions.push(TlsAction::MintTicketKey);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let next_mint = match self.mint_asked {
            Some(asked) => asked + MINT_RETRY,
            None => self.rotation_due(),
        };
        let next_drop = self
            .keys
            .iter()
            .filter_map(|k| k.retired)
            .map(|retired| retired + self.policy.ticket_lifetime)
            .min();
        earliest(Some(next_mint), next_drop)
    }

    pub fn poll_action(&mut self) -> Option<TlsAction> {
        (!self.actions.is_empty()).then(|| self.actions.remove(0))
    }

    /// Whether the material changed since the last call: every worker must get it again.
    pub fn take_changed(&mut self) -> bool {
        core::mem::take(&mut self.changed)
    }

    /// What every worker serves with now.
    pub fn material(&self) -> TlsMaterial {
        TlsMaterial {
            identity: self.identity.clone(),
            ticket_keys: self.keys.iter().map(|k| k.key.clone()).collect(),
            ticket_lifetime_secs: u32::try_from(self.policy.ticket_lifetime.as_secs())
                .unwrap_or(u32::MAX),
            stateless_reset_key: self.reset_key.clone(),
        }
    }

    pub fn status(&self) -> TlsStatus {
        TlsStatus {
            identity_generation: self.identity.generation,
            summary: self.summary.clone(),
            ticket_key_generation: self.key_generation,
            ticket_keys: self.keys.len(),
            next_rotation: Some(self.rotation_due()),
            last_refusal: self.last_refusal.clone(),
        }
    }

    /// The machine's own rules: one sealing key, newest first, none kept past its last
    /// ticket's lifetime, never more than a message holds.
    pub fn check_invariants(&self) -> Result<(), String> {
        let now = self.stepped;
        let current = self.keys.iter().filter(|k| k.retired.is_none()).count();
        if current != 1 || self.keys.first().is_none_or(|k| k.retired.is_some()) {
            return Err(format!("{current} current ticket keys, or not the newest"));
        }
        if self.keys.len() > MAX_TICKET_KEYS {
            return Err(format!("{} ticket keys kept", self.keys.len()));
        }
        for pair in self.keys.windows(2) {
            if pair[0].key.generation <= pair[1].key.generation {
                return Err("ticket keys out of order".into());
            }
        }
        if let Some(k) = self.keys.iter().find(|k| {
            k.retired
                .is_some_and(|r| r + self.policy.ticket_lifetime < now)
        }) {
            return Err(format!(
                "ticket key {} kept past its last ticket's lifetime",
                k.key.generation
            ));
        }
        Ok(())
    }

    fn rotation_due(&self) -> Instant {
        let minted = self.keys.first().map_or(Instant::ZERO, |k| k.minted);
        minted + self.policy.rotate_every
    }

    fn install_key(&mut self, now: Instant, entropy: &[u8; TICKET_ENTROPY_LEN]) {
        let (name, secret) = entropy.split_at(TICKET_KEY_NAME_LEN);
        let mut key = TicketKey {
            generation: self.key_generation + 1,
            name: [0; TICKET_KEY_NAME_LEN],
            secret: [0; TICKET_SECRET_LEN],
        };
        key.name.copy_from_slice(name);
        key.secret.copy_from_slice(secret);
        self.key_generation = key.generation;
        for kept in &mut self.keys {
            kept.retired.get_or_insert(now);
        }
        self.keys.insert(
            0,
            KeptKey {
                key,
                retired: None,
                minted: now,
            },
        );
        // A policy whose lifetime spans many rotations keeps the newest ones only: their
        // oldest tickets then fall back to a full handshake, which is always safe.
        self.keys.truncate(MAX_TICKET_KEYS);
        self.changed = true;
    }

    fn drop_expired(&mut self, now: Instant) {
        let lifetime = self.policy.ticket_lifetime;
        let before = self.keys.len();
        self.keys
            .retain(|k| k.retired.is_none_or(|retired| now < retired + lifetime));
        if self.keys.len() != before {
            self.changed = true;
        }
    }
}

/// Whether material with this identity fits one control-channel frame, with as many
/// ticket keys as a message may hold: the answer does not depend on the keys kept now.
pub fn check_identity_fits(cert_pem: &str, key_pem: &str) -> Result<(), TlsRefusal> {
    let key = TicketKey {
        generation: 0,
        name: [0; TICKET_KEY_NAME_LEN],
        secret: [0; TICKET_SECRET_LEN],
    };
    let material = TlsMaterial {
        identity: IdentityPem {
            generation: 0,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        },
        ticket_keys: vec![key; MAX_TICKET_KEYS],
        ticket_lifetime_secs: 0,
        stateless_reset_key: StatelessResetKey([0; STATELESS_RESET_KEY_LEN]),
    };
    let len = crate::proto::tls_material_len(&material);
    let max = crate::proto::MAX_FRAME_DEFAULT;
    if len <= max {
        Ok(())
    } else {
        Err(TlsRefusal::TooLarge { len, max })
    }
}

#[cfg(test)]
#[path = "tls_material_tests.rs"]
mod tests;
