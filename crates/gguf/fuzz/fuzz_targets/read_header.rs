//! libFuzzer target: the GGUF header reader must never panic, and every error must carry an
//! offset inside the input. Each input is read as a file of known size and as a stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rigdeck_gguf::{GgufFile, ModelSummary, ReadOptions};

fuzz_target!(|data: &[u8]| {
    match GgufFile::from_bytes(data, None) {
        Ok(file) => {
            assert!(file.data_end() <= data.len() as u64);
            let _ = ModelSummary::from_file(&file);
        }
        Err(e) => assert!(e.offset.is_some_and(|o| o <= data.len() as u64), "{e}"),
    }
    if let Err(e) = GgufFile::read(data, &ReadOptions::default()) {
        assert!(e.offset.is_some_and(|o| o <= data.len() as u64), "{e}");
    }
});
