//! Where ik_llama.cpp's memory use differs from the plan, which follows llama.cpp's (and is
//! checked against llama.cpp's own `llama-fit-params`): its MLA cache modes, the attention batch
//! cap and run-time repacking. Said as notes when a profile on an ik_llama.cpp build is saved.
//!
//! In the ik_llama.cpp tree Rigdeck builds (`ik-llama-cpp-python` 0.1.5; `llama_kv_cache_init`
//! and `llama_model::cache_size`), an MLA model's cache with flash attention (its default) is the
//! latent K row alone, what the plan counts, whatever `-mla` says. Without flash attention,
//! `-mla 1` adds a transposed V cache of the latent width per token and layer, and `-mla 2`/`3`
//! (3 is its default) keep the latent in the `-ctv` type instead of `-ctk`. `-amb` only applies
//! without flash attention; `-rtr` turns memory mapping off.

use crate::placement::model::AttentionLayout;
use crate::placement::options::PlacementOptions;

use super::engine_settings::EngineSettings;

/// What ik_llama.cpp's settings change in the memory the plan gives. `attention` is the model's
/// (`None` when its header could not be read); `placement` the profile's.
pub fn notes(
    settings: &EngineSettings,
    attention: Option<&AttentionLayout>,
    placement: &PlacementOptions,
) -> Vec<String> {
    let mut notes = Vec::new();
    let flash_attention = placement.flash_attention;
    if let Some(note) = attention.and_then(|a| mla_note(settings.mla, a, placement)) {
        notes.push(note);
    }
    if let Some(mib) = settings.attn_max_batch_mib {
        notes.push(match flash_attention {
            true => format!(
                "ik_llama.cpp applies -amb {mib} only without flash attention, which this \
                 profile uses: it changes nothing here"
            ),
            false => format!(
                "ik_llama.cpp -amb {mib} caps the attention compute buffer at {mib} MiB: the \
                 planned compute (llama.cpp's figure) may be above what it uses"
            ),
        });
    }
    if settings.run_time_repack {
        notes.push(
            "ik_llama.cpp -rtr repacks the weights kept on the CPU while loading: they are read \
             into RAM instead of mapped from the file, so the host needs their whole size free \
             (nothing is shared with the page cache) and loading takes longer"
                .to_owned(),
        );
    }
    notes
}

/// `-mla` (`None`: ik_llama.cpp's default, 3) against the model: a note where it changes the
/// cache the plan counts.
fn mla_note(
    mode: Option<u8>,
    attention: &AttentionLayout,
    placement: &PlacementOptions,
) -> Option<String> {
    if !attention.mla {
        return mode.map(|mode| {
            format!(
                "ik_llama.cpp's -mla {mode} only changes models with latent attention (DeepSeek, \
                 Kimi, GLM-5); this one has none, so it changes nothing"
            )
        });
    }
    if placement.flash_attention {
        return None;
    }
    let (k_type, v_type) = (placement.cache_type_k.name(), placement.cache_type_v.name());
    if mode == Some(1) && attention.key_length > 0 {
        let extra = f64::from(attention.value_length) / f64::from(attention.key_length) * 100.0;
        return Some(format!(
            "without flash attention, ik_llama.cpp -mla 1 keeps a transposed V cache ({} values \
             per token and layer, {v_type}) beside the latent K cache ({}, {k_type}) that the \
             plan counts: about {extra:.0} % more KV cache than planned at equal types; -mla 2 \
             or 3 (its default), or flash attention, keep the latent alone",
            attention.value_length, attention.key_length
        ));
    }
    (mode != Some(1) && k_type != v_type).then(|| {
        format!(
            "without flash attention, ik_llama.cpp keeps the latent cache of -mla 2 and 3 (its \
             default) in the V type ({v_type}), not the K type ({k_type}) the plan counts"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::options::KvType;

    fn attention(mla: bool, key_length: u32, value_length: u32) -> AttentionLayout {
        AttentionLayout {
            head_count_kv: vec![1; 4],
            head_count: vec![16; 4],
            key_length,
            value_length,
            key_length_swa: 0,
            value_length_swa: 0,
            shared_kv_layers: 0,
            cacheless: false,
            mla,
            mla_key_length: if mla { 192 } else { 0 },
            mla_value_length: if mla { 128 } else { 0 },
            sliding_window: None,
            swa_layers: Vec::new(),
            indexer_key_length: Vec::new(),
            indexer_value_length: 0,
            indexer_heads: 0,
            indexer_top_k: 0,
            indexer_block_size: 0,
            compress_ratios: Vec::new(),
            recurrent: None,
            recurrent_layers: Vec::new(),
        }
    }

    fn placement(flash_attention: bool) -> PlacementOptions {
        PlacementOptions {
            flash_attention,
            ..PlacementOptions::default()
        }
    }

    fn with_mla(mla: u8) -> EngineSettings {
        EngineSettings {
            mla: Some(mla),
            ..EngineSettings::default()
        }
    }

    #[test]
    fn without_flash_attention_mla_1_adds_the_transposed_v_cache() {
        let deepseek = attention(true, 576, 512);
        let notes = notes(&with_mla(1), Some(&deepseek), &placement(false));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("about 89 % more KV cache"), "{notes:?}");
        for mode in [2, 3] {
            let same = super::notes(&with_mla(mode), Some(&deepseek), &placement(false));
            assert!(same.is_empty(), "{same:?}");
        }
        // With flash attention (ik_llama.cpp's default) every mode keeps the latent alone.
        assert!(super::notes(&with_mla(1), Some(&deepseek), &placement(true)).is_empty());
    }

    #[test]
    fn the_default_mode_keeps_the_latent_in_the_v_type_without_flash_attention() {
        let deepseek = attention(true, 576, 512);
        let mut options = placement(false);
        options.cache_type_k = KvType::Q8_0;
        let notes = notes(&EngineSettings::default(), Some(&deepseek), &options);
        assert!(
            notes[0].contains("V type (f16), not the K type (q8_0)"),
            "{notes:?}"
        );
    }

    #[test]
    fn other_models_and_unreadable_headers() {
        let llama = attention(false, 128, 128);
        let notes = notes(&with_mla(3), Some(&llama), &placement(true));
        assert!(notes[0].contains("changes nothing"), "{notes:?}");
        assert!(
            super::notes(&EngineSettings::default(), Some(&llama), &placement(false)).is_empty()
        );
        assert!(super::notes(&with_mla(1), None, &placement(false)).is_empty());
    }

    #[test]
    fn the_attention_cap_and_repacking_are_explained() {
        let settings = EngineSettings {
            attn_max_batch_mib: Some(512),
            run_time_repack: true,
            ..EngineSettings::default()
        };
        let plain = attention(false, 128, 128);
        let with_fa = notes(&settings, Some(&plain), &placement(true));
        assert!(
            with_fa[0].contains("only without flash attention"),
            "{with_fa:?}"
        );
        assert!(with_fa[1].contains("read into RAM"), "{with_fa:?}");
        let without = notes(&settings, Some(&plain), &placement(false));
        assert!(without[0].contains("caps the attention compute buffer at 512 MiB"));
    }
}
