//! Where Rigdeck keeps its files: the config dir (token, settings) and the data dir (database, models).

use std::path::PathBuf;

/// The two folders Rigdeck owns. XDG locations by default; `RIGDECK_CONFIG_DIR` and
/// `RIGDECK_DATA_DIR` move them (tests and side-by-side installs use this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppPaths {
    pub config_dir: PathBuf,
    pub data_dir: PathBuf,
}

impl AppPaths {
    /// Resolves the folders from the environment, falling back to the XDG defaults
    /// (`~/.config/rigdeck`, `~/.local/share/rigdeck`).
    pub fn from_env() -> anyhow::Result<Self> {
        let config_dir = match std::env::var_os("RIGDECK_CONFIG_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => dirs::config_dir()
                .ok_or_else(|| {
                    anyhow::anyhow!("cannot find a config folder: set HOME or RIGDECK_CONFIG_DIR")
                })?
                .join("rigdeck"),
        };
        let data_dir = match std::env::var_os("RIGDECK_DATA_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => dirs::data_dir()
                .ok_or_else(|| {
                    anyhow::anyhow!("cannot find a data folder: set HOME or RIGDECK_DATA_DIR")
                })?
                .join("rigdeck"),
        };
        Ok(Self {
            config_dir,
            data_dir,
        })
    }

    pub fn token_file(&self) -> PathBuf {
        self.config_dir.join("token")
    }

    pub fn settings_file(&self) -> PathBuf {
        self.config_dir.join("settings.toml")
    }

    pub fn database_file(&self) -> PathBuf {
        self.data_dir.join("rigdeck.db")
    }

    /// Where Rigdeck puts the engines it builds and installs:
    /// `<data dir>/engines/<kind>-<version>-<backend>/`.
    pub fn engines_dir(&self) -> PathBuf {
        self.data_dir.join("engines")
    }

    /// The Hugging Face token the user gave Rigdeck (0600; `HF_TOKEN` wins over it).
    pub fn hub_token_file(&self) -> PathBuf {
        self.config_dir.join("hf_token")
    }

    /// Quality runs' files: recorded reference logits and the corpora they were recorded on.
    pub fn quality_dir(&self) -> PathBuf {
        self.data_dir.join("quality")
    }

    /// Rigdeck's own models folder, the first of the default model folders.
    pub fn models_dir(&self) -> PathBuf {
        self.data_dir.join("models")
    }
}
