//! The channel's TLS: both sides present their own self-signed certificate; no CA and no host
//! names. The dialling side accepts only the certificate whose fingerprint it pinned; the
//! listening side takes any certificate whose owner proves it holds the key, and the channel's
//! routes then admit only pinned fingerprints (the join route excepted, which pins a new one).
//! Handshake signatures are checked with the ring provider's algorithms.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::fingerprint::Fingerprint;
use crate::identity::Identity;

/// The certificate presented is not the one pinned.
#[derive(Debug, thiserror::Error)]
#[error("expected fingerprint {expected}, presented {presented}")]
pub struct FingerprintMismatch {
    pub expected: Fingerprint,
    pub presented: Fingerprint,
}

/// The ring provider: the only one this crate uses, AES-128-GCM first (as strong a choice for
/// TLS 1.3 as AES-256, and four rounds in fourteen cheaper on a tunnel's bulk bytes).
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite;
    Arc::new(CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::ring::default_provider()
    })
}

/// The handshake signature checks both verifiers make, with the provider's algorithms (each
/// verifier holds its `provider`).
macro_rules! signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
}

/// Accepts the server certificate with the pinned fingerprint and no other.
#[derive(Debug)]
pub struct PinnedServerVerifier {
    expected: Fingerprint,
    provider: Arc<CryptoProvider>,
}

impl PinnedServerVerifier {
    pub fn new(expected: Fingerprint) -> Self {
        Self {
            expected,
            provider: provider(),
        }
    }
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Fingerprint::of_der(end_entity);
        if presented == self.expected {
            return Ok(ServerCertVerified::assertion());
        }
        let mismatch = FingerprintMismatch {
            expected: self.expected,
            presented,
        };
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Other(rustls::OtherError(Arc::new(mismatch))),
        ))
    }

    signature_checks!();
}

/// Requires a client certificate and its proof of the key; which certificates are admitted is
/// the channel's pin check, made on the fingerprint after the handshake.
#[derive(Debug)]
pub struct ClientProvesItsKey {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientProvesItsKey {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    signature_checks!();
}

/// The listening side's configuration: TLS 1.3 only, this daemon's certificate, a client
/// certificate required; an RPC tunnel may take its connection's traffic keys
/// (`rpc_records`).
pub fn server_config(identity: &Identity) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = provider();
    let verifier = Arc::new(ClientProvesItsKey {
        provider: provider.clone(),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![identity.certificate.clone()], identity.key())?;
    config.enable_secret_extraction = true;
    Ok(config)
}

/// The dialling side's configuration: TLS 1.3 only, the peer pinned to `expected`, this
/// daemon's certificate presented; an RPC tunnel may take its connection's traffic keys.
pub fn client_config(
    identity: &Identity,
    expected: Fingerprint,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServerVerifier::new(expected)))
        .with_client_auth_cert(vec![identity.certificate.clone()], identity.key())?;
    config.enable_secret_extraction = true;
    Ok(config)
}

/// The pin mismatch inside a failed handshake's error, if that is why it failed.
pub fn mismatch_in(err: &std::io::Error) -> Option<&FingerprintMismatch> {
    let rustls_error = err.get_ref()?.downcast_ref::<rustls::Error>()?;
    match rustls_error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            other.0.downcast_ref::<FingerprintMismatch>()
        }
        _ => None,
    }
}
