//! The files on disk: the cache layout or a plain folder (`layout`), the download lock shared
//! with `huggingface_hub` (`lock`).

pub mod layout;
pub mod lock;

pub use layout::{Destination, FilePaths};
pub use lock::DownloadLock;
