//! A tunnel's TLS 1.3 records, sealed and opened in place with the traffic keys rustls hands
//! over once the channel's handshake and upgrade are done. The records are the standard ones
//! (same keys, same sequence numbers, same layout), so either end may still be rustls itself;
//! what changes is where the bytes live: a chunk is read from the socket straight into record
//! slots and sealed there, and received records are opened where they were read and written
//! out from there, with no copy in between.
//!
//! Taking the keys is safe at the point a tunnel does it: each side has just sent or read the
//! upgrade's last message and the other side sends nothing until it is answered, so rustls
//! holds no part of a record that it would lose. Were it ever otherwise, the next record would
//! fail to open and the tunnel would end with an error, never pass altered bytes.

use std::io::{self, ErrorKind, IoSlice, IoSliceMut};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, NONCE_LEN};
use rustls::ConnectionTrafficSecrets;

/// The most plaintext one record carries (TLS 1.3: 2^14 bytes).
pub const RECORD_PLAIN: usize = 16 * 1024;
/// Each record's header: its type (application data), the legacy version, its length.
const HEADER: usize = 5;
/// After each record's plaintext: the inner content type, then the AEAD tag.
const TRAILER: usize = 1 + TAG;
const TAG: usize = 16;
/// A record at its largest, header to tag.
pub const RECORD: usize = HEADER + RECORD_PLAIN + TRAILER;
/// The largest ciphertext a peer may send in one record (TLS 1.3 allows 255 bytes of padding).
const MAX_CIPHERTEXT: usize = RECORD_PLAIN + 256;

const APPLICATION_DATA: u8 = 0x17;
const ALERT: u8 = 0x15;
const HANDSHAKE: u8 = 0x16;
/// A TLS 1.3 handshake message a server may send at any time after the handshake and that a
/// tunnel can pass over.
const NEW_SESSION_TICKET: u8 = 4;
/// The close_notify alert (warning level, description 0).
const CLOSE_NOTIFY: [u8; 2] = [1, 0];

/// One direction's AEAD key, IV and next sequence number.
pub struct Keys {
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    seq: u64,
}

impl Keys {
    /// The keys rustls extracted for one direction, from its sequence number on.
    pub fn new(seq: u64, secrets: ConnectionTrafficSecrets) -> io::Result<Self> {
        let (algorithm, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => {
                return Err(io::Error::other(
                    "the tunnel's TLS cipher suite is not one a tunnel can carry",
                ))
            }
        };
        let key = UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| io::Error::other("the tunnel's TLS key has the wrong length"))?;
        let iv = iv
            .as_ref()
            .try_into()
            .map_err(|_| io::Error::other("the tunnel's TLS IV has the wrong length"))?;
        Ok(Keys {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The next record's nonce: the IV with the sequence number XORed into its last 8 bytes.
    fn next_nonce(&mut self) -> io::Result<Nonce> {
        let mut nonce = self.iv;
        for (byte, seq) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *byte ^= seq;
        }
        self.seq = self
            .seq
            .checked_add(1)
            .ok_or_else(|| io::Error::other("the tunnel's TLS sequence numbers ran out"))?;
        Ok(Nonce::assume_unique_for_key(nonce))
    }
}

fn header(inner_len: usize) -> [u8; HEADER] {
    let [hi, lo] = (inner_len as u16).to_be_bytes();
    [APPLICATION_DATA, 3, 3, hi, lo]
}

fn crypto_failed(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, what.to_string())
}

/// Plaintext read into record slots, then sealed where it lies: the records leave as one
/// contiguous run of bytes.
pub struct Sealer {
    keys: Keys,
    slots: Vec<u8>,
}

impl Sealer {
    /// Room for `records` full records a chunk.
    pub fn new(keys: Keys, records: usize) -> Self {
        Sealer {
            keys,
            slots: vec![0; records.max(1) * RECORD],
        }
    }

    /// The most plaintext one chunk takes.
    pub fn capacity(&self) -> usize {
        self.slots.len() / RECORD * RECORD_PLAIN
    }

