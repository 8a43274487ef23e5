//! The service against a scripted client on loopback: limits and malformed input.
