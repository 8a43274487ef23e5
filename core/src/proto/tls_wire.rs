//! The TLS material message on the wire: the identity (generation, certificate PEM, key
//! PEM), the ticket lifetime, then the ticket keys newest first (generation, 16-byte
//! name, 32-byte secret), then the 32-byte stateless-reset key. The decoder accepts what the encoder writes and nothing else:
//! no keys, more than [`MAX_TICKET_KEYS`], or keys out of order is a malformed frame.

use super::ProtoError;
use super::wire::{Reader, Writer};
use crate::tls_material::{
    IdentityPem, MAX_TICKET_KEYS, STATELESS_RESET_KEY_LEN, StatelessResetKey, TICKET_KEY_NAME_LEN,
    TICKET_SECRET_LEN, TicketKey, TlsMaterial,
};

pub(crate) fn put_tls_material(w: &mut Writer<'_>, m: &TlsMaterial) {
    w.u64(m.identity.generation);
    w.str(&m.identity.cert_pem);
    w.str(&m.identity.key_pem);
    w.u32(m.ticket_lifetime_secs);
    w.u8(u8::try_from(m.ticket_keys.len()).unwrap_or(u8::MAX));
    for key in &m.ticket_keys {
        w.u64(key.generation);
        w.u128(u128::from_be_bytes(key.name));
        let (hi, lo) = key.secret.split_at(16);
        w.u128(u128::from_be_bytes(hi.try_into().unwrap_or_default()));
        w.u128(u128::from_be_bytes(lo.try_into().unwrap_or_default()));
    }
    let (hi, lo) = m.stateless_reset_key.0.split_at(16);
    w.u128(u128::from_be_bytes(hi.try_into().unwrap_or_default()));
    w.u128(u128::from_be_bytes(lo.try_into().unwrap_or_default()));
}

pub(crate) fn get_tls_material(r: &mut Reader<'_>) -> Result<TlsMaterial, ProtoError> {
    let identity = IdentityPem {
        generation: r.u64()?,
        cert_pem: r.string()?,
        key_pem: r.string()?,
    };
    let ticket_lifetime_secs = r.u32()?;
    let count = r.u8()?;
    if count == 0 || usize::from(count) > MAX_TICKET_KEYS {
        return Err(ProtoError::InvalidValue {
            field: "ticket key count",
            value: u64::from(count),
        });
    }
    let mut ticket_keys: Vec<TicketKey> = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let generation = r.u64()?;
        if ticket_keys
            .last()
            .is_some_and(|k| k.generation <= generation)
        {
            return Err(ProtoError::InvalidValue {
                field: "ticket key generation",
                value: generation,
            });
        }
        let name: [u8; TICKET_KEY_NAME_LEN] = r.u128()?.to_be_bytes();
        let mut secret = [0u8; TICKET_SECRET_LEN];
        secret[..16].copy_from_slice(&r.u128()?.to_be_bytes());
        secret[16..].copy_from_slice(&r.u128()?.to_be_bytes());
        ticket_keys.push(TicketKey {
            generation,
            name,
            secret,
        });
    }
    let mut reset_key = [0u8; STATELESS_RESET_KEY_LEN];
    reset_key[..16].copy_from_slice(&r.u128()?.to_be_bytes());
    reset_key[16..].copy_from_slice(&r.u128()?.to_be_bytes());
    Ok(TlsMaterial {
        identity,
        ticket_keys,
        ticket_lifetime_secs,
        stateless_reset_key: StatelessResetKey(reset_key),
    })
}
