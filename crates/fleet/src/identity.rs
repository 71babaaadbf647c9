//! The daemon's own fleet identity: a self-signed certificate and its key, made at first start
//! under `<config>/fleet/` (the key 0600), and the name it goes by (the host name by default).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::fingerprint::Fingerprint;

const CERTIFICATE_FILE: &str = "certificate.pem";
const KEY_FILE: &str = "key.pem";
const NAME_FILE: &str = "name";

/// Why the identity could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot write the fleet identity in {dir}: {source}; check that the config folder is writable (or set RIGDECK_CONFIG_DIR)")]
    Write {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("the fleet identity in {dir} is damaged ({detail}): delete that folder to make a new one (paired peers will have to pair again)")]
    Damaged { dir: PathBuf, detail: String },
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the fleet name '{name}' in {file} is not usable: use 1 to 63 letters, digits, '.', '-' or '_' (edit the file and restart the daemon)")]
    BadName { name: String, file: PathBuf },
}

/// This daemon's certificate, key and name.
pub struct Identity {
    pub name: String,
    pub certificate: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    pub fingerprint: Fingerprint,
    pub dir: PathBuf,
}

impl Identity {
    /// Reads the identity in `dir`, making it first when there is none.
    pub fn load_or_create(dir: &Path) -> Result<Self, IdentityError> {
        let write_error = |source| IdentityError::Write {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(write_error)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(write_error)?;
        if !dir.join(CERTIFICATE_FILE).exists() {
            create_certificate(dir)?;
            tracing::info!("made this daemon's fleet certificate in {}", dir.display());
        }
        let name = load_or_create_name(dir)?;
        let (certificate, key) = read_certificate(dir)?;
        Ok(Self {
            name,
            fingerprint: Fingerprint::of_der(&certificate),
            certificate,
            key,
            dir: dir.to_owned(),
        })
    }

    /// A copy of the private key (rustls takes ownership of one per configuration).
    pub fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
}

/// A name a peer can be called by on the command line.
pub fn is_usable_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The host name with anything unusable in a name replaced by '-'.
fn host_name() -> String {
    let uname = rustix::system::uname();
    let raw = uname.nodename().to_string_lossy();
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    if name.is_empty() {
        "rigdeck".to_owned()
    } else {
        name
    }
}

fn load_or_create_name(dir: &Path) -> Result<String, IdentityError> {
    let file = dir.join(NAME_FILE);
    let name = match std::fs::read_to_string(&file) {
        Ok(text) => text.trim().to_owned(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let name = host_name();
            std::fs::write(&file, format!("{name}\n")).map_err(|source| IdentityError::Write {
                dir: dir.to_owned(),
                source,
            })?;
            name
        }
        Err(source) => {
            return Err(IdentityError::Write {
                dir: dir.to_owned(),
                source,
            })
        }
    };
    if !is_usable_name(&name) {
        return Err(IdentityError::BadName { name, file });
    }
    Ok(name)
}

/// A new ECDSA P-256 key and a self-signed certificate for it, written key first (0600), each
/// through a temporary file, so a crash leaves either no certificate or a whole identity.
fn create_certificate(dir: &Path) -> Result<(), IdentityError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["rigdeck-fleet".to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Rigdeck fleet daemon");
    let certificate = params.self_signed(&key)?;
    let write_error = |source| IdentityError::Write {
        dir: dir.to_owned(),
        source,
    };
    write_private(&dir.join(KEY_FILE), key.serialize_pem().as_bytes()).map_err(write_error)?;
    let temporary = dir.join(format!("{CERTIFICATE_FILE}.new"));
    std::fs::write(&temporary, certificate.pem()).map_err(write_error)?;
    std::fs::rename(&temporary, dir.join(CERTIFICATE_FILE)).map_err(write_error)?;
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("new");
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

fn read_certificate(
    dir: &Path,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), IdentityError> {
    let damaged = |detail: String| IdentityError::Damaged {
        dir: dir.to_owned(),
        detail,
    };
    let certificate = CertificateDer::from_pem_file(dir.join(CERTIFICATE_FILE))
        .map_err(|err| damaged(format!("{CERTIFICATE_FILE}: {err}")))?;
    let key_path = dir.join(KEY_FILE);
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|err| damaged(format!("{KEY_FILE}: {err}")))?;
    keep_private(&key_path);
    Ok((certificate, key))
}

/// A key file others may read is made 0600 again, and said so.
fn keep_private(path: &Path) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            "{} was readable by others: made it 0600 again",
            path.display()
        );
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}
