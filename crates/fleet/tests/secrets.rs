//! The one-time secrets: compared whole, in constant time, as digests.

use rigdeck_fleet::invites::{digest, digests_match, new_secret};

#[test]
fn digests_match_only_when_every_byte_does() {
    let secret = new_secret().unwrap();
    let same = digest(&secret);
    assert!(digests_match(&digest(&secret), &same));
    for position in [0, 15, 31] {
        let mut other = same;
        other[position] ^= 1;
        assert!(!digests_match(&other, &same), "differs at {position}");
    }
}

#[test]
fn secrets_are_fresh_and_128_bits() {
    let a = new_secret().unwrap();
    let b = new_secret().unwrap();
    assert_eq!(a.len() * 8, 128);
    assert_ne!(a, b);
}
