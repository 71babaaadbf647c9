//! A corpus from a text file: checked to be a regular file of UTF-8 text with something in it,
//! at most [`MAX_FILE_BYTES`] long.

use std::io::ErrorKind;
use std::path::Path;

use tokio::io::AsyncReadExt;

use super::{CorpusError, CorpusText};

/// The largest corpus file read.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// The text of the file at `path`, labelled with its file name.
pub(super) async fn corpus(path: &Path) -> Result<CorpusText, CorpusError> {
    check_kind(path).await?;
    let bytes = read_at_most(path, MAX_FILE_BYTES).await?;
    let text = String::from_utf8(bytes).map_err(|e| CorpusError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if text.trim().is_empty() {
        return Err(CorpusError::Empty(path.to_owned()));
    }
    Ok(CorpusText::new(label(path), text, Vec::new()))
}

/// A regular file (a folder, a device or a pipe is refused before reading) not over the limit.
async fn check_kind(path: &Path) -> Result<(), CorpusError> {
    let metadata = tokio::fs::metadata(path)
        .await
        .map_err(|e| open_error(path, e))?;
    if metadata.is_dir() {
        return Err(CorpusError::Folder(path.to_owned()));
    }
    if !metadata.is_file() {
        return Err(CorpusError::NotAFile(path.to_owned()));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(CorpusError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// The file's bytes; a file that grew past `limit` since it was checked is refused too.
async fn read_at_most(path: &Path, limit: u64) -> Result<Vec<u8>, CorpusError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| open_error(path, e))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| open_error(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(CorpusError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

fn open_error(path: &Path, error: std::io::Error) -> CorpusError {
    match error.kind() {
        ErrorKind::NotFound => CorpusError::Missing(path.to_owned()),
        _ => CorpusError::Unreadable {
            path: path.to_owned(),
            source: error,
        },
    }
}

fn label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(name: &str, bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[tokio::test]
    async fn a_text_file_is_read_whole_and_labelled_with_its_name() {
        let (_dir, path) = written("notes.md", "Grüße aus Köln.\n日本語も。\n".as_bytes());
        let corpus = corpus(&path).await.unwrap();
        assert_eq!(corpus.label, "notes.md");
        assert_eq!(corpus.text, "Grüße aus Köln.\n日本語も。\n");
        assert_eq!(corpus.sha256.len(), 64);
        assert!(corpus.notes.is_empty());
    }

    #[tokio::test]
    async fn a_missing_file_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.txt");
        let error = corpus(&path).await.unwrap_err();
        assert!(matches!(error, CorpusError::Missing(_)), "{error:?}");
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains("give the path of a UTF-8 text file"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let error = corpus(dir.path()).await.unwrap_err();
        assert!(matches!(error, CorpusError::Folder(_)), "{error:?}");
        assert!(error
            .to_string()
            .contains(&dir.path().display().to_string()));
    }

    #[tokio::test]
    async fn a_device_is_refused_before_it_is_read() {
        let error = corpus(Path::new("/dev/zero")).await.unwrap_err();
        assert!(matches!(error, CorpusError::NotAFile(_)), "{error:?}");
        assert!(error.to_string().contains("/dev/zero"));
    }

    #[tokio::test]
    async fn text_that_is_not_utf8_names_the_byte_offset() {
        let mut bytes = "Café ".as_bytes().to_vec();
        bytes.extend_from_slice(&[0xC3, 0x28, b'x']);
        let (_dir, path) = written("latin.txt", &bytes);
        let error = corpus(&path).await.unwrap_err();
        match &error {
            CorpusError::NotUtf8 { offset, .. } => assert_eq!(*offset, "Café ".len()),
            other => panic!("not a UTF-8 error: {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains("latin.txt"), "{message}");
        assert!(message.contains("offset 6"), "{message}");
    }

    #[tokio::test]
    async fn an_empty_or_blank_file_is_refused() {
        for content in ["", " \n\t\r\n  "] {
            let (_dir, path) = written("blank.txt", content.as_bytes());
            let error = corpus(&path).await.unwrap_err();
            assert!(
                matches!(error, CorpusError::Empty(_)),
                "{content:?}: {error:?}"
            );
            assert!(error.to_string().contains("blank.txt"));
        }
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_refused_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.txt");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: the size is over the limit without writing half a gigabyte.
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        let error = corpus(&path).await.unwrap_err();
        assert!(matches!(error, CorpusError::TooLarge { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("huge.txt") && message.contains("512 MiB"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_file_that_grew_past_the_limit_is_cut_off_and_refused() {
        let (_dir, path) = written("grown.txt", b"0123456789");
        let error = read_at_most(&path, 4).await.unwrap_err();
        assert!(matches!(error, CorpusError::TooLarge { .. }), "{error:?}");
        assert_eq!(read_at_most(&path, 10).await.unwrap(), b"0123456789");
    }
}
