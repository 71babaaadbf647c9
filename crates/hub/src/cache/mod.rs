//! The files on disk: the cache layout or a plain folder (`layout`), the download lock shared
//! with `huggingface_hub` (`lock`), what the cache holds and removing it (`inventory`).

pub mod inventory;
pub mod layout;
pub mod lock;

pub use layout::{Destination, FilePaths};
pub use lock::DownloadLock;
