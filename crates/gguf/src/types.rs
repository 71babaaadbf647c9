//! The ggml tensor types: id, name, block size and bytes per block, and the size of a tensor.
//!
//! The table is ggml's `type_traits` (`ggml/src/ggml.c`) and gguf-py's `GGML_QUANT_SIZES`
//! (`gguf-py/gguf/constants.py`), checked against both. Ids 4, 5, 31–33 and 36–38 were removed
//! from ggml and never appear in GGUF files; they are unknown here as they are in llama.cpp.

use serde::{Serialize, Serializer};
use std::fmt;

/// Defines the enum and its lookup functions from one table, so the four facts of a type
/// (id, name, block size, bytes per block) can never drift apart.
macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:literal, $bytes:literal;)*) => {
        /// A ggml tensor type as stored in a GGUF tensor info.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum GgmlType {
            $(
                #[doc = concat!("`", $name, "` (id ", $id, "): ", $block, " elements per block, ",
                    $bytes, " bytes per block.")]
                $variant,
            )*
        }

        impl GgmlType {
            /// Every known type, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$variant),*];

            /// The type with this id, or `None` for an id ggml does not define (or removed).
            pub const fn from_id(id: u32) -> Option<GgmlType> {
                match id {
                    $($id => Some(GgmlType::$variant),)*
                    _ => None,
                }
            }

            /// The id stored in GGUF files.
            pub const fn id(self) -> u32 {
                match self { $(GgmlType::$variant => $id,)* }
            }

            /// ggml's upper-case name, e.g. `Q4_K`.
            pub const fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => $name,)* }
            }

            /// Elements per block (1 for the plain float and integer types).
            pub const fn block_size(self) -> u64 {
                match self { $(GgmlType::$variant => $block,)* }
            }

            /// Bytes per block.
            pub const fn type_size(self) -> u64 {
                match self { $(GgmlType::$variant => $bytes,)* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    MXFP4 = 39, "MXFP4", 32, 17;
    NVFP4 = 40, "NVFP4", 64, 36;
    Q1_0 = 41, "Q1_0", 128, 18;
    Q2_0 = 42, "Q2_0", 64, 18;
}

impl GgmlType {
    /// The type with this name, ignoring case (`q4_k` and `Q4_K` both work).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Whether the type packs several elements into a block with shared scales.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Average bits per element, e.g. 4.5 for `Q4_K`.
    pub fn bits_per_weight(self) -> f64 {
        // Both factors are small constants, so the conversion is exact.
        (self.type_size() * 8) as f64 / self.block_size() as f64
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for GgmlType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Why a tensor's byte size cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// ggml stores whole blocks per row, so a row must hold a whole number of blocks.
    #[error("its rows of {row} elements are not a multiple of the {ty} block size {block}")]
    PartialBlock {
        /// Elements per row (the first dimension).
        row: u64,
        /// The type's block size.
        block: u64,
        /// The tensor type.
        ty: GgmlType,
    },
    /// The shape is so large that its size in bytes does not fit 64 bits.
    #[error("its size in bytes does not fit 64 bits")]
    Overflow,
}

/// Bytes a tensor of this type and shape occupies: `ne0 / block * bytes * ne1 * ne2 * ne3`.
///
/// `dims` is in GGUF order (the row length first); an empty shape is a scalar.
pub fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> Result<u64, SizeError> {
    let row = dims.first().copied().unwrap_or(1);
    let block = ty.block_size();
    if row % block != 0 {
        return Err(SizeError::PartialBlock { row, block, ty });
    }
    let row_bytes = (row / block)
        .checked_mul(ty.type_size())
        .ok_or(SizeError::Overflow)?;
    dims.iter()
        .skip(1)
        .try_fold(row_bytes, |acc, &d| acc.checked_mul(d))
        .ok_or(SizeError::Overflow)
}

/// Number of elements of a shape, `None` if it overflows 64 bits.
pub fn element_count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference table, typed out separately from the macro so a typo in one shows up.
    const EXPECTED: &[(u32, &str, u64, u64)] = &[
        (0, "F32", 1, 4),
        (1, "F16", 1, 2),
        (2, "Q4_0", 32, 18),
        (3, "Q4_1", 32, 20),
        (6, "Q5_0", 32, 22),
        (7, "Q5_1", 32, 24),
        (8, "Q8_0", 32, 34),
        (9, "Q8_1", 32, 36),
        (10, "Q2_K", 256, 84),
        (11, "Q3_K", 256, 110),
        (12, "Q4_K", 256, 144),
        (13, "Q5_K", 256, 176),
        (14, "Q6_K", 256, 210),
        (15, "Q8_K", 256, 292),
        (16, "IQ2_XXS", 256, 66),
        (17, "IQ2_XS", 256, 74),
        (18, "IQ3_XXS", 256, 98),
        (19, "IQ1_S", 256, 50),
        (20, "IQ4_NL", 32, 18),
        (21, "IQ3_S", 256, 110),
        (22, "IQ2_S", 256, 82),
        (23, "IQ4_XS", 256, 136),
        (24, "I8", 1, 1),
        (25, "I16", 1, 2),
        (26, "I32", 1, 4),
        (27, "I64", 1, 8),
        (28, "F64", 1, 8),
        (29, "IQ1_M", 256, 56),
        (30, "BF16", 1, 2),
        (34, "TQ1_0", 256, 54),
        (35, "TQ2_0", 256, 66),
        (39, "MXFP4", 32, 17),
        (40, "NVFP4", 64, 36),
        (41, "Q1_0", 128, 18),
        (42, "Q2_0", 64, 18),
    ];

    #[test]
    fn every_type_has_the_reference_id_name_block_and_bytes() {
        assert_eq!(GgmlType::ALL.len(), EXPECTED.len());
        for &(id, name, block, bytes) in EXPECTED {
            let ty = GgmlType::from_id(id).unwrap();
            assert_eq!(ty.id(), id);
            assert_eq!(ty.name(), name);
            assert_eq!(ty.block_size(), block, "{name}");
            assert_eq!(ty.type_size(), bytes, "{name}");
            assert_eq!(GgmlType::from_name(&name.to_lowercase()), Some(ty));
            // One row of one block is exactly one block's bytes.
            assert_eq!(tensor_bytes(ty, &[block]).unwrap(), bytes);
            assert_eq!(tensor_bytes(ty, &[block * 4, 3, 2]).unwrap(), bytes * 24);
        }
    }

    #[test]
    fn removed_and_future_ids_are_unknown() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 43, 142, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn bits_per_weight_of_common_quants() {
        assert_eq!(GgmlType::Q4_K.bits_per_weight(), 4.5);
        assert_eq!(GgmlType::Q8_0.bits_per_weight(), 8.5);
        assert_eq!(GgmlType::IQ2_XXS.bits_per_weight(), 2.0625);
        assert!(!GgmlType::BF16.is_quantized());
    }

    #[test]
    fn row_not_divisible_by_block_is_an_error() {
        assert_eq!(
            tensor_bytes(GgmlType::Q4_K, &[100, 2]),
            Err(SizeError::PartialBlock {
                row: 100,
                block: 256,
                ty: GgmlType::Q4_K
            })
        );
        assert_eq!(tensor_bytes(GgmlType::F32, &[7]).unwrap(), 28);
    }

    #[test]
    fn overflowing_shapes_are_errors_not_panics() {
        assert_eq!(
            tensor_bytes(GgmlType::F32, &[u64::MAX]),
            Err(SizeError::Overflow)
        );
        assert_eq!(
            tensor_bytes(GgmlType::F16, &[1 << 32, 1 << 32]),
            Err(SizeError::Overflow)
        );
        assert_eq!(element_count(&[1 << 40, 1 << 40]), None);
    }

    #[test]
    fn scalars_and_empty_tensors() {
        assert_eq!(tensor_bytes(GgmlType::F32, &[]).unwrap(), 4);
        assert_eq!(tensor_bytes(GgmlType::Q4_0, &[0, 5]).unwrap(), 0);
        assert_eq!(element_count(&[]), Some(1));
    }

    #[test]
    fn serialises_as_its_name() {
        assert_eq!(
            serde_json::to_string(&GgmlType::IQ2_XXS).unwrap(),
            "\"IQ2_XXS\""
        );
    }
}
