//! Session tickets sealed with the parent's keys, so that a ticket one worker issued
//! resumes on any other, of any generation, while its key is kept (decision 0025).
//!
//! A ticket is `name (16) ‖ nonce (12) ‖ ChaCha20-Poly1305(state) ‖ tag (16)`, the key
//! name authenticated as associated data. The name picks the key; a name no kept key has
//! (a retired key the parent dropped, another server's ticket, garbage) opens nothing and
//! the client does a full handshake. The ticket's lifetime is enforced the way rustls asks
//! (`ProducesTickets::lifetime`): by the parent erasing the key, not by a date inside.
//!
//! ChaCha20-Poly1305 rather than AES-GCM: a random 96-bit nonce is safe for either at
//! these volumes (one key seals for six hours), and ChaCha20 is constant-time in software
//! on every CPU servery might run on. ring rather than rustls' own `Ticketer`: that one
//! makes its keys itself, per process, which is exactly what cannot resume across workers.

use std::fmt;
use std::sync::{Arc, RwLock};

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;
use servery_core::tls_material::{TICKET_KEY_NAME_LEN, TicketKey};

const TAG_LEN: usize = 16;
const OVERHEAD: usize = TICKET_KEY_NAME_LEN + NONCE_LEN + TAG_LEN;

struct SealingKey {
    name: [u8; TICKET_KEY_NAME_LEN],
    generation: u64,
    aead: LessSafeKey,
}

/// The keys in use: the first seals, every one opens.
#[derive(Default)]
struct Keys {
    keys: Vec<SealingKey>,
    lifetime_secs: u32,
}

/// The ticketer every connection of a worker shares; [`ParentTicketer::install`] swaps
/// its keys for the handshakes that follow.
pub struct ParentTicketer {
    keys: RwLock<Arc<Keys>>,
    rng: SystemRandom,
}

impl fmt::Debug for ParentTicketer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.current();
        f.debug_struct("ParentTicketer")
            .field(
                "generations",
                &keys.keys.iter().map(|k| k.generation).collect::<Vec<_>>(),
            )
            .field("lifetime_secs", &keys.lifetime_secs)
            .finish()
    }
}

impl Default for ParentTicketer {
    fn default() -> Self {
        ParentTicketer {
            keys: RwLock::new(Arc::new(Keys::default())),
            rng: SystemRandom::new(),
        }
    }
}

impl ParentTicketer {
    /// Seal with the first of `keys` and open with any of them from now on.
    pub fn install(&self, keys: &[TicketKey], lifetime_secs: u32) {
        let keys = keys
            .iter()
            .filter_map(|k| {
                // A 32-byte key is what ChaCha20-Poly1305 takes: this cannot fail.
                let unbound = UnboundKey::new(&CHACHA20_POLY1305, &k.secret).ok()?;
                Some(SealingKey {
                    name: k.name,
                    generation: k.generation,
                    aead: LessSafeKey::new(unbound),
                })
            })
            .collect();
        let fresh = Arc::new(Keys {
            keys,
            lifetime_secs,
        });
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// The generation of the sealing key, if any.
    pub fn sealing_generation(&self) -> Option<u64> {
        self.current().keys.first().map(|k| k.generation)
    }

    fn current(&self) -> Arc<Keys> {
        Arc::clone(&self.keys.read().unwrap_or_else(|e| e.into_inner()))
    }
}

impl ProducesTickets for ParentTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.current().lifetime_secs
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.current();
        let key = keys.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(plain.len() + OVERHEAD);
        ticket.extend_from_slice(&key.name);
        ticket.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.name),
                &mut sealed,
            )
            .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < OVERHEAD {
            return None;
        }
        let (name, rest) = cipher.split_at(TICKET_KEY_NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.current();
        let key = keys.keys.iter().find(|k| k.name == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = key
            .aead
            .open_in_place(nonce, Aad::from(&key.name), &mut buf)
            .ok()?;
        let len = plain.len();
        buf.truncate(len);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(generation: u64, byte: u8) -> TicketKey {
        TicketKey {
            generation,
            name: [byte; TICKET_KEY_NAME_LEN],
            secret: [byte.wrapping_add(1); 32],
        }
    }

    #[test]
    fn tickets_open_with_every_kept_key_and_with_no_other() {
        let t = ParentTicketer::default();
        assert_eq!(t.encrypt(b"state"), None, "no key, no ticket");
        t.install(&[key(1, 1)], 60);
        let old = t.encrypt(b"state one").expect("sealed");
        assert_eq!(&old[..TICKET_KEY_NAME_LEN], &[1; TICKET_KEY_NAME_LEN]);
        // Another worker with the same keys opens it.
        let other = ParentTicketer::default();
        other.install(&[key(1, 1)], 60);
        assert_eq!(other.decrypt(&old).as_deref(), Some(&b"state one"[..]));
        // A rotation: the new key seals, the old one still opens.
        t.install(&[key(2, 2), key(1, 1)], 60);
        let new = t.encrypt(b"state two").expect("sealed");
        assert_eq!(&new[..TICKET_KEY_NAME_LEN], &[2; TICKET_KEY_NAME_LEN]);
        assert_eq!(t.decrypt(&old).as_deref(), Some(&b"state one"[..]));
        assert_eq!(t.sealing_generation(), Some(2));
        // The old key dropped: its tickets fail closed.
        t.install(&[key(3, 3), key(2, 2)], 60);
        assert_eq!(t.decrypt(&old), None);
        assert_eq!(t.decrypt(&new).as_deref(), Some(&b"state two"[..]));
        assert_eq!(t.lifetime(), 60);
    }

    #[test]
    fn a_known_name_with_a_wrong_secret_or_a_flipped_bit_opens_nothing() {
        let t = ParentTicketer::default();
        t.install(&[key(1, 1)], 60);
        let ticket = t.encrypt(b"state").expect("sealed");
        let impostor = ParentTicketer::default();
        impostor.install(
            &[TicketKey {
                secret: [9; 32],
                ..key(1, 1)
            }],
            60,
        );
        assert_eq!(impostor.decrypt(&ticket), None);
        for i in 0..ticket.len() {
            let mut flipped = ticket.clone();
            flipped[i] ^= 0x01;
            assert_eq!(t.decrypt(&flipped), None, "bit flipped at byte {i}");
        }
        assert!(!format!("{t:?}").contains("secret"));
    }

    proptest! {
        /// Attacker-controlled tickets of any shape open nothing and never panic.
        #[test]
        fn arbitrary_tickets_never_open(
            cipher in proptest::collection::vec(any::<u8>(), 0..200),
            known_name in any::<bool>(),
        ) {
            let t = ParentTicketer::default();
            t.install(&[key(1, 1)], 60);
            let mut cipher = cipher;
            if known_name && cipher.len() >= TICKET_KEY_NAME_LEN {
                cipher[..TICKET_KEY_NAME_LEN].copy_from_slice(&[1; TICKET_KEY_NAME_LEN]);
            }
            prop_assert_eq!(t.decrypt(&cipher), None);
        }
    }
}
