//! A tunnel's bytes once its upgrade is answered: the channel's TCP socket and TLS state are
//! taken back from hyper, rustls hands over the traffic keys, and each way is copied on a
//! blocking thread of its own — one read straight into TLS record slots, sealed (or opened)
//! where the bytes lie, one write; no task wake-up and no copy between. llama.cpp RPC is a
//! chain of small messages and large transfers (a token's logits, a model's weights): both
//! cost a few system calls a chunk this way.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use rustls::Connection;

use crate::rpc_records::{write_all_slices, Keys, Opener, Sealer, RECORD_PLAIN};
use crate::rpc_tunnel::Traffic;

/// The most one read takes: a chunk of a model's weights crosses as 16 records in one write.
pub const CHUNK: usize = 16 * RECORD_PLAIN;

/// The channel under an upgraded tunnel.
struct Channel {
    tcp: TcpStream,
    tls: Connection,
    /// Plaintext hyper read past the upgrade's headers: the far end's first bytes.
    first: Bytes,
}

/// Copies `local`'s bytes to the upgraded channel and the channel's to `local` until either
/// side ends (then both do); `traffic.sent` counts what left `local`, `traffic.received` what
/// reached it. Dropping the future ends the copying.
pub async fn pipe(
    local: tokio::net::TcpStream,
    upgraded: hyper::upgrade::Upgraded,
    traffic: Arc<Traffic>,
) -> io::Result<()> {
    let channel = take_over(upgraded)?;
    let local = blocking(local.into_std()?)?;
    let net = blocking(channel.tcp.try_clone()?)?;
    let handed = hand_over(channel)?;
    let closer = Closer::of(&local, &net)?;
    let outward = {
        let (local, net, traffic) = (local.try_clone()?, net.try_clone()?, traffic.clone());
        let closer = Closer::of(&local, &net)?;
        let sealer = Sealer::new(handed.send, CHUNK / RECORD_PLAIN);
        tokio::task::spawn_blocking(move || closer.after(outward(local, net, sealer, &traffic)))
    };
    let inward_closer = Closer::of(&local, &net)?;
    let opener = Opener::new(handed.receive, CHUNK);
    let (first, closed) = (handed.first, handed.closed);
    let inward = tokio::task::spawn_blocking(move || {
        inward_closer.after(inward(net, local, opener, (first, closed), &traffic))
    });
    let (outward, inward) = tokio::join!(outward, inward);
    drop(closer);
    outward.map_err(io::Error::other)??;
    inward.map_err(io::Error::other)?
}

/// The TCP socket and TLS state under `upgraded`: the channel's own (dialled by `dial::open` or
/// accepted by `channel::serve`), or an error.
fn take_over(upgraded: hyper::upgrade::Upgraded) -> io::Result<Channel> {
    type Dialled = TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
    type Accepted = TokioIo<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;
    let upgraded = match upgraded.downcast::<Dialled>() {
        Ok(parts) => {
            let (tcp, tls) = parts.io.into_inner().into_inner();
            return Ok(Channel {
                tcp: tcp.into_std()?,
                tls: tls.into(),
                first: parts.read_buf,
            });
        }
        Err(upgraded) => upgraded,
    };
    match upgraded.downcast::<Accepted>() {
        Ok(parts) => {
            let (tcp, tls) = parts.io.into_inner().into_inner();
            Ok(Channel {
                tcp: tcp.into_std()?,
                tls: tls.into(),
                first: parts.read_buf,
            })
        }
        Err(_) => Err(io::Error::other(
            "the tunnel's connection is not the channel's TLS over TCP",
        )),
    }
}

fn blocking(stream: TcpStream) -> io::Result<TcpStream> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Shuts both sockets down when dropped: the other way's thread, blocked in a read, ends.
struct Closer(TcpStream, TcpStream);

impl Closer {
    fn of(local: &TcpStream, net: &TcpStream) -> io::Result<Self> {
        Ok(Closer(local.try_clone()?, net.try_clone()?))
    }

    /// A way's thread ended: the whole tunnel does (RPC has no half-closed connections).
    fn after(self, result: io::Result<()>) -> io::Result<()> {
        drop(self);
        result
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        let _ = self.0.shutdown(Shutdown::Both);
        let _ = self.1.shutdown(Shutdown::Both);
    }
}

/// What rustls hands over: the plaintext it (or hyper) already read, whether the far end
/// already closed, and each direction's keys.
struct HandedOver {
    first: Vec<u8>,
    closed: bool,
    send: Keys,
    receive: Keys,
}

/// The channel's TLS state reduced to its keys, once whatever it holds is taken out: the
/// plaintext it decrypted and not yet handed to hyper, and the records it has yet to send.
fn hand_over(channel: Channel) -> io::Result<HandedOver> {
    let Channel {
        mut tcp,
        mut tls,
        first,
    } = channel;
    let mut plain = first.to_vec();
    let state = tls
        .process_new_packets()
        .map_err(|err| io::Error::new(ErrorKind::InvalidData, err))?;
    match tls.reader().read_to_end(&mut plain) {
        Ok(_) => {}
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        Err(err) => return Err(err),
    }
    // `tcp` is the socket `pipe` already made blocking (through its clone).
    while tls.wants_write() {
        tls.write_tls(&mut tcp)?;
    }
    let secrets = tls
        .dangerous_extract_secrets()
        .map_err(|err| io::Error::other(format!("the tunnel's TLS keys: {err}")))?;
    Ok(HandedOver {
        first: plain,
        closed: state.peer_has_closed(),
        send: Keys::new(secrets.tx.0, secrets.tx.1)?,
        receive: Keys::new(secrets.rx.0, secrets.rx.1)?,
    })
}

/// `local`'s bytes, sealed, to the channel; a close_notify when `local` ends.
fn outward(
    mut local: TcpStream,
    mut net: TcpStream,
    mut sealer: Sealer,
    traffic: &Traffic,
) -> io::Result<()> {
    loop {
        let read = loop {
            match local.read_vectored(&mut sealer.plaintext_areas()) {
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if read == 0 {
            return net.write_all(sealer.close_notify()?);
        }
        net.write_all(sealer.seal(read)?)?;
        traffic.sent.fetch_add(read as u64, Ordering::Relaxed);
    }
}

/// The channel's records, opened, to `local` (after what was already read, `first`), until
/// the far end closes.
fn inward(
    mut net: TcpStream,
    mut local: TcpStream,
    mut opener: Opener,
    (first, closed): (Vec<u8>, bool),
    traffic: &Traffic,
) -> io::Result<()> {
    local.write_all(&first)?;
    traffic
        .received
        .fetch_add(first.len() as u64, Ordering::Relaxed);
    if closed {
        return Ok(());
    }
    loop {
        let read = read_some(&mut net, opener.unfilled())?;
        if read == 0 {
            return Ok(());
        }
        let opened = opener.open(read)?;
        write_all_slices(&mut local, &opened.plaintext)?;
        let moved: usize = opened.plaintext.iter().map(|slice| slice.len()).sum();
        traffic.received.fetch_add(moved as u64, Ordering::Relaxed);
        if opened.closed {
            return Ok(());
        }
    }
}

/// One read, again when a signal interrupted it.
fn read_some(stream: &mut TcpStream, buffer: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buffer) {
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
