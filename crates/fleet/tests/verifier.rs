//! The pinned verifier over real TLS handshakes on loopback: the pinned certificate is accepted,
//! any other refused with both fingerprints; the listener learns the dialler's certificate.

use std::sync::Arc;

use rigdeck_fleet::verifier::{client_config, mismatch_in, server_config};
use rigdeck_fleet::{Fingerprint, Identity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Listens once; answers with the fingerprint of the client's certificate (or the handshake's error).
async fn listen(
    identity: Identity,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<Option<Fingerprint>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&identity).unwrap()));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.ok()?;
        let seen = Fingerprint::of_der(tls.get_ref().1.peer_certificates()?.first()?);
        tls.write_all(b"ok").await.ok()?;
        tls.shutdown().await.ok()?;
        Some(seen)
    });
    (address, task)
}

async fn dial(
    identity: &Identity,
    address: std::net::SocketAddr,
    pin: Fingerprint,
) -> std::io::Result<Vec<u8>> {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_config(identity, pin).unwrap()));
    let tcp = TcpStream::connect(address).await?;
    let name = rustls::pki_types::ServerName::try_from("rigdeck-fleet").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await?;
    Ok(answer)
}

fn identity(dir: &tempfile::TempDir, which: &str) -> Identity {
    Identity::load_or_create(&dir.path().join(which)).unwrap()
}

#[tokio::test]
async fn the_pinned_certificate_is_accepted_and_the_listener_sees_the_diallers() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, desk) = (identity(&dir, "rig"), identity(&dir, "desk"));
    let (rig_print, desk_print) = (rig.fingerprint, desk.fingerprint);
    let (address, seen) = listen(rig).await;
    let answer = dial(&desk, address, rig_print).await.unwrap();
    assert_eq!(answer, b"ok");
    assert_eq!(seen.await.unwrap(), Some(desk_print));
}

#[tokio::test]
async fn any_other_certificate_is_refused_with_both_fingerprints() {
    let dir = tempfile::tempdir().unwrap();
    let (rig, desk, impostor) = (
        identity(&dir, "rig"),
        identity(&dir, "desk"),
        identity(&dir, "impostor"),
    );
    let (expected, presented) = (rig.fingerprint, impostor.fingerprint);
    let (address, seen) = listen(impostor).await;
    let err = dial(&desk, address, expected).await.unwrap_err();
    let mismatch = mismatch_in(&err).unwrap_or_else(|| panic!("not a pin mismatch: {err}"));
    assert_eq!(mismatch.expected, expected);
    assert_eq!(mismatch.presented, presented);
    assert_eq!(seen.await.unwrap(), None, "no data went to the impostor");
}

#[test]
fn the_identity_is_made_once_with_a_private_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let first = identity(&dir, "fleet");
    let again = identity(&dir, "fleet");
    assert_eq!(first.fingerprint, again.fingerprint);
    assert_eq!(first.name, again.name);
    let mode = std::fs::metadata(dir.path().join("fleet/key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::write(dir.path().join("fleet/name"), "bad name!\n").unwrap();
    let err = Identity::load_or_create(&dir.path().join("fleet"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("bad name!"), "{err}");
}
