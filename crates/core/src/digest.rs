//! SHA-256 fingerprints of what a person approved: an approve-and-remember rule binds exact
//! arguments or a code file's exact contents by one, so a proposal can match a rule only by being
//! what the person saw.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// The prefix every rule digest carries, so that a rule stored with another kind of digest (the
/// 64-bit FNV hash of earlier versions) matches nothing rather than being compared as if alike.
pub const SHA256_PREFIX: &str = "sha256:";

/// `sha256:` and the SHA-256 of `bytes` in lowercase hex.
pub fn sha256_tagged(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut text = String::with_capacity(SHA256_PREFIX.len() + 64);
    text.push_str(SHA256_PREFIX);
    for byte in hash.iter() {
        // Writing into a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_in_hex_with_its_tag() {
        assert_eq!(
            sha256_tagged(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(sha256_tagged(b"abc"), sha256_tagged(b"abd"));
    }
}
