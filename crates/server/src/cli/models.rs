//! `rigdeck models`: the models in the configured folders, with what they are.

use std::process::ExitCode;

use rigdeck_core::library::{Library, ModelEntry, ModelFormat};
use rigdeck_core::paths::AppPaths;
use rigdeck_core::settings::SettingsStore;

#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
    /// Print the full list as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let (settings, problem) = SettingsStore::load(&AppPaths::from_env()?);
    if let Some(problem) = problem {
        eprintln!("rigdeck: {problem}");
    }
    let folders = settings.current().library_folders();
    let mut library = Library::default();
    library.rescan(&folders);
    if args.json {
        println!("{}", serde_json::to_string_pretty(library.entries())?);
        return Ok(ExitCode::SUCCESS);
    }
    if library.entries().is_empty() {
        println!("no models found in:");
        for f in &folders {
            println!("  {}", f.display());
        }
        println!("add folders in the settings (or settings.toml: model_folders = [\"/path\"])");
    }
    for entry in library.entries() {
        println!("{}", line(entry));
    }
    Ok(ExitCode::SUCCESS)
}

fn line(e: &ModelEntry) -> String {
    let gib = e.size_bytes as f64 / (1u64 << 30) as f64;
    let facts = match (&e.format, &e.gguf, &e.safetensors) {
        (ModelFormat::Gguf, Some(s), _) => {
            let quant = s
                .file_type
                .as_ref()
                .map(|f| f.label.clone())
                .unwrap_or_else(|| "?".into());
            let experts = s
                .experts
                .as_ref()
                .map(|x| format!(", {} experts ({} active)", x.count, x.used.unwrap_or(0)))
                .unwrap_or_default();
            format!(
                "{} {} layers, ctx {}{experts}",
                s.architecture.as_deref().unwrap_or("?"),
                s.layers.unwrap_or(0),
                s.context_length.unwrap_or(0)
            ) + &format!(
                ", {quant}, {:.2} bits/weight",
                s.bits_per_weight.unwrap_or(0.0)
            )
        }
        (ModelFormat::Safetensors, _, Some(s)) => format!(
            "safetensors {} {} layers, {}",
            s.model_type.as_deref().unwrap_or("?"),
            s.layers.unwrap_or(0),
            s.quantization
                .as_deref()
                .or(s.dtype.as_deref())
                .unwrap_or("?")
        ),
        _ => String::new(),
    };
    let problem = e
        .problem
        .as_ref()
        .map(|p| format!("\n    problem: {p}"))
        .unwrap_or_default();
    format!(
        "{:<40} {gib:>8.1} GiB  {facts}\n    {}{problem}",
        e.name,
        e.path.display()
    )
}