    /// The slots' plaintext areas, in order, to read a chunk into.
    pub fn plaintext_areas(&mut self) -> Vec<IoSliceMut<'_>> {
        self.slots
            .chunks_exact_mut(RECORD)
            .map(|slot| IoSliceMut::new(&mut slot[HEADER..HEADER + RECORD_PLAIN]))
            .collect()
    }

    /// The first `read` bytes of the plaintext areas sealed as records, ready to send.
    pub fn seal(&mut self, read: usize) -> io::Result<&[u8]> {
        let read = read.min(self.capacity());
        let mut end = 0;
        for (index, slot) in self.slots.chunks_exact_mut(RECORD).enumerate() {
            let start = index * RECORD_PLAIN;
            if start >= read {
                break;
            }
            let plain = (read - start).min(RECORD_PLAIN);
            end = index * RECORD + seal_slot(&mut self.keys, slot, plain, APPLICATION_DATA)?;
        }
        Ok(&self.slots[..end])
    }

    /// A close_notify alert, sealed.
    pub fn close_notify(&mut self) -> io::Result<&[u8]> {
        let slot = &mut self.slots[..RECORD];
        slot[HEADER..HEADER + CLOSE_NOTIFY.len()].copy_from_slice(&CLOSE_NOTIFY);
        let end = seal_slot(&mut self.keys, slot, CLOSE_NOTIFY.len(), ALERT)?;
        Ok(&self.slots[..end])
    }
}

/// Seals the `plain` bytes at `slot[HEADER..]` as a record of inner type `kind`; the record's
/// length.
fn seal_slot(keys: &mut Keys, slot: &mut [u8], plain: usize, kind: u8) -> io::Result<usize> {
    let head = header(plain + TRAILER);
    slot[..HEADER].copy_from_slice(&head);
    slot[HEADER + plain] = kind;
    let nonce = keys.next_nonce()?;
    let tag = keys
        .key
        .seal_in_place_separate_tag(nonce, Aad::from(head), &mut slot[HEADER..=HEADER + plain])
        .map_err(|_| crypto_failed("a tunnel record could not be sealed"))?;
    let tag_at = HEADER + plain + 1;
    slot[tag_at..tag_at + TAG].copy_from_slice(tag.as_ref());
    Ok(tag_at + TAG)
}

/// Received bytes opened record by record where they were read; what follows the last whole
/// record waits for the next read.
pub struct Opener {
    keys: Keys,
    buffer: Vec<u8>,
    /// How many bytes of `buffer` hold received data.
    filled: usize,
    /// How many of those were whole records, already opened and handed out.
    consumed: usize,
}

/// What the records read so far held.
pub struct Opened<'a> {
    /// The application data, in order, as slices of the receive buffer.
    pub plaintext: Vec<&'a [u8]>,
    /// Whether the far end closed the tunnel (a close_notify or any other alert).
    pub closed: bool,
}

impl Opener {
    /// Reads of up to `chunk` bytes (and always room for a whole record).
    pub fn new(keys: Keys, chunk: usize) -> Self {
        Opener {
            keys,
            buffer: vec![0; chunk.max(HEADER + MAX_CIPHERTEXT)],
            filled: 0,
            consumed: 0,
        }
    }

    /// Where the next read goes, once the records handed out are dropped and a partial one
    /// is moved to the front.
    pub fn unfilled(&mut self) -> &mut [u8] {
        if self.consumed > 0 {
            self.buffer.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
            self.consumed = 0;
        }
        &mut self.buffer[self.filled..]
    }

    /// `read` more bytes arrived: every whole record so far opened in place.
    pub fn open(&mut self, read: usize) -> io::Result<Opened<'_>> {
        self.filled += read;
        let mut ranges = Vec::new();
        let mut closed = false;
        let mut at = self.consumed;
        while let Some(len) = whole_record(&self.buffer[at..self.filled])? {
            let (head, rest) = self.buffer[at..].split_at_mut(HEADER);
            let nonce = self.keys.next_nonce()?;
            let inner = self
                .keys
                .key
                .open_in_place(nonce, Aad::from(&*head), &mut rest[..len])
                .map_err(|_| crypto_failed("a tunnel record failed its integrity check"))?;
            let (kind, content) = inner_content(inner)?;
            let content = at + HEADER..at + HEADER + content.len();
            at += HEADER + len;
            match kind {
                APPLICATION_DATA => ranges.push(content),
                ALERT => {
                    closed = true;
                    break;
                }
                HANDSHAKE if self.buffer.get(content.start) == Some(&NEW_SESSION_TICKET) => {}
                _ => {
                    return Err(crypto_failed(
                        "a TLS message other than data arrived inside the tunnel",
                    ))
                }
            }
        }
        self.consumed = at;
        let buffer = &self.buffer;
        Ok(Opened {
            plaintext: ranges
                .into_iter()
                .filter(|range| !range.is_empty())
                .map(|range| &buffer[range])
                .collect(),
            closed,
        })
    }
}

