//! A tunnel's bytes once its upgrade is answered: the channel's TCP socket and TLS state are
//! taken back from hyper, and each way is copied on a blocking thread of its own — one read,
//! one encryption (or decryption) and one write per chunk, the TLS records sent as soon as the
//! chunk is read, no task wake-up between. llama.cpp RPC is a chain of small round trips and
//! large transfers: both cost a few system calls a chunk this way.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use rustls::Connection;

use crate::rpc_tunnel::Traffic;

/// The most one read takes: a chunk of a model's weights crosses as a few 16 KiB records in
/// one write.
pub const CHUNK: usize = 256 * 1024;

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
    let mut channel = take_over(upgraded)?;
    channel.tls.set_buffer_limit(None);
    let local = blocking(local.into_std()?)?;
    let net = blocking(channel.tcp)?;
    let closer = Closer::of(&local, &net)?;
    let tls = Arc::new(Mutex::new(channel.tls));
    let outward = {
        let (local, net, tls, traffic) = (
            local.try_clone()?,
            net.try_clone()?,
            tls.clone(),
            traffic.clone(),
        );
        let closer = Closer::of(&local, &net)?;
        tokio::task::spawn_blocking(move || closer.after(outward(local, net, &tls, &traffic)))
    };
    let (first, inward_closer) = (channel.first, Closer::of(&local, &net)?);
    let inward = tokio::task::spawn_blocking(move || {
        inward_closer.after(inward(net, local, &tls, first, &traffic))
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

/// `local`'s bytes, encrypted, to the channel; a close_notify when `local` ends.
fn outward(
    mut local: TcpStream,
    mut net: TcpStream,
    tls: &Mutex<Connection>,
    traffic: &Traffic,
) -> io::Result<()> {
    let mut chunk = vec![0u8; CHUNK];
    let mut records = Vec::with_capacity(CHUNK + CHUNK / 8);
    loop {
        let read = read_some(&mut local, &mut chunk)?;
        records.clear();
        encrypt(tls, &chunk[..read], &mut records)?;
        net.write_all(&records)?;
        if read == 0 {
            return Ok(());
        }
        traffic.sent.fetch_add(read as u64, Ordering::Relaxed);
    }
}

/// The channel's records, decrypted, to `local` (after `first`), until the far end closes.
fn inward(
    mut net: TcpStream,
    mut local: TcpStream,
    tls: &Mutex<Connection>,
    first: Bytes,
    traffic: &Traffic,
) -> io::Result<()> {
    let mut chunk = vec![0u8; CHUNK];
    let mut plain = Vec::with_capacity(CHUNK);
    plain.extend_from_slice(&first);
    // What the TLS state already holds goes first.
    let mut closed = decrypt(tls, &[], &mut plain)?;
    loop {
        local.write_all(&plain)?;
        traffic
            .received
            .fetch_add(plain.len() as u64, Ordering::Relaxed);
        plain.clear();
        if closed {
            return Ok(());
        }
        let read = read_some(&mut net, &mut chunk)?;
        if read == 0 {
            return Ok(());
        }
        closed = decrypt(tls, &chunk[..read], &mut plain)?;
    }
}

/// `plain` as TLS records appended to `records` (a close_notify when it is empty), with
/// whatever else the TLS state had to send before it.
fn encrypt(tls: &Mutex<Connection>, plain: &[u8], records: &mut Vec<u8>) -> io::Result<()> {
    let mut tls = lock(tls);
    if plain.is_empty() {
        tls.send_close_notify();
    } else {
        tls.writer().write_all(plain)?;
    }
    while tls.wants_write() {
        tls.write_tls(records)?;
    }
    Ok(())
}

/// `records` read from the channel, their plaintext appended to `plain`; whether the far end
/// closed the connection.
fn decrypt(tls: &Mutex<Connection>, mut records: &[u8], plain: &mut Vec<u8>) -> io::Result<bool> {
    let mut tls = lock(tls);
    loop {
        let state = tls
            .process_new_packets()
            .map_err(|err| io::Error::new(ErrorKind::InvalidData, err))?;
        match tls.reader().read_to_end(plain) {
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
        if state.peer_has_closed() || records.is_empty() {
            return Ok(state.peer_has_closed());
        }
        tls.read_tls(&mut records)?;
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

fn lock(tls: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    tls.lock().unwrap_or_else(PoisonError::into_inner)
}
