//! Which device each layer lands on, following llama.cpp's `load_tensors`
//! (`src/llama-model.cpp`): the last `-ngl` layers (the output counting as one) go to the GPUs,
//! split at the cumulative `-ts` fractions; the input embedding stays on the CPU.

use super::options::{DeviceId, PlacementOptions, SplitMode};

/// The device of every repeating layer and of the output layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDevices {
    pub layers: Vec<DeviceId>,
    pub output: DeviceId,
}

/// `free_bytes[i]` is GPU i's free memory, used only when `-ts` is absent or all zero.
pub fn assign_layers(n_layer: u32, free_bytes: &[u64], options: &PlacementOptions) -> LayerDevices {
    let gpus = active_gpus(free_bytes.len() as u32, options);
    if gpus.is_empty() {
        return LayerDevices {
            layers: vec![DeviceId::Cpu; n_layer as usize],
            output: DeviceId::Cpu,
        };
    }
    let splits = cumulative_splits(&gpus, free_bytes, &options.tensor_split);
    let total = n_layer + 1;
    let ngl = options.n_gpu_layers.map_or(total, |n| n.min(total));
    let first_gpu_layer = total - ngl;
    let device_of = |il: u32| -> DeviceId {
        if il < first_gpu_layer || ngl == 0 {
            return DeviceId::Cpu;
        }
        let position = f64::from(il - first_gpu_layer) / f64::from(ngl);
        // upper_bound: the first split point strictly greater than the position.
        let slot = splits
            .iter()
            .position(|&s| s > position)
            .unwrap_or(splits.len() - 1);
        DeviceId::Gpu(gpus[slot])
    };
    LayerDevices {
        layers: (0..n_layer).map(device_of).collect(),
        output: device_of(n_layer),
    }
}

/// `-sm none` uses only the main GPU; the other modes use all of them.
fn active_gpus(n_gpus: u32, options: &PlacementOptions) -> Vec<u32> {
    match options.split_mode {
        SplitMode::None if options.main_gpu < n_gpus => vec![options.main_gpu],
        SplitMode::None => Vec::new(),
        SplitMode::Layer | SplitMode::Row => (0..n_gpus).collect(),
    }
}

/// Cumulative fractions, normalised to end at 1; all-zero or absent `-ts` falls back to free memory.
fn cumulative_splits(gpus: &[u32], free_bytes: &[u64], tensor_split: &[f64]) -> Vec<f64> {
    let given: Vec<f64> = gpus
        .iter()
        .map(|&g| {
            tensor_split
                .get(g as usize)
                .copied()
                .unwrap_or(0.0)
                .max(0.0)
        })
        .collect();
    let weights = if given.iter().all(|&w| w == 0.0) {
        gpus.iter()
            .map(|&g| free_bytes.get(g as usize).copied().unwrap_or(0) as f64)
            .collect()
    } else {
        given
    };
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        // No information at all: an even split.
        let n = gpus.len() as f64;
        return (1..=gpus.len()).map(|i| i as f64 / n).collect();
    }
    let mut running = 0.0;
    weights
        .iter()
        .map(|w| {
            running += w;
            running / sum
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ngl: Option<u32>, ts: &[f64]) -> PlacementOptions {
        PlacementOptions {
            n_gpu_layers: ngl,
            tensor_split: ts.to_vec(),
            ..Default::default()
        }
    }

    fn count(devices: &LayerDevices, d: DeviceId) -> usize {
        devices.layers.iter().filter(|&&x| x == d).count()
    }

    #[test]
    fn all_layers_split_evenly_over_equal_cards() {
        let d = assign_layers(32, &[24 << 30, 24 << 30], &opts(None, &[]));
        // 33 slots (32 layers + output) over two cards: positions < 0.5 on GPU 0.
        assert_eq!(count(&d, DeviceId::Gpu(0)), 17);
        assert_eq!(count(&d, DeviceId::Gpu(1)), 15);
        assert_eq!(d.output, DeviceId::Gpu(1));
    }

    #[test]
    fn ngl_keeps_the_first_layers_on_the_cpu() {
        let d = assign_layers(10, &[8 << 30], &opts(Some(5), &[]));
        assert_eq!(&d.layers[..6], &[DeviceId::Cpu; 6]);
        assert_eq!(&d.layers[6..], &[DeviceId::Gpu(0); 4]);
        assert_eq!(
            d.output,
            DeviceId::Gpu(0),
            "the output layer counts in -ngl"
        );
        let none = assign_layers(10, &[8 << 30], &opts(Some(0), &[]));
        assert!(none.layers.iter().all(|&x| x == DeviceId::Cpu));
        assert_eq!(none.output, DeviceId::Cpu);
    }

    #[test]
    fn tensor_split_proportions_are_followed() {
        // The seed's 4× PRO 6000 split: 1,0.75,0.9,1 over 78 layers + output.
        let d = assign_layers(78, &[0; 4], &opts(None, &[1.0, 0.75, 0.9, 1.0]));
        let counts: Vec<usize> = (0..4).map(|g| count(&d, DeviceId::Gpu(g))).collect();
        assert_eq!(counts.iter().sum::<usize>(), 78);
        assert_eq!(counts, vec![22, 16, 20, 20]);
    }

    #[test]
    fn no_gpus_means_everything_on_the_cpu() {
        let d = assign_layers(4, &[], &opts(None, &[]));
        assert_eq!(d.layers, vec![DeviceId::Cpu; 4]);
    }

    #[test]
    fn split_mode_none_uses_the_main_gpu_only() {
        let options = PlacementOptions {
            split_mode: SplitMode::None,
            main_gpu: 1,
            ..Default::default()
        };
        let d = assign_layers(4, &[1, 1], &options);
        assert_eq!(d.layers, vec![DeviceId::Gpu(1); 4]);
    }
}
