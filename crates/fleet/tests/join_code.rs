//! Join codes: they read back whole, a typo is caught by the checksum, expiry is kept.

use rigdeck_fleet::{CodeError, Fingerprint, JoinCode};

fn sample() -> JoinCode {
    JoinCode {
        address: "192.168.1.20:7879".to_owned(),
        fingerprint: Fingerprint::of_der(b"the rig's certificate"),
        secret: *b"0123456789abcdef",
        expires_at_ms: 1_800_000_000_000,
    }
}

#[test]
fn a_code_reads_back_as_made() {
    let code = sample();
    let text = code.encode();
    assert!(text.starts_with("rdk1-"), "{text}");
    assert!(!text.contains(char::is_whitespace));
    assert_eq!(JoinCode::decode(&text).unwrap(), code);
    // Pasted with a line break, or upper-cased by a chat program, it still reads.
    let (head, tail) = text.split_at(40);
    assert_eq!(
        JoinCode::decode(&format!("{head}\n  {tail}")).unwrap(),
        code
    );
    assert_eq!(JoinCode::decode(&text.to_uppercase()).unwrap(), code);
}

#[test]
fn ipv6_and_names_travel_as_given() {
    for address in ["[fd00::2]:7879", "rig.lan:7879", "127.0.0.1:40001"] {
        let code = JoinCode {
            address: address.to_owned(),
            ..sample()
        };
        assert_eq!(JoinCode::decode(&code.encode()).unwrap().address, address);
    }
}

#[test]
fn every_single_character_typo_is_caught() {
    let text = sample().encode();
    let body_start = "rdk1-".len();
    for i in body_start..text.len() {
        let original = text.as_bytes()[i];
        let replacement = if original == b'a' { b'b' } else { b'a' };
        let mut typo = text.clone().into_bytes();
        typo[i] = replacement;
        let typo = String::from_utf8(typo).unwrap();
        let err = JoinCode::decode(&typo).expect_err("a typo must not decode");
        assert!(matches!(err, CodeError::Checksum), "position {i}: {err:?}");
    }
}

#[test]
fn a_lost_character_and_foreign_text_are_told_apart() {
    let text = sample().encode();
    let cut = &text[..text.len() - 1];
    let err = JoinCode::decode(cut).unwrap_err();
    assert!(
        matches!(err, CodeError::Checksum | CodeError::Length),
        "{err:?}"
    );
    let longer = format!("{text}a");
    let err = JoinCode::decode(&longer).unwrap_err();
    assert!(
        matches!(err, CodeError::Checksum | CodeError::Length),
        "{err:?}"
    );
    assert_eq!(
        JoinCode::decode("rdk1-aaaa").unwrap_err(),
        CodeError::TooShort
    );
    assert_eq!(JoinCode::decode("hello").unwrap_err(), CodeError::NotACode);
    assert!(matches!(
        JoinCode::decode("rdk2-abcdef").unwrap_err(),
        CodeError::NewerFormat(_)
    ));
    assert_eq!(
        JoinCode::decode(&format!("{}1", &text[..text.len() - 1])).unwrap_err(),
        CodeError::BadCharacter('1')
    );
    assert!(JoinCode::decode(&text[..20]).is_err());
    let message = CodeError::Checksum.to_string();
    assert!(message.contains("mistyped"), "{message}");
}

#[test]
fn expiry_is_kept_to_the_second() {
    let code = sample();
    let read = JoinCode::decode(&code.encode()).unwrap();
    assert!(!read.is_expired(code.expires_at_ms - 1));
    assert!(read.is_expired(code.expires_at_ms));
    assert!(read.is_expired(code.expires_at_ms + 60_000));
}