/// The ciphertext length of the record at the front of `bytes` when all of it is there.
fn whole_record(bytes: &[u8]) -> io::Result<Option<usize>> {
    if bytes.len() < HEADER {
        return Ok(None);
    }
    if bytes[0] != APPLICATION_DATA || bytes[1] != 3 {
        return Err(crypto_failed(
            "the tunnel received bytes that are not a TLS 1.3 record",
        ));
    }
    let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
    if !(TAG + 1..=MAX_CIPHERTEXT).contains(&len) {
        return Err(crypto_failed(
            "the tunnel received a TLS record of a bad length",
        ));
    }
    Ok((bytes.len() >= HEADER + len).then_some(len))
}

/// An opened record's inner content type and its content (trailing zero padding removed).
fn inner_content(inner: &[u8]) -> io::Result<(u8, &[u8])> {
    let end = inner
        .iter()
        .rposition(|&byte| byte != 0)
        .ok_or_else(|| crypto_failed("a tunnel record had no content type"))?;
    Ok((inner[end], &inner[..end]))
}

/// Writes every slice in full.
pub fn write_all_slices(out: &mut impl io::Write, slices: &[&[u8]]) -> io::Result<()> {
    let mut io: Vec<IoSlice<'_>> = slices.iter().map(|s| IoSlice::new(s)).collect();
    let mut rest = &mut io[..];
    while !rest.is_empty() {
        match out.write_vectored(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut rest, written),
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use rustls::{ClientConnection, Connection, ServerConnection};

    use super::*;
    use crate::identity::Identity;
    use crate::verifier::{client_config, server_config};

    /// A client and a server connection over the channel's own configurations, handshake done
    /// and the server's tickets read, as a tunnel finds them.
    fn connected() -> (Connection, Connection) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let server_identity = Identity::load_or_create(&dir.path().join("server")).expect("id");
        let client_identity = Identity::load_or_create(&dir.path().join("client")).expect("id");
        let client_config = client_config(&client_identity, server_identity.fingerprint)
            .expect("client configuration");
        let server_config = server_config(&server_identity).expect("server configuration");
        let mut client: Connection = ClientConnection::new(
            std::sync::Arc::new(client_config),
            rustls::pki_types::ServerName::try_from("rig").expect("a name"),
        )
        .expect("a client")
        .into();
        let mut server: Connection = ServerConnection::new(std::sync::Arc::new(server_config))
            .expect("a server")
            .into();
        while client.is_handshaking() || server.is_handshaking() {
            transfer(&mut client, &mut server);
            transfer(&mut server, &mut client);
        }
        transfer(&mut server, &mut client);
        transfer(&mut client, &mut server);
        (client, server)
    }

    fn transfer(from: &mut Connection, to: &mut Connection) {
        let mut bytes = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut bytes).expect("records written");
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            to.read_tls(&mut rest).expect("records read");
            to.process_new_packets().expect("records processed");
        }
    }

    /// Our side of `connection`: its sealer and opener.
    fn taken_over(connection: Connection, chunk_records: usize) -> (Sealer, Opener) {
        let secrets = connection.dangerous_extract_secrets().expect("the keys");
        let send = Keys::new(secrets.tx.0, secrets.tx.1).expect("send keys");
        let receive = Keys::new(secrets.rx.0, secrets.rx.1).expect("receive keys");
        let chunk = chunk_records * RECORD_PLAIN;
        (
            Sealer::new(send, chunk_records),
            Opener::new(receive, chunk),
        )
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed) % 251) as u8).collect()
    }

    /// `data` through `sealer` as its records, a chunk at a time.
    fn sealed(sealer: &mut Sealer, data: &[u8]) -> Vec<u8> {
        let mut records = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let read = rest
                .read_vectored(&mut sealer.plaintext_areas())
                .expect("a chunk");
            records.extend_from_slice(sealer.seal(read).expect("sealed"));
        }
        records
    }

    /// `records` fed to `opener` `piece` bytes at a time; the plaintext and whether it closed.
    fn opened(opener: &mut Opener, records: &[u8], piece: usize) -> io::Result<(Vec<u8>, bool)> {
        let mut plain = Vec::new();
        for bytes in records.chunks(piece) {
            opener.unfilled()[..bytes.len()].copy_from_slice(bytes);
            let opened = opener.open(bytes.len())?;
            for slice in &opened.plaintext {
                plain.extend_from_slice(slice);
            }
            if opened.closed {
                return Ok((plain, true));
            }
        }
        Ok((plain, false))
    }

    fn rustls_reads(server: &mut Connection, records: &[u8]) -> (Vec<u8>, bool) {
        let mut rest = records;
        let mut plain = Vec::new();
        let mut closed = false;
        while !rest.is_empty() {
            server.read_tls(&mut rest).expect("records read");
            closed |= server
                .process_new_packets()
                .expect("records rustls accepts")
                .peer_has_closed();
            match server.reader().read_to_end(&mut plain) {
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::WouldBlock => {}
                Err(err) => panic!("{err}"),
            }
        }
        (plain, closed)
    }

    #[test]
    fn records_sealed_here_are_read_by_rustls_and_rustls_records_open_here() {
        let (client, mut server) = connected();
        let (mut sealer, mut opener) = taken_over(client, 4);

        // Here to rustls: 300 000 bytes in chunks of four records, then a close_notify.
        let sent = pattern(300_000, 7);
        let mut records = sealed(&mut sealer, &sent);
        records.extend_from_slice(sealer.close_notify().expect("close_notify"));
        let (received, closed) = rustls_reads(&mut server, &records);
        assert!(received == sent, "rustls read other bytes than were sent");
        assert!(closed, "rustls did not see the close_notify");

        // Rustls to here: writes of odd sizes, read back 1 000 bytes at a time (records split
        // across reads), then rustls's close_notify ends it.
        let answer = pattern(123_457, 3);
        server.set_buffer_limit(None);
        for piece in answer.chunks(40_001) {
            server.writer().write_all(piece).expect("plaintext taken");
        }
        server.send_close_notify();
        let mut records = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut records).expect("records written");
        }
        let (plain, closed) = opened(&mut opener, &records, 1_000).expect("opened");
        assert!(
            plain == answer,
            "the opened bytes differ from what rustls sent"
        );
        assert!(closed, "the close_notify was not seen");
    }

    #[test]
    fn a_changed_byte_or_a_record_that_is_not_tls_ends_the_tunnel_with_an_error() {
        let (client, server) = connected();
        let (mut sealer, _) = taken_over(server, 1);
        let (_, mut opener) = taken_over(client, 1);
        let mut records = sealed(&mut sealer, b"GET_TENSOR");
        records[HEADER + 2] ^= 1;
        let err = opened(&mut opener, &records, records.len()).expect_err("a changed byte");
        assert!(err.to_string().contains("integrity check"), "{err}");

        let (client, server) = connected();
        let (mut sealer, _) = taken_over(server, 1);
        let (_, mut opener) = taken_over(client, 1);
        let mut records = sealed(&mut sealer, b"HELLO");
        records[0] = 0x16;
        let err = opened(&mut opener, &records, records.len()).expect_err("not a record");
        assert!(err.to_string().contains("not a TLS 1.3 record"), "{err}");
        let (client, _) = connected();
        let (_, mut opener) = taken_over(client, 1);
        let err = opened(&mut opener, &[0x17, 3, 3, 0, 3], 5).expect_err("too short");
        assert!(err.to_string().contains("bad length"), "{err}");
    }
}
